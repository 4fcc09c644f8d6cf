"""benches/adaptive_ratio.py: eager and adaptive are timed in alternating repeats, so a shared machine's load
moving between two windows cannot decide their ratio (issue 21)."""

from __future__ import annotations

import itertools

import torch

from benches import adaptive_ratio
from benches.adaptive_ratio import paired_seconds


def test_the_modes_repeats_alternate_and_each_is_timed(monkeypatch):
    monkeypatch.setattr(adaptive_ratio, "BLOCK_SECONDS", 1e-4)
    calls: list[str] = []

    def workload() -> None:
        calls.append(torch.neuron.get_eager_mode())

    paired = paired_seconds(workload, repeats=4)
    assert set(paired.best) == {"eager", "adaptive"}
    assert all(0 < wall < float("inf") and 0 <= thread < float("inf") for wall, thread in paired.best.values())
    assert len(paired.ratios) == 4 and all(wall > 0 for wall, _ in paired.ratios)
    # each mode's warm calls and its block's size first, then the timed repeats: runs of one mode, alternating
    # eager, adaptive, adaptive, eager, eager, adaptive, adaptive, eager
    runs = [mode for mode, _ in itertools.groupby(calls)]
    assert runs == ["eager", "adaptive", "eager", "adaptive", "eager", "adaptive", "eager"]
    assert torch.neuron.get_eager_mode() == "eager"
