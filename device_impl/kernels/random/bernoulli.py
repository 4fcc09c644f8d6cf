"""bernoulli_ with a float or tensor probability, bernoulli.out.

Tiling: ``tiles.sample``: flat [p <= 128, f] tiles of the output in memory order, one
uniform draw per element (GpSimdE); VectorE writes ``u < p`` (p a number, or a tile of
the probability tensor broadcast to the output and DMA-loaded beside the draws). A tensor
p is first checked to lie in [0, 1] on the engines (VectorE compares, a logical-and
reduce along the free axis, GpSimdE across partitions), before any draw.
"""

from __future__ import annotations

import torch

from device_impl.engine.dtypes import FP32
from device_impl.kernels import overlap
from device_impl.kernels.common import is_device_tensor, scalar_of
from device_impl.kernels.random.tiles import BOOL, FLOATS, check_p, native, reduce_flags, refuse, sample, serve


def _bernoulli_scalar(self: torch.Tensor, p: float, generator) -> torch.Tensor:
    check_p(p)
    overlap.assert_no_internal_overlap(self)

    def emit(nc, outs, rand, ins):
        nc.vector.tensor_scalar(outs[0], rand[0], "less", p, dtype=FP32)

    sample("bernoulli", [self], generator, ["uniform"], emit)
    return self


@native("aten::bernoulli_.float")
def _bernoulli_float(a: dict) -> torch.Tensor:
    return _bernoulli_scalar(a["self"], float(a["p"]), a.get("generator"))


def _bernoulli_tensor(self: torch.Tensor, p: torch.Tensor, generator) -> torch.Tensor:
    if not is_device_tensor(p):  # a host 0-dim probability
        if p.dim() != 0:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{self.device} and {p.device}!")
        return _bernoulli_scalar(self, float(scalar_of(p)), generator)
    if p.dtype not in FLOATS:
        raise refuse("bernoulli_tensor_cpu_p_", p.dtype)
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
    if p.numel() and not reduce_flags("bernoulli_check_p", p, _in_unit_interval):
        raise RuntimeError("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be "
                           "improved?  If so, please report an enhancement request to PyTorch.)")

    def emit(nc, outs, rand, ins):
        nc.vector.tensor_tensor(outs[0], rand[0], ins[0], "less", dtype=FP32)

    sample("bernoulli", [self], generator, ["uniform"], emit, ins=(p,))
    return self


def _in_unit_interval(nc, t, flag) -> None:
    lo = nc.sbuf_tile(t.shape, BOOL)
    nc.vector.tensor_scalar(lo, t, "greater_equal", 0.0, dtype=FP32)
    nc.vector.tensor_scalar(flag, t, "less_equal", 1.0, dtype=FP32)
    nc.vector.tensor_tensor(flag, flag, lo, "logical_and", dtype=BOOL)


@native("aten::bernoulli_.Tensor")
def _bernoulli_tensor_(a: dict) -> torch.Tensor:
    return _bernoulli_tensor(a["self"], a["p"], a.get("generator"))


@native("aten::bernoulli.out")
def _bernoulli_out(a: dict) -> torch.Tensor:
    p, out = a["self"], a["out"]
    if tuple(out.shape) != tuple(p.shape):
        out.resize_(tuple(p.shape))
    return _bernoulli_tensor(out, p, a.get("generator"))


# --- overloads PyTorch's composites route to the kernels above ------------------------------

serve("aten::bernoulli_.float", "aten::bernoulli.p", "aten::bernoulli.float_out")
serve("aten::bernoulli_.Tensor", "aten::bernoulli", "aten::bernoulli.Tensor", "aten::bernoulli.Tensor_out")
