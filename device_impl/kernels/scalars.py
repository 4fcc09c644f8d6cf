"""PyTorch's rules for a Python scalar meeting a tensor dtype: the one place they live.

A ``c10::Scalar`` reaches a kernel as a double, an int64, a bool or a complex double, and
the kernel asks for it as its ``scalar_t`` (``Scalar::to<T>()``) or its ``opmath_t``.
That conversion is checked (``c10::checked_convert`` / ``c10::overflows``):

* into a floating dtype: a finite value beyond the dtype's largest magnitude overflows
  (infinities and NaN pass; float64 holds every double);
* into an integer dtype: a float must be finite and within [min, max] (then truncates
  toward zero); an integer must be within [min, max], except that an unsigned target also
  takes [-max, 0) and wraps it (two's complement, as ``a - b`` on uint8 needs);
* a complex value into a real dtype only with a zero imaginary part (its real part is
  then checked); into a complex dtype anything goes; a bool value always fits;
* into bool nothing overflows (a complex value is true when either part is nonzero).

The error is ``RuntimeError("value cannot be converted to type <C type> without overflow")``
with c10's name of the C type (``CTYPE_NAMES``).

Opmath: CPU computes reduced-precision floats in float32 (``at::opmath_type``), so a
scalar for a float16/bfloat16/float32 op is checked against float32 and rounded to it;
integers and float64 are their own opmath type.

``tests/kernels/test_scalars.py`` checks each rule against the running torch.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch

from device_impl.engine.dtypes import numpy_dtype

# c10's names of the C types, as its overflow message prints them.
CTYPE_NAMES = {torch.int8: "int8_t", torch.uint8: "uint8_t", torch.int16: "int16_t", torch.int32: "int",
               torch.int64: "int64_t", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
               torch.float32: "float", torch.float64: "double", torch.bool: "bool"}
# std::numeric_limits / caffe2 TypeMeta names CPU puts in its range messages ("from is out of bounds for ...").
CPP_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
             torch.bfloat16: "c10::BFloat16", torch.int64: "long int", torch.int32: "int", torch.int16: "short int",
             torch.int8: "signed char", torch.uint8: "unsigned char", torch.bool: "bool"}
# The largest finite magnitude of each narrow floating dtype (float64 holds every double).
FLOAT_MAX = {torch.float32: float(np.finfo(np.float32).max), torch.float16: float(np.finfo(np.float16).max),
             torch.bfloat16: float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)}


def overflow_error(dtype: torch.dtype) -> RuntimeError:
    """c10's report_overflow for a conversion into ``dtype``."""
    return RuntimeError(f"value cannot be converted to type {CTYPE_NAMES.get(dtype, dtype)} without overflow")


def check_fits(value, dtype: torch.dtype) -> None:
    """Raise as ``c10::checked_convert`` does when the number ``value`` does not fit ``dtype``."""
    if isinstance(value, bool) or dtype.is_complex or dtype == torch.bool:
        return
    if isinstance(value, complex):
        if value.imag != 0:
            raise overflow_error(dtype)
        value = value.real
    if dtype.is_floating_point:
        if dtype in FLOAT_MAX and math.isfinite(value) and abs(value) > FLOAT_MAX[dtype]:
            raise overflow_error(dtype)
        return
    info = torch.iinfo(dtype)
    if isinstance(value, float) and not math.isfinite(value):
        raise overflow_error(dtype)
    # Integers into unsigned types wrap from [-max, 0); floats must lie within [min, max].
    low = -info.max if info.min == 0 and not isinstance(value, float) else info.min
    if not low <= value <= info.max:
        raise overflow_error(dtype)


def checked_convert(value, dtype: torch.dtype):
    """``Scalar::to<T>()`` as a Python number: checked (``check_fits``), then a float for a floating
    dtype (not yet rounded to it: see ``round_to``), a bool for bool, and for an integer dtype the
    value truncated toward zero with negatives wrapped into unsigned types."""
    if dtype == torch.bool:
        return bool(value)  # a complex value is true when either part is nonzero
    check_fits(value, dtype)
    if isinstance(value, complex) and not dtype.is_complex:
        value = value.real
    if dtype.is_floating_point:
        return float(value)
    if dtype.is_complex:
        return complex(value)
    value = int(value)  # truncation toward zero
    info = torch.iinfo(dtype)
    if info.min == 0 and value < 0:
        return value & info.max
    return value


def scalar_fill(value, dtype: torch.dtype):
    """The value CPU's ``fill_`` writes into a *one-element* tensor (``at::detail::scalar_fill``, the
    path linspace/logspace with one step take): float16/bfloat16 convert through a checked double and
    then overflow to infinity unchecked (a complex value with an imaginary part overflows "double");
    every other dtype is ``checked_convert``. A larger tensor's fill_ is ``checked_convert`` for all."""
    if dtype in (torch.float16, torch.bfloat16):
        check_fits(value, torch.float64)
        return float(value.real if isinstance(value, complex) else value)
    return checked_convert(value, dtype)


def round_to(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` the way CPU casts a host argument: through float unless the
    dtype is float64 (double -> float -> half), overflowing to infinity unchecked."""
    with np.errstate(over="ignore"):
        return float(np.asarray(np.float32(value) if dtype != torch.float64 else value).astype(numpy_dtype(dtype)))


def to_numpy(value, dtype: torch.dtype):
    """``value.to<scalar_t>()`` as a numpy scalar of ``dtype`` (what a memset writes): checked, then
    rounded through float32 for a narrow float."""
    converted = checked_convert(value, dtype)
    npd = numpy_dtype(dtype)
    if dtype.is_floating_point and dtype != torch.float64:
        return npd.type(np.float32(converted)) if dtype != torch.float32 else np.float32(converted)
    return npd.type(converted)


def opmath_dtype(dtype: torch.dtype) -> torch.dtype:
    """``at::opmath_type<scalar_t>``: float32 for float16/bfloat16/float32, every other dtype itself."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def wrap_int64(value: int) -> int:
    """Python int -> the int64 with the same low 64 bits (C++ int64 arithmetic wraps)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value
