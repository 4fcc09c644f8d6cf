"""random_ (default range, from/to, full 64-bit range): what randint and random reach.

Tiling: ``tiles.sample``: flat [p <= 128, f] tiles of the output in memory order, one
"bits" draw (62 random bits, int64) per element, two when the span exceeds 2^62
(VectorE joins them into 64 bits). VectorE computes ``from + bits mod span`` in int64
with wrap and casts to the dtype (through float32 for float16/bfloat16, as
``static_cast<Half>(int64_t)``). The range checks and the float dtypes' adjustment of
from/to to representable integers (CPU's update_from/update_to) run on the host first.
"""

from __future__ import annotations

import math
import warnings

import torch

from device_impl.engine.dtypes import FP32
from device_impl.kernels import overlap
from device_impl.kernels.common import numpy_dtype
from device_impl.kernels.random.tiles import BOOL, I64, native, refuse, sample, serve, tmp
from device_impl.kernels.scalars import CPP_NAMES, FLOAT_MAX, round_to, wrap_int64

_DIGITS = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8, torch.float64: 53}  # significand bits


def _to_int64(x: float) -> int:
    """static_cast<int64_t>(float) as x86 does it: out of range (or inf/NaN) gives INT64_MIN."""
    return int(x) if math.isfinite(x) and -2.0 ** 63 <= x < 2.0 ** 63 else -(1 << 63)


def _update_from(value: int, dtype: torch.dtype) -> int:
    """CPU's update_from: the first integer >= from that the float dtype represents."""
    plus1 = _to_int64(round_to(float(value + 1), dtype))
    if plus1 < value:
        n = max(abs(value + 1).bit_length() - 1, 0)
        value = plus1 + (1 << (n - _DIGITS[dtype] + 1))
    return value


def _update_to(value: int, dtype: torch.dtype) -> int:
    minus1 = _to_int64(round_to(float(value - 1), dtype))
    if minus1 >= value:
        n = max(abs(value - 1).bit_length() - 1, 0)
        value = minus1 - (1 << (n - _DIGITS[dtype] + 1))
    return value


def _check_from_to(lo: int, hi_inclusive: int, dtype: torch.dtype) -> None:
    name = CPP_NAMES[dtype]
    if dtype.is_floating_point:
        limit = FLOAT_MAX[dtype]
        for value, what in ((lo, "from"), (hi_inclusive, "to - 1")):
            if not -limit <= value <= limit:
                raise RuntimeError(f"{what} is out of bounds for {name}")
        digits = _DIGITS[dtype]
        for value, what in ((lo, "from"), (hi_inclusive, "to - 1")):
            if value < -(1 << digits) or value > (1 << digits):
                warnings.warn(f"{what} is out of bounds [-(2^{digits}), 2^{digits}]. Due to precision limitations "
                              f"{name} can support discrete uniform distribution only within this range. This warning "
                              f"will become an error in version 1.7 release, please fix the code in advance",
                              UserWarning, stacklevel=4)
    else:
        info = (0, 1) if dtype == torch.bool else (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
        for value, what in ((lo, "from"), (hi_inclusive, "to - 1")):
            if not info[0] <= value <= info[1]:
                raise RuntimeError(f"{what} is out of bounds for {name}")


def _random_fill(self: torch.Tensor, span: int, base: int, generator) -> torch.Tensor:
    """self <- base + (bits mod span), span in [1, 2^64], computed in int64 with wrap, then cast."""
    overlap.assert_no_internal_overlap(self)
    out_dtype = numpy_dtype(self.dtype)
    narrow_float = self.dtype in (torch.float16, torch.bfloat16)
    mask63 = (1 << 63) - 1
    big = span > 1 << 62
    span_signed = wrap_int64(span)

    def emit(nc, outs, rand, ins):
        a = rand[0]
        r = tmp(nc, a, I64)
        if not big:
            nc.vector.tensor_scalar(r, a, "remainder", span, dtype=I64)
        else:
            v = tmp(nc, a, I64)  # 64 random bits: (a << 2) ^ b
            nc.vector.tensor_scalar(v, a, "left_shift", 2, dtype=I64)
            nc.vector.tensor_tensor(v, v, rand[1], "bitwise_xor", dtype=I64)
            if span == 1 << 64:
                r = v
            elif span <= 1 << 63:
                nc.vector.tensor_scalar(r, v, "bitwise_and", mask63, dtype=I64)
                if span < 1 << 63:
                    nc.vector.tensor_scalar(r, r, "remainder", span, dtype=I64)
            else:  # 2^63 < span < 2^64: v mod span = v if v <u span else v - span
                flipped = tmp(nc, a, I64)
                nc.vector.tensor_scalar(flipped, v, "bitwise_xor", -(1 << 63), dtype=I64)
                below = tmp(nc, a, BOOL)
                nc.vector.tensor_scalar(below, flipped, "less", wrap_int64(span_signed ^ -(1 << 63)), dtype=I64)
                reduced = tmp(nc, a, I64)
                nc.vector.tensor_scalar(reduced, v, "subtract", span_signed, dtype=I64)
                nc.vector.select(r, below, v, reduced)
        if base:
            nc.vector.tensor_scalar(r, r, "add", wrap_int64(base), dtype=I64)
        if narrow_float:  # int64 -> float -> half, as static_cast<Half>(int64_t)
            f = tmp(nc, a, FP32)
            nc.vector.tensor_copy(f, r)
            nc.vector.tensor_copy(outs[0], f)
        elif out_dtype == BOOL:
            nc.vector.tensor_scalar(outs[0], r, "not_equal", 0, dtype=I64)
        else:
            nc.vector.tensor_copy(outs[0], r)

    sample("random", [self], generator, ["bits", "bits"] if big else ["bits"], emit)
    return self


def _random_from_to(self: torch.Tensor, lo: int, hi: int | None, generator) -> torch.Tensor:
    dtype = self.dtype
    if hi is not None:
        if not lo < hi:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={lo} >= to={hi}")
        if dtype.is_floating_point:
            lo, hi = _update_from(lo, dtype), _update_to(hi, dtype)
            if not lo < hi:
                raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than 'to' casted to dtype, but "
                                   f"got from={lo} >= to={hi}")
        _check_from_to(lo, hi - 1, dtype)
        return _random_fill(self, hi - lo, lo, generator) if self.numel() else self
    if lo != -(1 << 63):
        if dtype.is_floating_point:
            to_inc = 1 << _DIGITS[dtype]
            lo = _update_from(lo, dtype)
            if not lo < to_inc:
                raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' "
                                   f"casted to dtype, but got from={lo} > to_inc={to_inc}")
        else:
            to_inc = 1 if dtype == torch.bool else torch.iinfo(dtype).max
        _check_from_to(lo, to_inc, dtype)
        return _random_fill(self, to_inc - lo + 1, lo, generator) if self.numel() else self
    if dtype == torch.bool:
        raise refuse("random_full_64_bits_range_kernel_cpu", dtype)
    if dtype not in (torch.int64, torch.float32, torch.bfloat16):
        raise RuntimeError("random_full_64_bits_range_kernel_cpu handles only int64, double, float and bfloat16")
    return _random_fill(self, 1 << 64, 0, generator) if self.numel() else self


@native("aten::random_")
def _random_default(a: dict) -> torch.Tensor:
    self = a["self"]
    dtype = self.dtype
    if dtype == torch.bool:
        span = 2
    elif dtype.is_floating_point:
        span = (1 << _DIGITS[dtype]) + 1
    else:
        span = torch.iinfo(dtype).max + 1
    return _random_fill(self, span, 0, a.get("generator")) if self.numel() else self


@native("aten::random_.from")
def _random_from(a: dict) -> torch.Tensor:
    to = a.get("to")
    return _random_from_to(a["self"], int(a["from"]), None if to is None else int(to), a.get("generator"))


@native("aten::random_.to")
def _random_to(a: dict) -> torch.Tensor:
    return _random_from_to(a["self"], 0, int(a["to"]), a.get("generator"))


# --- overloads PyTorch's composites route to the kernels above ------------------------------

serve("aten::random_.from", "aten::randint", "aten::randint.generator", "aten::randint.low",
      "aten::randint.low_generator", "aten::randint.out", "aten::randint.generator_out", "aten::randint.low_out",
      "aten::randint.low_generator_out", "aten::randint_like", "aten::randint_like.generator",
      "aten::randint_like.low_dtype", "aten::randint_like.low_generator_dtype", "aten::randint_like.Tensor",
      "aten::randint_like.Tensor_generator", "aten::randint_like.out", "aten::randint_like.generator_out",
      "aten::randint_like.low_dtype_out", "aten::randint_like.low_generator_dtype_out", "aten::randint_like.Tensor_out",
      "aten::randint_like.Tensor_generator_out", "aten::random.from", "aten::random.from_out")
serve("aten::random_.to", "aten::random.to", "aten::random.to_out")
serve("aten::random_", "aten::random", "aten::random.out")
