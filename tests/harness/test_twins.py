"""Twin overloads (harness.twins): the out=, in-place, Scalar and out_dtype forms of each call a case makes
are found from the schemas, called with the call's own arguments (layouts kept) on the device and on CPU,
and judged; a wrong twin kernel fails the designed case of the op that reaches it."""

from __future__ import annotations

import torch

from harness import design, mutate, twins
from harness.runner import run_case

KEY = "PrivateUse1"


def _names(op: str) -> dict[str, str]:
    return {t.name: t.kind for t in twins.twins_of(op, KEY)}


def test_twins_come_from_the_schemas_and_the_device_registrations():
    assert _names("aten::relu") == {"aten::relu.out": "out", "aten::relu_": "inplace"}
    assert _names("aten::threshold_backward") == {"aten::threshold_backward.grad_input": "out"}
    add = _names("aten::add.Tensor")
    assert add["aten::add.out"] == "out" and add["aten::add.Scalar_out"] == "scalar"
    assert "aten::remainder.Scalar_Tensor" in _names("aten::remainder.Tensor")  # the Tensor 'self' as a Scalar
    # CPU has no kernel for the fused LSTM cell: no oracle, no twin
    assert twins.twins_of("aten::_thnn_fused_lstm_cell", KEY) == ()


def test_a_snapshot_keeps_the_layout_the_kernel_saw():
    base = torch.arange(6.0, device="neuron")
    expanded = base[:3].unsqueeze(0).expand(4, 3)  # stride 0
    shot = twins.Snapshot(expanded)
    again = shot.make(True)
    assert again.stride() == expanded.stride() and torch.equal(again.cpu(), expanded.cpu())
    assert shot.make(False).stride() == expanded.stride() and shot.overlapping
    base.fill_(-1)
    assert torch.equal(shot.make(True).cpu(), torch.arange(3.0).expand(4, 3)), "a snapshot, not a view"


def _designed(spec: str, dtype: str = "float32"):
    return [d for d in design.cases(spec) if d.cell.dtype == dtype and d.cell.error is None]


def test_a_wrong_inplace_twin_fails_the_functional_ops_cases():
    """relu_ that drops NaN: no case calls relu_, yet relu's designed cases with NaN catch it."""
    cases = [d.case for d in _designed("relu") if d.cell.domain == "special"]
    assert cases and all(run_case(c).verdict == "pass" for c in cases)
    f = mutate.facts("aten::relu_", [])
    with mutate.Planted(mutate.CLASSES["nan_inf"].make("aten::relu_", "nan_inf", f)):
        results = [run_case(c) for c in cases]
    failed = [r for r in results if r.verdict == "fail"]
    assert failed and "twin aten::relu_" in failed[0].message


def test_an_out_twin_that_ignores_out_fails_and_the_wrong_device_rule_holds():
    cases = [d.case for d in _designed("relu")][:4]
    f = mutate.facts("aten::threshold_backward.grad_input", [])
    with mutate.Planted(mutate.CLASSES["out"].make("aten::threshold_backward.grad_input", "out", f)):
        results = [run_case(c) for c in cases]
    assert any("twin aten::threshold_backward.grad_input" in r.message for r in results if r.verdict == "fail")
    with mutate.Planted(mutate.CLASSES["error_class"].make("aten::relu.out", "error_class",
                                                            mutate.facts("aten::relu.out", []))):
        results = [run_case(c) for c in cases]
    assert any("out= on cpu" in r.message for r in results if r.verdict == "fail")


def test_twins_are_recorded_as_called_so_mutate_reruns_the_case():
    result = run_case(_designed("relu")[0].case)
    assert result.verdict == "pass"
    assert {"aten::relu.out", "aten::relu_"} <= set(result.called)


def test_a_twin_cpu_has_no_kernel_for_is_judged_by_the_devices_own_call():
    """convolution_overrideable's CPU entry only raises NotImplementedError: its out= twin is held to the device's own
    functional result, bit for bit, and a twin that ignores out= still fails."""
    x, w = torch.randn(1, 2, 5, 5, device="neuron"), torch.randn(3, 2, 3, 3, device="neuron")
    args = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)

    def run():
        torch.ops.aten.convolution_overrideable(x, w, None, *args)

    def judge(actual, expected):
        raise AssertionError("no CPU result to judge against")

    calls = twins.record(run, "neuron")
    comparison, called = twins.check(calls, "neuron", judge)
    assert "aten::convolution_overrideable.out" in called and comparison.ok, comparison.message
    mutant = mutate.CLASSES["out"].make("aten::convolution_overrideable.out", "out",
                                        mutate.OpFacts("aten::convolution_overrideable.out", mutate.overload(
                                            "aten::convolution_overrideable.out")._schema, (), ()))
    with mutate.Planted(mutant):
        comparison, _ = twins.check(calls, "neuron", judge)
    assert not comparison.ok
