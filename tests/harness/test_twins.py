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


# --- the cross-device probe -------------------------------------------------------------------

def _recorded(run) -> dict[str, twins.Call]:
    return {twins._name(c.op): c for c in twins.record(run, "neuron")}


def test_the_cross_device_oracle_asks_the_running_torch():
    """Rejected where PyTorch's codegen checks devices (device_check: ExactSame) or its meta kernel refuses the
    mix; accepted where PyTorch accepts a host tensor (copy_, index's host indices, select_scatter's composite)."""
    d = torch.randn(4, 4, device="neuron")
    calls = _recorded(lambda: (torch.mm(d, d), d + d, torch.where(d > 0, d, d), torch.cdist(d, d),
                               d[torch.tensor([0, 1], device="neuron")], torch.select_scatter(d, d[0], 0, 1),
                               torch.ops.aten.copy_(torch.empty(4, 4, device="neuron"), d)))
    rejected = {name: twins.mixed_devices_rejected(calls[name], slot) for name, slot in [
        ("aten::mm", ("mat2", 0)), ("aten::add.Tensor", ("other", 0)), ("aten::where.self", ("self", 0)),
        ("aten::_cdist_forward", ("x2", 0)), ("aten::index.Tensor", ("indices", 0)),
        ("aten::select_scatter", ("src", 0)), ("aten::copy_", ("src", 0))]}
    assert "ExactSame" in rejected["aten::mm"] and "ExactSame" in rejected["aten::_cdist_forward"]
    assert "meta kernel raises RuntimeError" in rejected["aten::add.Tensor"]
    assert "meta kernel raises RuntimeError" in rejected["aten::where.self"]
    assert rejected["aten::index.Tensor"] is None and rejected["aten::select_scatter"] is None
    assert rejected["aten::copy_"] is None
    assert twins._slots(calls["aten::copy_"]) == [("src", 0)], "the written self is never moved"


def test_the_probe_catches_a_kernel_raising_the_wrong_class_or_accepting_a_host_tensor():
    case = _designed("batch_norm")[0].case
    assert run_case(case).verdict == "pass"
    op = "aten::native_batch_norm"
    with mutate.Planted(mutate.CLASSES["error_class"].make(op, "error_class", mutate.facts(op, []))):
        result = run_case(case)
    assert result.verdict == "fail" and "on the host" in result.message and "TypeError" in result.message

    class Uploads(mutate.Mutant):  # a kernel that quietly moves host arguments to the device
        def run(self, original, keyset, args, kwargs):
            up = [a.to("neuron") if isinstance(a, torch.Tensor) and a.is_cpu and a.dim() else a for a in args]
            return original.call_boxed(keyset, *up, **kwargs)

    with mutate.Planted(Uploads(op, "uploads", mutate.facts(op, []))):
        result = run_case(case)
    assert result.verdict == "fail" and "the device returned a result" in result.message
