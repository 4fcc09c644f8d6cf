"""A replayed fused elementwise launch writes a step's result over the tile of an operand that dies there
(``chain.in_place``): where that is allowed, and that every run computes eager's bits, leaves its inputs
unchanged and reports its recording's figures.

Each case runs a program in eager, then three times in adaptive mode (recorded at the instruction level,
then replayed twice) and checks the in-place choices, per step: the index of the operand written over, or
None. A choice made where the operand is still read (later in the chain, or by the step's own later
instructions) would change the bits of the replays, which every case compares with eager's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from device_impl import eager
from device_impl.eager import programs
from device_impl.engine import core

NUMEL = 300_000  # several flat tiles of the widest width


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
    ((_, reuse),) = programs._FIGURES.values()
    return reuse.over, _reads(reuse)


def _reads(reuse) -> tuple:
    """Per step, the operands read straight from their HBM views."""
    return tuple(tuple(i for i, read in enumerate(reads) if read) for reads in reuse.direct)


def test_each_step_of_a_chain_writes_over_the_tile_that_dies(adaptive):
    """x * 1.5 reads x from HBM into a tile of its own; that tile takes the subtraction, and so on; y * y reads
    one dying tile twice."""
    def program(x):
        y = torch.tanh(x * 1.5 - 0.25)
        return torch.sigmoid(y * y)

    assert _replayed(program, _host((NUMEL,))) == ((None, 0, 0, 0, 0), ((0,), (), (), (), ()))


def _stores_copied(monkeypatch, program, *inputs: torch.Tensor) -> list[tuple[int, int]]:
    """Per adaptive run of ``_replayed(program, *inputs)``: how many result tiles its launch copied to HBM
    (``flat_out``, a replay's stores) and over how many tile regions (``run_region`` calls)."""
    from device_impl.eager import chain as chains

    copied, regions = [0], [0]
    real_out, real_region = chains.flat_out, chains.run_region

    def counting_out(*args):
        copied[0] += 1
        return real_out(*args)

    def counting_region(*args, **kwargs):
        regions[0] += 1
        return real_region(*args, **kwargs)

    monkeypatch.setattr(chains, "flat_out", counting_out)
    monkeypatch.setattr(chains, "run_region", counting_region)
    counts = []
    module = __import__(__name__)
    original = module._outs

    def outs(value):  # called once per run by _replayed, after the program queued its launch
        torch.neuron.synchronize()
        counts.append((copied[0], regions[0]))
        copied[0] = regions[0] = 0
        return original(value)

    monkeypatch.setattr(module, "_outs", outs)
    _replayed(program, *inputs)
    return counts[1:]  # the first call is eager mode's


def test_a_stored_result_read_by_nothing_else_is_written_by_its_instruction(adaptive, monkeypatch):
    """The chain's last result is only stored: in a replay its one instruction writes it straight into the
    output's HBM view, so no result tile is copied (the recording, at the instruction level, stores by DMA); a
    result also read later by the chain keeps its tile and is copied out, once per region. Bits, inputs and
    figures are checked by _replayed."""
    def last_only(x):
        return torch.sigmoid(torch.tanh(x * 1.5 - 0.25))

    (_, recorded), *replays = _stores_copied(monkeypatch, last_only, _host((NUMEL,)))
    assert recorded > 1 and replays == [(0, recorded)] * 2

    def kept(x):
        y = torch.tanh(x * 2)  # returned, and read again by the last step
        return y, torch.sigmoid(y + 1)

    eager.reset_stats()
    programs.clear_cache()
    (_, recorded), *replays = _stores_copied(monkeypatch, kept, _host((NUMEL,)))
    assert recorded > 1 and replays == [(recorded, recorded)] * 2


def test_an_intermediate_read_again_later_keeps_its_tile(adaptive):
    """y is read by the add and again by the last multiply: the add gets a tile of its own."""
    def program(x):
        y = x * 2
        a = torch.tanh(y + 1)
        return a * y

    assert _replayed(program, _host((NUMEL,))) == ((None, None, 0, 0), ((0,), (), (), ()))


def test_an_input_read_again_later_keeps_its_tile_and_its_bits(adaptive):
    """x is read by the first and the last step: it is loaded (a copy) and kept; the first step writes a tile of
    its own, the last may take either dying tile. x itself, on the device, is never written."""
    def program(x):
        y = torch.tanh(x * 2)
        return y + x

    assert _replayed(program, _host((NUMEL,))) == ((None, 0, 0), ((), (), ()))


def test_a_broadcast_operand_s_tile_holds_its_broadcast_values(adaptive):
    """b, broadcast over x's rows, is loaded as the output's elements (a whole tile of them): b * x may be
    written over that tile, and reads x from HBM; a broadcast view is never read in place of its tile."""
    def program(x, b):
        return torch.tanh(b * x + 1)

    assert _replayed(program, _host((700, 600)), _host((600,), seed=1)) == ((0, 0, 0), ((1,), (), ()))


def test_a_broadcast_operand_read_again_keeps_its_tile(adaptive):
    def program(x, b):
        return torch.tanh(b * x) - b

    assert _replayed(program, _host((700, 600)), _host((600,), seed=1)) == ((None, 0, 0), ((1,), (), ()))


def test_a_strided_input_is_loaded_and_its_tile_written_over(adaptive):
    """x[:, ::2] is not one run of memory: it is loaded (a copy), which the multiply may write over."""
    def program(x):
        return torch.tanh(x[:, ::2] * 2)

    assert _replayed(program, _host((700, 1200))) == ((0, 0), ((), ()))


def test_an_input_updated_in_place_is_read_before_it_is_stored(adaptive):
    """x.mul_(2) reads x from HBM and stores into it, region by region: each region is read before its store,
    as its load would have been; the replays compute eager's bits from eager's x."""
    def program(x):
        x.mul_(2)
        return torch.tanh(x.add_(1))

    start = _host((NUMEL,))
    x = start.to("neuron")
    with torch.neuron.eager_mode("eager"):
        program(x)
    outs = []
    for run in range(4):  # eager, then recorded and replayed twice
        x = start.to("neuron")
        with torch.neuron.eager_mode("eager" if run == 0 else "adaptive"):
            y = program(x)
            torch.neuron.synchronize()
        outs.append((_bits(x), _bits(y)))
    assert all(torch.equal(a, b) for o in outs[1:] for a, b in zip(o, outs[0]))
    assert eager.stats()["programs_replayed"] == 2
    ((_, reuse),) = programs._FIGURES.values()
    assert reuse.over == (None, 0, 0) and _reads(reuse) == ((0,), (), ())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_float_chains_and_a_promoting_step(adaptive, dtype):
    """Steps in a reduced float (computed in fp32, rounded into the tile) write over their operand's tile; the
    add of that tile and a float32 y, a float32 result, may not take the reduced-float tile, and reads y from
    HBM."""
    def program(x, y):
        return (torch.tanh(x * 2) + y) * 3

    reuse = _replayed(program, _host((NUMEL,), dtype=dtype), _host((NUMEL,), seed=1))
    assert reuse == ((None, 0, None, 0), ((0,), (), (1,), ()))


def test_a_converted_operand_s_tile_is_not_the_one_the_emit_reads(adaptive):
    """The add of x (bfloat16, converted to float32 for the emit) and y, into a bfloat16 z: x's tile has z's
    dtype but the emit reads x's float32 copy, a scratch tile released after the step; z keeps its own."""
    def program(x, y):
        x = x[:, ::2]  # loaded (not one run of memory), not read in place
        z = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        torch.add(x, y, out=z)
        return torch.tanh(z) * 3

    x, y = _host((700, 1200), dtype=torch.bfloat16), _host((700, 600), seed=1)
    assert _replayed(program, x, y) == ((None, 0, 0), ((1,), (), ()))


def test_a_float32_result_never_takes_a_reduced_float_tile(adaptive):
    def program(x):
        # the copy converts: a step of its own, into a float32 tile; x is loaded (not one run of memory)
        return torch.tanh(x[:, ::2].float() * 2)

    assert _replayed(program, _host((700, 1200), dtype=torch.bfloat16)) == ((None, 0, 0), ((), (), ()))


def test_a_step_of_several_instructions_gets_tiles_of_its_own(adaptive):
    """leaky_relu's emit issues three instructions (a multiply, a compare, a select): never written in place,
    and its input, when loaded, is a copy."""
    def program(x):
        return F.leaky_relu(x * 2, 0.1) + 1

    assert _replayed(program, _host((NUMEL,))) == ((None, None, 0), ((0,), (), ()))
    eager.clear_cache()
    eager.reset_stats()
    assert _replayed(lambda x: F.leaky_relu(x, 0.1) + 1, _host((NUMEL,))) == ((None, 0), ((), ()))


def test_a_step_that_issues_other_instructions_in_place_runs_again(adaptive):
    """Should a step given in_place's choices issue other than one instruction in a replay (its instructions
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
    ((key, (figures, reuse)),) = programs._FIGURES.items()
    assert reuse.over == (None, None, 0)
    programs._FIGURES[key] = (figures, reuse._replace(over=(None, 0, 0)))
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
    ((key, (figures, reuse)),) = programs._FIGURES.items()
    assert reuse.over == (None, 0, None)
    programs._FIGURES[key] = (figures, reuse._replace(over=(None, 0, 0)))
    with pytest.raises(RuntimeError, match="cannot be rerun.*NEURON_STATIC_REPLAY=0"):
        program(x)
        torch.neuron.synchronize()


def test_an_hbm_view_read_in_place_of_a_tile_is_read_only():
    """A tile over HBM (in_place's direct reads) cannot be written: an instruction writing it would raise, not
    change the user's tensor."""
    from device_impl.eager import chain as chains

    memory = np.arange(12, dtype=np.float32).reshape(3, 4)
    tile = chains._borrowed(memory, 2, 10, 2, 4)
    assert np.shares_memory(tile.data, memory) and tile.read().tolist() == [[2, 3, 4, 5], [6, 7, 8, 9]]
    with pytest.raises(ValueError, match="read-only"):
        tile.write_target()[...] = 0
    assert memory.reshape(-1).tolist() == list(range(12))
