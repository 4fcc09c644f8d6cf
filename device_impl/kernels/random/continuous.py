"""uniform_, normal_ (scalar and tensor mean/std), exponential_, geometric_, log_normal_, cauchy_.

Tiling: ``tiles.sample``: flat [p <= 128, f] tiles of the output in memory order; one
uniform or normal float32 draw per element (GpSimdE), transformed elementwise:

* uniform   ScalarE ``u * (to - from) + from`` in float32, VectorE turns a value that
            rounded up to ``to`` into ``from`` (CPU's [from, to) rule);
* normal    ScalarE ``z * std + mean`` (VectorE multiply/add when mean or std is a tensor,
            loaded as a broadcast tile beside the draws);
* exponential / geometric   ScalarE ``log(1 - u)``, VectorE scale (and ceil, max 1);
* log_normal  ScalarE ``exp(z * std + mean)``;  cauchy  ScalarE ``tan(pi (u - 1/2))``, scale, shift.

The golden below is the same arithmetic in numpy over the draws, element by element.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from device_impl.engine.dtypes import FP32
from device_impl.kernels import overlap
from device_impl.kernels.common import SCALAR_TYPE_NAMES, cast_error, check_out
from device_impl.kernels.random.tiles import (
    BOOL,
    FLOATS,
    broadcast_shapes,
    float_only,
    fmt,
    native,
    reduce_flags,
    refuse,
    sample,
    serve,
    tmp,
)
from device_impl.kernels.scalars import CPP_NAMES, FLOAT_MAX, round_to


@native("aten::uniform_")
def _uniform_(a: dict) -> torch.Tensor:
    self, lo, hi = a["self"], float(a["from"]), float(a["to"])
    float_only(self, "check_uniform_bounds")
    dtype = self.dtype
    limit = FLOAT_MAX[dtype]
    name = CPP_NAMES[dtype]
    if not -limit <= lo <= limit:
        raise RuntimeError(f"from is out of bounds for {name}")
    if not -limit <= hi <= limit:
        raise RuntimeError(f"to is out of bounds for {name}")
    if not lo <= hi:
        raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={fmt(lo)} > to={fmt(hi)}")
    if hi - lo > limit:
        raise RuntimeError(f"uniform_ expects to-from <= std::numeric_limits<{SCALAR_TYPE_NAMES[dtype]}>::max(), "
                           f"but found to={fmt(hi)} and from={fmt(lo)} which result in to-from to exceed the limit")
    overlap.assert_no_internal_overlap(self)
    # CPU: from/to cast to the dtype, x * (to - from) + from in float from 24 random bits, rounded to the
    # dtype; a value that rounds up to `to` becomes `from`, so the result stays in [from, to).
    lo_t, hi_t = np.float32(round_to(lo, dtype)), np.float32(round_to(hi, dtype))
    span = float(np.float32(hi_t - lo_t))

    def emit(nc, outs, rand, ins):
        value = tmp(nc, outs[0], outs[0].dtype)
        nc.scalar.activation(value, rand[0], "identity", scale=span, bias=float(lo_t))
        at_top = tmp(nc, value, BOOL)
        nc.vector.tensor_scalar(at_top, value, "equal", float(hi_t), dtype=FP32)
        low = tmp(nc, value, value.dtype)
        nc.vector.memset(low, float(lo_t))
        nc.vector.select(outs[0], at_top, low, value)

    sample("uniform", [self], a.get("generator"), ["uniform"], emit)
    return self


def _check_std(std: float) -> None:
    if not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {fmt(std)}")


@native("aten::normal_")
def _normal_(a: dict) -> torch.Tensor:
    self, mean, std = a["self"], float(a["mean"]), float(a["std"])
    float_only(self, "normal_kernel_cpu")
    _check_std(std)
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        nc.scalar.activation(outs[0], rand[0], "identity", scale=std, bias=mean)

    sample("normal", [self], a.get("generator"), ["normal"], emit)
    return self


def _check_std_tensor(std: torch.Tensor) -> None:
    """CPU: a real std with std.min() >= 0 (NaN fails), checked on the engines."""
    if std.is_complex():
        raise RuntimeError("normal expects standard deviation to be non-complex")
    if std.numel() == 0:
        return
    flags = reduce_flags("normal_check_std", std, lambda nc, t, f: nc.vector.tensor_scalar(f, t, "greater_equal", 0.0,
                                                                                          dtype=FP32))
    if not flags:
        raise RuntimeError("normal expects all elements of std >= 0.0")


def _normal_tensors(name: str, out: torch.Tensor, mean: Any, std: Any, generator) -> torch.Tensor:
    """out = mean + std * z with either operand a tensor (broadcast) or a number."""
    float_only(out, "normal_kernel_cpu")

    def emit(nc, outs, rand, ins):
        m, s = ins
        z = rand[0]
        if not hasattr(s, "shape"):
            if not hasattr(m, "shape"):
                nc.scalar.activation(outs[0], z, "identity", scale=float(s), bias=float(m))
                return
            t = tmp(nc, z)
            nc.scalar.activation(t, z, "identity", scale=float(s))
        else:
            t = tmp(nc, z)
            nc.vector.tensor_tensor(t, z, s, "multiply", dtype=FP32)
        if hasattr(m, "shape"):
            nc.vector.tensor_tensor(outs[0], t, m, "add", dtype=FP32)
        else:
            nc.vector.tensor_scalar(outs[0], t, "add", float(m), dtype=FP32)

    sample(name, [out], generator, ["normal"], emit, ins=(mean, std))
    return out


def _normal_out(a: dict, shape, like: torch.Tensor, operands: tuple) -> torch.Tensor:
    """The given out= (checked, resized to ``shape``) or a new tensor of ``like``'s dtype."""
    out = a.get("out")
    if out is None:
        return torch.empty(tuple(shape), dtype=like.dtype, device=like.device)
    check_out(out, tuple(shape), out.dtype, operands)
    return out


@native("aten::normal.Tensor_float", "aten::normal.Tensor_float_out")
def _normal_tensor_float(a: dict) -> torch.Tensor:
    mean, std = a["mean"], float(a["std"])
    _check_std(std)
    # CPU's normal_out_impl(Tensor, float): a std tensor like out, so out's shape broadcasts with mean's
    # (an empty out of a non-empty mean raises; a 0-dim mean gives out's shape)
    shape = mean.shape if a.get("out") is None else broadcast_shapes(mean.shape, a["out"].shape)
    out = _normal_out(a, shape, mean, (mean,))
    return _normal_tensors("normal", out, mean, std, a.get("generator"))


@native("aten::normal.float_Tensor", "aten::normal.float_Tensor_out")
def _normal_float_tensor(a: dict) -> torch.Tensor:
    mean, std = float(a["mean"]), a["std"]
    _check_std_tensor(std)
    out = _normal_out(a, std.shape, std, (std,))
    return _normal_tensors("normal", out, mean, std, a.get("generator"))


@native("aten::normal.Tensor_Tensor", "aten::normal.Tensor_Tensor_out")
def _normal_tensor_tensor(a: dict) -> torch.Tensor:
    mean, std = a["mean"], a["std"]
    _check_std_tensor(std)
    out = _normal_out(a, broadcast_shapes(mean.shape, std.shape), mean, (mean, std))
    if not torch.can_cast(std.dtype, out.dtype):
        raise cast_error(std.dtype, out.dtype)
    return _normal_tensors("normal", out, mean, std, a.get("generator"))


def _continuous_only(t: torch.Tensor, distribution: str, names: dict) -> None:
    """CPU's refusal of an integral tensor (exponential_ names the dtype as ScalarType, cauchy_ as C++ type)."""
    if t.dtype not in FLOATS:
        raise RuntimeError(f"{distribution} distribution is a continuous probability distribution. dtype must be a "
                           f"floating point but you specified {names[t.dtype]}")


@native("aten::exponential_")
def _exponential_(a: dict) -> torch.Tensor:
    self, lambd = a["self"], float(a["lambd"])
    if not lambd > 0.0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda={fmt(lambd)}")
    _continuous_only(self, "Exponential", SCALAR_TYPE_NAMES)
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        t = tmp(nc, rand[0])
        nc.scalar.activation(t, rand[0], "log", scale=-1.0, bias=1.0)  # log(1 - u), u in [0, 1)
        nc.vector.tensor_scalar(outs[0], t, "multiply", -1.0 / lambd, dtype=FP32)

    sample("exponential", [self], a.get("generator"), ["uniform"], emit)
    return self


@native("aten::geometric_")
def _geometric_(a: dict) -> torch.Tensor:
    self, p = a["self"], float(a["p"])
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={fmt(p)}")
    if self.dtype == torch.bool:
        raise refuse("geometric_cpu", self.dtype)
    overlap.assert_no_internal_overlap(self)
    inv = 1.0 / math.log1p(-p)

    def emit(nc, outs, rand, ins):
        t = tmp(nc, rand[0])
        nc.scalar.activation(t, rand[0], "log", scale=-1.0, bias=1.0)  # log(1 - u) in (-inf, 0]
        nc.vector.tensor_scalar(t, t, "multiply", inv, dtype=FP32)
        nc.vector.tensor_unary(t, t, "ceil", dtype=FP32)
        nc.vector.tensor_scalar(outs[0], t, "maximum", 1.0, dtype=FP32)  # support starts at 1

    sample("geometric", [self], a.get("generator"), ["uniform"], emit)
    return self


@native("aten::log_normal_")
def _log_normal_(a: dict) -> torch.Tensor:
    self, mean, std = a["self"], float(a["mean"]), float(a["std"])
    if not std > 0.0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={fmt(std)}")
    float_only(self, "log_normal_cpu")
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        nc.scalar.activation(outs[0], rand[0], "exp", scale=std, bias=mean)

    sample("log_normal", [self], a.get("generator"), ["normal"], emit)
    return self


@native("aten::cauchy_")
def _cauchy_(a: dict) -> torch.Tensor:
    self, median, sigma = a["self"], float(a["median"]), float(a["sigma"])
    if not sigma > 0.0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={fmt(sigma)}")
    _continuous_only(self, "Cauchy", CPP_NAMES)
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        t = tmp(nc, rand[0])
        nc.scalar.activation(t, rand[0], "tan", scale=math.pi, bias=-math.pi / 2)  # tan(pi * (u - 1/2))
        nc.scalar.activation(outs[0], t, "identity", scale=sigma, bias=median)

    sample("cauchy", [self], a.get("generator"), ["uniform"], emit)
    return self


# --- overloads PyTorch's composites route to the kernels above ------------------------------

serve("aten::uniform_", "aten::rand", "aten::rand.generator", "aten::rand.out", "aten::rand.generator_out",
      "aten::rand_like", "aten::rand_like.generator", "aten::rand_like.out", "aten::rand_like.generator_out",
      "aten::uniform", "aten::uniform.out")
serve("aten::normal_", "aten::randn", "aten::randn.generator", "aten::randn.out", "aten::randn.generator_out",
      "aten::randn_like", "aten::randn_like.generator", "aten::randn_like.out", "aten::randn_like.generator_out",
      "aten::normal.float_float", "aten::normal.float_float_out", "aten::normal.out", "aten::normal_functional")
serve("aten::exponential_", "aten::exponential", "aten::exponential.out")
