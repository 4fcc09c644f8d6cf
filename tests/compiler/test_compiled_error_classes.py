"""Compiled graphs raise CPU's exception class where a fake tensor's own implementation, a reference meta or a
decomposition refuses the call in other words, or not at all (the op suite's compiled mode: index and index_2d
with a float index, floor_divide of bool, index_copy with a float index). Each test failed before its probe
(device_impl/compiler/parity.py: FAKE_IMPL_CHECKED, BOOL_CHECKED, ORIGINAL_PROBES)."""

from __future__ import annotations

import warnings

import pytest
import torch

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _compiled(fn, *args):
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return torch.compile(fn, backend="neuron", dynamic=False)(*[a.to("neuron") for a in args])


def _raises_as_cpu(fn, *args) -> type:
    """fn raises on CPU, and its compiled run on neuron raises CPU's class (or a subclass) with CPU's words."""
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001 - CPU's class is the expectation
        expected, words = type(error), str(error)
    else:
        raise AssertionError("CPU accepted the call: the test needs an input CPU refuses")
    with pytest.raises(expected) as raised:
        _compiled(fn, *args)
    assert words.splitlines()[0] in str(raised.value)
    return expected


X = torch.arange(12.0).reshape(3, 4)


@pytest.mark.parametrize("call", [
    lambda x, i: x[i],
    lambda x, i: x[i, i],
    lambda x, i: x[:, i],
], ids=["index", "index_2d", "index_dim1"])
def test_a_float_index_raises_cpus_index_error(call):
    assert _raises_as_cpu(call, X, torch.tensor([0.0, 1.0])) is IndexError
    assert torch.equal(_compiled(call, X, torch.tensor([0, 2])).cpu(), call(X, torch.tensor([0, 2])))


@pytest.mark.parametrize("call", [
    lambda b: torch.floor_divide(b, True),
    lambda b: torch.floor_divide(b, b),
    lambda b: torch.div(b, b, rounding_mode="trunc"),
], ids=["floor_scalar", "floor_tensor", "trunc_tensor"])
def test_floor_and_trunc_division_of_bool_raise_not_implemented_as_cpu(call):
    assert _raises_as_cpu(call, torch.tensor([True, False, True])) is NotImplementedError


def test_division_of_bool_that_cpu_accepts_still_compiles():
    b = torch.tensor([True, False, True])
    for call in (lambda t: torch.div(t, t), lambda t: torch.floor_divide(t, 2), lambda t: torch.floor_divide(t[:0], 0)):
        torch.testing.assert_close(_compiled(call, b).cpu(), call(b), rtol=0, atol=0, equal_nan=True)


def test_index_copy_with_a_float_index_raises_cpus_runtime_error():
    call = lambda x, i, s: torch.index_copy(x, 1, i, s)  # noqa: E731
    source = torch.ones(3, 2)
    assert _raises_as_cpu(call, X, torch.tensor([0.0, 3.0]), source) is RuntimeError
    assert torch.equal(_compiled(call, X, torch.tensor([0, 3]), source).cpu(), call(X, torch.tensor([0, 3]), source))


@pytest.mark.parametrize("shape, dim", [((5,), 0), ((3, 4), 0), ((3, 4), 1), ((3, 4, 2), 1), ((3, 4, 2), 2)])
@pytest.mark.parametrize("op", ["index_select", "index_add"])
def test_an_out_of_range_index_raises_the_class_cpu_raises_at_these_shapes(fresh, op, shape, dim):
    """CPU's index_select raises RuntimeError on its dim-1 fast path and IndexError elsewhere; its index_add
    RuntimeError or IndexError by the path its shapes pick: the compiled program raises what CPU raises."""
    x = torch.zeros(shape)
    index = torch.tensor([shape[dim]])
    if op == "index_select":
        call = lambda t, i: torch.index_select(t, dim, i)  # noqa: E731
        args = (x, index)
    else:
        call = lambda t, i, s: torch.index_add(t, dim, i, s)  # noqa: E731
        args = (x, index, torch.ones([1 if d == dim else n for d, n in enumerate(shape)]))
    _raises_as_cpu_class(call, *args)


def _raises_as_cpu_class(fn, *args) -> None:
    try:
        fn(*args)
    except Exception as error:  # noqa: BLE001 - CPU's class is the expectation
        expected = type(error)
    else:
        raise AssertionError("CPU accepted the call: the test needs an input CPU refuses")
    with pytest.raises(Exception) as raised:
        _compiled(fn, *args)
    assert type(raised.value) is expected


@pytest.mark.parametrize("dtype, value, pad", [
    (torch.uint8, 300.0, (1, 1)), (torch.uint8, -1.0, (0, 2, 1, 0)), (torch.int8, 200.0, (1, 0)),
    (torch.float16, 1e6, (2, 2)),
])
def test_a_pad_value_the_dtype_cannot_hold_raises_as_cpu(dtype, value, pad):
    """F.pad converts ``value`` to the tensor's dtype with CPU's overflow check; the compiled program cast it."""
    call = lambda t: torch.nn.functional.pad(t, pad, value=value)  # noqa: E731
    assert _raises_as_cpu(call, torch.zeros(3, 4, dtype=dtype)) is RuntimeError


def test_a_pad_cpu_accepts_still_compiles():
    """A value that fits, and a negative pad (a crop: nothing filled, nothing converted), give CPU's result."""
    x = torch.arange(12, dtype=torch.uint8).reshape(3, 4)
    for call in (lambda t: torch.nn.functional.pad(t, (1, 1), value=255.0),
                 lambda t: torch.nn.functional.pad(t, (-1, 0), value=300.0)):
        assert torch.equal(_compiled(call, x).cpu(), call(x))


@pytest.mark.parametrize("dtype", [torch.bool, torch.float32])
def test_as_strided_over_an_empty_view_addresses_its_base_storage(dtype):
    """``x[1:]`` of a one-element x is empty, but as_strided over it reads the storage element before the view:
    the zero-size call's CPU probe (``empty_refusal``) gave the view an empty storage of its own and raised
    "setStorage: ... out of bounds for storage of size 0" where CPU returns x's element."""
    call = lambda t: t[1:].as_strided((1, 1), (0, 0), 0).clone()  # noqa: E731
    x = torch.ones(1, dtype=dtype)
    assert torch.equal(_compiled(call, x).cpu(), call(x))


@pytest.mark.parametrize("dtype, value", [
    (torch.uint8, -0.5), (torch.uint8, 300), (torch.int8, 200), (torch.float16, 1e6),
])
@pytest.mark.parametrize("form", ["method", "function", "in-place", "empty", "keyword", "function-keywords"])
def test_a_masked_fill_value_the_dtype_cannot_hold_raises_as_cpu(dtype, value, form):
    """CPU's masked_fill converts the value with c10's overflow check before reading the mask (an empty tensor
    too); PyTorch's reference, which AOTAutograd traces, casts it (-0.5 into uint8 became 0) and the compiled
    program returned a result (the op suite's masked_fill-uint8-int_edges case: parity.fill_value_refusal). The
    value given as ``value=`` is checked too (it returned a result)."""
    call = {"method": lambda t, m: t.masked_fill(m > 0, value),
            "function": lambda t, m: torch.masked_fill(t, m > 0, value),
            "in-place": lambda t, m: t.clone().masked_fill_(m > 0, value),
            "empty": lambda t, m: t[:0].masked_fill(m[:0] > 0, value),
            "keyword": lambda t, m: t.masked_fill(m > 0, value=value),
            "function-keywords": lambda t, m: torch.masked_fill(t, mask=m > 0, value=value)}[form]
    assert _raises_as_cpu(call, torch.zeros(5, dtype=dtype), torch.randn(5)) is RuntimeError


def test_a_masked_fill_cpu_accepts_still_compiles():
    """A value that fits (2.5 truncates into uint8 on CPU too) and a value tensor give CPU's result."""
    x, m = torch.arange(6, dtype=torch.uint8), torch.tensor([1.0, -1, 2, 0, 3, -4])
    for call in (lambda t, k: t.masked_fill(k > 0, 2.5), lambda t, k: t.masked_fill(k > 0, 255),
                 lambda t, k: t.masked_fill(k > 0, torch.tensor(7, dtype=torch.uint8, device=t.device))):
        assert torch.equal(_compiled(call, x, m).cpu(), call(x, m))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
def test_avg_pool3d_of_a_dtype_cpu_has_no_kernel_for_raises_as_cpu(dtype, grad):
    """CPU has no float16/bfloat16 avg_pool3d kernel (NotImplementedError "avg_pool3d_out_frame" not implemented);
    its meta accepts them and the compiled reduce_window computed a result (parity.FAKE_CHECKED)."""
    x = torch.randn(1, 2, 3, 4, 5, dtype=dtype).requires_grad_(grad)
    call = (lambda t: torch.nn.functional.avg_pool3d(t, 2).sum()) if grad else \
        (lambda t: torch.nn.functional.avg_pool3d(t, 2))
    assert _raises_as_cpu(call, x) is NotImplementedError


def test_float32_avg_pool3d_still_compiles():
    x = torch.randn(1, 2, 3, 4, 5)
    torch.testing.assert_close(_compiled(lambda t: torch.nn.functional.avg_pool3d(t, 2), x).cpu(),
                               torch.nn.functional.avg_pool3d(x, 2))
