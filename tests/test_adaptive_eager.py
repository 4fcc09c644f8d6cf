"""Adaptive eager: switching modes, every point where queued work must run, and the statistics.

Each flush-trigger test first checks that work is waiting (``pending()``), then
performs the trigger and checks that the queue ran (empty, the flush counted
under its reason) and that the data is what eager computes.
"""

from __future__ import annotations

import gc
import warnings

import pytest
import torch

from device_impl import eager
from device_impl.dispatch.table import HOOKS
from support import run_python


@pytest.fixture
def adaptive(adaptive):
    """tests/conftest.py's adaptive mode, and the queue limits these tests change put back before it ends."""
    try:
        yield adaptive
    finally:
        eager.set_limits(max_ops=eager.queue.DEFAULT_MAX_OPS, max_bytes=eager.queue.DEFAULT_MAX_BYTES)


def _host(n: int = 1000, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def _x(n: int = 1000, seed: int = 0) -> torch.Tensor:
    return _host(n, seed).to("neuron")


def _eager(fn, *args):
    """``fn(*args)`` run by plain eager on the device, on the host (what adaptive must reproduce bit for bit)."""
    with torch.neuron.eager_mode("eager"):
        return fn(*args).cpu()


def _flushed(reason: str) -> int:
    return eager.stats()["flushes"].get(reason, 0)


# --- mode switches ---------------------------------------------------------------------------------

def test_set_and_get_eager_mode_plug_and_unplug_the_queue():
    assert torch.neuron.get_eager_mode() == "eager"
    assert HOOKS.submit is None and HOOKS.barrier is None
    x = _x()
    torch.neuron.set_eager_mode("adaptive")
    try:
        assert torch.neuron.get_eager_mode() == "adaptive"
        assert HOOKS.submit is not None and HOOKS.barrier is not None
        y = x + 1
        assert eager.pending() == 1
    finally:
        torch.neuron.set_eager_mode("eager")
    # Switching back ran the queue, then unplugged every hook: eager runs exactly its own code again.
    assert eager.pending() == 0
    assert HOOKS.submit is None and HOOKS.barrier is None
    z = x + 2
    assert eager.pending() == 0
    assert torch.equal(y.cpu(), x.cpu() + 1) and torch.equal(z.cpu(), x.cpu() + 2)


def test_context_manager_restores_the_previous_mode_and_flushes():
    x = _x()
    with torch.neuron.eager_mode("adaptive"):
        y = x * 3
        assert eager.pending() == 1 and torch.neuron.get_eager_mode() == "adaptive"
        with torch.neuron.eager_mode("eager"):  # nesting: the inner switch runs the queue first
            assert eager.pending() == 0 and torch.neuron.get_eager_mode() == "eager"
        assert torch.neuron.get_eager_mode() == "adaptive"
        z = y - 1
        assert eager.pending() == 1
    assert torch.neuron.get_eager_mode() == "eager" and eager.pending() == 0
    assert torch.equal(z.cpu(), x.cpu() * 3 - 1)


def test_context_manager_restores_the_mode_when_the_block_raises():
    with pytest.raises(KeyError):
        with torch.neuron.eager_mode("adaptive"):
            _ = _x() + 1
            raise KeyError("user error")
    assert torch.neuron.get_eager_mode() == "eager" and eager.pending() == 0


@pytest.mark.parametrize("bad", ["fast", "Adaptive", "", "compiled"])
def test_invalid_mode_names_raise_value_error(bad):
    with pytest.raises(ValueError, match="unknown eager mode"):
        torch.neuron.set_eager_mode(bad)
    with pytest.raises(ValueError, match="unknown eager mode"):
        with torch.neuron.eager_mode(bad):
            pass
    assert torch.neuron.get_eager_mode() == "eager"


def test_environment_variable_starts_in_adaptive_mode():
    result = run_python(
        "import torch, device_impl\n"
        "from device_impl import eager\n"
        "x = torch.arange(6.0).to('neuron')\n"
        "y = x * 2 + 1\n"
        "print(torch.neuron.get_eager_mode(), eager.pending(), y.cpu().tolist(), eager.pending())\n",
        NEURON_EAGER_MODE="adaptive")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "adaptive 2 [1.0, 3.0, 5.0, 7.0, 9.0, 11.0] 0"


def test_environment_variable_rejects_unknown_modes():
    result = run_python("import torch, device_impl\n", NEURON_EAGER_MODE="lazy")
    assert result.returncode != 0
    assert "ValueError" in result.stderr and "NEURON_EAGER_MODE='lazy'" in result.stderr


# --- flush triggers --------------------------------------------------------------------------------

def test_copy_to_host_flushes(adaptive):
    x = _x()
    y = torch.exp(x) + 1
    assert eager.pending() == 2
    host = y.cpu()
    assert eager.pending() == 0 and _flushed("copy") == 1
    assert torch.equal(host, _eager(lambda t: torch.exp(t) + 1, x))


def test_item_flushes(adaptive):
    x = _x()
    y = x * 2
    assert eager.pending() == 1
    value = y[7].item()
    assert eager.pending() == 0 and _flushed("item") == 1
    assert value == (x.cpu() * 2)[7].item()


def test_printing_flushes(adaptive):
    x = torch.tensor([1.5, -2.0, 3.25]).to("neuron")
    y = x * 2
    assert eager.pending() == 1
    text = repr(y)
    assert eager.pending() == 0 and eager.stats()["flushes_total"] >= 1
    assert "3.0000" in text and "-4.0000" in text and "6.5000" in text and "device='neuron:0'" in text


def test_synchronize_flushes(adaptive):
    x = _x()
    y = torch.sigmoid(x)
    assert eager.pending() == 1
    torch.neuron.synchronize()
    assert eager.pending() == 0 and _flushed("synchronize") == 1
    assert torch.equal(y.cpu(), _eager(torch.sigmoid, x))


_WAITS = {
    "event.record": lambda s, e: e.record(),
    "event.synchronize": lambda s, e: e.synchronize(),
    "event.query": lambda s, e: e.query(),
    "event.wait": lambda s, e: e.wait(s),
    "stream.synchronize": lambda s, e: s.synchronize(),
    "stream.query": lambda s, e: s.query(),
    "stream.wait_event": lambda s, e: s.wait_event(e),
    "stream.wait_stream": lambda s, e: s.wait_stream(torch.neuron.current_stream()),
    "stream.record_event": lambda s, e: s.record_event(),
    "current_stream.synchronize": lambda s, e: torch.neuron.current_stream().synchronize(),
    "with stream": lambda s, e: s.__enter__(),
    "torch.neuron.stream": lambda s, e: torch.neuron.stream(s).__enter__(),
    "torch.neuron.set_stream": lambda s, e: torch.neuron.set_stream(s),
}


@pytest.mark.parametrize("wait", sorted(_WAITS))
def test_stream_and_event_waits_flush(adaptive, wait):
    s, e = torch.neuron.Stream(), torch.neuron.Event()
    e.record()
    x = _x()
    y = x + 5
    assert eager.pending() == 1
    try:
        _WAITS[wait](s, e)
        assert eager.pending() == 0
    finally:
        torch.accelerator.set_stream(torch.neuron.default_stream())
    assert torch.equal(y.cpu(), x.cpu() + 5)


def test_event_timestamps_include_queued_work(adaptive):
    x = _x(1 << 18)
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    start.record()
    y = torch.tanh(x * 3)
    end.record()  # the queued work ran before the timestamp was taken
    end.synchronize()
    assert start.elapsed_time(end) > 0
    again = torch.neuron.Event(enable_timing=True)
    again.record()
    assert end.elapsed_time(again) == 0
    assert torch.equal(y.cpu(), _eager(lambda t: torch.tanh(t * 3), x))


def test_cpu_fallback_op_flushes_only_when_it_reads_queued_memory(adaptive):
    x, other = _x(), _x(seed=1)
    y = x * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        unrelated = torch.median(other)  # CPU fallback on memory no queued op touches: the queue waits on
        assert eager.pending() == 1 and _flushed("fallback") == 0
        med = torch.median(y)  # reads y: the queue runs first
    assert eager.pending() == 0 and _flushed("fallback") == 1
    assert med.item() == torch.median(x.cpu() * 2).item()
    assert unrelated.item() == torch.median(other.cpu()).item()


def test_op_the_fuser_cannot_take_flushes_what_it_depends_on(adaptive):
    x, other = _x(), _x(seed=2)
    y = x + 1
    independent = torch.cumsum(other, 0)  # a scan: runs at the call, but reads nothing queued
    assert eager.pending() == 1 and _flushed("unqueueable") == 0
    z = torch.cumsum(y, 0)  # reads the queued y: flush, then run
    assert eager.pending() == 0 and _flushed("unqueueable") == 1
    assert torch.equal(z.cpu(), _eager(lambda t: torch.cumsum(t + 1, 0), x))
    assert torch.equal(independent.cpu(), _eager(lambda t: torch.cumsum(t, 0), other))


def test_an_op_writing_memory_a_queued_op_reads_flushes_first(adaptive):
    x = _x()
    y = x * 2  # queued: reads x
    x.index_fill_(0, torch.tensor([0, 1], device="neuron"), 100.0)  # not queueable: must not run before y
    assert eager.pending() == 0 and _flushed("unqueueable") == 1
    assert torch.equal(y.cpu(), _host() * 2)
    assert x.cpu()[:2].tolist() == [100.0, 100.0]


def test_queue_length_limit_flushes(adaptive):
    eager.set_limits(max_ops=3)
    x = _x()
    a = x + 1
    b = a * 2
    assert eager.pending() == 2
    c = b - 3  # the third step reaches the limit
    assert eager.pending() == 0 and _flushed("op_limit") == 1
    d = c * c
    assert eager.pending() == 1
    assert torch.equal(d.cpu(), ((x.cpu() + 1) * 2 - 3) ** 2)


def test_byte_limit_flushes(adaptive):
    x = _x(1 << 16)  # 256 KiB of fp32 per output
    eager.set_limits(max_bytes=600 * 1024)
    a = x + 1
    b = a * 2
    assert eager.pending() == 2 and _flushed("byte_limit") == 0
    c = b + a  # 768 KiB of outputs waiting
    assert eager.pending() == 0 and _flushed("byte_limit") == 1
    assert torch.equal(c.cpu(), (x.cpu() + 1) * 2 + (x.cpu() + 1))


def test_limits_must_be_positive():
    with pytest.raises(ValueError, match="max_ops"):
        eager.set_limits(max_ops=0)
    with pytest.raises(ValueError, match="max_bytes"):
        eager.set_limits(max_bytes=0)


def test_dropped_intermediates_are_not_stored_and_their_memory_returns(adaptive):
    x = _x(1 << 14)
    torch.neuron.synchronize()
    gc.collect()  # garbage of earlier tests must not be freed mid-test
    baseline = torch.neuron.memory_allocated()
    t = x + 1
    u = t * 2
    del t  # the last user of a queued result is gone before the data was needed
    v = u - x
    kept = u  # noqa: F841 (u stays observable)
    del u
    assert eager.pending() == 3
    host = v.cpu()
    stats = eager.stats()
    assert stats["stores_elided"] == 1  # t: nobody could ever read it; u is still held by `kept`
    assert torch.equal(host, (x.cpu() + 1) * 2 - x.cpu())
    assert torch.equal(kept.cpu(), (x.cpu() + 1) * 2)
    del v, kept, host
    assert torch.neuron.memory_allocated() == baseline


def test_an_input_dropped_by_the_user_stays_alive_until_its_op_runs(adaptive):
    x = _x()
    expected = x.cpu() * 4
    y = x * 4
    del x
    assert torch.equal(y.cpu(), expected)


# --- statistics ------------------------------------------------------------------------------------

def _program(x: torch.Tensor) -> torch.Tensor:
    y = (x + 1) * 2
    return torch.relu(y) - x


def test_stats_count_a_known_program_exactly(adaptive):
    x = _x(4096)
    out = _program(x)
    out.cpu()
    first = eager.stats()
    assert {k: first[k] for k in ("ops_queued", "steps", "ops_run_eagerly", "groups", "fused_groups", "fused_ops",
                                  "programs_cached", "cache_hits", "stores_elided", "errors")} == {
        "ops_queued": 4, "steps": 4, "ops_run_eagerly": 0, "groups": 1, "fused_groups": 1, "fused_ops": 4,
        "programs_cached": 1, "cache_hits": 0, "stores_elided": 3, "errors": 0}
    assert first["flushes"] == {"copy": 1} and first["flushes_total"] == 1
    # The same program on new tensors of the same shapes reuses the cached program.
    again = _program(_x(4096, seed=3))
    torch.neuron.synchronize()
    second = eager.stats()
    assert second["programs_cached"] == 1 and second["cache_hits"] == 1 and second["groups"] == 2
    assert second["flushes"] == {"copy": 1, "synchronize": 1}
    # Another shape is another program.
    _program(_x(100)).cpu()
    third = eager.stats()
    assert third["programs_cached"] == 2 and third["cache_hits"] == 1
    assert torch.equal(out.cpu(), _program_cpu(x.cpu())) and again.shape == (4096,)
    eager.reset_stats()
    assert eager.stats()["ops_queued"] == 0 and eager.stats()["flushes"] == {}


def _program_cpu(x: torch.Tensor) -> torch.Tensor:
    y = (x + 1) * 2
    return torch.relu(y) - x


def test_a_single_queued_op_runs_as_its_own_launch(adaptive):
    x = _x()
    y = torch.neg(x)
    y.cpu()
    stats = eager.stats()
    assert stats["groups"] == 1 and stats["fused_groups"] == 0 and stats["programs_cached"] == 0
    assert torch.equal(y.cpu(), -x.cpu())


# --- what ran before in the process -------------------------------------------------------------------

def _decoder_call():
    """A small harness.models.DecoderBlock forward on the device, as a recurring workload (one call per use)."""
    from harness.models import DecoderBlock

    torch.manual_seed(0)
    block = DecoderBlock(hidden=64, heads=4, kv_heads=2, seq=32, intermediate=128).to("neuron").eval()
    x = _host(2 * 32 * 64).reshape(2, 32, 64).to("neuron")

    def call() -> torch.Tensor:
        with torch.no_grad():
            out = block(x)
        torch.neuron.synchronize()
        return out

    return call


# Calls before a recurring call's path is settled: the first records its launches; each flush learns whether
# the call heading it ran alone (queue._ALONE), and once it runs at the call the next one heads the flush, so
# the small decoder's ten such calls are learnt over its first five calls.
WARM_CALLS = 8


def _recurring_path(call) -> dict:
    """What one recurring call does: adaptive's counters and the engine launches by name (the path it takes)."""
    from device_impl.engine import core

    for _ in range(WARM_CALLS):
        call()
    eager.reset_stats()
    core.reset_stats()
    call()
    launches = {name: entry["launches"] for name, entry in core.stats().items()}
    return {"stats": eager.stats(), "launches": launches}


def test_a_recurring_call_takes_the_same_path_whatever_ran_before(adaptive):
    """Issue 21: the decoder's adaptive/eager ratio looked worse after the chain and MLP cases of
    benches/adaptive_ratio.py. Whatever ran before, a recurring call takes the same path: the same launches,
    replays, flushes and cache hits (its ratio's swings were the shared machine's load, which the benchmark
    now meets with alternating repeats)."""
    alone = _recurring_path(_decoder_call())
    eager.clear_cache()
    chain_x = _x(1 << 16)
    w = _host(64 * 256).reshape(64, 256).to("neuron")
    for _ in range(3):  # an elementwise chain and a GELU MLP first, as the benchmark's earlier cases
        y = chain_x
        for _ in range(5):
            y = torch.sigmoid(torch.tanh(y - 0.5) * 1.5 + 0.25)
        torch.nn.functional.gelu(_x(32 * 64).reshape(32, 64) @ w) @ w.t()
        torch.neuron.synchronize()
    after = _recurring_path(_decoder_call())
    assert after == alone
    assert alone["stats"]["programs_replayed"] > 0 and alone["stats"]["cache_hits"] > 0


def test_recurring_calls_grow_nothing_the_device_keeps(adaptive):
    """Every cache adaptive eager keeps (programs, flush plans, recorded launches, refusals, layouts, which calls
    run alone, eager replay's signatures) is as large after more recurring calls as after the first few."""
    from device_impl.eager import programs, queue
    from device_impl.kernels import replay

    def sizes() -> dict[str, int]:
        kept = {name: len(getattr(programs, name)) for name in
                ("_CACHE", "_LAUNCHES", "_FLUSHES", "_FIGURES", "_REFUSED", "_LAYOUTS")}
        kept["_ALONE"] = len(queue._ALONE)
        kept["replay"] = len(replay._figures) + len(replay._refused)
        return kept

    call = _decoder_call()
    for _ in range(WARM_CALLS):
        call()
    before = sizes()
    for _ in range(5):
        call()
    assert sizes() == before


def test_a_kernel_launching_on_its_own_runs_after_the_queued_work_it_reads(adaptive):
    """A compute in a queueable module that opens a launch itself instead of ``common.elementwise``'s (linalg_cross's
    GpSimd program) cannot wait in the queue: capturing it ran it at the call, before the queued product it reads
    had run, and read zeros. Its launch is refused while captured (``capture._RefuseLaunch``), so it runs after a
    barrier: CPU's values, and the queued op before it ran first."""
    from device_impl.eager.stats import STATS

    torch.manual_seed(0)
    a, b = torch.randn(8, 3), torch.randn(8, 3)
    na, nb = a.to("neuron"), b.to("neuron")
    eagerly = STATS.ops_run_eagerly
    out = torch.linalg.cross(na * 2, nb) * 3
    torch.neuron.synchronize()
    assert STATS.ops_run_eagerly == eagerly + 1
    assert torch.equal(out.cpu(), torch.linalg.cross(a * 2, b) * 3)
    moved = torch.linalg.cross(na.clone(), nb, dim=1)
    torch.neuron.synchronize()
    assert torch.equal(moved.cpu(), torch.linalg.cross(a, b, dim=1))
