"""Meta tests of harness.opinfo (the upstream OpInfo sweep): moving samples, error inputs, the float64
criterion, xfails, and reproducers that fail as the sweep did."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.testing._internal.opinfo.core import ErrorInput, SampleInput

from harness import opinfo
from harness.compare import failure_kind
from harness.xfails import XFails
from planted import plant


def op_named(name: str, variant: str = ""):
    return next(o for o in opinfo.op_db() if o.name == name and o.variant_test_name == variant)


def test_to_device_keeps_views_strides_and_offsets():
    base = torch.arange(40.0)
    for view in (base[3:].view(37)[::2], base.view(4, 10).t(), base[:4].view(4, 1).expand(4, 6), base[5:9]):
        moved = opinfo.to_device(view, "neuron")
        assert moved.device.type == "neuron"
        assert moved.stride() == view.stride() and moved.storage_offset() == view.storage_offset()
        assert torch.equal(moved.cpu(), view)
        assert moved.untyped_storage().nbytes() == view.untyped_storage().nbytes()


def test_factory_samples_are_made_on_the_device():
    moved = opinfo._move(SampleInput(3, kwargs={"device": "cpu", "dtype": torch.float32}), "neuron")
    assert moved.kwargs["device"] == "neuron" and moved.kwargs["dtype"] == torch.float32


def test_dropout_given_positionally_makes_attention_random():
    op = op_named("nn.functional.multi_head_attention_forward")
    samples = list(op.sample_inputs("cpu", torch.float32))
    assert [opinfo.is_random(op, s) for s in samples[:2]] == [False, True]


def test_error_inputs_need_cpu_to_raise_and_the_device_to_raise_the_same():
    op = SimpleNamespace(op=torch.index_select)
    bad = ErrorInput(SampleInput(torch.randn(5, 3), args=(0, torch.tensor([9]))), error_type=IndexError,
                     error_regex="out of range")
    assert opinfo.run_error_input(op, bad, "neuron").ok
    with plant("error_class"):
        result = opinfo.run_error_input(op, bad, "neuron")
    assert not result.ok and failure_kind(result.message) == "error parity"
    fine = ErrorInput(SampleInput(torch.randn(5, 3), args=(0, torch.tensor([1]))), error_type=IndexError,
                      error_regex="")
    assert opinfo.run_error_input(op, fine, "neuron").criterion.startswith("skip")


def test_float64_criterion_judges_accumulating_ops():
    results = opinfo.run_op(op_named("matmul"), [torch.float32], "neuron", max_samples=None, reference=False,
                            errors=False)
    assert results and all(r.verdict == "pass" for r in results), [r.message for r in results if r.verdict != "pass"]
    assert any(r.comparison.criterion.startswith("fp64 reference") for r in results)


def test_planted_bug_fails_the_sweep_and_its_reproducer(capsys):
    op = op_named("neg")
    with plant("zero_sign"):
        results = opinfo.run_op(op, [torch.float32], "neuron", errors=False)
    failed = [r for r in results if r.verdict == "fail"]
    assert failed and all(failure_kind(r.message) == "output: zero sign" for r in failed)
    first = failed[0]
    assert first.case.source == "opinfo" and first.case.spec == "neg" and first.reproducer
    assert "import harness" not in first.reproducer and "from harness" not in first.reproducer
    code = compile(first.reproducer, "reproducer", "exec")
    with plant("zero_sign"), pytest.raises(AssertionError) as raised:
        exec(code, {"__name__": "__main__"})  # noqa: S102
    assert failure_kind(str(raised.value)) == failure_kind(first.message)
    exec(code, {"__name__": "__main__"})  # noqa: S102 - the real kernel: it passes
    assert "reproducer passed" in capsys.readouterr().out


def test_xfails_of_source_opinfo_apply():
    xfails = XFails.parse('[[xfail]]\nsource = "opinfo"\nop = "neg"\ncategory = "numerics"\n'
                          'message = "wrong sign"\nreason = "pretend the sign of zero is a known difference"\n')
    with plant("zero_sign"):
        results = opinfo.run_op(op_named("neg"), [torch.float32], "neuron", errors=False, xfails=xfails)
    assert {r.verdict for r in results} <= {"pass", "xfail"} and any(r.verdict == "xfail" for r in results)
    assert not xfails.stale()


def test_sweep_counts_and_skips():
    counts = opinfo.SweepCounts()
    opinfo.run_op(op_named("jiterator_unary"), [torch.float32], counts=counts)
    assert "jiterator_unary" in counts.skipped_ops and not counts.samples
    results = opinfo.run_op(op_named("abs"), [torch.float32, torch.bfloat16], max_samples=2, reference=False,  # 1 each
                            errors=False, counts=counts)
    assert counts.samples == len(results) == 2 and counts.verdicts == {"pass": 2} and counts.pass_rate() == 1.0
    assert {r.case.dtype for r in results} == {"float32", "bfloat16"}


def test_error_inputs_without_tensors_are_skipped_not_moved():
    op = SimpleNamespace(op=torch.cat)
    empty = ErrorInput(SampleInput([]), error_type=ValueError, error_regex="non-empty")
    assert opinfo.run_error_input(op, empty, "neuron").criterion.startswith("skip: the error input has no tensor")


def test_samples_without_tensors_run_on_the_device():
    result = opinfo.run_sample(SimpleNamespace(op=torch.ones, name="ones"), SampleInput((2, 3)), torch.float32, "neuron")
    assert result.ok and result.criterion.startswith("rtol")  # compared: the device made its own tensor
    skipped = opinfo.run_sample(SimpleNamespace(op=lambda a, b: torch.tensor(a) + b, name="sum"), SampleInput(2, args=(3,)),
                                torch.float32, "neuron")
    assert skipped.criterion.startswith("skip: no tensor input and no device argument")
