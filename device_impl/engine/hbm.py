"""HBM: the engine's zero-copy window onto device tensors.

Device memory is host memory owned by the C++ caching allocator, so a numpy
array over a tensor's data pointer, with the tensor's sizes and strides, *is*
the tensor in HBM. Kernels read and write tensors only through these views
(via DMA instructions); nothing here computes. The C++ core builds the view
(``hbm_view``) because it is on the path of every kernel launch.
"""

from __future__ import annotations

from device_impl._core import C
from device_impl.engine.dtypes import TORCH_TO_NUMPY

for _torch_dtype, _numpy_dtype in TORCH_TO_NUMPY.items():
    C.set_numpy_dtype(_torch_dtype, _numpy_dtype)

# view(tensor) -> np.ndarray aliasing the tensor's memory (neuron or CPU), sizes and strides included.
view = C.hbm_view
