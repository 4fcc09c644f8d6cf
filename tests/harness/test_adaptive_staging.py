"""Adaptive mode runs a case's op on inputs whose producer is still queued (harness.modes.stage_pending)."""

from __future__ import annotations

import pytest
import torch

from harness import modes, runner
from harness.cases import Case
from harness.values import TensorSpec


def _cross_case() -> Case:
    tensors = (TensorSpec((8, 3), "float32", "contiguous", "normal", 11), TensorSpec((8, 3), "float32", "transposed",
                                                                                     "normal", 12))
    return Case("linalg_cross", "float32", tensors, {"dim": -1}, "adaptive", "neuron")


def test_staging_moves_inputs_onto_storages_a_queued_copy_fills():
    """Same tensor objects, sizes, strides, offsets and values; new storages, shared where they were shared; the
    copies still queued when the op runs."""
    pytest.importorskip("device_impl")
    base = torch.randn(20, device="neuron")
    a, b = base[2:14].view(3, 4).t(), base[5:9]  # one storage, offsets 2 and 5
    c = torch.randn(3, device="neuron").requires_grad_()
    before = [(t.size(), t.stride(), t.storage_offset(), t.detach().cpu().clone()) for t in (a, b, c)]
    old_ptr = base.untyped_storage().data_ptr()
    torch.neuron.set_eager_mode("adaptive")
    try:
        modes.stage_pending([a, b, c, 1.5, "x"], "neuron")
        from device_impl import eager
        assert eager.pending(), "the copies are queued, not run"
        assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() != old_ptr
        torch.neuron.synchronize()
    finally:
        torch.neuron.set_eager_mode("eager")
    for t, (size, stride, offset, values) in zip((a, b, c), before):
        assert (t.size(), t.stride(), t.storage_offset()) == (size, stride, offset)
        assert torch.equal(t.detach().cpu(), values)
    assert c.requires_grad and c.is_leaf


def test_adaptive_mode_catches_a_kernel_reading_its_inputs_before_their_producer(monkeypatch):
    """linalg_cross's kernel opened its own launch while captured and read its inputs at the call (zeros where the
    producer was queued): with the fix undone (eager.capture's refusal of such a launch), the adaptive case fails
    because its inputs are staged, and passes without staging, as the op suite's adaptive mode did before."""
    from device_impl.eager import capture

    case = _cross_case()
    assert runner.run_case(case).verdict == "pass"
    monkeypatch.setattr(capture.core, "divert", lambda stand_in: None)  # the bug back: the launch runs at the call
    caught = runner.run_case(case)
    assert caught.verdict == "fail" and "output" in caught.message, caught.message
    monkeypatch.setattr(modes, "stage_pending", lambda values, device: None)
    assert runner.run_case(case).verdict == "pass"


def test_an_adaptive_reproducer_stages_its_inputs_as_the_runner_does(tmp_path):
    """The reproducer of an adaptive case stages its inputs as the runner (its ``stage_pending``): run as rendered it
    passes, and with linalg_cross's capture fix undone in the script's process it fails, as the runner's case does."""
    import subprocess
    import sys
    from pathlib import Path

    from harness import repro
    from harness.specs import SPECS

    case = _cross_case()
    spec = SPECS["linalg_cross"]
    script = repro.render(spec, case, spec.render(case.params, ["x0", "x1"]))
    assert "stage_pending(globals().get(\"dev_in\", ()))" in script
    root = Path(__file__).resolve().parents[2]
    runs = {}
    for name, text in (("fixed", script), ("undone", script.replace(
            "import device_impl  #", "import device_impl.engine.core as _core; _core.divert = lambda stand_in: None  #"))):
        path = tmp_path / f"{name}.py"
        path.write_text(text)
        runs[name] = subprocess.run([sys.executable, str(path)], cwd=root, capture_output=True, text=True, timeout=600)
    assert runs["fixed"].returncode == 0, runs["fixed"].stderr[-2000:]
    assert runs["undone"].returncode != 0 and "output" in runs["undone"].stderr, runs["undone"].stderr[-2000:]


def test_an_opinfo_reproducer_runs_in_adaptive_mode(tmp_path):
    """The OpInfo sweep's reproducers share the mode runner but have no op-spec inputs (``dev_in``) to stage, as the
    sweep stages none: an adaptive one runs (it raised NameError while the runner named ``dev_in`` outright)."""
    import subprocess
    import sys
    from pathlib import Path

    from torch.testing._internal.common_methods_invocations import op_db

    from harness import opinfo

    op = next(o for o in op_db if o.name == "add")
    path = tmp_path / "opinfo_add.py"
    path.write_text(opinfo._reproducer(op, torch.float32, "sample", 0, "neuron", "", mode="adaptive"))
    run = subprocess.run([sys.executable, str(path)], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0 and "reproducer passed" in run.stdout, run.stderr[-2000:]
