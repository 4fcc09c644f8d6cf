"""Kernel family 'random': sampling, dropout, and the factories that compute values (arange, linspace, logspace, eye).

Random numbers come only from the core's counter-based generator. A kernel
reserves the draws it uses (``runtime.random.reserve``: (seed, offset)) and
each tile asks GpSimdE for its own numbers at ``offset + stream * numel +
tile_start``, so a result depends only on (seed, offset, shape): not on tiling
decisions of other ops, timing, or which other ops ran between two draws.
Distributions are transforms of uniform/normal/bit tiles on ScalarE/VectorE;
permutations (randperm) and binary searches (multinomial) are GpSimd programs.

Factories follow CPU's formulas exactly, including its rounding:

* arange(int)       exact int64 on GpSimd iota;
* arange(float32)   CPU computes in double, and its vector loop rounds the base of
                    each 8-element block to float first; (b)f16 compute in float with
                    fused multiply-adds. Neither fp64 nor fma exists on the fixed-function
                    engines, so these run as GpSimd programs (general-purpose cores);
* linspace          float32: fma in float (GpSimd program); (b)f16: every operation
                    rounded to the dtype (VectorE, exact); integers: fma in double (GpSimd);
* logspace          pow in double on a double exponent (GpSimd program);
* eye               iota + compare on the diagonal tiles, a zero tile elsewhere.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Sequence

import ml_dtypes
import numpy as np
import torch

from device_impl._compat import torch_at_least
from device_impl.dispatch.table import TABLE, resolve
from device_impl.engine import launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, FLOAT_DTYPES, FP32
from device_impl.kernels import overlap
from device_impl.kernels.common import (
    FREE_MAX,
    P,
    SCALAR_TYPE_NAMES,
    check_out,
    flat_tiles,
    fma32,
    fma64,
    hbm,
    is_device_tensor,
    memory_order,
    numpy_dtype,
    result_type,
    row_tiles,
    scalar_of,
)
from device_impl.kernels.registry import Binder
from device_impl.runtime.random import reserve

I64 = np.dtype(np.int64)
F64 = np.dtype(np.float64)
BOOL = np.dtype(np.bool_)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
_DIGITS = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8, torch.float64: 53}
_FMAX = {torch.float32: float(np.finfo(np.float32).max), torch.float16: 65504.0,
         torch.bfloat16: float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)}
# std::numeric_limits / caffe2 TypeMeta names CPU puts in its messages.
_CPP_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
              torch.bfloat16: "c10::BFloat16", torch.int64: "long int", torch.int32: "int", torch.int16: "short int",
              torch.int8: "signed char", torch.uint8: "unsigned char", torch.bool: "bool"}
_CTYPE = {torch.int8: "int8_t", torch.uint8: "uint8_t", torch.int16: "int16_t", torch.int32: "int",
          torch.int64: "int64_t", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16", torch.float32: "float",
          torch.bool: "bool"}


# --- registration ----------------------------------------------------------------

def _native(*ops: str, dtypes: frozenset = COMPUTE_DTYPES):
    """Register ``fn(args)`` (schema names -> values) as the kernel of each overload."""

    def register(fn: Callable[[dict], Any]) -> Callable[[dict], Any]:
        for op in ops:
            TABLE.native(op, dtypes=dtypes)(_bound(fn, Binder.of(resolve(op))))
        return fn

    return register


def _bound(fn: Callable[[dict], Any], binder: Binder) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return fn(binder.bind(args, kwargs))

    kernel.__module__ = __name__
    return kernel


# --- shared checks ---------------------------------------------------------------

def _refuse(kernel: str, dtype: torch.dtype) -> NotImplementedError:
    return NotImplementedError(f'"{kernel}" not implemented for \'{SCALAR_TYPE_NAMES[dtype]}\'')


def _fmt(x) -> str:
    """A number as c10::str prints it (ostream defaults: 6 significant digits)."""
    if isinstance(x, bool):
        return str(int(x))
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:g}"


def _float_only(t: torch.Tensor, kernel: str) -> None:
    if t.dtype not in _FLOATS:
        raise _refuse(kernel, t.dtype)


def _check_generator(generator: torch.Generator | None) -> None:
    """An explicit generator must be a neuron one (CUDA raises the same way for a CPU generator)."""
    if generator is not None and generator.device.type != "neuron":
        raise RuntimeError(f"Expected a 'neuron' device type for generator but found '{generator.device.type}'")


def _reserve(generator: torch.Generator | None, device: int, draws: int) -> tuple[int, int]:
    _check_generator(generator)
    return reserve(generator, device, draws)


def _convert(value, dtype: torch.dtype):
    """c10::Scalar::to<T>(): a checked conversion (overflow raises, as CPU)."""
    if isinstance(value, torch.Tensor):
        value = scalar_of(value)
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        value = float(value)
        if math.isfinite(value) and abs(value) > _FMAX.get(dtype, math.inf):
            raise RuntimeError(f"value cannot be converted to type {_CTYPE[dtype]} without overflow")
        return value
    info = torch.iinfo(dtype)
    overflow = RuntimeError(f"value cannot be converted to type {_CTYPE[dtype]} without overflow")
    if isinstance(value, float):
        if not (info.min <= value <= info.max):  # NaN and infinities included
            raise overflow
        return int(value)  # truncation toward zero
    value = int(value)
    if info.min == 0 and -info.max <= value < 0:  # c10 lets negatives wrap into unsigned types
        return value & info.max
    if not info.min <= value <= info.max:
        raise overflow
    return value


def _wrap64(value: int) -> int:
    """Python int -> the int64 with the same low 64 bits."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def _as_dtype(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` (a host scalar, the way the CPU casts its arguments)."""
    with np.errstate(over="ignore"):
        return float(np.asarray(np.float32(value) if dtype != torch.float64 else value).astype(numpy_dtype(dtype)))


# --- the random tile loop -----------------------------------------------------------

def _oriented(t: torch.Tensor, shape: tuple[int, ...], order: list[int] | None) -> np.ndarray:
    v = hbm(t)
    if tuple(v.shape) != shape:
        v = np.broadcast_to(v, shape)
    return v.transpose(order) if order is not None else v


def _sample(name: str, outs: Sequence[torch.Tensor], generator, streams: Sequence[str],
            emit: Callable[..., None], ins: Sequence[Any] = (), free_max: int = FREE_MAX) -> None:
    """Fill ``outs`` (one shape) tile by tile: ``emit(nc, out_tiles, random_tiles, in_tiles)``.

    ``streams`` names the distribution of each random tile ("uniform", "normal",
    "bits"); one draw per element per stream is reserved. ``ins`` are tensors
    broadcast to the output shape (host scalars are passed through as numbers).
    Tiles follow the memory order of ``outs[0]``.
    """
    out0 = outs[0]
    numel = out0.numel()
    if numel == 0:
        return
    seed, offset = _reserve(generator, out0.device.index, numel * len(streams))
    shape = tuple(out0.shape)
    order = None
    if out0.dim() > 1:
        order = memory_order(out0)
        if order == list(range(out0.dim())):
            order = None
    out_views = [_oriented(o, shape, order) for o in outs]
    in_views = [_oriented(t, shape, order) if is_device_tensor(t) else None for t in ins]
    scalars = [None if is_device_tensor(t) else scalar_of(t) for t in ins]
    with launch(name, out0.device.index) as nc:
        for start, stop, p, f in flat_tiles(numel, free_max):
            mark = nc.mark()
            loaded: list[Any] = []
            for v, s in zip(in_views, scalars):
                if v is None:
                    loaded.append(s)
                    continue
                tile = nc.sbuf_tile((p, f), v.dtype)
                nc.dma.load_flat(tile, v, start, stop)
                loaded.append(tile)
            rand = []
            for k, dist in enumerate(streams):
                tile = nc.sbuf_tile((p, f), I64 if dist == "bits" else FP32)
                nc.gpsimd.random(tile, seed, offset + k * numel + start, dist)
                rand.append(tile)
            results = [nc.sbuf_tile((p, f), v.dtype) for v in out_views]
            emit(nc, results, rand, loaded)
            for v, r in zip(out_views, results):
                nc.dma.store_flat(v, start, stop, r)
            nc.release_to(mark)


def _tmp(nc, like, dtype=FP32):
    return nc.sbuf_tile(like.shape, dtype)


# --- uniform_, normal_ and the continuous distributions ----------------------------------

@_native("aten::uniform_")
def _uniform_(a: dict) -> torch.Tensor:
    self, lo, hi = a["self"], float(a["from"]), float(a["to"])
    _float_only(self, "check_uniform_bounds")
    dtype = self.dtype
    limit = _FMAX[dtype]
    name = _CPP_NAMES[dtype]
    if not -limit <= lo <= limit:
        raise RuntimeError(f"from is out of bounds for {name}")
    if not -limit <= hi <= limit:
        raise RuntimeError(f"to is out of bounds for {name}")
    if not lo <= hi:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={_fmt(lo)} > to={_fmt(hi)}")
    if hi - lo > limit:
        raise RuntimeError(f"uniform_ expects to-from <= std::numeric_limits<{SCALAR_TYPE_NAMES[dtype]}>::max(), "
                           f"but found to={_fmt(hi)} and from={_fmt(lo)} which result in to-from to exceed the limit")
    overlap.assert_no_internal_overlap(self)
    # CPU: from/to cast to the dtype, x * (to - from) + from in float from 24 random bits, rounded to the
    # dtype; a value that rounds up to `to` becomes `from`, so the result stays in [from, to).
    lo_t, hi_t = np.float32(_as_dtype(lo, dtype)), np.float32(_as_dtype(hi, dtype))
    span = float(np.float32(hi_t - lo_t))

    def emit(nc, outs, rand, ins):
        value = _tmp(nc, outs[0], outs[0].dtype)
        nc.scalar.activation(value, rand[0], "identity", scale=span, bias=float(lo_t))
        at_top = _tmp(nc, value, BOOL)
        nc.vector.tensor_scalar(at_top, value, "equal", float(hi_t), dtype=FP32)
        low = _tmp(nc, value, value.dtype)
        nc.vector.memset(low, float(lo_t))
        nc.vector.select(outs[0], at_top, low, value)

    _sample("uniform", [self], a.get("generator"), ["uniform"], emit)
    return self


def _check_std(std: float) -> None:
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_fmt(std)}")


@_native("aten::normal_")
def _normal_(a: dict) -> torch.Tensor:
    self, mean, std = a["self"], float(a["mean"]), float(a["std"])
    _float_only(self, "normal_kernel_cpu")
    _check_std(std)
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        nc.scalar.activation(outs[0], rand[0], "identity", scale=std, bias=mean)

    _sample("normal", [self], a.get("generator"), ["normal"], emit)
    return self


def _check_std_tensor(std: torch.Tensor) -> None:
    """CPU: std.min() >= 0 (NaN fails), checked on the engines."""
    if std.numel() == 0:
        return
    flags = _reduce_flags("normal_check_std", std, lambda nc, t, f: nc.vector.tensor_scalar(f, t, "greater_equal", 0.0,
                                                                                          dtype=FP32))
    if not flags:
        raise RuntimeError("normal expects all elements of std >= 0.0")


def _reduce_flags(name: str, t: torch.Tensor, predicate: Callable[..., None]) -> bool:
    """True when ``predicate(nc, tile, flag_tile)`` holds for every element of ``t`` (AND on the engines)."""
    view = hbm(t)
    ok = True
    with launch(name, t.device.index) as nc:
        for start, stop, p, f in flat_tiles(t.numel()):
            mark = nc.mark()
            tile = nc.sbuf_tile((p, f), view.dtype)
            nc.dma.load_flat(tile, view, start, stop)
            flag = nc.sbuf_tile((p, f), BOOL)
            predicate(nc, tile, flag)
            row = nc.sbuf_tile((p, 1), BOOL)
            nc.vector.tensor_reduce(row, flag, "logical_and")
            col = nc.sbuf_tile((1, 1), BOOL)
            nc.gpsimd.partition_reduce(col, row, "logical_and")
            ok = ok and bool(col.read()[0, 0])
            nc.release_to(mark)
    return ok


def _normal_tensors(name: str, out: torch.Tensor, mean: Any, std: Any, generator) -> torch.Tensor:
    """out = mean + std * z with either operand a tensor (broadcast) or a number."""
    _float_only(out, "normal_kernel_cpu")

    def emit(nc, outs, rand, ins):
        m, s = ins
        z = rand[0]
        if not hasattr(s, "shape"):
            if not hasattr(m, "shape"):
                nc.scalar.activation(outs[0], z, "identity", scale=float(s), bias=float(m))
                return
            t = _tmp(nc, z)
            nc.scalar.activation(t, z, "identity", scale=float(s))
        else:
            t = _tmp(nc, z)
            nc.vector.tensor_tensor(t, z, s, "multiply", dtype=FP32)
        if hasattr(m, "shape"):
            nc.vector.tensor_tensor(outs[0], t, m, "add", dtype=FP32)
        else:
            nc.vector.tensor_scalar(outs[0], t, "add", float(m), dtype=FP32)

    _sample(name, [out], generator, ["normal"], emit, ins=(mean, std))
    return out


def _broadcast(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """The broadcast shape of two shapes (PyTorch's error when they do not broadcast)."""
    ndim = max(len(a), len(b))
    a = (1,) * (ndim - len(a)) + tuple(a)
    b = (1,) * (ndim - len(b)) + tuple(b)
    merged = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b ({y}) at non-singleton "
                               f"dimension {i}")
        merged.append(y if x == 1 else x)
    return tuple(merged)


@_native("aten::normal.Tensor_float", "aten::normal.Tensor_float_out")
def _normal_tensor_float(a: dict) -> torch.Tensor:
    mean, std = a["mean"], float(a["std"])
    _check_std(std)
    out = a.get("out")
    if out is None:
        out = torch.empty(mean.shape, dtype=mean.dtype, device=mean.device)
    else:
        check_out(out, tuple(mean.shape), out.dtype, (mean,))
    return _normal_tensors("normal", out, mean, std, a.get("generator"))


@_native("aten::normal.float_Tensor", "aten::normal.float_Tensor_out")
def _normal_float_tensor(a: dict) -> torch.Tensor:
    mean, std = float(a["mean"]), a["std"]
    if std.is_complex():
        raise RuntimeError("normal expects standard deviation to be non-complex")
    _check_std_tensor(std)
    out = a.get("out")
    if out is None:
        out = torch.empty(std.shape, dtype=std.dtype, device=std.device)
    else:
        check_out(out, tuple(std.shape), out.dtype, (std,))
    return _normal_tensors("normal", out, mean, std, a.get("generator"))


@_native("aten::normal.Tensor_Tensor", "aten::normal.Tensor_Tensor_out")
def _normal_tensor_tensor(a: dict) -> torch.Tensor:
    mean, std = a["mean"], a["std"]
    if std.is_complex():
        raise RuntimeError("normal expects standard deviation to be non-complex")
    _check_std_tensor(std)
    shape = _broadcast(mean.shape, std.shape)
    out = a.get("out")
    if out is None:
        out = torch.empty(shape, dtype=mean.dtype, device=mean.device)
    else:
        check_out(out, shape, out.dtype, (mean, std))
    if not torch.can_cast(std.dtype, out.dtype):
        raise RuntimeError(f"result type {SCALAR_TYPE_NAMES[std.dtype]} can't be cast to the desired output type "
                           f"{SCALAR_TYPE_NAMES[out.dtype]}")
    return _normal_tensors("normal", out, mean, std, a.get("generator"))


@_native("aten::exponential_")
def _exponential_(a: dict) -> torch.Tensor:
    self, lambd = a["self"], float(a["lambd"])
    if not lambd > 0.0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={_fmt(lambd)}")
    if self.dtype not in _FLOATS:
        raise RuntimeError(f"Exponential distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {SCALAR_TYPE_NAMES[self.dtype]}")
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        t = _tmp(nc, rand[0])
        nc.scalar.activation(t, rand[0], "log", scale=-1.0, bias=1.0)  # log(1 - u), u in [0, 1)
        nc.vector.tensor_scalar(outs[0], t, "multiply", -1.0 / lambd, dtype=FP32)

    _sample("exponential", [self], a.get("generator"), ["uniform"], emit)
    return self


@_native("aten::geometric_")
def _geometric_(a: dict) -> torch.Tensor:
    self, p = a["self"], float(a["p"])
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={_fmt(p)}")
    if self.dtype == torch.bool:
        raise _refuse("geometric_cpu", self.dtype)
    overlap.assert_no_internal_overlap(self)
    inv = 1.0 / math.log1p(-p)

    def emit(nc, outs, rand, ins):
        t = _tmp(nc, rand[0])
        nc.scalar.activation(t, rand[0], "log", scale=-1.0, bias=1.0)  # log(1 - u) in (-inf, 0]
        nc.vector.tensor_scalar(t, t, "multiply", inv, dtype=FP32)
        nc.vector.tensor_unary(t, t, "ceil", dtype=FP32)
        nc.vector.tensor_scalar(outs[0], t, "maximum", 1.0, dtype=FP32)  # support starts at 1

    _sample("geometric", [self], a.get("generator"), ["uniform"], emit)
    return self


@_native("aten::log_normal_")
def _log_normal_(a: dict) -> torch.Tensor:
    self, mean, std = a["self"], float(a["mean"]), float(a["std"])
    if not std > 0.0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_fmt(std)}")
    _float_only(self, "log_normal_cpu")
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        nc.scalar.activation(outs[0], rand[0], "exp", scale=std, bias=mean)

    _sample("log_normal", [self], a.get("generator"), ["normal"], emit)
    return self


@_native("aten::cauchy_")
def _cauchy_(a: dict) -> torch.Tensor:
    self, median, sigma = a["self"], float(a["median"]), float(a["sigma"])
    if not sigma > 0.0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={_fmt(sigma)}")
    if self.dtype not in _FLOATS:
        raise RuntimeError(f"Cauchy distribution is a continuous probability distribution. dtype must be a floating "
                           f"point but you specified {_CPP_NAMES[self.dtype]}")
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        t = _tmp(nc, rand[0])
        nc.scalar.activation(t, rand[0], "tan", scale=math.pi, bias=-math.pi / 2)  # tan(pi * (u - 1/2))
        nc.scalar.activation(outs[0], t, "identity", scale=sigma, bias=median)

    _sample("cauchy", [self], a.get("generator"), ["uniform"], emit)
    return self


# --- bernoulli ---------------------------------------------------------------------

def _check_p(p: float) -> None:
    if not 0 <= p <= 1:
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={_fmt(p)}")


def _bernoulli_scalar(self: torch.Tensor, p: float, generator) -> torch.Tensor:
    _check_p(p)
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        nc.vector.tensor_scalar(outs[0], rand[0], "less", p, dtype=FP32)

    _sample("bernoulli", [self], generator, ["uniform"], emit)
    return self


@_native("aten::bernoulli_.float")
def _bernoulli_float(a: dict) -> torch.Tensor:
    return _bernoulli_scalar(a["self"], float(a["p"]), a.get("generator"))


def _bernoulli_tensor(self: torch.Tensor, p: torch.Tensor, generator) -> torch.Tensor:
    if not is_device_tensor(p):  # a host 0-dim probability
        if p.dim() != 0:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{self.device} and {p.device}!")
        return _bernoulli_scalar(self, float(scalar_of(p)), generator)
    if p.dtype not in _FLOATS:
        raise _refuse("bernoulli_tensor_cpu_p_", p.dtype)
    shape = tuple(self.shape)
    p_shape = tuple(p.shape)
    if len(p_shape) > len(shape) or any(q != 1 and q != s for q, s in zip(reversed(p_shape), reversed(shape))):
        for i, (q, s) in enumerate(zip(reversed(p_shape), reversed(shape))):
            if q != 1 and q != s:
                raise RuntimeError(f"The expanded size of the tensor ({s}) must match the existing size ({q}) at "
                                   f"non-singleton dimension {len(shape) - 1 - i}.  Target sizes: {list(shape)}.  "
                                   f"Tensor sizes: {list(p_shape)}")
        raise RuntimeError(f"expand: the number of sizes provided ({len(shape)}) must be greater or equal to the "
                           f"number of dimensions in the tensor ({len(p_shape)})")
    overlap.assert_no_internal_overlap(self)
    if p.numel() and not _reduce_flags("bernoulli_check_p", p, _in_unit_interval):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be "
                           "improved?  If so, please report an enhancement request to PyTorch.)")

    def emit(nc, outs, rand, ins):
        nc.vector.tensor_tensor(outs[0], rand[0], ins[0], "less", dtype=FP32)

    _sample("bernoulli", [self], generator, ["uniform"], emit, ins=(p,))
    return self


def _in_unit_interval(nc, t, flag) -> None:
    lo = nc.sbuf_tile(t.shape, BOOL)
    nc.vector.tensor_scalar(lo, t, "greater_equal", 0.0, dtype=FP32)
    nc.vector.tensor_scalar(flag, t, "less_equal", 1.0, dtype=FP32)
    nc.vector.tensor_tensor(flag, flag, lo, "logical_and", dtype=BOOL)


@_native("aten::bernoulli_.Tensor")
def _bernoulli_tensor_(a: dict) -> torch.Tensor:
    return _bernoulli_tensor(a["self"], a["p"], a.get("generator"))


@_native("aten::bernoulli.out")
def _bernoulli_out(a: dict) -> torch.Tensor:
    p, out = a["self"], a["out"]
    if tuple(out.shape) != tuple(p.shape):
        out.resize_(tuple(p.shape))
    return _bernoulli_tensor(out, p, a.get("generator"))


# --- random_ ---------------------------------------------------------------------------

def _to_int64(x: float) -> int:
    """static_cast<int64_t>(float) as x86 does it: out of range (or inf/NaN) gives INT64_MIN."""
    return int(x) if math.isfinite(x) and -2.0 ** 63 <= x < 2.0 ** 63 else -(1 << 63)


def _update_from(value: int, dtype: torch.dtype) -> int:
    """CPU's update_from: the first integer >= from that the float dtype represents."""
    plus1 = _to_int64(_as_dtype(float(value + 1), dtype))
    if plus1 < value:
        n = max(abs(value + 1).bit_length() - 1, 0)
        value = plus1 + (1 << (n - _DIGITS[dtype] + 1))
    return value


def _update_to(value: int, dtype: torch.dtype) -> int:
    minus1 = _to_int64(_as_dtype(float(value - 1), dtype))
    if minus1 >= value:
        n = max(abs(value - 1).bit_length() - 1, 0)
        value = minus1 - (1 << (n - _DIGITS[dtype] + 1))
    return value


def _check_from_to(lo: int, hi_inclusive: int, dtype: torch.dtype) -> None:
    name = _CPP_NAMES[dtype]
    if dtype.is_floating_point:
        limit = _FMAX[dtype]
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
    span_signed = _wrap64(span)

    def emit(nc, outs, rand, ins):
        a = rand[0]
        r = _tmp(nc, a, I64)
        if not big:
            nc.vector.tensor_scalar(r, a, "remainder", span, dtype=I64)
        else:
            v = _tmp(nc, a, I64)  # 64 random bits: (a << 2) ^ b
            nc.vector.tensor_scalar(v, a, "left_shift", 2, dtype=I64)
            nc.vector.tensor_tensor(v, v, rand[1], "bitwise_xor", dtype=I64)
            if span == 1 << 64:
                r = v
            elif span <= 1 << 63:
                nc.vector.tensor_scalar(r, v, "bitwise_and", mask63, dtype=I64)
                if span < 1 << 63:
                    nc.vector.tensor_scalar(r, r, "remainder", span, dtype=I64)
            else:  # 2^63 < span < 2^64: v mod span = v if v <u span else v - span
                flipped = _tmp(nc, a, I64)
                nc.vector.tensor_scalar(flipped, v, "bitwise_xor", -(1 << 63), dtype=I64)
                below = _tmp(nc, a, BOOL)
                nc.vector.tensor_scalar(below, flipped, "less", _wrap64(span_signed ^ -(1 << 63)), dtype=I64)
                reduced = _tmp(nc, a, I64)
                nc.vector.tensor_scalar(reduced, v, "subtract", span_signed, dtype=I64)
                nc.vector.select(r, below, v, reduced)
        if base:
            nc.vector.tensor_scalar(r, r, "add", _wrap64(base), dtype=I64)
        if narrow_float:  # int64 -> float -> half, as static_cast<Half>(int64_t)
            f = _tmp(nc, a, FP32)
            nc.vector.tensor_copy(f, r)
            nc.vector.tensor_copy(outs[0], f)
        elif out_dtype == BOOL:
            nc.vector.tensor_scalar(outs[0], r, "not_equal", 0, dtype=I64)
        else:
            nc.vector.tensor_copy(outs[0], r)

    _sample("random", [self], generator, ["bits", "bits"] if big else ["bits"], emit)
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
        raise _refuse("random_full_64_bits_range_kernel_cpu", dtype)
    if dtype not in (torch.int64, torch.float32, torch.bfloat16):
        raise RuntimeError("random_full_64_bits_range_kernel_cpu handles only int64, double, float and bfloat16")
    return _random_fill(self, 1 << 64, 0, generator) if self.numel() else self


@_native("aten::random_")
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


@_native("aten::random_.from")
def _random_from(a: dict) -> torch.Tensor:
    to = a.get("to")
    return _random_from_to(a["self"], int(a["from"]), None if to is None else int(to), a.get("generator"))


@_native("aten::random_.to")
def _random_to(a: dict) -> torch.Tensor:
    return _random_from_to(a["self"], 0, int(a["to"]), a.get("generator"))


# --- randperm --------------------------------------------------------------------------

_PERM_MAX = P * 8192  # elements one SBUF-resident permutation handles (keys + result: 16 B per element)
_BUCKET = P * 4096  # target bucket size of the two-level permutation of larger n


def _perm_layout(n: int) -> tuple[int, int]:
    return (1, n) if n <= FREE_MAX else (P, math.ceil(n / P))


def _argsort_program(n: int):
    def program(out, keys):
        order = np.argsort(keys.reshape(-1)[:n], kind="stable")
        flat = out.reshape(-1)
        flat[:n] = order
        flat[n:] = 0

    return program


@_native("aten::randperm.generator_out")
def _randperm_out(a: dict) -> torch.Tensor:
    n, out, generator = int(a["n"]), a["out"], a.get("generator")
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    _check_generator(generator)
    dtype = out.dtype
    if dtype == torch.bool:
        raise _refuse("randperm", dtype)
    _convert(n - 1 if n > 0 else n, dtype)  # CPU: scalar_tensor(n - 1) of the result's dtype must exist
    if dtype == torch.float16 and n > (1 << 11) + 1:
        raise RuntimeError("n cannot be greater than 2049 for Half type.")
    if dtype == torch.float32 and n > (1 << 24) + 1:
        raise RuntimeError("n cannot be greater than 2^24+1 for Float type.")
    if tuple(out.shape) != (n,):
        out.resize_((n,))
    if n == 0:
        return out
    if n <= _PERM_MAX:
        _randperm_small(out, n, generator)
    else:
        _randperm_large(out, n, generator)
    return out


def _store_perm(nc, out_view: np.ndarray, perm, n: int, start: int = 0) -> None:
    """Cast an int64 permutation tile (first n elements in row-major order) to out's dtype and store it."""
    p, f = perm.shape
    if out_view.dtype != I64:
        cast = nc.sbuf_tile((p, f), out_view.dtype)
        if out_view.dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
            wide = nc.sbuf_tile((p, f), FP32)  # static_cast<Half>(int64): via float
            nc.vector.tensor_copy(wide, perm)
            nc.vector.tensor_copy(cast, wide)
        else:
            nc.vector.tensor_copy(cast, perm)
        perm = cast
    rows, rest = divmod(n, f)
    if rows:
        nc.dma.store(out_view[start:start + rows * f], perm[:rows, :])
    if rest:
        nc.dma.store(out_view[start + rows * f:start + n], perm[rows:rows + 1, :rest])


def _randperm_small(out: torch.Tensor, n: int, generator) -> None:
    """Sort n random 62-bit keys on GpSimd: argsort of i.i.d. keys is a uniform permutation."""
    seed, offset = _reserve(generator, out.device.index, n)
    p, f = _perm_layout(n)
    view = hbm(out)
    with launch("randperm", out.device.index) as nc:
        keys = nc.sbuf_tile((p, f), I64)
        nc.gpsimd.random(keys, seed, offset, "bits")
        perm = nc.sbuf_tile((p, f), I64)
        nc.gpsimd.run("randperm_sort", _argsort_program(n), (perm,), (keys,), elements=n,
                      factor=max(1.0, math.log2(n)))
        _store_perm(nc, view, perm, n)


def _randperm_large(out: torch.Tensor, n: int, generator) -> None:
    """Two-level permutation for n beyond SBUF: random bucket per element (a stable counting scatter into
    HBM scratch by indirect DMA), then each bucket shuffled by random keys. Lexicographic (bucket, key)
    order of i.i.d. keys, so the permutation is uniform."""
    buckets = math.ceil(n / _BUCKET)
    seed, offset = _reserve(generator, out.device.index, 2 * n)
    scratch = torch.empty((n, 1), dtype=torch.int64, device=out.device)
    table = hbm(scratch)
    view = hbm(out)
    with launch("randperm", out.device.index) as nc:
        counts = nc.sbuf_tile((1, buckets), I64)
        nc.vector.memset(counts, 0)

        def histogram(counts_out, ids, counts_in):
            counts_out[0] = counts_in[0] + np.bincount(ids.reshape(-1), minlength=buckets)

        tiles = list(flat_tiles(n, FREE_MAX))
        for start, stop, p, f in tiles:  # pass 1: bucket sizes
            mark = nc.mark()
            ids = _bucket_ids(nc, seed, offset + start, p, f, buckets)
            nc.gpsimd.run("randperm_histogram", histogram, (counts,), (ids, counts), elements=p * f)
            nc.release_to(mark)
        base = nc.sbuf_tile((1, buckets), I64)  # exclusive prefix sum: where each bucket starts
        nc.vector.tensor_scan(base, counts, "add", dtype=I64)
        nc.vector.tensor_tensor(base, base, counts, "subtract", dtype=I64)
        fill = nc.sbuf_tile((1, buckets), I64)
        nc.vector.tensor_copy(fill, base)

        def positions(dest, fill_out, ids, fill_in):
            flat = ids.reshape(-1)
            order = np.argsort(flat, kind="stable")
            sorted_ids = flat[order]
            first = np.searchsorted(sorted_ids, np.arange(buckets))
            rank = np.empty_like(flat)
            rank[order] = np.arange(flat.size) - first[sorted_ids]
            dest.reshape(-1)[:] = fill_in[0][flat] + rank
            fill_out[0] = fill_in[0] + np.bincount(flat, minlength=buckets)

        for start, stop, p, f in tiles:  # pass 2: scatter each index to its bucket slot (same bucket draws)
            mark = nc.mark()
            ids = _bucket_ids(nc, seed, offset + start, p, f, buckets)
            dest = nc.sbuf_tile((p, f), I64)
            nc.gpsimd.run("randperm_positions", positions, (dest, fill), (ids, fill), elements=p * f, factor=4.0)
            index = nc.sbuf_tile((p, f), I64)
            nc.gpsimd.iota(index, base=start, partition_step=f, free_step=1)
            _scatter_rows(nc, table, dest, index)
            nc.release_to(mark)
        sizes = counts.read()[0].tolist()
        starts = base.read()[0].tolist()
        for b in range(buckets):  # pass 3: shuffle each bucket in SBUF
            m, s = int(sizes[b]), int(starts[b])
            if m == 0:
                continue
            mark = nc.mark()
            pp, ff = _perm_layout(m)
            values = nc.sbuf_tile((pp, ff), I64)
            rows, rest = divmod(m, ff)
            flat_table = table.reshape(-1)
            if rows:
                nc.dma.load(values[:rows, :], flat_table[s:s + rows * ff])
            if rest:
                nc.dma.load(values[rows:rows + 1, :rest], flat_table[s + rows * ff:s + m])
            keys = nc.sbuf_tile((pp, ff), I64)
            nc.gpsimd.random(keys, seed, offset + n + s, "bits")
            shuffled = nc.sbuf_tile((pp, ff), I64)

            def shuffle(result, vals, ks, m=m):
                order = np.argsort(ks.reshape(-1)[:m], kind="stable")
                flat = result.reshape(-1)
                flat[:m] = vals.reshape(-1)[:m][order]
                flat[m:] = 0

            nc.gpsimd.run("randperm_sort", shuffle, (shuffled,), (values, keys), elements=m,
                          factor=max(1.0, math.log2(m)))
            _store_perm(nc, view, shuffled, m, start=s)
            nc.release_to(mark)


def _bucket_ids(nc, seed: int, counter: int, p: int, f: int, buckets: int):
    bits = nc.sbuf_tile((p, f), I64)
    nc.gpsimd.random(bits, seed, counter, "bits")
    ids = nc.sbuf_tile((p, f), I64)
    nc.vector.tensor_scalar(ids, bits, "remainder", buckets, dtype=I64)
    return ids


def _scatter_rows(nc, table: np.ndarray, dest, index) -> None:
    """table[dest[p, j]] = index[p, j] for every element, by indirect DMA in columns of <= 128 rows."""
    p, f = dest.shape
    for j in range(f):
        nc.dma.store_rows(table, dest[:, j:j + 1], index[:, j:j + 1])


# --- multinomial -------------------------------------------------------------------------

_CATEGORIES_MAX = 4096  # categories one partition row holds (values, keys, sort indices)


@_native("aten::multinomial", "aten::multinomial.out")
def _multinomial(a: dict) -> torch.Tensor:
    self, n_sample, replacement = a["self"], int(a["num_samples"]), bool(a["replacement"])
    generator, out = a.get("generator"), a.get("out")
    if out is not None and out.device != self.device:
        raise RuntimeError("multinomial arguments must have the same device")
    if not 0 < self.dim() <= 2:
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if self.dtype not in _FLOATS:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{SCALAR_TYPE_NAMES[self.dtype]}")
    if out is not None and out.dtype != torch.int64:
        raise RuntimeError(f"multinomial expects Long tensor out, got: {SCALAR_TYPE_NAMES[out.dtype]}")
    if n_sample <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    cats = self.shape[-1]
    if not replacement and n_sample > cats:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if cats > 1 << 24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    _check_generator(generator)
    rows = 1 if self.dim() == 1 else self.shape[0]
    shape = (n_sample,) if self.dim() == 1 else (rows, n_sample)
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=self.device)
    elif tuple(out.shape) != shape:
        out.resize_(shape)
    if out.numel() == 0:
        return out
    probs = hbm(self).reshape(rows, cats)
    result = hbm(out).reshape(rows, n_sample)
    if cats > _CATEGORIES_MAX:
        if cats > _ROW_MAX:
            raise NotImplementedError(f"multinomial on neuron holds a distribution's row in SBUF: at most {_ROW_MAX} "
                                      f"categories, got {cats}")
        _multinomial_wide(self, probs, result, n_sample, replacement, generator)
        return out
    if not replacement or n_sample == 1:
        _multinomial_keys(self, probs, result, n_sample, generator)
    else:
        _multinomial_search(self, probs, result, n_sample, generator)
    return out


def _load_rows(nc, probs: np.ndarray, r0: int, r1: int):
    x = nc.sbuf_tile((r1 - r0, probs.shape[1]), probs.dtype)
    nc.dma.load(x, probs[r0:r1])
    xf = nc.sbuf_tile(x.shape, FP32)
    nc.vector.tensor_copy(xf, x)
    return xf


def _all_rows(nc, flags) -> bool:
    row = nc.sbuf_tile((flags.partitions, 1), BOOL)
    nc.vector.tensor_reduce(row, flags, "logical_and")
    col = nc.sbuf_tile((1, 1), BOOL)
    nc.gpsimd.partition_reduce(col, row, "logical_and")
    return bool(col.read()[0, 0])


def _multinomial_keys(self, probs, result, n_sample: int, generator) -> None:
    """Without replacement (or one sample): top-k of p / q with q ~ Exp(1) (the Gumbel trick, as CPU)."""
    rows, cats = probs.shape
    device = self.device.index
    with launch("multinomial", device) as nc:
        tiles = []
        for r0, r1 in row_tiles(rows):  # validity first: CPU checks before it draws
            mark = nc.mark()
            xf = _load_rows(nc, probs, r0, r1)
            ok = nc.sbuf_tile(xf.shape, BOOL)
            finite = nc.sbuf_tile(xf.shape, BOOL)
            nc.vector.tensor_scalar(ok, xf, "greater_equal", 0.0, dtype=FP32)
            nc.vector.tensor_scalar(finite, xf, "less", math.inf, dtype=FP32)
            nc.vector.tensor_tensor(ok, ok, finite, "logical_and", dtype=BOOL)
            if not _all_rows(nc, ok):
                raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
            total = nc.sbuf_tile((r1 - r0, 1), FP32)
            nc.vector.tensor_reduce(total, xf, "add", dtype=FP32)
            positive = nc.sbuf_tile((r1 - r0, 1), BOOL)
            nc.vector.tensor_scalar(positive, total, "not_equal", 0.0, dtype=FP32)
            if not _all_rows(nc, positive):
                raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
            tiles.append((r0, r1))
            nc.release_to(mark)
    seed, offset = _reserve(generator, device, rows * cats)
    with launch("multinomial", device) as nc:
        for r0, r1 in tiles:
            mark = nc.mark()
            xf = _load_rows(nc, probs, r0, r1)
            u = nc.sbuf_tile(xf.shape, FP32)
            nc.gpsimd.random(u, seed, offset + r0 * cats, "uniform")
            q = nc.sbuf_tile(xf.shape, FP32)
            nc.scalar.activation(q, u, "log", scale=-1.0, bias=1.0)
            nc.vector.tensor_scalar(q, q, "multiply", -1.0, dtype=FP32)
            nc.vector.tensor_scalar(q, q, "maximum", 2.0 ** -30, dtype=FP32)  # Exp(1) > 0 (u = 0 has mass 2^-24)
            keys = nc.sbuf_tile(xf.shape, FP32)
            nc.vector.tensor_tensor(keys, xf, q, "divide", dtype=FP32)
            index = nc.sbuf_tile((r1 - r0, n_sample if n_sample > 1 else 1), I64)
            if n_sample == 1:
                best = nc.sbuf_tile((r1 - r0, 1), FP32)
                nc.vector.arg_reduce(best, index, keys, "maximum")
            else:
                ordered = nc.sbuf_tile(xf.shape, FP32)
                order = nc.sbuf_tile(xf.shape, I64)
                nc.gpsimd.sort(ordered, order, keys, descending=True)
                index = order[:, :n_sample]
            nc.dma.store(result[r0:r1], index)
            nc.release_to(mark)


_ROW_MAX = P * 8192  # categories of one SBUF-resident row (probabilities, keys and the top-k indices)


def _flat_tile(nc, n: int, dtype, fill=None):
    """A tile holding n elements in row-major order ([1, n] or [128, ceil(n / 128)]), padding set to ``fill``."""
    tile = nc.sbuf_tile(_perm_layout(n), dtype)
    if fill is not None:
        nc.vector.memset(tile, fill)
    return tile


def _flat_regions(tile, n: int):
    """The (sub-tile, start, stop) regions covering the first n elements of a flat tile."""
    f = tile.free
    rows, rest = divmod(n, f)
    regions = []
    if rows:
        regions.append((tile[:rows, :], 0, rows * f))
    if rest:
        regions.append((tile[rows:rows + 1, :rest], rows * f, n))
    return regions


def _padding(tile, n: int):
    """The sub-tiles after the first n elements of a flat tile."""
    p, f = tile.shape
    rows, rest = divmod(n, f)
    regions = []
    if rest:
        regions.append(tile[rows:rows + 1, rest:])
        rows += 1
    if rows < p:
        regions.append(tile[rows:, :])
    return regions


def _load_row(nc, row: np.ndarray, cats: int):
    x = _flat_tile(nc, cats, row.dtype, 0)
    for region, s0, s1 in _flat_regions(x, cats):
        nc.dma.load(region, row[s0:s1])
    xf = nc.sbuf_tile(x.shape, FP32)
    nc.vector.tensor_copy(xf, x)
    return xf


def _multinomial_wide(self, probs, result, n_sample: int, replacement: bool, generator) -> None:
    """Rows too long for one partition: each row is a [128, F] tile (padding holds probability 0)."""
    rows, cats = probs.shape
    device = self.device.index
    fast = not replacement or n_sample == 1
    with launch("multinomial", device) as nc:  # validation before any draw, as CPU
        for r in range(rows):
            mark = nc.mark()
            xf = _load_row(nc, probs[r], cats)
            flags = nc.sbuf_tile(xf.shape, BOOL)
            nc.vector.tensor_scalar(flags, xf, "greater_equal", 0.0, dtype=FP32)
            finite = nc.sbuf_tile(xf.shape, BOOL)
            nc.vector.tensor_unary(finite, xf, "isfinite", dtype=FP32)
            if fast:
                nc.vector.tensor_tensor(flags, flags, finite, "logical_and", dtype=BOOL)
                if not _all_rows(nc, flags):
                    raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
            else:
                if not _all_rows(nc, flags):
                    raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
                if not _all_rows(nc, finite):
                    raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity "
                                       "or NaN)")
            part = nc.sbuf_tile((xf.partitions, 1), FP32)
            nc.vector.tensor_reduce(part, xf, "add", dtype=FP32)
            total = nc.sbuf_tile((1, 1), FP32)
            nc.gpsimd.partition_reduce(total, part, "add", dtype=FP32)
            positive = nc.sbuf_tile((1, 1), BOOL)
            nc.vector.tensor_scalar(positive, total, "greater", 0.0, dtype=FP32)
            if not _all_rows(nc, positive):
                raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
            nc.release_to(mark)
    seed, offset = _reserve(generator, device, rows * (cats if fast else n_sample))
    with launch("multinomial", device) as nc:
        for r in range(rows):
            mark = nc.mark()
            xf = _load_row(nc, probs[r], cats)
            if fast:  # top-k of p / q, q ~ Exp(1); padding keys are -1 so they are never chosen
                u = nc.sbuf_tile(xf.shape, FP32)
                nc.gpsimd.random(u, seed, offset + r * cats, "uniform")
                q = nc.sbuf_tile(xf.shape, FP32)
                nc.scalar.activation(q, u, "log", scale=-1.0, bias=1.0)
                nc.vector.tensor_scalar(q, q, "multiply", -1.0, dtype=FP32)
                nc.vector.tensor_scalar(q, q, "maximum", 2.0 ** -30, dtype=FP32)
                keys = nc.sbuf_tile(xf.shape, FP32)
                nc.vector.tensor_tensor(keys, xf, q, "divide", dtype=FP32)
                for region in _padding(keys, cats):
                    nc.vector.memset(region, -1.0)
                index = _flat_tile(nc, n_sample, I64)

                def top(index_out, ks, k=n_sample):
                    order = np.argsort(-ks.reshape(-1)[:cats], kind="stable")[:k]
                    flat = index_out.reshape(-1)
                    flat[:k] = order
                    flat[k:] = 0

                nc.gpsimd.run("multinomial_topk", top, (index,), (keys,), elements=cats,
                              factor=max(1.0, math.log2(cats)))
                for region, s0, s1 in _flat_regions(index, n_sample):
                    nc.dma.store(result[r, s0:s1], region)
            else:  # normalised cumulative sums and a binary search per sample
                for c0 in range(0, n_sample, P * FREE_MAX):
                    c1 = min(n_sample, c0 + P * FREE_MAX)
                    inner = nc.mark()
                    u = nc.sbuf_tile(_perm_layout(c1 - c0), FP32)
                    nc.gpsimd.random(u, seed, offset + r * n_sample + c0, "uniform")
                    nc.scalar.activation(u, u, "identity", scale=-1.0, bias=1.0)  # (0, 1]
                    index = nc.sbuf_tile(u.shape, I64)

                    def search(index_out, x, us, m=c1 - c0):
                        cdf = np.cumsum(x.reshape(-1)[:cats], dtype=np.float32)
                        cdf = cdf / cdf[-1]
                        cdf[-1] = 1.0
                        flat = index_out.reshape(-1)
                        flat[:m] = np.searchsorted(cdf, us.reshape(-1)[:m], side="left")
                        flat[m:] = 0

                    nc.gpsimd.run("multinomial_search", search, (index,), (xf, u), elements=cats + (c1 - c0),
                                  factor=max(1.0, math.log2(cats)))
                    for region, s0, s1 in _flat_regions(index, c1 - c0):
                        nc.dma.store(result[r, c0 + s0:c0 + s1], region)
                    nc.release_to(inner)
            nc.release_to(mark)


def _multinomial_search(self, probs, result, n_sample: int, generator) -> None:
    """With replacement: normalised cumulative sums, one uniform per sample, binary search (GpSimd)."""
    rows, cats = probs.shape
    device = self.device.index
    with launch("multinomial", device) as nc:
        for r0, r1 in row_tiles(rows):
            mark = nc.mark()
            xf = _load_rows(nc, probs, r0, r1)
            flags = nc.sbuf_tile(xf.shape, BOOL)
            nc.vector.tensor_scalar(flags, xf, "greater_equal", 0.0, dtype=FP32)
            if not _all_rows(nc, flags):
                raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
            nc.vector.tensor_unary(flags, xf, "isfinite", dtype=FP32)
            if not _all_rows(nc, flags):
                raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or "
                                   "NaN)")
            total = nc.sbuf_tile((r1 - r0, 1), FP32)
            nc.vector.tensor_reduce(total, xf, "add", dtype=FP32)
            positive = nc.sbuf_tile((r1 - r0, 1), BOOL)
            nc.vector.tensor_scalar(positive, total, "greater", 0.0, dtype=FP32)
            if not _all_rows(nc, positive):
                raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
            nc.release_to(mark)
    seed, offset = _reserve(generator, device, rows * n_sample)
    chunk = FREE_MAX

    def search(index, cdf, u):
        for r in range(cdf.shape[0]):
            index[r] = np.searchsorted(cdf[r], u[r], side="left")

    with launch("multinomial", device) as nc:
        for r0, r1 in row_tiles(rows):
            mark = nc.mark()
            xf = _load_rows(nc, probs, r0, r1)
            cdf = nc.sbuf_tile(xf.shape, FP32)
            nc.vector.tensor_scan(cdf, xf, "add", dtype=FP32)
            total = cdf[:, cats - 1:cats]
            norm = nc.sbuf_tile((r1 - r0, 1), FP32)
            nc.vector.tensor_copy(norm, total)
            nc.vector.tensor_tensor(cdf, cdf, norm, "divide", dtype=FP32)
            nc.vector.memset(cdf[:, cats - 1:cats], 1.0)  # the last bucket closes at 1
            for s0 in range(0, n_sample, chunk):
                s1 = min(n_sample, s0 + chunk)
                inner = nc.mark()
                u = nc.sbuf_tile((r1 - r0, s1 - s0), FP32)
                # one stream per row; u' = 1 - u in (0, 1] so a leading zero-probability class is never drawn
                for r in range(r0, r1):
                    nc.gpsimd.random(u[r - r0:r - r0 + 1, :], seed, offset + r * n_sample + s0, "uniform")
                nc.scalar.activation(u, u, "identity", scale=-1.0, bias=1.0)
                index = nc.sbuf_tile(u.shape, I64)
                nc.gpsimd.run("multinomial_search", search, (index,), (cdf, u), elements=u.data.size,
                              factor=max(1.0, math.log2(max(cats, 2))))
                nc.dma.store(result[r0:r1, s0:s1], index)
                nc.release_to(inner)
            nc.release_to(mark)


# --- dropout ----------------------------------------------------------------------------

@_native("aten::native_dropout")
def _native_dropout(a: dict) -> tuple[torch.Tensor, torch.Tensor]:
    x, p, train = a["input"], float(a["p"]), a.get("train")
    if x.numel() == 0:
        return x, torch.empty_like(x)
    if train is None or train:
        p1m = 1.0 - p
        _check_p(p1m)
        scale = 0.0 if p1m == 0 else 1.0 / p1m
        if x.dtype not in _FLOATS:  # input.mul(mask).mul_(scale) on an integral tensor
            raise RuntimeError(f"result type Float can't be cast to the desired output type "
                               f"{SCALAR_TYPE_NAMES[x.dtype]}")
        mask = torch.empty_like(x, dtype=torch.bool)
        out = torch.empty_like(x)

        def emit(nc, outs, rand, ins):
            o, m = outs
            nc.vector.tensor_scalar(m, rand[0], "less", p1m, dtype=FP32)
            kept = _tmp(nc, o)
            nc.vector.tensor_tensor(kept, ins[0], m, "multiply", dtype=FP32)  # x * mask keeps NaN * 0 = NaN
            nc.vector.tensor_scalar(o, kept, "multiply", scale, dtype=FP32)

        _sample("dropout", [out, mask], a.get("generator"), ["uniform"], emit, ins=(x,))
        return out, mask
    out = torch.empty_like(x)
    mask = torch.empty_like(x, dtype=torch.bool)

    def emit_eval(nc, outs, rand, ins):
        nc.vector.tensor_copy(outs[0], ins[0])
        nc.vector.memset(outs[1], True)

    _elementwise_outputs("dropout_eval", [out, mask], (x,), emit_eval)
    return out, mask


def _elementwise_outputs(name: str, outs: Sequence[torch.Tensor], ins: Sequence[torch.Tensor], emit) -> None:
    """The tile loop of ``_sample`` without random tiles."""
    out0 = outs[0]
    numel = out0.numel()
    if numel == 0:
        return
    shape = tuple(out0.shape)
    order = None
    if out0.dim() > 1:
        order = memory_order(out0)
        if order == list(range(out0.dim())):
            order = None
    out_views = [_oriented(o, shape, order) for o in outs]
    in_views = [_oriented(t, shape, order) for t in ins]
    with launch(name, out0.device.index) as nc:
        for start, stop, p, f in flat_tiles(numel):
            mark = nc.mark()
            loaded = []
            for v in in_views:
                tile = nc.sbuf_tile((p, f), v.dtype)
                nc.dma.load_flat(tile, v, start, stop)
                loaded.append(tile)
            results = [nc.sbuf_tile((p, f), v.dtype) for v in out_views]
            emit(nc, results, [], loaded)
            for v, r in zip(out_views, results):
                nc.dma.store_flat(v, start, stop, r)
            nc.release_to(mark)


@_native("aten::native_dropout_backward")
def _native_dropout_backward(a: dict) -> torch.Tensor:
    grad, mask, scale = a["grad_output"], a["mask"], float(a["scale"])
    shape = _broadcast(grad.shape, mask.shape)
    inner = result_type(grad, mask)  # grad * mask, rounded to its type, then * scale
    dtype = result_type(grad, mask, scale)
    if tuple(grad.shape) == shape:
        out = torch.empty_like(grad, dtype=dtype)
    else:
        out = torch.empty(shape, dtype=dtype, device=grad.device)
    inner_np = FP32 if inner in _FLOATS else numpy_dtype(inner)
    inner_store = numpy_dtype(inner)

    def emit(nc, outs, rand, ins):
        g, m = ins
        kept = _tmp(nc, outs[0], inner_store)
        nc.vector.tensor_tensor(kept, g, m, "multiply", dtype=inner_np)
        nc.vector.tensor_scalar(outs[0], kept, "multiply", scale, dtype=FP32)

    _elementwise_outputs("dropout_backward", [out], (grad, mask), emit)
    return out


# --- arange ---------------------------------------------------------------------------

_GRAIN = 32768  # at::internal::GRAIN_SIZE: how CPU's parallel_for splits a range among threads
_VECTOR_BYTES = 32  # the Vectorized<T> width CPU's arange kernel runs with


def _cpu_chunks(n: int) -> int:
    """Chunk length of CPU's parallel_for over [0, n) (its vector loop restarts at each chunk)."""
    threads = torch.get_num_threads()
    if n < _GRAIN or threads == 1:
        return n
    tasks = min(threads, -(-n // _GRAIN))
    return -(-n // tasks)


def _arange_program(dtype: torch.dtype, start: float, step: float, n: int):
    """CPU's arange kernel, element by element: a scalar loop and a vector loop whose block base is rounded
    to the dtype (Vectorized<T>::arange(base, step)), restarted at each parallel_for chunk."""
    target = numpy_dtype(dtype)
    width = _VECTOR_BYTES // target.itemsize
    chunk = _cpu_chunks(n)
    wide = dtype == torch.float32  # accumulate in double; (b)f16 accumulate in float with fma

    def program(out, idx):
        i = idx.reshape(-1)
        b = (i // chunk) * chunk
        m = np.minimum(n, b + chunk) - b
        vector = (i - b) < (m // (2 * width)) * (2 * width)
        i0 = b + ((i - b) // width) * width
        if wide:
            scalar = np.float64(start) + np.float64(step) * i.astype(F64)
            base = (np.float64(start) + np.float64(step) * i0.astype(F64)).astype(FP32).astype(F64)
            block = base + (i - i0).astype(F64) * np.float64(step)
            value = np.where(vector, block, scalar).astype(FP32)
        else:
            s, st = np.float32(start), np.float32(step)
            scalar = fma32(np.full(i.shape, st), i.astype(FP32), s)
            base = fma32(np.full(i.shape, st), i0.astype(FP32), s).astype(target).astype(FP32)
            block = fma32((i - i0).astype(FP32), np.full(i.shape, st), base)
            value = np.where(vector, block, scalar)
        out.reshape(-1)[:] = value.astype(target)

    return program


# torch 2.14 sizes an int64 arange with a floating-point start, end or step in double, as every other
# dtype (arange(0, 5, 1.5) has 4 elements, arange(0, 1, 0.1) is ten zeros); 2.13 sized it from the
# int64-converted bounds (5 elements; step 0 raised ValueError). Found by `python -m harness compat
# --torch 2.13.0 --torch 2.14.1`; tests/kernels/test_random_kernels.py checks either against the CPU.
_INT64_ARANGE_SIZE_IN_DOUBLE = torch_at_least(2, 14)


@_native("aten::arange.start_out")
def _arange_out(a: dict) -> torch.Tensor:
    start, end, step, out = a["start"], a["end"], a["step"], a["out"]
    start, end, step = (scalar_of(v) for v in (start, end, step))
    dtype = out.dtype
    if dtype == torch.bool:
        raise _refuse("arange_cpu", dtype)
    # Bounds are validated in double, then start/step (and, for int64, end) convert to the accumulate type.
    dstart, dend, dstep = float(start), float(end), float(step)
    if not (dstep > 0 or dstep < 0):
        raise RuntimeError("step must be nonzero")
    if not (math.isfinite(dstart) and math.isfinite(dend)):
        raise RuntimeError(f"unsupported range: {_fmt(dstart)} -> {_fmt(dend)}")
    if not ((dstep > 0 and dend >= dstart) or (dstep < 0 and dend <= dstart)):
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    if dtype.is_floating_point:
        acc = torch.float64 if dtype == torch.float32 else torch.float32
        xstart, xstep = _convert(start, acc), _convert(step, acc)
    else:
        xstart, xstep = _convert(start, torch.int64), _convert(step, torch.int64)
    if dtype == torch.int64 and not (_INT64_ARANGE_SIZE_IN_DOUBLE and any(isinstance(v, float)
                                                                             for v in (start, end, step))):
        xend = _convert(end, torch.int64)
        if xstep == 0:
            raise ValueError("step must be nonzero")
        sgn = (xstep > 0) - (xstep < 0)
        num = _wrap64(xend - xstart + xstep - sgn)  # int64 arithmetic, wrapping as the C++ does
        quotient = abs(num) // abs(xstep)
        size_d = float(quotient if (num >= 0) == (xstep > 0) else -quotient)
    else:
        quotient = (dend - dstart) / dstep
        size_d = float(math.ceil(quotient)) if math.isfinite(quotient) else quotient
    if not (size_d >= 0 and size_d <= float(2 ** 63 - 1)):
        raise RuntimeError("invalid size, possible overflow?")
    size = int(size_d)
    if out.numel() != size:
        if out.numel() > 0:
            warnings.warn(f"The number of elements in the out tensor of shape {list(out.shape)} is {out.numel()} which "
                          f"does not match the computed number of elements {size}. Note that this may occur as a "
                          f"result of rounding error. The out tensor will be resized to a tensor of shape ({size},).",
                          UserWarning, stacklevel=3)
        out.resize_((size,))
    if size == 0:
        return out
    view = hbm(out)
    with launch("arange", out.device.index) as nc:
        for s0, s1, p, f in flat_tiles(size):
            mark = nc.mark()
            result = nc.sbuf_tile((p, f), view.dtype)
            if not dtype.is_floating_point:  # exact int64 with wrap, cast (wrapping) into the dtype
                nc.gpsimd.iota(result, base=_wrap64(xstart + xstep * s0), partition_step=_wrap64(xstep * f),
                               free_step=xstep)
            else:
                idx = nc.sbuf_tile((p, f), I64)
                nc.gpsimd.iota(idx, base=s0, partition_step=f, free_step=1)
                nc.gpsimd.run("arange", _arange_program(dtype, xstart, xstep, size), (result,), (idx,),
                              elements=p * f, factor=4.0)
            nc.dma.store_flat(view, s0, s1, result)
            nc.release_to(mark)
    return out


# --- linspace / logspace ----------------------------------------------------------------

def _space_out(out: torch.Tensor, steps: int) -> None:
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    if out.numel() != steps:
        out.resize_((steps,))


def _fill_value(out: torch.Tensor, value) -> None:
    """fill_(value) with fill_'s conversion rules (a half or bfloat16 overflows to inf; float32 raises)."""
    if out.dtype == torch.float32:
        value = np.float32(_convert(value, torch.float32))
    elif out.dtype.is_floating_point:
        with np.errstate(over="ignore"):
            value = np.float32(float(scalar_of(value)))
    elif out.dtype != torch.bool:
        value = _convert(value, out.dtype)
    view = hbm(out)
    with launch("fill", out.device.index) as nc:
        for s0, s1, p, f in flat_tiles(out.numel()):
            mark = nc.mark()
            t = nc.sbuf_tile((p, f), view.dtype)
            nc.vector.memset(t, value)
            nc.dma.store_flat(view, s0, s1, t)
            nc.release_to(mark)


def _index_tiles(nc, lo: int, hi: int):
    """Flat tiles over [lo, hi) with an int64 index tile (GpSimd iota) for each."""
    for s0, s1, p, f in flat_tiles(hi - lo):
        mark = nc.mark()
        idx = nc.sbuf_tile((p, f), I64)
        nc.gpsimd.iota(idx, base=lo + s0, partition_step=f, free_step=1)
        yield lo + s0, lo + s1, idx
        nc.release_to(mark)


@_native("aten::linspace.out")
def _linspace_out(a: dict) -> torch.Tensor:
    start, end, steps, out = scalar_of(a["start"]), scalar_of(a["end"]), int(a["steps"]), a["out"]
    _space_out(out, steps)
    if steps == 0:
        return out
    if steps == 1:
        _fill_value(out, start)
        return out
    dtype = out.dtype
    if dtype == torch.bool:
        raise _refuse("linspace_cpu", dtype)
    lo, hi = _convert(start, dtype), _convert(end, dtype)
    halfway = steps // 2
    view = hbm(out)
    target = view.dtype
    with launch("linspace", out.device.index) as nc:
        if dtype == torch.float32:
            s, e = np.float32(lo), np.float32(hi)
            step = np.float32(np.float32(e - s) / np.float32(steps - 1))

            def program(res, idx):
                i = idx.reshape(-1)
                first = fma32(np.full(i.shape, step), i.astype(FP32), s)
                second = fma32(np.full(i.shape, -step), (steps - 1 - i).astype(FP32), e)
                res.reshape(-1)[:] = np.where(i < halfway, first, second)

            for s0, s1, idx in _index_tiles(nc, 0, steps):
                res = nc.sbuf_tile(idx.shape, target)
                nc.gpsimd.run("linspace", program, (res,), (idx,), elements=idx.data.size, factor=4.0)
                nc.dma.store_flat(view, s0, s1, res)
        elif dtype in FLOAT_DTYPES:  # c10::Half / BFloat16 arithmetic: every operation rounds to the dtype
            s = float(np.asarray(np.float32(lo)).astype(target))
            e = float(np.asarray(np.float32(hi)).astype(target))
            diff = float(np.asarray(np.float32(e) - np.float32(s)).astype(target))
            count = float(np.asarray(np.float32(steps - 1)).astype(target))
            step = float(np.asarray(np.float32(diff) / np.float32(count)).astype(target))
            for part, (p0, p1) in enumerate(((0, halfway), (halfway, steps))):
                if p0 == p1:
                    continue
                for s0, s1, idx in _index_tiles(nc, p0, p1):
                    k = idx
                    if part:  # steps - idx - 1
                        k = nc.sbuf_tile(idx.shape, I64)
                        nc.vector.tensor_scalar(k, idx, "subtract", steps - 1, reverse=True, dtype=I64)
                    wide = nc.sbuf_tile(idx.shape, FP32)
                    nc.vector.tensor_copy(wide, k)  # int64 -> float -> half, as static_cast<Half>(int64_t)
                    res = nc.sbuf_tile(idx.shape, target)
                    nc.vector.tensor_copy(res, wide)
                    nc.vector.tensor_scalar(res, res, "multiply", step, dtype=FP32)
                    if part:
                        nc.vector.tensor_scalar(res, res, "subtract", e, reverse=True, dtype=FP32)
                    else:
                        nc.vector.tensor_scalar(res, res, "add", s, dtype=FP32)
                    nc.dma.store_flat(view, s0, s1, res)
        else:  # integers: step in double, start + step * idx with one rounding, truncated
            s, e = float(lo), float(hi)
            step = (float(hi) - float(lo)) / float(steps - 1)

            def program(res, idx):
                i = idx.reshape(-1).astype(F64)
                first = fma64(np.full(i.shape, step), i, np.full(i.shape, s))
                second = fma64(np.full(i.shape, -step), (steps - 1) - i, np.full(i.shape, e))
                value = np.where(idx.reshape(-1) < halfway, first, second)
                res.reshape(-1)[:] = _double_to_int(value, I64 if target == I64 else np.dtype(np.int32))

            for s0, s1, idx in _index_tiles(nc, 0, steps):
                res = nc.sbuf_tile(idx.shape, I64)
                nc.gpsimd.run("linspace", program, (res,), (idx,), elements=idx.data.size, factor=4.0)
                if target != I64:
                    cast = nc.sbuf_tile(idx.shape, target)
                    nc.vector.tensor_copy(cast, res)
                    res = cast
                nc.dma.store_flat(view, s0, s1, res)
    return out


@_native("aten::logspace.out")
def _logspace_out(a: dict) -> torch.Tensor:
    start, end, steps, base, out = (scalar_of(a["start"]), scalar_of(a["end"]), int(a["steps"]), float(a["base"]),
                                    a["out"])
    _space_out(out, steps)
    if steps == 0:
        return out
    dtype = out.dtype
    if steps == 1:
        _fill_value(out, _pow(base, float(start)))
        return out
    if dtype == torch.bool:
        raise _refuse("logspace_cpu", dtype)
    target = numpy_dtype(dtype)
    lo, hi = _convert(start, dtype), _convert(end, dtype)
    halfway = steps // 2
    if dtype.is_floating_point:
        # CPU: scalar_t start/end; step = double(end - start) / (steps - 1) with end - start in scalar_t
        s = float(np.asarray(np.float32(lo)).astype(target))
        e = float(np.asarray(np.float32(hi)).astype(target))
        diff = float(np.asarray(np.float32(e) - np.float32(s)).astype(target))
        b = base
    else:
        s, e = int(lo), int(hi)
        diff = float(_wrap_int(e - s, dtype))  # scalar_t arithmetic
        b = base
    step = diff / (steps - 1)

    def program(res, idx):
        i = idx.reshape(-1)
        fi = i.astype(F64)
        x = np.where(i < halfway, s + step * fi, e - step * ((steps - 1) - fi))
        with np.errstate(all="ignore"):
            value = np.power(b, x)
        flat = res.reshape(-1)
        if dtype.is_floating_point:
            flat[:] = value.astype(FP32).astype(target)  # double -> float -> dtype
        else:
            flat[:] = _double_to_int(value, target)

    view = hbm(out)
    with launch("logspace", out.device.index) as nc:
        for s0, s1, idx in _index_tiles(nc, 0, steps):
            res = nc.sbuf_tile(idx.shape, target)
            nc.gpsimd.run("logspace", program, (res,), (idx,), elements=idx.data.size, factor=16.0)
            nc.dma.store_flat(view, s0, s1, res)
    return out


def _double_to_int(value: np.ndarray, target: np.dtype) -> np.ndarray:
    """static_cast<T>(double) as x86 computes it: truncation; out of range or NaN gives the minimum of the
    64-bit (int64) or 32-bit conversion (narrower integers keep the low bits of the 32-bit result)."""
    bits = 64 if target == I64 else 32
    lo, hi = -2.0 ** (bits - 1), 2.0 ** (bits - 1)
    inside = np.isfinite(value) & (value >= lo) & (value < hi)
    whole = np.where(inside, np.trunc(np.where(inside, value, 0.0)), lo).astype(np.int64)
    return whole.astype(target)


def _wrap_int(value: int, dtype: torch.dtype) -> int:
    """``value`` computed in C++ int arithmetic for ``dtype`` (small types promote to int)."""
    bits = 64 if dtype == torch.int64 else 32
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def _pow(base: float, exponent: float) -> float:
    try:
        return math.pow(base, exponent)
    except OverflowError:
        return math.inf
    except ValueError:
        return math.nan


# --- eye ----------------------------------------------------------------------------------

@_native("aten::eye.out", "aten::eye.m_out")
def _eye_out(a: dict) -> torch.Tensor:
    n, out = int(a["n"]), a["out"]
    m = int(a["m"]) if a.get("m") is not None else n
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    if tuple(out.shape) != (n, m):
        out.resize_((n, m))
    if n == 0 or m == 0:
        return out
    view = hbm(out)
    width = min(m, FREE_MAX)
    with launch("eye", out.device.index) as nc:
        zero = nc.sbuf_tile((min(n, P), width), view.dtype)
        nc.vector.memset(zero, 0)
        for r0, r1 in row_tiles(n):
            for c0 in range(0, m, width):
                c1 = min(m, c0 + width)
                rows, cols = r1 - r0, c1 - c0
                if c0 >= r1 or c1 <= r0:  # no diagonal element in this block
                    nc.dma.store(view[r0:r1, c0:c1], zero[:rows, :cols])
                    continue
                mark = nc.mark()
                diff = nc.sbuf_tile((rows, cols), np.dtype(np.int32))
                nc.gpsimd.iota(diff, base=r0 - c0, partition_step=1, free_step=-1)  # row - column
                block = nc.sbuf_tile((rows, cols), view.dtype)
                nc.vector.tensor_scalar(block, diff, "equal", 0, dtype=np.dtype(np.int32))
                nc.dma.store(view[r0:r1, c0:c1], block)
                nc.release_to(mark)
    return out


# --- overloads PyTorch's composites route to the kernels above -------------------------------

_SERVED = {
    "aten::uniform_": ("aten::rand", "aten::rand.generator", "aten::rand.out", "aten::rand.generator_out",
                       "aten::rand_like", "aten::rand_like.generator", "aten::rand_like.out",
                       "aten::rand_like.generator_out", "aten::uniform", "aten::uniform.out"),
    "aten::normal_": ("aten::randn", "aten::randn.generator", "aten::randn.out", "aten::randn.generator_out",
                      "aten::randn_like", "aten::randn_like.generator", "aten::randn_like.out",
                      "aten::randn_like.generator_out", "aten::normal.float_float", "aten::normal.float_float_out",
                      "aten::normal.out", "aten::normal_functional"),
    "aten::random_.from": ("aten::randint", "aten::randint.generator", "aten::randint.low",
                           "aten::randint.low_generator", "aten::randint.out", "aten::randint.generator_out",
                           "aten::randint.low_out", "aten::randint.low_generator_out", "aten::randint_like",
                           "aten::randint_like.generator", "aten::randint_like.low_dtype",
                           "aten::randint_like.low_generator_dtype", "aten::randint_like.Tensor",
                           "aten::randint_like.Tensor_generator", "aten::randint_like.out",
                           "aten::randint_like.generator_out", "aten::randint_like.low_dtype_out",
                           "aten::randint_like.low_generator_dtype_out", "aten::randint_like.Tensor_out",
                           "aten::randint_like.Tensor_generator_out", "aten::random.from", "aten::random.from_out"),
    "aten::random_.to": ("aten::random.to", "aten::random.to_out"),
    "aten::random_": ("aten::random", "aten::random.out"),
    "aten::bernoulli_.float": ("aten::bernoulli.p", "aten::bernoulli.float_out"),
    "aten::bernoulli_.Tensor": ("aten::bernoulli", "aten::bernoulli.Tensor", "aten::bernoulli.Tensor_out"),
    "aten::exponential_": ("aten::exponential", "aten::exponential.out"),
    "aten::randperm.generator_out": ("aten::randperm", "aten::randperm.generator", "aten::randperm.out"),
    "aten::native_dropout": ("aten::dropout", "aten::native_dropout.out"),
    "aten::native_dropout_backward": ("aten::native_dropout_backward.out",),
    "aten::arange.start_out": ("aten::arange", "aten::arange.start", "aten::arange.start_step", "aten::arange.out"),
    "aten::linspace.out": ("aten::linspace", "aten::linspace.Tensor_Tensor", "aten::linspace.Tensor_Scalar",
                           "aten::linspace.Scalar_Tensor", "aten::linspace.Tensor_Tensor_out",
                           "aten::linspace.Tensor_Scalar_out", "aten::linspace.Scalar_Tensor_out"),
    "aten::logspace.out": ("aten::logspace", "aten::logspace.Tensor_Tensor", "aten::logspace.Tensor_Scalar",
                           "aten::logspace.Scalar_Tensor", "aten::logspace.Tensor_Tensor_out",
                           "aten::logspace.Tensor_Scalar_out", "aten::logspace.Scalar_Tensor_out"),
    "aten::eye.m_out": ("aten::eye.m",),
    "aten::eye.out": ("aten::eye",),
    # empty + fill_/zero_ (kernels of the copy family)
    "aten::fill_.Scalar": ("aten::full", "aten::full.out", "aten::full_like", "aten::full_like.out",
                           "aten::scalar_tensor", "aten::scalar_tensor.out", "aten::ones", "aten::ones.out",
                           "aten::ones_like", "aten::ones_like.out"),
    "aten::zero_": ("aten::zeros", "aten::zeros.out", "aten::zeros_like", "aten::zeros_like.out"),
}
for _target, _ops in _SERVED.items():
    for _op in _ops:
        TABLE.serves(_op, _target)
