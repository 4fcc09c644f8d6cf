"""A replayed fused elementwise launch writes a step's result over the tile of an operand that dies there
(``chain.in_place``): where that is allowed, and that every run computes eager's bits, leaves its inputs
unchanged and reports its recording's figures.

Each case runs a program in eager, then three times in adaptive mode (recorded at the instruction level,
then replayed twice) and checks the in-place choices, per step: the index of the operand written over, or
None. A choice made where the operand is still read (later in the chain, or by the step's own later
instructions) would change the bits of the replays, which every case compares with eager's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from device_impl import eager
from device_impl.eager import programs
from device_impl.engine import core

NUMEL = 300_000  # several flat tiles of the widest width


@pytest.fixture
def adaptive():
    eager.flush()
    eager.reset_stats()
    eager.clear_cache()
    torch.neuron.set_eager_mode("adaptive")
    try:
        yield eager
    finally:
        torch.neuron.set_eager_mode("eager")
    assert eager.pending() == 0


def _host(shape, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().cpu()
    return t.view({2: torch.int16, 4: torch.int32}[t.element_size()]) if t.dtype.is_floating_point else t


def _outs(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _figures(report) -> tuple:
    return (report.kernel, report.device_ns, report.busy_ns, report.hbm_bytes_read, report.hbm_bytes_written,
            report.flops, report.instructions, report.sbuf_peak_bytes)


def _replayed(program, *inputs: torch.Tensor, runs: int = 3) -> tuple:
    """Run ``program`` on the device in eager, then ``runs`` times in adaptive mode: each run's outputs have
    eager's bits, its inputs keep theirs, the runs after the first are replays reporting the first's figures.
    Returns the recording's in-place choices."""
    args = [t.to("neuron") for t in inputs]
    held = [_bits(a) for a in args]
    with torch.neuron.eager_mode("eager"):
        expected = [_bits(o) for o in _outs(program(*args))]
    reports = []
    for run in range(runs):
        outs = _outs(program(*args))
        torch.neuron.synchronize()
        reports.append(_figures(core.last_launch()))
        for i, (o, e) in enumerate(zip(outs, expected)):
            assert torch.equal(_bits(o), e), f"run {run}: output {i} differs from eager"
        for i, (a, h) in enumerate(zip(args, held)):
            assert torch.equal(_bits(a), h), f"run {run}: input {i} changed"
    stats = eager.stats()
    assert stats["fused_groups"] == runs and stats["programs_replayed"] == runs - 1, stats
    assert reports[0][0].startswith("fused[") and all(r == reports[0] for r in reports)
    ((_, over),) = programs._FIGURES.values()
    return over


def test_each_step_of_a_chain_writes_over_the_tile_that_dies(adaptive):
    """x's tile takes x * 1.5, that tile takes the subtraction, and so on; y * y reads one dying tile twice."""
    def program(x):
        y = torch.tanh(x * 1.5 - 0.25)
        return torch.sigmoid(y * y)

    assert _replayed(program, _host((NUMEL,))) == (0, 0, 0, 0, 0)


def test_an_intermediate_read_again_later_keeps_its_tile(adaptive):
    """y is read by the add and again by the last multiply: the add gets a tile of its own."""
    def program(x):
        y = x * 2
        a = torch.tanh(y + 1)
        return a * y

    assert _replayed(program, _host((NUMEL,))) == (0, None, 0, 0)


def test_an_input_read_again_later_keeps_its_tile_and_its_bits(adaptive):
    """x is read by both steps: the first writes a tile of its own; the second may take either dying tile.
    x itself, on the device, is never written (its tile is a copy)."""
    def program(x):
        y = torch.tanh(x * 2)
        return y + x

    assert _replayed(program, _host((NUMEL,))) == (None, 0, 0)


def test_a_broadcast_operand_s_tile_holds_its_broadcast_values(adaptive):
    """b, broadcast over x's rows, is loaded as the output's elements (a whole tile of them): writing b * x
    over that tile writes no element another reads."""
    def program(x, b):
        return torch.tanh(b * x + 1)

    assert _replayed(program, _host((700, 600)), _host((600,), seed=1)) == (0, 0, 0)


def test_a_broadcast_operand_read_again_keeps_its_tile(adaptive):
    def program(x, b):
        return torch.tanh(b * x) - b

    assert _replayed(program, _host((700, 600)), _host((600,), seed=1)) == (1, 0, 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_float_chains_and_a_promoting_step(adaptive, dtype):
    """Steps in bfloat16 (computed in fp32, rounded into the tile) write over their operand's tile; the add
    of a reduced-float and a float32 tensor converts the first (the emit reads the converted copy) and its
    float32 result may only take the float32 operand's tile."""
    def program(x, y):
        return (torch.tanh(x * 2) + y) * 3

    over = _replayed(program, _host((NUMEL,), dtype=dtype), _host((NUMEL,), seed=1))
    assert over == (0, 0, 1, 0)


def test_a_converted_operand_s_tile_is_not_the_one_the_emit_reads(adaptive):
    """The add of x (bfloat16, converted to float32 for the emit) and y, into a bfloat16 z: x's tile has z's
    dtype but the emit reads x's float32 copy, a scratch tile released after the step; z keeps its own."""
    def program(x, y):
        z = torch.empty_like(x)
        torch.add(x, y, out=z)
        return torch.tanh(z) * 3

    assert _replayed(program, _host((NUMEL,), dtype=torch.bfloat16), _host((NUMEL,), seed=1)) == (None, 0, 0)


def test_a_float32_result_never_takes_a_reduced_float_tile(adaptive):
    def program(x):
        return torch.tanh(x.float() * 2)  # the copy converts: a step of its own, into a float32 tile

    over = _replayed(program, _host((NUMEL,), dtype=torch.bfloat16))
    assert over[0] is None and over[1:] == (0, 0)


def test_a_step_of_several_instructions_gets_a_tile_of_its_own(adaptive):
    """leaky_relu's emit issues three instructions (a multiply, a compare, a select): never written in place."""
    def program(x):
        return F.leaky_relu(x * 2, 0.1) + 1

    assert _replayed(program, _host((NUMEL,))) == (0, None, 0)


def test_a_step_that_issues_other_instructions_in_place_runs_again(adaptive):
    """Should a step written over its operand issue other than one instruction in a replay (its instructions
    depending on the data), the replay stops (chain.Diverged) and the launch runs at the instruction level:
    eager's bits, the recording's figures, and that key is not replayed again. Forced here by a recording
    that claims leaky_relu's three instructions were one."""
    def program(x):
        return F.leaky_relu(x * 2, 0.1) + 1

    x = _host((NUMEL,)).to("neuron")
    with torch.neuron.eager_mode("eager"):
        expected = _bits(program(x))
    out = program(x)
    torch.neuron.synchronize()
    recorded = _figures(core.last_launch())
    ((key, (figures, over)),) = programs._FIGURES.items()
    assert over == (0, None, 0)
    programs._FIGURES[key] = (figures, (0, 0, 0))
    for run in range(2):
        out = program(x)
        torch.neuron.synchronize()
        assert torch.equal(_bits(out), expected), run
        assert _figures(core.last_launch()) == recorded
    assert eager.stats()["programs_replayed"] == 0 and key in programs._REFUSED


def test_a_diverged_replay_that_wrote_what_it_loads_is_not_rerun(adaptive):
    """A replay stopped after storing into a tensor the launch loads (here x, updated in place) cannot run
    again from HBM: it raises, naming the way out, instead of computing from the half-updated x."""
    def program(x):
        x.mul_(2)
        x.add_(1)
        return F.leaky_relu(x, 0.1)

    x = _host((NUMEL,)).to("neuron")
    program(x)
    torch.neuron.synchronize()
    ((key, (figures, over)),) = programs._FIGURES.items()
    assert over == (0, 0, None)
    programs._FIGURES[key] = (figures, (0, 0, 0))
    with pytest.raises(RuntimeError, match="cannot be rerun.*NEURON_STATIC_REPLAY=0"):
        program(x)
        torch.neuron.synchronize()
