"""Hypothesis strategies for cases: shapes, broadcast pairs, dims, dtypes, layouts, value domains.

Shapes include 0-d, 0-size, 1 and the tile edges where kernels break (127,
128, 129, 511, 512, 513), up to 5-D, with the element count capped so a
profile's examples stay fast. Layouts and value domains are drawn as labels
(``TensorSpec.layout`` / ``.domain``), never filtered: every drawn case runs.
"""

from __future__ import annotations

from typing import Sequence

from hypothesis import strategies as st

from harness.values import FLOAT_DOMAINS, INT_DOMAINS, LAYOUTS, TensorSpec, layout_applies

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


@st.composite
def shapes(draw, min_dims: int = 0, max_dims: int = 4, max_numel: int = MAX_NUMEL, allow_empty: bool = True,
           min_size: int = 0) -> tuple[int, ...]:
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
    return TensorSpec(shape, dtype, layout, domain, seed, requires_grad)


def scalars(dtype: str):
    """A Python scalar of the kind PyTorch promotes with a tensor of ``dtype`` (and a few that promote it)."""
    if dtype == "bool":
        return st.booleans() | st.integers(-3, 3)
    if dtype in INT_DTYPES:
        return st.integers(-9, 9) | st.sampled_from([2.5, -0.5])
    return st.floats(-4, 4, allow_nan=False, width=32) | st.integers(-3, 3) | \
        st.sampled_from([float("inf"), float("nan"), -0.0])
