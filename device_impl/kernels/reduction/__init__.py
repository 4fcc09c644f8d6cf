"""Kernel family 'reduction': reductions, scans, softmax, normalisation layers and losses.

Every kernel first views its input in HBM as ``K x R``: the kept dimensions ``K`` (one output
element each) and the reduced dimensions ``R``, permuted with numpy strides (no copies) and
coalesced where neighbouring dimensions are contiguous with respect to each other in every array
the kernel touches. Tiles are then *boxes* of that index space: products of slices, so each tile
is one strided DMA. Three tilings (``sums``):

* ``rows`` (the default): K on partitions (<= 128 rows per tile), R along the free axis in chunks
  of ``CHUNK`` elements; per-partition reductions on VectorE / ScalarE (``activation(...,
  accumulate=)`` fuses the elementwise part with the row sum), partials combined across chunks.
  Row blocks small enough (``RESIDENT_BYTES``, double-buffered) stay in SBUF between passes, so
  softmax, var and the norm layers read HBM once; longer rows stream their chunks again per pass
  (softmax then uses a running max / rescaled sum, so it needs two passes, not three).
* ``columns`` (a kept dimension is the innermost in memory, e.g. ``x.sum(0)``): R on partitions,
  K along the free axis, reduced across partitions with a TensorE matmul against a ones vector
  (float sums, fp32 PSUM accumulation) or GpSimdE partition reductions (max/min/prod/any/all,
  integers).
* ``flat`` (few output elements, long reductions, e.g. a full ``x.sum()``): each output's
  elements as flat ``[128, F]`` tiles, per-partition partials, one cross-partition reduction at
  the end.

Numerics follow CPU eager: floats accumulate in fp32 and round once into the output; integer
sums/products accumulate in int64 (wrapping as CPU); max/min/argmax propagate NaN (argmax: first
occurrence, first NaN); softmax, log_softmax and logsumexp subtract the row maximum; var/std are
two-pass. Where CPU accumulates in double (float32 cumsum/cumprod, batch-norm statistics) the
simulator runs GpSimd programs in double. Errors carry CPU's exception class.

Where each op is lowered (``TABLE.lookup(op).source`` names the module):

==============  ================================================================================
``tiles``       the family's shared tiling: K x R grids, boxes, row blocks, streams, ``_kernel``
                registration, ``RowKernel``, the normalisation layers' shared pieces
``sums``        sum, prod, mean (all overloads), any, all (all overloads), linalg_vector_norm; the
                one-pass engine (``_Spec``, ``_reduce``: rows / columns / flat; ``RowReduction``)
``extrema``     amax, amin, max, min (whole tensor and .dim), argmax, argmin, aminmax
``moments``     var, std, var_mean, std_mean (.correction), logsumexp; the row moments
                (``_moments``, ``_rstd``) of the normalisation layers
``scans``       cumsum, cumprod (functional, out=, in-place)
``selection``   kthvalue, mode (CPU's quickselect and std::sort walks, so its index among ties)
``cum_extrema`` cummax, cummin (their helpers: the running extremum and its index, CPU's tie and NaN rules)
``softmax``     _softmax, _log_softmax, _safe_softmax, _softmax_backward_data,
                _log_softmax_backward_data
``layer_norm``  native_layer_norm, native_layer_norm_backward
``group_norm``  native_group_norm, native_group_norm_backward
``batch_norm``  native_batch_norm, _native_batch_norm_legit (all overloads),
                _native_batch_norm_legit_no_training, native_batch_norm_backward
``renorm``      renorm (the slices' norms by ``sums``' engine, CPU's scale factor, one multiply)
``losses``      mse_loss, mse_loss_backward, nll_loss_forward/backward, nll_loss2d_forward/backward
==============  ================================================================================

Adaptive eager (device_impl.eager) fuses ``RowReduction`` (sum/mean/amax/amin over the last
dimension) and ``RowKernel`` (softmax, log_softmax, layer_norm) launches into their producers;
the names it uses are re-exported here.
"""

from device_impl.kernels.reduction import (  # noqa: F401  (importing registers the kernels)
    batch_norm,
    cum_extrema,
    extrema,
    group_norm,
    layer_norm,
    losses,
    moments,
    renorm,
    scans,
    selection,
    softmax,
    sums,
    tiles,
)
from device_impl.kernels.reduction.sums import (  # noqa: F401  (shared with device_impl.eager)
    RowReduction,
    row_accumulate,
    row_finish,
)
from device_impl.kernels.reduction.tiles import (  # noqa: F401  (shared with device_impl.eager)
    CHUNK,
    PARAM_COLS,
    RESIDENT_BYTES,
    RowKernel,
    Source,
)
