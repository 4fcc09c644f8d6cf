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
