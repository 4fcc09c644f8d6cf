"""Hypothesis strategies for cases: shapes, broadcast pairs, dims, dtypes, layouts, value domains.

Shapes include 0-d, 0-size, 1 and the tile edges where kernels break (127,
128, 129, 511, 512, 513), up to 5-D, with the element count capped so a
profile's examples stay fast. Layouts and value domains are drawn as labels
(``TensorSpec.layout`` / ``.domain``), never filtered: every drawn case runs.

A designed case (harness.design) draws through the same strategies with a ``Target``
active (``targeting(...)``): the shape's free (last) axis takes the target size, tensors of
the case's dtype take the target value domain and layout, and an error target turns one
input into an error input (an out-of-range index, a non-broadcastable shape, a float
index). The op spec's own draw code is unchanged: what a spec cannot honour (a conv
whose sizes are its own) is simply not realized, and the case records what it did get.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterator, Sequence

from hypothesis import strategies as st

from harness.values import (FLOAT_DOMAINS, INT_DOMAINS, LAYOUTS, SHIFT_DOMAINS, SPARSE_DOMAINS, TAP_DOMAINS,
                            ZERO_TIE_DOMAINS, TensorSpec, layout_applies)


@dataclass(frozen=True)
class Target:
    """What a designed case asks of the strategies (None: drawn as usual)."""

    dtype: str
    domain: str | None = None
    layout: str | None = None
    size: int | str | None = None  # the free-axis length, "0-dim" or "empty"
    error: str | None = None  # one of harness.design.ERRORS


_TARGET: contextvars.ContextVar[Target | None] = contextvars.ContextVar("harness_design_target", default=None)


@contextlib.contextmanager
def targeting(target: Target | None) -> Iterator[None]:
    token = _TARGET.set(target)
    try:
        yield
    finally:
        _TARGET.reset(token)


def target() -> Target | None:
    return _TARGET.get()


def domain_applies(domain: str, dtype: str) -> bool:
    """A value domain is drawn for a dtype that can hold it (NaN and -0.0 need a float)."""
    if domain in SPARSE_DOMAINS:
        return True
    if domain in ZERO_TIE_DOMAINS or domain in TAP_DOMAINS:
        return dtype in FLOAT_DTYPES
    if domain in SHIFT_DOMAINS:
        return dtype in INT_DTYPES
    if dtype == "bool":
        return domain == "bool"
    if dtype in FLOAT_DTYPES or dtype in ("float64", "complex64"):
        return domain in FLOAT_DOMAINS
    return domain in INT_DOMAINS

TILE_EDGES = (1, 127, 128, 129, 511, 512, 513)
SMALL = (0, 1, 2, 3, 5, 7, 8)
MAX_NUMEL = 1 << 16

FLOAT_DTYPES = ("float32", "bfloat16", "float16")
INT_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + ("bool",)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _cap(shape: list[int], max_numel: int) -> tuple[int, ...]:
    """Shrink the largest dimensions until the element count fits (keeps edge sizes where possible)."""
    while _numel(shape) > max_numel:
        i = max(range(len(shape)), key=lambda d: shape[d])
        shape[i] = max(1, shape[i] // 4) if shape[i] > 8 else 1
    return tuple(shape)


def _targeted_shape(draw, size, min_dims: int, max_dims: int, max_numel: int, allow_empty: bool,
                    min_size: int) -> tuple[int, ...] | None:
    """A shape honouring a designed size (None: the spec's constraints rule it out)."""
    if size == "0-dim":
        return () if min_dims == 0 else None
    goal = target()
    ndim = max(1, min_dims, draw(st.integers(min_dims, max_dims)))
    wide = goal is not None and goal.layout in ("transposed", "overlapping", "channels_last")
    if goal is not None and goal.layout == "channels_last" and min_dims <= 4 <= max_dims:
        ndim = 4
    elif wide:
        ndim = max(ndim, min(2, max_dims))
    if ndim > max_dims:
        return None
    last = 0 if size == "empty" else int(size)
    if last < max(min_size, 0 if allow_empty else 1) or last > max_numel:
        return None
    room = max_numel // max(last, 1)
    lead = []
    for _ in range(ndim - 1):  # the other axes small, within the element cap
        d = max(min_size, 2 if wide else 1, draw(st.sampled_from((1, 2, 3, 5))))
        d = d if d <= room else 1
        room //= max(d, 1)
        lead.append(d)
    return tuple(lead) + (last,)


@st.composite
def shapes(draw, min_dims: int = 0, max_dims: int = 4, max_numel: int = MAX_NUMEL, allow_empty: bool = True,
           min_size: int = 0) -> tuple[int, ...]:
    goal = target()
    if goal is not None and goal.size is not None:
        shape = _targeted_shape(draw, goal.size, min_dims, max_dims, max_numel, allow_empty, min_size)
        if shape is not None:
            return shape
    ndim = draw(st.integers(min_dims, max_dims))
    sizes = st.sampled_from(TILE_EDGES) | st.sampled_from(SMALL if allow_empty else SMALL[1:])
    dims = [max(min_size, draw(sizes)) for _ in range(ndim)]
    if not allow_empty:
        dims = [max(1, d) for d in dims]
    return _cap(dims, max_numel)


@st.composite
def broadcast_pair(draw, max_dims: int = 4) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast: the second drops leading dims and sets some to 1 (or the reverse)."""
    a = draw(shapes(max_dims=max_dims))
    goal = target()
    if goal is not None and goal.error == "shape_mismatch" and a and a[-1] > 1:
        return a, a[:-1] + (a[-1] + 1,)  # the free axes differ and neither is 1: not broadcastable
    keep = draw(st.integers(0, len(a)))
    b = list(a[len(a) - keep:])
    for i in range(len(b)):
        if draw(st.booleans()):
            b[i] = 1
    pair = (a, tuple(b))
    return pair if draw(st.booleans()) else pair[::-1]


@st.composite
def dims_of(draw, shape: Sequence[int], allow_none: bool = True, allow_tuple: bool = True):
    """A valid dim argument for ``shape``: None, an int (possibly negative) or a tuple of distinct dims."""
    ndim = len(shape)
    options = ["none"] if allow_none else []
    if ndim:
        options.append("int")
        if allow_tuple:
            options.append("tuple")
    if not options:
        return None
    kind = draw(st.sampled_from(options))
    if kind == "none":
        return None
    if kind == "int":
        d = draw(st.integers(0, ndim - 1))
        return d - ndim if draw(st.booleans()) else d
    picked = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    return tuple(picked)


@st.composite
def tensor(draw, shape: Sequence[int], dtype: str, layouts: Sequence[str] = LAYOUTS,
           domains: Sequence[str] | None = None, requires_grad: bool = False) -> TensorSpec:
    shape = tuple(shape)
    layout = draw(st.sampled_from([lay for lay in layouts if layout_applies(lay, shape)] or ["contiguous"]))
    if domains is None:
        domains = FLOAT_DOMAINS if dtype in FLOAT_DTYPES or dtype in ("float64", "complex64") else \
            ("bool",) if dtype == "bool" else INT_DOMAINS
    domain = draw(st.sampled_from(tuple(domains)))
    seed = draw(st.integers(0, 2**31 - 1))
    goal = target()
    if goal is not None and dtype == goal.dtype:
        # A designed case: the op's inputs of the case's dtype take the design's domain (whatever
        # domains the spec draws at random: NaN reaches a matmul too) and layout, where the spec
        # lets the tensor have it (an in-place op's written tensor keeps its writable layouts).
        if goal.domain is not None and domain_applies(goal.domain, dtype):
            domain = goal.domain
        if goal.layout is not None and goal.layout in layouts and layout_applies(goal.layout, shape):
            layout = goal.layout
    return TensorSpec(shape, dtype, layout, domain, seed, requires_grad)


def scalars(dtype: str):
    """A Python scalar of the kind PyTorch promotes with a tensor of ``dtype`` (and a few that promote it)."""
    if dtype == "bool":
        return st.booleans() | st.integers(-3, 3)
    if dtype in INT_DTYPES:
        return st.integers(-9, 9) | st.sampled_from([2.5, -0.5])
    return st.floats(-4, 4, allow_nan=False, width=32) | st.integers(-3, 3) | \
        st.sampled_from([float("inf"), float("nan"), -0.0])
