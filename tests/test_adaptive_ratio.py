"""benches/adaptive_ratio.py: eager and adaptive are timed in alternating repeats, so a shared machine's load
moving between two windows cannot decide their ratio (issue 21)."""

from __future__ import annotations

import itertools

import torch

from benches import adaptive_ratio, cases
from benches.adaptive_ratio import paired_seconds


def test_the_modes_repeats_alternate_and_each_is_timed(monkeypatch):
    monkeypatch.setattr(adaptive_ratio, "BLOCK_SECONDS", 1e-4)
    calls: list[str] = []

    def workload() -> None:
        calls.append(torch.neuron.get_eager_mode())

    paired = paired_seconds(workload, repeats=4)
    assert set(paired.best) == {"eager", "adaptive"}
    assert all(0 < wall < float("inf") and 0 <= thread < float("inf") and 0 <= process < float("inf")
               for wall, thread, process in paired.best.values())
    assert len(paired.ratios) == 4 and all(wall > 0 for wall, _, _ in paired.ratios)
    # each mode's warm calls and its block's size first, then the timed repeats: runs of one mode, alternating
    # eager, adaptive, adaptive, eager, eager, adaptive, adaptive, eager
    runs = [mode for mode, _ in itertools.groupby(calls)]
    assert runs == ["eager", "adaptive", "eager", "adaptive", "eager", "adaptive", "eager"]
    assert torch.neuron.get_eager_mode() == "eager"


def test_the_chains_host_floor_is_timed_in_the_same_windows(monkeypatch):
    """The floor's block follows each pair of mode blocks (issue 21: timed alone after them, its best wall came
    from another moment of the machine's load and read 1.46x eager's wall), and its ratios are over the eager
    block of the same repeat."""
    monkeypatch.setattr(adaptive_ratio, "BLOCK_SECONDS", 1e-4)
    calls: list[str] = []

    def workload() -> None:
        calls.append(torch.neuron.get_eager_mode())

    paired = paired_seconds(workload, repeats=3, extra={"floor": lambda: calls.append("floor")})
    assert set(paired.best) == {"eager", "adaptive", "floor"}
    assert len(paired.extra_ratios["floor"]) == 3 and all(w > 0 for w, _, _ in paired.extra_ratios["floor"])
    assert len(paired.median_ratio("floor")) == 3
    runs = [name for name, _ in itertools.groupby(calls)]
    assert runs == ["eager", "adaptive", "floor",  # warm calls and block sizes
                    "eager", "adaptive", "floor", "adaptive", "eager", "floor", "eager", "adaptive", "floor"]


def test_the_chains_host_floor_computes_the_devices_bits():
    """The floor is the chain's arithmetic as the engines compute it: per tile and over the whole array it gives
    the bits the neuron chain gives, in eager and adaptive mode (element-wise float32 steps: the tiling does not
    change a bit)."""
    numel = 3 * 128 * 2048 + 1000  # several tiles and a ragged last one
    x = torch.randn(numel, generator=torch.Generator().manual_seed(3))
    whole = torch.from_numpy(adaptive_ratio.chain_floor(numel, whole=True, x=x.numpy())().copy())
    tiles = adaptive_ratio.chain_floor(numel, x=x.numpy())
    last = torch.from_numpy(tiles().copy())
    assert torch.equal(last.view(torch.int32), whole[-last.numel():].view(torch.int32))
    xn = x.to("neuron")
    for mode in ("eager", "adaptive"):
        with torch.neuron.eager_mode(mode):
            y = xn
            for i in range(cases.CHAIN_ROUNDS):
                y = (torch.sigmoid(y * cases.CHAIN_SCALE + cases.CHAIN_BIAS) if i % 2
                     else torch.tanh(y - cases.CHAIN_SHIFT))
            assert torch.equal(y.cpu().view(torch.int32), whole.view(torch.int32)), mode
