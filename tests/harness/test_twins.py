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
    assert "the cross-device probe" in result.reproducer, "the reproducer says the expression itself passes"

    class Uploads(mutate.Mutant):  # a kernel that quietly moves host arguments to the device
        def run(self, original, keyset, args, kwargs):
            up = [a.to("neuron") if isinstance(a, torch.Tensor) and a.is_cpu and a.dim() else a for a in args]
            return original.call_boxed(keyset, *up, **kwargs)

    with mutate.Planted(Uploads(op, "uploads", mutate.facts(op, []))):
        result = run_case(case)
    assert result.verdict == "fail" and "the device returned a result" in result.message


def _fake_cuda_rejects(call: twins.Call, slot: tuple[str, int]) -> bool | None:
    """PyTorch's own model of CUDA's device rules (FakeTensor's device propagation, what torch.compile traces
    CUDA graphs with) for the call with the argument at ``slot`` on the host: True if it rejects the mix, None if
    it cannot say (an op it cannot trace without CUDA)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def fake_cuda(s: twins.Snapshot) -> torch.Tensor:
        with mode:
            return torch.empty_strided(s.size, s.stride, dtype=s.dtype, device="cuda")
    args, kwargs = twins._with(call, fake_cuda, slot)  # the host tensor is a real one, which the mode fakes as cpu
    try:
        with mode:
            call.op(*args, **kwargs)
    except Exception as error:  # noqa: BLE001
        return True if "same device" in str(error) else None
    return False


def test_the_oracle_agrees_with_pytorchs_fake_cuda_device_rules():
    """Where the harness's oracle says PyTorch rejects a host tensor, PyTorch's FakeTensor model of CUDA rejects it
    too; where FakeTensor accepts (index's host indices, copy_), the oracle does. (The oracle may accept where
    FakeTensor rejects: select_scatter, whose composite copies src with copy_ on CUDA; the probe then skips.)"""
    d = torch.randn(4, 4, device="neuron")
    w = torch.randn(4, device="neuron")
    calls = _recorded(lambda: (torch.mm(d, d), d + d, torch.where(d > 0, d, d), torch.cdist(d, d), torch.cat([d, d]),
                               d[torch.tensor([0, 1], device="neuron")], torch.ops.aten.silu_backward(d, d),
                               torch.ops.aten.mse_loss_backward(d.sum(), d, d, 1),
                               torch.index_select(d, 0, torch.tensor([0, 1], device="neuron")),
                               torch.ops.aten.native_batch_norm(d.view(2, 4, 2), w, w, None, None, True, 0.1, 1e-5),
                               torch.ops.aten.copy_(torch.empty(4, 4, device="neuron"), d)))
    checked = 0
    for name, slot in [("aten::mm", ("mat2", 0)), ("aten::add.Tensor", ("other", 0)), ("aten::where.self", ("self", 0)),
                       ("aten::_cdist_forward", ("x2", 0)), ("aten::cat", ("tensors", 0)),
                       ("aten::index.Tensor", ("indices", 0)), ("aten::silu_backward", ("self", 0)),
                       ("aten::mse_loss_backward", ("target", 0)), ("aten::index_select", ("index", 0)),
                       ("aten::native_batch_norm", ("input", 0)), ("aten::copy_", ("src", 0))]:
        fake = _fake_cuda_rejects(calls[name], slot)
        ours = twins.mixed_devices_rejected(calls[name], slot) is not None
        if fake is None:
            continue
        checked += 1
        assert ours == fake, (name, slot, ours, fake)
    assert checked >= 10
