"""Kernel family 'indexing': gathers, scatters, advanced indexing, masks, embeddings, sort, topk, unique.

Every op here is a *row access*: the output (gathers) or the destination
(scatters) is a set of rows, each ``C`` elements at a fixed inner stride,
whose start addresses are computed on the device from the row number and
from index tensors:

    offset(row) = sum_j coord_j(row) * stride_j  +  sum_k wrap(index_k[row]) * stride_k

``coord_j`` are the row's coordinates in the "lead" shape (GpSimd ``iota``
then VectorE integer divide/remainder), index values are DMA'd from HBM
(or gathered by indirect DMA when their view is not a flat run), negative
indices wrap on VectorE. Rows then move by indirect DMA (``dma.load_rows`` /
``dma.store_rows``). Tiles are ``[p, f]`` rows in row-major order
(row = r0 + partition * f + column), so offset and index tiles load with
long contiguous DMA runs.

Index ranges are validated before anything is written (a min/max reduction
over the index tensor read back once), so errors match CPU's class and the
destination is untouched on error.

Accumulation follows CPU's serial loops exactly: integer sums use DMA
compute-on-write (exact in any order); float sums, products and max/min
gather the current destination rows and combine them with every source row
aimed at them, in row order, on GpSimd's cores, rounding to the destination
dtype after each step (index_put(accumulate=True), embedding backward) or,
where CPU accumulates bf16/fp16 in fp32 and rounds once (scatter_add,
scatter_reduce sum/mean/prod, index_add), on a float32 copy of the
destination. Non-accumulating scatters resolve duplicate destinations so the
last row wins, as CPU's serial loop.

Other irregular work on GpSimd (``gpsimd.run``): stream compaction for
nonzero/masks, and CPU's tie order for sort(stable=False) / topk (an
emulation of libstdc++'s introsort / partial_sort / nth_element, only for rows
with ties; without ties GpSimd's stable ``sort`` already gives CPU's order).
Rows up to SORT_ROW_MAX elements sort 128 per instruction, one per partition;
longer rows are sorted by one GpSimd program over the row spread across the
partitions.

Where each op is lowered (``TABLE.lookup(op).source`` names the module):

==================  ===========================================================================
``views``           numpy views of tensors, HBM copies and fills (``copy_into``, ``fill``), staging
``rows``            row tiles, offsets, moves, combines, index validation, ``_native`` registration
``gather_scatter``  gather, scatter (src/value/reduce), scatter_add, scatter_reduce, take,
                    select_scatter, slice_scatter, diagonal_scatter
``index_put``       index_select, index.Tensor, index_put, index_put_, _index_put_impl_,
                    index_add, index_copy, index_fill_
``masked``          nonzero (argwhere, nonzero_numpy), masked_select, masked_scatter_
``embedding``       embedding, embedding_dense_backward, _embedding_bag, _embedding_bag_forward_only
``sort``            sort (all overloads), argsort, topk, _unique2; ``sort_rows``
==================  ===========================================================================

masked_fill and where are pointwise: ``kernels.elementwise``. Scalar -> dtype conversion
(overflow errors, opmath) is ``device_impl.kernels.scalars``.
"""

from device_impl.kernels.indexing import (  # noqa: F401  (importing registers the kernels)
    embedding,
    gather_scatter,
    index_put,
    masked,
    rows,
    sort,
    views,
)
from device_impl.kernels.indexing.sort import sort_rows  # noqa: F401  (shared with device_impl.compiler)
from device_impl.kernels.indexing.views import copy_into, fill  # noqa: F401  (shared with device_impl.compiler)
