"""Meta tests of harness.runner: the checks beyond value comparison, and what a result records."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from harness.cases import Case
from harness.runner import run_case
from harness.specs import SPECS
from harness.values import TensorSpec as T
from harness.xfails import XFails


def test_a_broken_call_text_fails_instead_of_passing_as_error_parity(monkeypatch):
    monkeypatch.setitem(SPECS, "neg", dataclasses.replace(SPECS["neg"], call="torch.neg({x0}"))
    result = run_case(Case("neg", "float32", (T((3,), "float32"),)))
    assert result.verdict == "fail" and "SyntaxError" in result.message


def test_dtype_parameters_render_as_names():
    result = run_case(Case("full", "bfloat16", (), {"shape": (2, 3), "value": 1.5, "dtype": "bfloat16"}))
    assert result.expression == "torch.full((2, 3), 1.5, dtype=torch.bfloat16, device=device)"
    assert result.verdict == "pass" and result.called == ["aten::full"]
    with pytest.raises(ValueError, match="not a name"):
        SPECS["full"].render({"shape": (1,), "value": 0, "dtype": "bad name"}, [])


def test_result_records_called_overloads_and_device_kernels_forward_and_backward():
    result = run_case(Case("sigmoid", "float32", (T((4, 5), "float32", "contiguous", "normal", 3, True),)))
    assert result.verdict == "pass"
    assert {"aten::sigmoid", "aten::sigmoid_backward"} <= set(result.called)
    assert {"aten::sigmoid.out", "aten::sigmoid_backward.grad_input"} <= set(result.device_ops)


def test_aliasing_parity_for_views():
    result = run_case(Case("transpose_view", "float32", (T((3, 4), "float32"),)))
    assert result.verdict == "pass" and result.comparison.ok
    result = run_case(Case("select", "int32", (T((3, 4), "int32", "sliced", "small_int", 1),), {"dim": 1, "index": 2}))
    assert result.verdict == "pass"


def test_inplace_ops_compare_their_inputs_after_the_call():
    result = run_case(Case("add_", "float32", (T((3, 4), "float32", "transposed"), T((4,), "float32"))))
    assert result.verdict == "pass"


def test_random_ops_are_judged_by_properties_and_determinism():
    result = run_case(Case("randn", "float32", (), {"shape": (5, 7), "dtype": "float32"}))
    assert result.verdict == "pass" and result.comparison.criterion == "properties + determinism"


def test_error_parity_passes_when_both_raise_the_same_class():
    case = Case("index_select", "float32", (T((5, 3), "float32"), T((2,), "int64", "contiguous", "index:40+", 1)),
                {"dim": 0})
    result = run_case(case)
    assert result.verdict == "pass" and result.comparison.criterion == "error parity"


def test_xfail_entries_turn_verdicts():
    xfails = XFails.parse('[[xfail]]\nop = "neg"\ncategory = "numerics"\nreason = "pretend neg is known to differ"\n')
    result = run_case(Case("neg", "float32", (T((3,), "float32"),)), xfails)
    assert result.verdict == "xpass" and result.xfail_reason.startswith("numerics:") and result.reproducer


def _mm_case(domain, dtype="float32", k=4):
    return Case("mm", dtype, (T((3, k), dtype, "contiguous", domain, 11, True),
                              T((k, 5), dtype, "contiguous", "normal", 12, True)))


def test_sum_of_products_overflow_positions_are_order_dependent(monkeypatch):
    """near_overflow operands: every product overflows; the device's blocking need not reproduce CPU's NaN/inf
    pattern (the spec's sum_of_products), which the strict comparison would demand."""
    case = _mm_case("near_overflow", "bfloat16", 129)
    assert SPECS["mm"].sum_of_products and run_case(case).verdict == "pass"
    strict = dataclasses.replace(SPECS["mm"], sum_of_products=False)
    monkeypatch.setitem(SPECS, "mm", strict)
    assert run_case(case).verdict == "fail"


def test_sum_of_products_still_catches_a_kernel_that_drops_nan():
    """A NaN input gives NaN at positions whose finite terms do not overflow: those stay strict."""
    from device_impl.dispatch import TABLE
    from device_impl.engine.hbm import view as hbm

    case = _mm_case("special")
    assert run_case(case).verdict == "pass"
    original = TABLE.kernel("aten::mm.out")

    def drops_nan(*args, **kwargs):
        result = original(*args, **kwargs)
        view = hbm(kwargs["out"] if "out" in kwargs else args[-1])
        view[np.isnan(view)] = 0
        return result

    with TABLE.overridden("aten::mm.out", drops_nan):
        result = run_case(case)
    assert result.verdict == "fail" and "NaN at different positions" in result.message


def test_compiled_mode_never_replays_another_calls_graph():
    """Two calls of one closure's code with different method descriptors in its cells (the contract
    checks' variants): Dynamo would replay the in-place variant's graph for the functional one
    (no guard on the descriptor), mutating the input. Each call gets its own code object."""
    from harness import modes

    compiled = modes.get("compiled")
    x = torch.randn(8, 8)
    for variant in ("sin_", "sin"):
        xd = x.to("neuron")
        method = getattr(torch.Tensor, variant)
        result = compiled.run(lambda: method(xd), "neuron")
        assert torch.allclose(result.cpu(), x.sin(), atol=1e-6)
        assert torch.allclose(xd.cpu(), x.sin() if variant == "sin_" else x, atol=1e-6), variant


def test_compiled_mode_skips_dynamos_guard_latency_profile_and_restores_it(monkeypatch):
    """Dynamo times every new frame's guards after evicting the CPU caches (~40 ms a compile, a metric nothing
    reads); the compiled mode replaces that timer while a case compiles, and puts Dynamo's back after, also when
    the case raises."""
    import torch._dynamo.guards as guards

    from harness import modes

    calls = []

    def timer(*args, **kwargs):
        calls.append(args)
        return 0.0

    monkeypatch.setattr(guards, "profile_guard_manager", timer)
    compiled = modes.get("compiled")
    x = torch.randn(5, 3)
    xd = x.to("neuron")
    result = compiled.run(lambda: torch.cos(xd) + 1, "neuron")
    assert torch.allclose(result.cpu(), torch.cos(x) + 1, atol=1e-6)
    with pytest.raises(RuntimeError):
        compiled.run(lambda: xd + torch.ones(4, device="neuron"), "neuron")
    assert calls == [] and guards.profile_guard_manager is timer
    torch.compile(lambda a: a * 2, backend="eager", dynamic=False)(torch.ones(3))
    assert len(calls) == 1  # outside the mode, Dynamo's own timer runs


def test_a_gradients_float64_reference_differentiates_cpus_cotangent():
    """The float64 reference of a gradient uses the cotangent CPU and the device use (rounded to CPU's output
    dtype), not the float32 draw: otherwise a bf16 mm gradient's reference moves by up to 2^-9 of its
    magnitude bound, across bf16's overflow threshold (issue 16: 3.397e38 for an exact 3.391e38)."""
    import torch

    from harness.runner import _grads

    x = torch.zeros(64, dtype=torch.float64, requires_grad=True)
    cpu_out = torch.zeros(64, dtype=torch.bfloat16, requires_grad=True) * 1
    drawn = torch.randn(64, generator=torch.Generator().manual_seed(5), dtype=torch.float32)
    (grad,) = _grads(SPECS["mm"], x * 1, [x], "cpu", 5, rounded_like=cpu_out)
    assert torch.equal(grad, drawn.to(torch.bfloat16).double())
    (unrounded,) = _grads(SPECS["mm"], x * 1, [x], "cpu", 5)
    assert torch.equal(unrounded, drawn.double()) and not torch.equal(unrounded, grad)


@pytest.mark.parametrize("layout, strides", [("transposed", (1, 3)), ("sliced", (8, 2)), ("expanded", (1, 0)),
                                             ("offset", (4, 1)), ("channels_last", None), ("overlapping", None)])
def test_a_cases_cotangent_reaches_the_backward_in_the_cases_layout(layout, strides):
    """A gradient case's cotangent is made on the device with the case's layout (autograd hands a user's strided
    gradient on as given), so a backward kernel that ignores a strided grad_output is caught; a layout the
    cotangent's shape cannot take (channels_last of a matrix) or one with no distinct values (overlapping) leaves
    it contiguous."""
    from harness.runner import _grads

    seen = []
    x = torch.randn(3, 4, device="neuron", requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: seen.append(g))
    (grad,) = _grads(SPECS["mul"], y, [x], "neuron", 7, layout=layout)
    assert seen[0].stride() == (strides or (4, 1))
    assert torch.equal(grad.cpu(), 2 * seen[0].cpu())
    if layout == "sliced":  # the filler a stride-ignoring read would meet is NaN
        assert torch.isnan(torch.as_strided(seen[0], (3, 8), (8, 1)).cpu()).any()


def test_a_compiled_mode_test_reports_its_first_failing_example_unshrunk(monkeypatch):
    """Under the quick profile a compiled-mode test does not shrink (each step would compile a graph; one failing
    op shrank for Hypothesis's whole 300 s): the first failing draw is reported. Other modes still shrink."""
    import types

    from hypothesis import Phase, given, settings
    from hypothesis import strategies as st

    from harness import pytest_plugin

    calls: list[int] = []

    @settings(max_examples=50, derandomize=True, database=None, deadline=None)
    @given(st.integers(0, 10**6))
    def failing(n):
        calls.append(n)
        assert n < 1000

    monkeypatch.setattr(pytest_plugin, "_PROFILE", "quick")
    item = types.SimpleNamespace(obj=failing)
    assert pytest_plugin._without_shrinking(item, "eager") is None
    bound = pytest_plugin._without_shrinking(item, "compiled")
    assert bound is not None and Phase.shrink not in failing._hypothesis_internal_use_settings.phases
    with pytest.raises(AssertionError):
        failing()
    unshrunk = list(calls)
    failing._hypothesis_internal_use_settings = bound
    calls.clear()
    with pytest.raises(AssertionError):
        failing()
    assert calls[-1] == 1000 and len(calls) > len(unshrunk)  # shrunk to the boundary, in more calls
    assert unshrunk[-1] > 1000 and all(n < 1000 for n in unshrunk[:-2])  # generated, then replayed as found
