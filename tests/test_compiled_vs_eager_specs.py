"""benches/compiled_vs_eager_specs.py: each mode is timed doing a call's whole work, its result written where the
caller can read it (issue 21's sweep compares compiled programs with the better eager mode)."""

from __future__ import annotations

import torch

from benches import compiled_vs_eager_specs
from device_impl import engine


def _hbm_bytes() -> float:
    torch.neuron.synchronize()
    return sum(s["hbm_bytes"] for s in engine.stats().values())


def test_adaptive_is_timed_storing_the_result_the_caller_holds():
    """Adaptive eager stores no output dead by its flush: a result dropped at once made the fused greater+select
    launch of ``torch.where(x > 0, x, y)`` skip its store, and the sweep's baseline (1.35 us) beat compiled's
    program, which writes the result (1.43 us). The timed calls must move the bytes of calls whose results are
    held: two of them, each synchronized, as the sweep makes (a warm call and the timed one)."""
    x, y = torch.randn(513).to("neuron"), torch.randn(513).to("neuron")

    def call() -> torch.Tensor:
        return torch.where(x > 0, x, y)

    with torch.neuron.eager_mode("adaptive"):
        call()
        torch.neuron.synchronize()
        engine.reset_stats()
        held = [call()]
        torch.neuron.synchronize()
        held.append(call())
        held_bytes = _hbm_bytes()
        del held
        engine.reset_stats()
        seconds = compiled_vs_eager_specs._device_seconds(call)
        timed_bytes = _hbm_bytes()
    assert seconds > 0
    assert timed_bytes == held_bytes, (timed_bytes, held_bytes)
