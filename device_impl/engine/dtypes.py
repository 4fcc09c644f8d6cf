"""Element types of the device and how the engines compute on them.

The engines compute floating point in fp32 (bf16/fp16 are widened on read and
rounded to nearest-even on write) and integers exactly in their own width
with two's-complement wrap. float64 and complex are storage-only: HBM holds
them and DMA moves them, but no engine computes on them, so ops on them take
the counted CPU fallback (see device_impl.kernels.registry).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

TORCH_TO_NUMPY: dict[torch.dtype, np.dtype] = {
    torch.float32: np.dtype(np.float32),
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    torch.float16: np.dtype(np.float16),
    torch.float64: np.dtype(np.float64),
    torch.int64: np.dtype(np.int64),
    torch.int32: np.dtype(np.int32),
    torch.int16: np.dtype(np.int16),
    torch.int8: np.dtype(np.int8),
    torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(np.bool_),
    torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
}
NUMPY_TO_TORCH = {v: k for k, v in TORCH_TO_NUMPY.items()}

# c10's ScalarType names, as PyTorch's error messages spell dtypes ("Found dtype Float but expected Long").
SCALAR_TYPE_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}

# dtypes the engines compute on.
COMPUTE_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                            torch.int16, torch.int8, torch.uint8, torch.bool})
FLOAT_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})

FP32 = np.dtype(np.float32)
BF16 = np.dtype(ml_dtypes.bfloat16)
_NARROW_FLOATS = (np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16))


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return TORCH_TO_NUMPY[dtype]


def is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt == BF16


def compute_dtype(dt: np.dtype) -> np.dtype:
    """The dtype an engine computes in for operands stored as ``dt``."""
    if dt in _NARROW_FLOATS:
        return FP32
    return dt


def poison_value(dt: np.dtype):
    """What an uninitialised SBUF/PSUM read returns: NaN for floats (as the NKI simulator), a marker otherwise."""
    if is_float(dt):
        return np.nan
    if dt == np.bool_:
        return True
    return np.iinfo(dt).min
