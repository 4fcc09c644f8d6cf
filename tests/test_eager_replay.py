"""Eager elementwise replay (device_impl/kernels/replay.py) changes the host cost of a launch and nothing else:
the same output bits and the same launch figures (device time, busy time per engine, HBM bytes, flops,
instructions, SBUF/PSUM peaks, device clock) as the instruction-level run, with the second launch of a
signature actually replayed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from device_impl import engine
from device_impl._core import C
from device_impl.engine import core
from device_impl.kernels import common, replay

DEV = "neuron"
_BITS = {torch.float32: torch.int32, torch.float64: torch.int64, torch.bfloat16: torch.int16,
         torch.float16: torch.int16, torch.bool: torch.uint8}


def _bits(t: torch.Tensor) -> torch.Tensor:
    host = t.detach().cpu().contiguous()
    return host.view(_BITS.get(host.dtype, host.dtype))


def _values(shape, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Values with the awkward cases a kernel must carry through: signed zeros, infinities, NaN, ties."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, generator=g).to(dtype)
    x = torch.randn(shape, generator=g) * 3
    flat = x.view(-1)
    specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 0.5, -2.5, 1e-40])
    flat[: min(flat.numel(), specials.numel())] = specials[: flat.numel()]
    return x.to(dtype)


class _Launches:
    """Every completed launch's figures (what core._close reports), in order, and the device clock's advance."""

    def __init__(self, monkeypatch) -> None:
        self.figures: list[tuple] = []
        original = core._close

        def spy(kernel, device, device_ns, busy, *rest):
            self.figures.append((kernel, device, device_ns, dict(busy), *rest[:-1]))  # all but the events
            return original(kernel, device, device_ns, busy, *rest)

        monkeypatch.setattr(core, "_close", spy)

    def run(self, fn):
        self.figures.clear()
        engine.reset_stats()
        clock = C.device_time_ns(0)
        result = fn()
        return result, list(self.figures), C.device_time_ns(0) - clock, engine.stats(), engine.last_launch()


def _outputs(result):
    return [result] if isinstance(result, torch.Tensor) else list(result)


def _check_same(fn, monkeypatch) -> None:
    """``fn`` (building its own inputs) with replay forced off, then twice with it on: identical bits and
    figures, and the second run replayed every launch."""
    launches = _Launches(monkeypatch)
    previous = replay.set_enabled(False)
    try:
        reference = launches.run(fn)
        replay.set_enabled(True)
        replay.reset()
        first = launches.run(fn)
        before = replay.stats()
        second = launches.run(fn)
        after = replay.stats()
    finally:
        replay.set_enabled(previous)
    n = len(reference[1])
    assert n > 0
    assert before["recorded"] == n and before["replayed"] == 0
    assert after["replayed"] - before["replayed"] == n, "the second run of each signature was not replayed"
    for run in (first, second):
        for got, want in zip(_outputs(run[0]), _outputs(reference[0])):
            assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
            assert torch.equal(_bits(got), _bits(want))
        assert run[1] == reference[1]  # per launch: kernel, device, device_ns, busy, hbm, flops, instructions, peaks
        assert run[2] == reference[2]  # device clock advance
        assert run[3] == reference[3]  # engine.stats()
        last, want = run[4], reference[4]
        assert (last.device_ns, last.busy_ns, last.hbm_bytes_read, last.hbm_bytes_written, last.flops,
                last.instructions, last.sbuf_peak_bytes, last.psum_peak_bytes) == \
            (want.device_ns, want.busy_ns, want.hbm_bytes_read, want.hbm_bytes_written, want.flops,
             want.instructions, want.sbuf_peak_bytes, want.psum_peak_bytes)


def _dev(shape, dtype, seed):
    return _values(shape, dtype, seed).to(DEV)


MULTI_TILE = 2049 * 128 + 3

CASES = {
    # unary
    "exp": lambda: torch.exp(_dev((1000,), torch.float32, 0)),
    "exp_bf16": lambda: torch.exp(_dev((300,), torch.bfloat16, 1)),
    "tanh_fp16": lambda: torch.tanh(_dev((257,), torch.float16, 2)),
    "relu": lambda: torch.relu(_dev((33, 65), torch.float32, 3)),
    "neg_int": lambda: torch.neg(_dev((100,), torch.int32, 4)),
    "abs_int64_sliced": lambda: torch.abs(_dev((40, 30), torch.int64, 5)[::2, 1::3]),
    "sigmoid_transposed": lambda: torch.sigmoid(_dev((64, 48), torch.float32, 6).t()),
    "rsqrt_bf16": lambda: torch.rsqrt(_dev((129,), torch.bfloat16, 7).abs()),
    "sqrt_int_promotes": lambda: torch.sqrt(_dev((50,), torch.int32, 8).abs()),
    "logical_not_bool": lambda: torch.logical_not(_dev((77,), torch.bool, 9)),
    # binary: layouts
    "add": lambda: torch.add(_dev((1024,), torch.float32, 10), _dev((1024,), torch.float32, 11)),
    "add_broadcast": lambda: _dev((64, 1), torch.float32, 12) + _dev((1, 128), torch.float32, 13),
    "mul_expanded": lambda: _dev((32, 40), torch.float32, 14) * _dev((40,), torch.float32, 15).expand(32, 40),
    "sub_transposed": lambda: _dev((40, 32), torch.float32, 16).t() - _dev((32, 40), torch.float32, 17),
    "div_sliced": lambda: _dev((50, 60), torch.float32, 18)[:, ::2] / _dev((50, 30), torch.float32, 19),
    "maximum_nan": lambda: torch.maximum(_dev((200,), torch.float32, 20), _dev((200,), torch.float32, 21)),
    # scalars and 0-d operands
    "add_scalar": lambda: _dev((100,), torch.float32, 22) + 2.5,
    "rmul_scalar": lambda: 3 * _dev((100,), torch.int64, 23),
    "mul_0d": lambda: _dev((100,), torch.bfloat16, 24) * _dev((), torch.float32, 25),
    "add_alpha_int": lambda: torch.add(_dev((90,), torch.int32, 26), _dev((90,), torch.int32, 27), alpha=3),
    "add_alpha_float": lambda: torch.add(_dev((90,), torch.float32, 28), _dev((90,), torch.float32, 29), alpha=0.3),
    "sub_alpha_bf16": lambda: torch.sub(_dev((300,), torch.bfloat16, 30), _dev((300,), torch.bfloat16, 31),
                                        alpha=1.5),
    "pow_scalar": lambda: torch.pow(_dev((100,), torch.float32, 32), 3),
    # dtypes and promotion with converts
    "add_fp16": lambda: _dev((300,), torch.float16, 33) + _dev((300,), torch.float16, 34),
    "add_int_float": lambda: _dev((100,), torch.int32, 35) + _dev((100,), torch.float32, 36),
    "mul_bf16_fp32": lambda: _dev((100,), torch.bfloat16, 37) * _dev((100,), torch.float32, 38),
    "add_uint8": lambda: _dev((100,), torch.uint8, 39) + _dev((100,), torch.uint8, 40),
    "and_bool": lambda: torch.logical_and(_dev((64,), torch.bool, 41), _dev((64,), torch.bool, 42)),
    "lt_mixed": lambda: _dev((64,), torch.int32, 43) < _dev((64,), torch.float16, 44),
    "floor_divide_int": lambda: torch.floor_divide(_dev((64,), torch.int32, 45), 7),
    # ternary and activations
    "where": lambda: torch.where(_dev((80,), torch.bool, 46), _dev((80,), torch.float32, 47),
                                 _dev((80,), torch.float32, 48)),
    "clamp": lambda: torch.clamp(_dev((80,), torch.float32, 49), -1.0, 0.5),
    "gelu": lambda: torch.nn.functional.gelu(_dev((80,), torch.float32, 50)),
    "lerp": lambda: torch.lerp(_dev((80,), torch.float32, 51), _dev((80,), torch.float32, 52), 0.3),
    # multi-tile
    "add_multi_tile": lambda: _dev((MULTI_TILE,), torch.float32, 53) + _dev((MULTI_TILE,), torch.float32, 54),
    "exp_multi_tile_bf16": lambda: torch.exp(_dev((MULTI_TILE,), torch.bfloat16, 55)),
}


def _out_variant():
    a, b = _dev((100,), torch.float32, 60), _dev((100,), torch.float32, 61)
    out = torch.empty(100, device=DEV)
    torch.mul(a, b, out=out)
    promoted = torch.empty(100, device=DEV, dtype=torch.int64)  # out= wider than the result: converted on store
    torch.add(_dev((100,), torch.int32, 62), 1, out=promoted)
    return out, promoted


def _in_place():
    a = _dev((100, 3), torch.float32, 63)
    a.add_(_dev((3,), torch.float32, 64))
    a.mul_(2.0)
    b = _dev((100,), torch.bfloat16, 65)
    b.sub_(_dev((100,), torch.float32, 66))  # in place with promotion to float32 computed, bf16 stored
    return a, b


CASES["out_variant"] = _out_variant
CASES["in_place"] = _in_place


@pytest.mark.parametrize("case", sorted(CASES))
def test_replayed_launches_match_the_instruction_level(case, monkeypatch):
    _check_same(CASES[case], monkeypatch)


def test_no_replay_while_a_trace_is_recorded():
    a, b = _dev((100,), torch.float32, 70), _dev((100,), torch.float32, 71)
    replay.reset()
    torch.add(a, b)
    with engine.record_trace() as trace:
        torch.add(a, b)
    assert replay.stats()["replayed"] == 0
    assert trace.reports and trace.reports[0].events, "a traced launch has every instruction's event"
    torch.add(a, b)
    assert replay.stats()["replayed"] == 1


def test_static_replay_switch_is_read_from_the_environment():
    from device_impl.runtime.config import static_replay

    assert static_replay({}) is True
    assert static_replay({"NEURON_STATIC_REPLAY": "0"}) is False


def test_a_replay_reads_unwritten_tiles_as_poison(monkeypatch):
    """A kernel that reads SBUF no instruction wrote gets NaN on both paths: the replay hides nothing."""

    def emit(nc, o, t):
        junk = nc.sbuf_tile(o.shape, np.float32)
        nc.vector.tensor_tensor(o, t, junk, "add")

    def run():
        out = torch.empty(64, device=DEV)
        return common.elementwise("poisoned", out, (_dev((64,), torch.float32, 72),), emit)

    _check_same(run, monkeypatch)
    assert torch.isnan(run().cpu()).all()


def test_an_emit_whose_instructions_depend_on_the_data_is_not_replayed(monkeypatch):
    """The replay's tally catches an emit that issues other instructions for other values: that launch reruns
    at the instruction level (its figures are then the right ones) and the signature is never replayed again."""

    def emit(nc, o, t):
        nc.vector.tensor_copy(o, t)
        if t.read()[0, 0] > 0:
            nc.vector.tensor_scalar(o, t, "multiply", 2.0)

    def run(first: float):
        x = torch.full((64,), first).to(DEV)
        return common.elementwise("data_dependent", torch.empty(64, device=DEV), (x,), emit)

    launches = _Launches(monkeypatch)
    replay.set_enabled(False)
    try:
        want = launches.run(lambda: run(-1.0))
    finally:
        replay.set_enabled(True)
    replay.reset()
    launches.run(lambda: run(1.0))  # recorded with two instructions
    got = launches.run(lambda: run(-1.0))  # one instruction: the replay's tally differs
    assert replay.stats()["refused"] == 1 and replay.stats()["replayed"] == 0
    assert got[1] == want[1] and torch.equal(got[0].cpu(), want[0].cpu())
    launches.run(lambda: run(1.0))
    assert replay.stats()["replayed"] == 0


def test_integer_division_by_zero_still_raises_when_replayed():
    x = _dev((64,), torch.int32, 73)
    replay.reset()
    torch.floor_divide(x, torch.full((64,), 3, dtype=torch.int32).to(DEV))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        torch.floor_divide(x, torch.zeros(64, dtype=torch.int32).to(DEV))
    assert replay.stats()["replayed"] == 0  # the replay raised: no launch completed


def test_the_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(replay._figures, "limit", 8)
    replay.reset()
    for n in range(1, 20):
        torch.exp(torch.ones(n, device=DEV))
    assert len(replay._figures) == 8


def test_an_emit_with_an_unhashable_closure_is_not_cached():
    table = np.arange(3)

    def emit(nc, o, t):
        assert table.size == 3
        nc.vector.tensor_copy(o, t)

    replay.reset()
    for _ in range(2):
        common.elementwise("unkeyed", torch.empty(8, device=DEV), (torch.ones(8).to(DEV),), emit)
    assert replay.stats() == {"replayed": 0, "recorded": 0, "instruction_level": 2, "refused": 0}


def test_the_profiler_sees_a_replayed_launch_as_the_instruction_level_one():
    from device_impl import profiler

    a, b = _dev((100,), torch.float32, 74), _dev((100,), torch.float32, 75)

    def profiled():
        with profiler.profile(instructions=False) as p:  # no trace recorded: launches may replay
            torch.mul(a, b)
        return [(x.kernel, x.device, x.device_ns, x.hbm_bytes, x.flops, x.instructions) for x in p.launches()]

    previous = replay.set_enabled(False)
    try:
        want = profiled()
    finally:
        replay.set_enabled(previous)
    replay.reset()
    profiled()
    assert profiled() == want and want
    assert replay.stats()["replayed"] == 1
