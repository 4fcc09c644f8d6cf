"""Issue 21 item 1: a compiled program's scratch arena (values crossing step boundaries) stays in SBUF when it fits
(compiler/memory.py ``arena_space``): a real SBUF tile of the launch, beside every step's own tiles, that the
steps reach with SBUF-to-SBUF DMA; HBM then sees only the program's inputs, weights and outputs. The bits are
those of the arena in HBM, and compiler.breakdown accounts for every byte."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import device_impl.compiler as compiler
from device_impl import engine
from device_impl.compiler import breakdown, executor, memory
from support import compile_traced


@pytest.fixture(autouse=True)
def settings(monkeypatch, no_neff_cache):
    monkeypatch.setattr(executor, "STATIC_REPLAY", False)  # the instruction level: every DMA counted as it runs


def mlp(x, w1, w2, w3):
    """A SwiGLU MLP whose gate is also read by the down product's epilogue (a residual-like add): the gate crosses
    step boundaries through the arena (a plain gated MLP keeps all its values in SBUF: build.keep_products,
    build.handoffs; ``test_a_gated_mlp_keeps_its_values_in_sbuf``)."""
    g = x @ w1
    return (torch.nn.functional.silu(g) * (x @ w2)) @ w3 + g[:, :128]


def gated(x, w1, w2, w3):
    """A plain SwiGLU MLP: the gate, read only by the up product's silu * mul epilogue, and that epilogue's result,
    read only by the down product as its A."""
    return (torch.nn.functional.silu(x @ w1) * (x @ w2)) @ w3


def _inputs():
    g = torch.Generator().manual_seed(0)
    # weights scaled by 1/sqrt(fan-in), so the values stay O(1)
    return [torch.randn(s, generator=g) / (s[0] ** 0.5 if i else 1.0)
            for i, s in enumerate(((256, 128), (128, 384), (128, 384), (384, 128)))]


def _run(inputs, fn=mlp):
    run, program = compile_traced(fn, *inputs)
    engine.reset_stats()
    (out,) = run([t.to("neuron") for t in inputs])
    (stats,) = [s for k, s in engine.stats().items() if k.startswith("neff:")]
    return out.cpu(), stats, run.executable, program


def _close_to_cpu(out, inputs, fn=mlp):
    """A sanity bound against CPU eager (TensorE sums K in 128-deep tiles, CPU's GEMM in its own blocking, so
    not bit-equal); the bits are pinned by the comparison with the arena in HBM."""
    torch.testing.assert_close(out, fn(*inputs), rtol=1e-4, atol=1e-5)


def test_a_small_arena_is_an_sbuf_tile_and_moves_no_hbm_bytes(monkeypatch):
    inputs = _inputs()
    out, stats, exe, program = _run(inputs)
    assert program.memory["arena"] == "sbuf" and program.memory["scratch_bytes"] > 0
    compulsory = sum(t.nbytes for t in inputs) + out.nbytes
    # weights and x read once (the gate and up products share x's tiles: build.share_lhs), the output written once
    assert stats["hbm_bytes"] == compulsory
    # the arena is in the recorded SBUF peak: it is allocated from the launch's pool
    assert program.schedule["sbuf_peak"] >= -(-program.memory["scratch_bytes"] // 128)

    rows = breakdown.step_figures(exe, [t.to("neuron") for t in inputs], weights={1, 2, 3})
    hbm = sum(v for r in rows for c, v in {**r.reads, **{"w" + k: x for k, x in r.writes.items()}}.items()
              if c not in ("sbuf", "wsbuf"))
    onchip = sum(r.reads["sbuf"] + r.writes["sbuf"] for r in rows)
    assert hbm == stats["hbm_bytes"] and onchip > 0
    assert sum(r.reads["weight"] for r in rows) == sum(t.nbytes for t in inputs[1:])

    compiler.clear_cache()
    monkeypatch.setattr(memory, "arena_space", lambda nbytes: "hbm")
    in_hbm, hbm_stats, _, hbm_program = _run(inputs)
    assert hbm_program.memory["arena"] == "hbm"
    assert torch.equal(out.view(torch.int32), in_hbm.view(torch.int32))  # the same bits
    assert hbm_stats["hbm_bytes"] == stats["hbm_bytes"] + onchip  # the on-chip bytes went through HBM before
    _close_to_cpu(out, inputs)


def test_an_arena_over_its_budget_is_in_hbm():
    per_partition = memory.ARENA_SBUF_BYTES
    assert memory.arena_space(128 * per_partition) == "sbuf"
    assert memory.arena_space(128 * per_partition + 1) == "hbm"
    assert memory.arena_space(0) == "hbm"


def test_steps_that_overflow_sbuf_beside_the_arena_move_it_to_hbm(monkeypatch):
    """The arena's budget is checked by running the program: a program whose steps' tiles do not fit SBUF
    beside its arena is recorded, and runs, with the arena in HBM."""
    monkeypatch.setattr(memory, "ARENA_SBUF_BYTES", memory.PLATFORM.sbuf_bytes_per_partition)
    inputs = _inputs()
    original = executor.Executable.arena_tile

    def greedy(self, nc):  # an arena that leaves the steps almost nothing
        nc.sbuf_tile((128, memory.PLATFORM.sbuf_bytes_per_partition - 4096), np.uint8)
        return original(self, nc)

    monkeypatch.setattr(executor.Executable, "arena_tile", greedy)
    out, stats, _, program = _run(inputs)
    assert program.memory["arena"] == "hbm" and program.schedule is not None
    assert stats["hbm_bytes"] > sum(t.nbytes for t in inputs) + out.nbytes
    _close_to_cpu(out, inputs)


def test_a_gated_mlp_keeps_its_values_in_sbuf(monkeypatch):
    """The gate's evacuated blocks stay in SBUF for the up product's epilogue, which reads them in place
    (build.keep_products), and that epilogue's result is handed to the down product without a store
    (build.handoffs, ``store`` False): no byte crosses a step boundary by DMA. The same instructions compute
    every value, so the bits are those of the program that stores and reloads them."""
    from device_impl.compiler import build

    inputs = _inputs()
    out, stats, exe, program = _run(inputs, gated)
    kinds = [(s.get("keep"), s.get("kept"), s.get("handoff", {}).get("store")) for s in program.steps]
    assert any(k for k, _, _ in kinds) and any(k for _, k, _ in kinds) and any(h is False for _, _, h in kinds)
    assert stats["hbm_bytes"] == sum(t.nbytes for t in inputs) + out.nbytes
    rows = breakdown.step_figures(exe, [t.to("neuron") for t in inputs], weights={1, 2, 3})
    assert sum(r.reads["sbuf"] + r.writes["sbuf"] + r.reads["scratch"] + r.writes["scratch"] for r in rows) == 0

    compiler.clear_cache()
    monkeypatch.setattr(build, "keep_products", lambda steps, *args: steps)
    monkeypatch.setattr(build, "_read_elsewhere", lambda *args: True)
    stored, stored_stats, stored_exe, _ = _run(inputs, gated)
    assert torch.equal(out.view(torch.int32), stored.view(torch.int32))  # the same bits
    rows = breakdown.step_figures(stored_exe, [t.to("neuron") for t in inputs], weights={1, 2, 3})
    gate = 256 * 384 * 4
    # the gate stored and loaded back, silu(g) * u stored: what the kept program no longer moves
    assert sum(r.reads["sbuf"] + r.writes["sbuf"] for r in rows) == 3 * gate
    assert stats["device_ns"] < stored_stats["device_ns"]
    _close_to_cpu(out, inputs, gated)
