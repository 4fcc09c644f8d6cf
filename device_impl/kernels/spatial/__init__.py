"""Kernel family 'spatial': convolution (TensorE implicit im2col), pooling, adaptive pooling, upsampling, grid
sampling, im2col/col2im, pairwise distances and real FFTs (DFT matmuls on TensorE).

Conventions shared by every kernel here:

* HBM views are normalised to 3 spatial dimensions (1d and 2d problems get leading singleton
  spatial axes), so one implementation serves 1d/2d/3d.
* Padding (zeros for convolution/avg pooling, -inf for max pooling) and the zero insertion of
  transposed convolution are materialised in an HBM scratch buffer (DMA fills of its border from
  a memset tile plus one HBM->HBM copy of the interior), so every window or patch afterwards is
  a plain strided DMA access pattern.
* Access patterns (slices, strides) are computed on the host from shapes, as a compiler computes
  DMA descriptors; every value that depends on tensor data, and every coordinate, weight and index
  used in arithmetic, is computed by engine instructions (GpSimd iota, VectorE/ScalarE).

numpy references: torch's CPU kernels (ATen/native/cpu/*), mirrored formula by formula where the
rounding matters (interpolation weights, grid unnormalisation, pooling divisors). Where CPU's choice
depends on the host (convolution backend and memory format, vector widths), the live CPU is asked:
``device_impl.kernels.cpu_host``.

Where each op is lowered (``TABLE.lookup(op).source`` names the module; overloads PyTorch routes to these,
such as functional/out forms and 1-d pooling, are served through them):

=================  ===========================================================================================
``tiles``          tile sizes, HBM scratch and padding (``Scratch``, ``pad_view``), boxes, strided windows,
                   flat tiles and copies
``conv``           convolution, convolution.out, _convolution, convolution_overrideable; ``conv_run``
``conv_backward``  convolution_backward, convolution_backward.out, convolution_backward_overrideable
``pool``           max_pool{2,3}d_with_indices, avg_pool{2,3}d (+ backward)
``adaptive_pool``  _adaptive_avg_pool{2,3}d, adaptive_max_pool{2,3}d (+ backward)
``resample``       upsample_nearest{1,2,3}d, _upsample_nearest_exact{1,2,3}d, upsample_linear1d,
                   upsample_bilinear2d, upsample_bicubic2d, upsample_trilinear3d (+ backward)
``grid_sample``    grid_sampler_2d, grid_sampler_2d_backward
``fold``           im2col, col2im (F.unfold / F.fold)
``distance``       _cdist_forward, _euclidean_dist, _pdist_forward
``fft``            _fft_r2c, _fft_c2r
=================  ===========================================================================================

Padding ops (constant_pad_nd, reflection/replication pads) are ``kernels.shape``.
"""

from device_impl.kernels.spatial import (  # noqa: F401  (importing registers the kernels)
    adaptive_pool,
    conv,
    conv_backward,
    distance,
    fft,
    fold,
    grid_sample,
    pool,
    resample,
    tiles,
)
from device_impl.kernels.spatial.conv import conv_run  # noqa: F401  (shared with device_impl.compiler)
from device_impl.kernels.spatial.tiles import Scratch, pad_view  # noqa: F401  (shared with device_impl.compiler)
