"""Tensor inputs of a case: shape, dtype, layout and value domain, made identically on any device.

A ``TensorSpec`` is data (it goes into the results store and the reproducer);
``materialize(spec, device)`` builds the tensor: a base tensor with the
spec's values is created on the host, moved to the device, and the same
view (transpose, slice with step, expand, storage offset, channels_last,
overlapping windows) is applied on both sides *after* the move, so the device
tensor itself has the layout: an expanded input reaches the device's kernel
with stride 0 (``.to()`` of an expanded host tensor would arrive contiguous),
and CPU and device inputs have the same values, strides and storage offsets.

Value domains are labels, not filters: an op gets NaN, inf, -0.0 and
out-of-domain values too, because CPU defines what they produce and the
device must produce the same.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

LAYOUTS = ("contiguous", "transposed", "sliced", "expanded", "offset", "channels_last", "overlapping")
# The layouts an op may write to: an expanded or overlapping written-to tensor is an error in PyTorch.
WRITABLE_LAYOUTS = ("contiguous", "transposed", "sliced", "offset", "channels_last")
FLOAT_DOMAINS = ("normal", "uniform", "unit", "positive", "extremes", "signed_zero", "special", "denormal",
                 "near_overflow", "tails", "near_zero", "negative")
INT_DOMAINS = ("small_int", "int_edges", "uniform")
# Domains of any dtype that an op spec's design may add (OpSpec.extra_domains): sparse, one element in 32 of the view
# (at least one; of a sliced view, only among those a linear walk of its storage misses) nonzero (True), the rest of
# the storage zero (False); dense, the same zero (False). An any/all answer, of a row or of the
# whole tensor, is then decided by a few elements, so reading the wrong ones (a stride ignored) changes it, where
# with random values every answer is the same whichever elements are read.
SPARSE_DOMAINS = ("sparse", "dense")
# Float domains an op spec's design may add (OpSpec.extra_domains) for an extremum (max/min over a slice or window):
# half the elements -0.0, the others negative (zero_below) or positive (zero_above), no +0.0, so a slice's max
# (zero_below) or min (zero_above) is -0.0 wherever it holds one, a sign no tie decides (signed_zero mixes 0.0 and
# -0.0, and a slice holding both is a tie whose sign CPU's loop decides; a long one rarely holds only -0.0).
ZERO_TIE_DOMAINS = ("zero_below", "zero_above")
# A float domain an op spec's design may add (OpSpec.extra_domains) for a convolution weight: "unit" values but for
# its first and last tap (index 0, and the last index, along every dim from the third on; a tensor of fewer dims:
# its first and last element), which are non-finite, one of +inf, -inf and NaN by the tensor's seed. A convolution
# whose padding meets such a tap shows whether its kernel multiplies the padded zeros (0 * inf is NaN; CPU's native
# kernels and some of oneDNN's do, its direct ones do not); with values drawn independently of position (special),
# a non-finite weight at a tap next to padding is rare, and the input's own NaN and infinities hide it.
TAP_DOMAINS = ("nonfinite_taps",)
# An integer domain an op spec's design may add (OpSpec.extra_domains) for a bit shift's count: half the elements at
# the edges of the dtype's bit width (bits - 1, bits, bits + 1, twice it, 0, 1, -1, -bits: CPU defines a count
# that is negative or at least the width), the others small integers; small_int and uniform miss the width of
# int16 and up, int_edges is only out of range.
SHIFT_DOMAINS = ("shift_counts",)
# What the edge domains are for (the designed coverage draws each in every float dtype):
# near_overflow: within a factor 2 of the dtype's largest finite value (sums, squares, exp overflow);
# tails: |x| in [10, 40], the saturation regions of sigmoid/tanh/erf/exp; near_zero: |x| in
# [1e-7, 1e-3], where log/log1p/reciprocal/division branch; negative: negative bases, integral and
# fractional (pow, log and sqrt of negatives, floor/trunc/round branches).

_DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool, torch.complex64)}


def dtype_named(name: str) -> torch.dtype:
    return _DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: str
    layout: str = "contiguous"
    domain: str = "normal"
    seed: int = 0
    requires_grad: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TensorSpec":
        return cls(tuple(d["shape"]), d["dtype"], d["layout"], d["domain"], d["seed"], d.get("requires_grad", False))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def layout_applies(layout: str, shape: tuple[int, ...]) -> bool:
    if layout == "channels_last":
        return len(shape) == 4
    if layout == "overlapping":  # windows that share elements: at least two dims longer than one
        return sum(1 for s in shape if s > 1) >= 2 and _numel(shape) > 0
    if layout in ("transposed", "sliced", "expanded", "offset"):
        return len(shape) >= 1 and _numel(shape) > 0
    return True


def base_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    if layout == "transposed":
        return tuple(reversed(shape))
    if layout == "sliced":
        return shape[:-1] + (shape[-1] * 2,)
    if layout == "expanded":
        return shape[:-1] + (1,)
    if layout == "offset":
        return (_numel(shape) + 3,)
    if layout == "channels_last":
        n, c, h, w = shape
        return (n, h, w, c)
    if layout == "overlapping":
        return (sum(s - 1 for s in shape) + 1,)
    return shape


def apply_layout(base: torch.Tensor, shape: tuple[int, ...], layout: str) -> torch.Tensor:
    """The view of ``base`` that has ``shape`` and the layout's strides (same code on every device)."""
    if layout == "transposed":
        return base.permute(*reversed(range(base.dim())))
    if layout == "sliced":
        return base[..., ::2]
    if layout == "expanded":
        return base.expand(*shape)
    if layout == "offset":
        return base[3:].view(shape)
    if layout == "channels_last":
        return base.permute(0, 3, 1, 2)
    if layout == "overlapping":  # element (i, j, ...) at i + j + ...: every stride 1
        return base.as_strided(shape, (1,) * len(shape))
    return base


def place(values: torch.Tensor, layout: str, device: str) -> torch.Tensor:
    """``values`` (a host tensor) on ``device`` with ``layout``'s strides, made there: how a case's cotangent
    reaches the backward kernels in the case's layout (autograd hands the user's gradient on as given: a
    ``sum().backward()`` gives an expanded one, a transposed output's consumer a transposed one). A writable
    layout's base is NaN outside the view, so a kernel reading past its strides reads NaN; an expanded one
    repeats the first element along the last dim (stride 0 holds one value). A layout that does not apply to the
    shape (channels_last of a matrix), or an overlapping one (no distinct values), stays contiguous."""
    shape = tuple(values.shape)
    if layout == "contiguous" or layout == "overlapping" or not layout_applies(layout, shape):
        return values.to(device)
    if layout == "expanded":
        return apply_layout(values[..., :1].contiguous().to(device), shape, layout)
    fill = float("nan") if values.dtype.is_floating_point else 0
    base = torch.full(base_shape(shape, layout), fill, dtype=values.dtype, device=device)
    view = apply_layout(base, shape, layout)
    view.copy_(values.to(device))
    return view


def strided_layout(specs: "tuple[TensorSpec, ...] | list[TensorSpec]") -> str:
    """The layout a case's cotangents take: its first non-contiguous input's (designed cells give one layout)."""
    return next((t.layout for t in specs if t.layout != "contiguous"), "contiguous")


LAYOUT_CODE = {  # the same views as source text, for reproducers
    "contiguous": "{b}",
    "transposed": "{b}.permute(*reversed(range({b}.dim())))",
    "sliced": "{b}[..., ::2]",
    "expanded": "{b}.expand({shape})",
    "offset": "{b}[3:].view({shape})",
    "channels_last": "{b}.permute(0, 3, 1, 2)",
    "overlapping": "{b}.as_strided({shape}, (1,) * len({shape}))",
}


def base_values(spec: TensorSpec) -> torch.Tensor:
    """The host base tensor of a spec (before the layout view)."""
    dtype = dtype_named(spec.dtype)
    shape = base_shape(spec.shape, spec.layout)
    g = torch.Generator().manual_seed(spec.seed)
    n = _numel(shape)
    if spec.domain in SPARSE_DOMAINS:
        # the hits lie in the view's elements (the storage around a sliced view stays zero, or nonzero for dense),
        # and where the view has elements that a read walking the storage linearly from its first element (ignoring
        # a slice's stride) never reaches, only there: the answer then hangs on elements such a read misses
        view = apply_layout(torch.arange(n).reshape(shape), spec.shape, spec.layout).reshape(-1)
        seen = view.unique()
        hit = torch.zeros(n, dtype=torch.bool)
        if seen.numel():
            far = seen[seen >= seen.min() + view.numel()]
            pool = far if far.numel() else seen
            hit[pool[torch.randperm(pool.numel(), generator=g)[:max(1, seen.numel() // 32)]]] = True
        hit = hit.reshape(shape)
        nonzero = hit if spec.domain == "sparse" else ~hit
        if dtype == torch.bool:
            return nonzero
        magnitude = torch.randint(1, 10, shape, generator=g) if not dtype.is_floating_point else \
            torch.randn(shape, generator=g, dtype=torch.float64).abs() + 0.5
        signed = torch.where(torch.rand(shape, generator=g) < 0.5, -magnitude, magnitude)
        return torch.where(nonzero, signed, torch.zeros_like(signed)).to(dtype)
    if dtype == torch.bool:
        return (torch.rand(shape, generator=g) > 0.5)
    if spec.domain.startswith("index:"):  # indices into a dim of size N: [-N, N) or, with "+", [0, N)
        bound = spec.domain[6:]
        if bound.endswith("u"):  # "index:Nu": no two name one row (n <= N), each negative or not at random
            high = int(bound[:-1])
            rows = torch.randperm(high, generator=g)[:n]
            return torch.where(torch.rand(rows.shape, generator=g) < 0.5, rows - high, rows).reshape(shape).to(dtype)
        high = int(bound.rstrip("+"))
        low = 0 if bound.endswith("+") else -high
        return torch.randint(low, max(high, low + 1), shape, generator=g, dtype=torch.int64).to(dtype)
    if spec.domain.startswith("oob:"):  # out of range for a dim of size N: in [N, N + 4] or [-N - 4, -N - 1]
        high = int(spec.domain[4:])
        over = torch.randint(high, high + 5, shape, generator=g, dtype=torch.int64)
        under = torch.randint(-high - 4, -high, shape, generator=g, dtype=torch.int64)
        values = torch.where(torch.rand(shape, generator=g) < 0.5, over, under)
        if n:  # at least one index out of range, whatever the draw: the error input must be one
            values.view(-1)[0] = high
        return values.to(dtype)
    if not (dtype.is_floating_point or dtype.is_complex):
        info = torch.iinfo(dtype)
        if spec.domain == "shift_counts":
            bits = info.bits
            pool = torch.tensor([c for c in (bits - 1, bits, bits + 1, 2 * bits, 0, 1, -1, -bits, 255)
                                 if info.min <= c <= info.max], dtype=torch.int64)
            edges = pool[torch.randint(0, len(pool), (n,), generator=g)]
            small = torch.randint(max(info.min, -3), 8, (n,), generator=g, dtype=torch.int64)
            return torch.where(torch.rand(n, generator=g) < 0.5, edges, small).reshape(shape).to(dtype)
        if spec.domain == "int_edges":
            # Not -1: CPU's integer division of the minimum by -1 (div with a rounding mode,
            # floor_divide, remainder, fmod) traps with SIGFPE and kills the process
            # (torch.div(torch.tensor([-2**31], dtype=torch.int32), torch.tensor([-1], dtype=torch.int32),
            # rounding_mode="trunc") on torch 2.13), so the edge pool pairs the minimum with -2.
            edges = torch.tensor([info.min, info.max, 0, 1, -2 if info.min < 0 else 2, info.min + 1, info.max - 1],
                                 dtype=torch.int64)
            picks = torch.randint(0, len(edges), (n,), generator=g)
            return edges[picks].reshape(shape).to(dtype)
        lo, hi = (max(info.min, -9), min(info.max, 9)) if spec.domain == "small_int" else (max(info.min, -1000),
                                                                                          min(info.max, 1000))
        return torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64).to(dtype)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    domain = spec.domain
    if domain == "uniform":
        x = torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1
    elif domain == "unit":
        x = torch.tanh(x) * 0.99
    elif domain == "positive":
        x = x.abs() + 0.05
    elif domain == "extremes":
        big = {torch.float16: 3e4, torch.bfloat16: 1e30}.get(dtype, 1e30)
        x = torch.sign(x) * big * torch.rand(shape, generator=g, dtype=torch.float64)
    elif domain == "near_overflow":
        top = torch.finfo(dtype).max if dtype.is_floating_point else 3e38
        x = torch.sign(x) * top * (0.5 + 0.5 * torch.rand(shape, generator=g, dtype=torch.float64))
        x = torch.where(x == 0, top / 2, x)
    elif domain == "tails":
        x = torch.sign(x) * (10 + 30 * torch.rand(shape, generator=g, dtype=torch.float64))
        x = torch.where(x == 0, 10.0, x)
    elif domain == "near_zero":
        magnitude = 10 ** (-7 + 4 * torch.rand(shape, generator=g, dtype=torch.float64))
        x = torch.where(x < 0, -magnitude, magnitude)
    elif domain == "negative":
        whole = -torch.randint(1, 6, shape, generator=g).to(torch.float64)
        x = torch.where(torch.rand(shape, generator=g) < 0.5, whole, -(x.abs() + 0.05))
    elif domain in TAP_DOMAINS:
        x = torch.tanh(x) * 0.99
        view = apply_layout(torch.arange(n).reshape(shape), spec.shape, spec.layout)  # base positions, logically
        if view.numel():
            lead = (slice(None),) * 2 if view.dim() >= 3 else ()
            view = view if view.dim() >= 3 else view.reshape(-1)
            taps = view.dim() - len(lead)
            corners = torch.stack([view[lead + (0,) * taps].reshape(-1), view[lead + (-1,) * taps].reshape(-1)])
            x.view(-1)[corners.reshape(-1)] = (float("inf"), float("-inf"), float("nan"))[spec.seed % 3]
    elif domain in ZERO_TIE_DOMAINS:
        side = x.abs() + 0.05
        x = torch.where(torch.rand(shape, generator=g) < 0.5, torch.full_like(x, -0.0),
                        -side if domain == "zero_below" else side)
    elif domain in ("signed_zero", "special", "denormal"):
        pool = {
            "signed_zero": [0.0, -0.0, 1.0, -1.0],
            "special": [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -2.5, 3.0],
            "denormal": [1e-40, -1e-40, 1e-45, 0.0, 1e-38, -3e-39] if dtype != torch.float16 else
                        [6e-8, -6e-8, 1e-5, 0.0, 3e-5, -2e-6],
        }[domain]
        picks = torch.randint(0, len(pool), (n,), generator=g)
        mixed = torch.tensor(pool, dtype=torch.float64)[picks].reshape(shape)
        keep = torch.rand(shape, generator=g) < 0.5
        x = torch.where(keep, mixed, x)
    return x.to(dtype)


def materialize(spec: TensorSpec, device: str) -> torch.Tensor:
    base = base_values(spec)
    if device != "cpu":
        base = base.to(device)
    t = apply_layout(base, spec.shape, spec.layout)
    if spec.requires_grad:
        t = t.detach().requires_grad_()
    return t


def literal(spec: TensorSpec) -> str:
    """Python source that rebuilds the spec's base tensor on the host exactly (for reproducers)."""
    base = base_values(spec)
    dtype = dtype_named(spec.dtype)
    if dtype in (torch.bfloat16, torch.float16):
        values = base.float().flatten().tolist()
        source_dtype = "torch.float32"
    else:
        values = base.flatten().tolist()
        source_dtype = f"torch.{spec.dtype}"
    text = repr(values).replace("nan", "float('nan')").replace("inf", "float('inf')")
    code = f"torch.tensor({text}, dtype={source_dtype}).reshape({tuple(base.shape)})"
    if source_dtype != f"torch.{spec.dtype}":
        code += f".to(torch.{spec.dtype})"
    return code
