"""Meta tests of harness.strategies and harness.values: the shapes, layouts and value domains the
harness promises are drawn (as labels, not filters) and built with the promised strides and values."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from harness import strategies as hs
from harness.values import FLOAT_DOMAINS, INT_DOMAINS, LAYOUTS, TensorSpec, base_values, literal, materialize

FIND = settings(max_examples=2000, database=None, suppress_health_check=list(HealthCheck))
PROPERTY = settings(max_examples=60, database=None, deadline=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("name,condition", [
    ("0-d", lambda s: s == ()),
    ("0-size", lambda s: len(s) >= 1 and 0 in s),
    ("size 1", lambda s: 1 in s),
    ("tile edge 127", lambda s: 127 in s),
    ("tile edge 129", lambda s: 129 in s),
    ("tile edge 513", lambda s: 513 in s),
    ("4-D", lambda s: len(s) == 4),
])
def test_shapes_include(name, condition):
    assert condition(find(hs.shapes(), condition, settings=FIND)), name


def test_shapes_reach_five_dims_within_the_cap():
    shape = find(hs.shapes(max_dims=5), lambda s: len(s) == 5 and all(d > 1 for d in s), settings=FIND)
    assert math.prod(shape) <= hs.MAX_NUMEL


@PROPERTY
@given(hs.shapes(max_dims=5))
def test_shapes_respect_the_size_cap(shape):
    assert len(shape) <= 5 and math.prod(shape) <= hs.MAX_NUMEL


@PROPERTY
@given(hs.broadcast_pair())
def test_broadcast_pairs_broadcast(pair):
    a, b = pair
    assert torch.broadcast_shapes(a, b) in (a, b)


def test_broadcast_pairs_include_real_broadcasting():
    a, b = find(hs.broadcast_pair(), lambda p: len(p[0]) != len(p[1]) and math.prod(p[0]) > 1
                and math.prod(p[1]) > 1, settings=FIND)
    assert torch.broadcast_shapes(a, b)
    a, b = find(hs.broadcast_pair(), lambda p: len(p[0]) == len(p[1]) and p[0] != p[1], settings=FIND)
    assert torch.broadcast_shapes(a, b) != min(a, b, key=math.prod)


@PROPERTY
@given(st.data())
def test_dims_are_valid(data):
    shape = data.draw(hs.shapes(min_dims=1))
    dim = data.draw(hs.dims_of(shape))
    if dim is not None:
        torch.empty(shape).sum(dim=dim)  # raises if a dim is out of range or repeated


def test_tensor_draws_every_layout_and_domain_as_labels():
    shape = (2, 3, 4, 5)
    for layout in LAYOUTS:
        assert find(hs.tensor(shape, "float32"), lambda t: t.layout == layout, settings=FIND).layout == layout
    for domain in FLOAT_DOMAINS:
        assert find(hs.tensor(shape, "float32"), lambda t: t.domain == domain, settings=FIND).domain == domain
    for domain in INT_DOMAINS:
        assert find(hs.tensor(shape, "int32"), lambda t: t.domain == domain, settings=FIND).domain == domain


def _spec(shape, layout, domain="normal", dtype="float32", seed=5) -> TensorSpec:
    return TensorSpec(tuple(shape), dtype, layout, domain, seed)


@pytest.mark.parametrize("device", ["cpu", "neuron"])
def test_layouts_have_the_promised_strides(device):
    shape = (2, 3, 4, 5)
    contiguous = materialize(_spec(shape, "contiguous"), device)
    assert contiguous.is_contiguous()
    transposed = materialize(_spec(shape, "transposed"), device)
    assert transposed.shape == shape and transposed.stride() == (1, 2, 6, 24)
    sliced = materialize(_spec(shape, "sliced"), device)
    assert sliced.shape == shape and sliced.stride()[-1] == 2 and not sliced.is_contiguous()
    expanded = materialize(_spec(shape, "expanded"), device)
    assert expanded.shape == shape and expanded.stride()[-1] == 0
    offset = materialize(_spec(shape, "offset"), device)
    assert offset.shape == shape and offset.storage_offset() == 3 and offset.is_contiguous()
    channels_last = materialize(_spec(shape, "channels_last"), device)
    assert channels_last.shape == shape and channels_last.is_contiguous(memory_format=torch.channels_last)
    assert not channels_last.is_contiguous()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cpu_and_device_inputs_are_identical(layout):
    spec = _spec((3, 4, 5, 2), layout, "special")
    a, b = materialize(spec, "cpu"), materialize(spec, "neuron")
    assert a.stride() == b.stride() and a.storage_offset() == b.storage_offset()
    assert torch.equal(torch.isnan(a), torch.isnan(b.cpu()))
    assert torch.equal(a.nan_to_num(), b.cpu().nan_to_num())
    assert torch.equal(torch.signbit(a), torch.signbit(b.cpu()))


def test_value_domains_produce_their_values():
    values = base_values(_spec((4096,), "contiguous", "signed_zero"))
    zeros = values[values == 0]
    assert torch.signbit(zeros).any() and (~torch.signbit(zeros)).any()
    special = base_values(_spec((4096,), "contiguous", "special"))
    assert torch.isnan(special).any() and (special == float("inf")).any() and (special == float("-inf")).any()
    for dtype in ("float32", "float16"):
        denormal = base_values(_spec((4096,), "contiguous", "denormal", dtype))
        tiny = torch.finfo(denormal.dtype).tiny
        assert ((denormal != 0) & (denormal.abs() < tiny)).any(), dtype
    extremes = base_values(_spec((4096,), "contiguous", "extremes"))
    assert extremes.abs().max() > 1e29
    unit = base_values(_spec((4096,), "contiguous", "unit"))
    assert unit.abs().max() < 1
    positive = base_values(_spec((4096,), "contiguous", "positive"))
    assert (positive > 0).all()


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8"])
def test_integer_edges(dtype):
    values = base_values(_spec((4096,), "contiguous", "int_edges", dtype))
    info = torch.iinfo(values.dtype)
    assert values.min() == info.min and values.max() == info.max


def test_index_domain_stays_in_range():
    values = base_values(_spec((4096,), "contiguous", "index:7+", "int64"))
    assert values.min() >= 0 and values.max() < 7
    signed = base_values(_spec((4096,), "contiguous", "index:7", "int64"))
    assert signed.min() >= -7 and signed.max() < 7 and signed.min() < 0


def test_same_seed_same_values_and_literal_rebuilds_them():
    for dtype in ("float32", "bfloat16", "int64", "bool"):
        spec = _spec((3, 5), "contiguous", "special" if dtype in ("float32", "bfloat16") else "uniform", dtype)
        a = base_values(spec)
        assert torch.equal(a.nan_to_num(), base_values(spec).nan_to_num())
        rebuilt = eval(literal(spec), {"torch": torch})  # noqa: S307 - the harness's own reproducer text
        assert rebuilt.dtype == a.dtype and torch.equal(torch.isnan(rebuilt), torch.isnan(a))
        assert torch.equal(rebuilt.nan_to_num(), a.nan_to_num())
        assert torch.equal(torch.signbit(rebuilt), torch.signbit(a)) if a.is_floating_point() else True


def test_scalars_include_specials_for_floats():
    assert math.isnan(find(hs.scalars("float32"), lambda v: isinstance(v, float) and v != v, settings=FIND))
    assert find(hs.scalars("float32"), lambda v: v == float("inf"), settings=FIND) == float("inf")
    assert isinstance(find(hs.scalars("int32"), lambda v: isinstance(v, float), settings=FIND), float)
