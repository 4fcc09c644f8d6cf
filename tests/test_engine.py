"""The NeuronCore simulator: hardware rules, numerics, cost model, timeline and trace."""

import json
import weakref

import ml_dtypes
import numpy as np
import pytest
import torch

from support import run_python
from device_impl import engine
from device_impl.engine import EngineError, constants, launch
from device_impl.engine.dtypes import FP32
from device_impl.engine.memory import Tile

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_platform_constants_are_consistent_with_their_sources():
    for p, tflops in ((constants.TRN1, 92.0), (constants.TRN2, 79.0)):
        assert p.tensor_flops_per_second == pytest.approx(tflops * 1e12, rel=0.01)
        assert p.partitions * p.sbuf_bytes_per_partition in (24 * constants.MiB, 28 * constants.MiB)
        assert p.psum_bytes_per_partition * p.partitions == 2 * constants.MiB
        assert p.moving_free_max == 512
        assert p.fp32_slowdown == 4
    assert constants.TRN1.partitions * constants.TRN1.sbuf_bytes_per_partition == 24 * constants.MiB
    # The NKI DMA bandwidth guide's sustained figures: 16 engines x 17 B/ns on trn1 (below a core's half of
    # 820 GB/s HBM), 16 x 23 B/ns on trn2, where a core's eighth of 2.9 TB/s HBM (362 GB/s) is the cap.
    assert constants.TRN1.dma_bytes_per_second == pytest.approx(272e9)
    assert constants.TRN2.dma_bytes_per_second == pytest.approx(2.9e12 / 8)


def test_platform_override_from_the_environment():
    ok = run_python("from device_impl.engine import PLATFORM; print(PLATFORM.name, PLATFORM.core)",
                    NEURON_PLATFORM_TARGET_OVERRIDE="trn2")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["trn2", "NeuronCore-v3"]
    bad = run_python("import device_impl.engine", NEURON_PLATFORM_TARGET_OVERRIDE="trn9")
    assert bad.returncode != 0 and "NEURON_PLATFORM_TARGET_OVERRIDE='trn9'" in bad.stderr


def test_tile_shape_and_capacity_rules():
    with launch("rules", 0) as nc:
        with pytest.raises(EngineError, match="129 partitions"):
            nc.sbuf_tile((129, 4), FP32)
        big = nc.sbuf_tile((128, 40000), FP32)  # 160000 B of a partition's 196608
        with pytest.raises(EngineError, match="sbuf overflow"):
            nc.sbuf_tile((1, 10000), FP32)
        nc.release(big)
        nc.sbuf_tile((1, 10000), FP32)  # the memory is reusable once freed
        with pytest.raises(EngineError, match="bank holds 2048"):
            nc.psum_tile((128, 513), FP32)


def test_uninitialised_reads_are_poisoned():
    with launch("poison", 0) as nc:
        floats = nc.sbuf_tile((2, 3), FP32)
        assert np.isnan(floats.read()).all()
        partial = nc.sbuf_tile((2, 4), BF16)
        nc.vector.memset(partial[:, :2], 1.0)
        values = partial.read().astype(np.float32)
        assert (values[:, :2] == 1).all() and np.isnan(values[:, 2:]).all()
        ints = nc.sbuf_tile((1, 2), np.int32)
        assert (ints.read() == np.iinfo(np.int32).min).all()


def test_released_tile_memory_is_reused_by_later_launches_but_reads_as_poison():
    """Pools hand a finished launch's large tile arrays to later tiles of the same shape and dtype (page
    faults of fresh arrays were most of a large elementwise op's cost): not inside the launch while the
    kernel can still reach the released tile (it may read it), never while a view of the array lives; a
    reused tile still reads poison until written, and the old tile no longer reaches the array."""
    with launch("spares", 0) as nc:
        first = nc.sbuf_tile((128, 128), FP32)
        nc.vector.memset(first, 7.0)
        array = weakref.ref(first.data)  # a strong reference would (rightly) keep it from reuse
        nc.release(first)
        again = nc.sbuf_tile((128, 128), FP32)
        assert again.data is not array()  # not within the launch ...
        assert (first.read() == 7.0).all()  # ... where the released tile still holds its values
        left_live = nc.sbuf_tile((128, 128), FP32)  # never released: reusable after the launch as well
        live_array = weakref.ref(left_live.data)
    with launch("spares", 0) as nc:
        second = nc.sbuf_tile((128, 128), FP32)
        third = nc.sbuf_tile((128, 128), FP32)
        fourth = nc.sbuf_tile((128, 128), FP32)
        reused = {id(second.data), id(third.data), id(fourth.data)}
        assert array() is not None and id(array()) in reused and id(live_array()) in reused
        assert all(np.isnan(t.read()).all() for t in (second, third, fourth))  # not the 7.0 left behind
        assert np.isnan(first.read()).all()  # the old tile reads as poison ...
        with pytest.raises(ValueError, match="read-only"):
            nc.vector.memset(first, 1.0)  # ... and refuses writes (use after free)
        other = nc.sbuf_tile((128, 128), BF16)
        assert id(other.data) not in reused  # another dtype never shares
        kept = second.data[1:]  # a view outlives the tile
        nc.vector.memset(second, 3.0)
        nc.release(second)
    with launch("spares", 0) as nc:
        fifth = nc.sbuf_tile((128, 128), FP32)
        nc.vector.memset(fifth, 5.0)
        assert fifth.data is not kept.base and (kept == 3.0).all()


def test_large_tiles_reuse_unreachable_released_arrays_within_a_launch():
    """Inside a launch a large tile takes a released tile's array only when nothing can reach that tile
    any more (a fused chain retires ~100 MiB of tiles per launch); a released tile a kernel still holds
    keeps its array and its values."""
    shape = (128, 128)  # 64 KiB of fp32: large enough to look for a reusable array
    with launch("sweep", 0) as nc:
        # arrays earlier launches left for reuse come first (a test before this one may have left a
        # (128, 128) fp32 one): without them the pool must look at this launch's released tiles
        nc.sbuf.spares.clear()
        nc.sbuf.spare_bytes = 0
        held = nc.sbuf_tile(shape, FP32)
        nc.vector.memset(held, 2.0)
        nc.release(held)  # released, but this function still holds it
        dropped = nc.sbuf_tile(shape, FP32)
        nc.vector.memset(dropped, 9.0)
        dropped_array = weakref.ref(dropped.data)
        nc.release(dropped)
        del dropped  # now unreachable
        fresh = nc.sbuf_tile(shape, FP32)
        assert fresh.data is dropped_array()
        assert np.isnan(fresh.read()).all()
        assert (held.read() == 2.0).all()


def test_dma_moves_bytes_only():
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    dst = np.zeros((4, 3), dtype=np.float32)
    with launch("dma", 0) as nc:
        t = nc.sbuf_tile((4, 3), FP32)
        nc.dma.load(t, src.T)  # a strided (transposing) access pattern
        nc.dma.store(dst, t)
        with pytest.raises(EngineError, match="moves bytes"):
            nc.dma.load(nc.sbuf_tile((3, 4), BF16), src)
    assert np.array_equal(dst, src.T)


def test_vector_engine_rounds_to_nearest_even_and_wraps_integers():
    with launch("numerics", 0) as nc:
        x = nc.sbuf_tile((1, 4), FP32)
        nc.vector.memset(x, 0)
        x.data[...] = np.array([[1.00390625, 1.01171875, -1.00390625, 3.0]], dtype=np.float32)
        y = nc.sbuf_tile((1, 4), BF16)
        nc.vector.tensor_copy(y, x)
        assert y.read().astype(np.float32).tolist() == [[1.0, 1.015625, -1.0, 3.0]]
        i = nc.sbuf_tile((1, 2), np.int8)
        nc.vector.memset(i, 127)
        j = nc.sbuf_tile((1, 2), np.int8)
        nc.vector.tensor_scalar(j, i, "add", 1)
        assert j.read().tolist() == [[-128, -128]]


def test_matmul_accumulates_in_fp32_and_enforces_tensore_limits():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 64)).astype(BF16)  # stationary [K, M]
    b = rng.standard_normal((128, 512)).astype(BF16)  # moving [K, N]
    with launch("mm", 0) as nc:
        sa, sb = nc.sbuf_tile(a.shape, BF16), nc.sbuf_tile(b.shape, BF16)
        nc.dma.load(sa, a)
        nc.dma.load(sb, b)
        acc = nc.psum_tile((64, 512), FP32)
        nc.tensor.matmul(acc, sa, sb)
        nc.tensor.matmul(acc, sa, sb, accumulate=True)
        expected = 2 * (a.astype(np.float32).T @ b.astype(np.float32))
        assert np.allclose(acc.read(), expected, rtol=1e-5, atol=1e-4)
        with pytest.raises(EngineError, match="PSUM"):
            nc.tensor.matmul(nc.sbuf_tile((64, 512), FP32), sa, sb)
        with pytest.raises(EngineError, match="matmul shapes"):
            nc.tensor.matmul(acc, sa, nc.sbuf_tile((64, 512), BF16))


def test_timeline_orders_dependencies_and_overlaps_engines():
    src = np.ones((128, 2048), dtype=np.float32)
    with launch("deps", 0) as nc:
        t = nc.sbuf_tile(src.shape, FP32)
        nc.dma.load(t, src)
        load_done = t.ready
        out = nc.sbuf_tile(src.shape, FP32)
        nc.scalar.activation(out, t, "exp")
        assert out.ready > load_done  # ScalarE waited for the DMA
        independent = nc.sbuf_tile((128, 2048), FP32)
        nc.vector.memset(independent, 1.0)
        assert independent.ready < load_done  # VectorE ran concurrently with the DMA
    report = engine.last_launch()
    assert report.instructions == 3
    assert all(busy <= report.device_ns for busy in report.busy_ns.values())
    assert report.hbm_bytes_read == src.nbytes
    assert 0 < report.utilization("dma") < 1


def test_floor_holds_dma_while_loads_wait_only_for_their_own_bytes():
    """A compiled program raises ``Timeline.floor`` so a step's transfers wait for the steps it depends on.
    A load from a range in ``Timeline.hbm_floors`` waits only for when those bytes are final (0 for the
    program's inputs and weights, which nothing in it writes), still sharing the DMA bandwidth; compute
    engines read tiles only and are not held by the floor; stores are."""
    from numpy.lib.array_utils import byte_bounds

    weights = np.ones((128, 512), dtype=np.float32)
    produced = np.ones((128, 512), dtype=np.float32)
    other = np.ones((128, 512), dtype=np.float32)
    out = np.zeros((128, 512), dtype=np.float32)
    with launch("floors", 0) as nc:
        timeline = nc.timeline
        timeline.hbm_floors = ((*byte_bounds(weights), 0.0, None), (*byte_bounds(produced), 20_000.0, None))
        timeline.floor = 50_000.0
        w = nc.sbuf_tile(weights.shape, FP32)
        nc.dma.load(w, weights)
        flat = nc.sbuf_tile(weights.shape, FP32)
        nc.dma.load_flat(flat, weights, 0, weights.size)
        a = nc.sbuf_tile((128, 256), FP32)
        nc.dma.load(a, produced[:, 256:])  # a view inside the range
        assert w.ready < 20_000.0 and flat.ready < 20_000.0  # no step writes the weights
        assert flat.ready > w.ready  # the two loads share the bandwidth, one after the other
        assert 20_000.0 < a.ready < 50_000.0  # waits for its producer only
        assert timeline.floor == 50_000.0  # restored after each load
        doubled = nc.sbuf_tile(weights.shape, FP32)
        nc.vector.tensor_tensor(doubled, w, w, "add")
        assert doubled.ready < 20_000.0  # compute waits for its tiles, not for the floor
        store_start = timeline.end
        nc.dma.store(out, doubled)
        assert timeline.end > 50_000.0 > store_start  # a store may overwrite bytes others read: floored
        b = nc.sbuf_tile(other.shape, FP32)
        nc.dma.load(b, other)
        assert b.ready > 50_000.0  # bytes the program does not describe: held by the floor
        timeline.floor = 0.0
        timeline.hbm_floors = ()


def test_a_load_waits_for_the_recorded_writes_of_its_own_bytes():
    """With a range's DMA writes recorded (``Timeline.hbm_targets``), a load from it waits for the last
    write overlapping the bytes it reads, not for the whole producing step (``ready``)."""
    from numpy.lib.array_utils import byte_bounds

    buffer = np.zeros((256, 512), dtype=np.float32)
    writes: list = []
    with launch("writes", 0) as nc:
        timeline = nc.timeline
        timeline.hbm_targets = ((*byte_bounds(buffer), writes),)
        halves = []
        for r0, floor in ((0, 0.0), (128, 50_000.0)):  # the second store held back by a floor
            t = nc.sbuf_tile((128, 512), FP32)
            nc.vector.memset(t, float(r0))
            timeline.floor = floor
            nc.dma.store(buffer[r0:r0 + 128], t)
            halves.append(timeline.end)
        timeline.floor = 0.0
        assert [w[2] for w in writes] == halves and halves[0] < 50_000.0 < halves[1]
        timeline.hbm_floors = ((*byte_bounds(buffer), 1e6, writes),)
        first, second = nc.sbuf_tile((128, 512), FP32), nc.sbuf_tile((128, 512), FP32)
        nc.dma.load(first, buffer[0:128])
        nc.dma.load(second, buffer[128:256])
        assert halves[0] < first.ready < 50_000.0  # waited for the store of its rows only
        assert halves[1] < second.ready < 1e6
        timeline.hbm_floors = timeline.hbm_targets = ()


def test_interleaved_streams_release_only_their_own_tiles():
    """NeuronCore.stream: a kernel interleaving two instruction streams (attention's pipelined query blocks)
    gives each its own tile scope, so one stream's release_to leaves the other's tiles live."""
    with launch("streams", 0) as nc:
        a_live, b_live = [], []
        with nc.stream(a_live):
            a_mark = nc.mark()
            a = nc.sbuf_tile((128, 64), FP32)
        with nc.stream(b_live):
            b = nc.sbuf_tile((128, 64), FP32)
        used, per_tile = nc.sbuf.used, b.nbytes
        assert per_tile == 64 * 4
        with nc.stream(a_live):
            nc.release_to(a_mark)  # a's tile only, although b's was allocated after it
        assert nc.sbuf.used == used - per_tile and a_live == [] and [t for _, t in b_live] == [b]
        with nc.stream(b_live):
            nc.release_to(0)
        assert nc.sbuf.used == used - 2 * per_tile and b_live == []



def test_tensor_scalar_with_two_operations_is_the_two_instructions_in_one_pass():
    """op0 then op1 with the intermediate in the compute dtype: the bits of two instructions, one pass's cost."""
    values = np.array([[-np.inf, -3.5, 0.0, 1e-45, np.finfo(np.float32).max, np.nan]], dtype=np.float32)
    with launch("two_ops", 0) as nc:
        x = nc.sbuf_tile(values.shape, FP32)
        x.data[...] = values
        x.initialized = True
        one = nc.sbuf_tile(values.shape, FP32)
        nc.vector.tensor_scalar(one, x, "maximum", -np.finfo(np.float32).max, op1="multiply", scalar1=-1.0)
        two = nc.sbuf_tile(values.shape, FP32)
        nc.vector.tensor_scalar(two, x, "maximum", -np.finfo(np.float32).max)
        nc.vector.tensor_scalar(two, two, "multiply", -1.0)
        assert one.read().tobytes() == two.read().tobytes()
        assert one.read()[0, 0] == np.finfo(np.float32).max  # -inf clamped, then negated
    report = engine.last_launch()
    p = constants.PLATFORM
    assert report.busy_ns["vector"] == pytest.approx(3 * (p.instruction_overhead_cycles + values.shape[1])
                                                     / p.vector_hz * 1e9)


def test_tensor_scalar_takes_a_per_partition_scalar_tile():
    """A [P, 1] tile as either scalar (attention's (0 + P V) / l out of PSUM): each partition's own value, the bits
    of tensor_tensor with that column, one pass; a wider tile is refused."""
    rng = np.random.default_rng(0)
    values = rng.standard_normal((4, 8)).astype(np.float32)
    values[0, :2] = [-0.0, 0.0]
    column = np.array([[3.0], [0.5], [1e-30], [-7.0]], dtype=np.float32)
    with launch("per_partition", 0) as nc:
        x = nc.sbuf_tile(values.shape, FP32)
        x.data[...] = values
        x.initialized = True
        c = nc.sbuf_tile(column.shape, FP32)
        c.data[...] = column
        c.initialized = True
        one = nc.sbuf_tile(values.shape, FP32)
        nc.vector.tensor_scalar(one, x, "add", 0.0, op1="divide", scalar1=c, dtype=FP32)
        two = nc.sbuf_tile(values.shape, FP32)
        nc.vector.tensor_scalar(two, x, "add", 0.0)
        nc.vector.tensor_tensor(two, two, c, "divide", dtype=FP32)
        assert one.read().tobytes() == two.read().tobytes()
        assert not np.signbit(one.read()[0, 0])  # -0.0 + 0.0 is +0.0 before the divide
        with pytest.raises(EngineError):
            nc.vector.tensor_scalar(one, x, "multiply", x)


def test_affine_select_keeps_where_the_affine_position_is_non_negative():
    """Causal attention's mask without a mask tile: keep a[p, f] where base + p - f >= 0, on GpSimd."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with launch("affine", 0) as nc:
        t = nc.sbuf_tile(a.shape, FP32)
        t.data[...] = a
        t.initialized = True
        out = nc.sbuf_tile(a.shape, FP32)
        nc.gpsimd.affine_select(out, t, -np.inf, base=1, partition_step=1, free_step=-1)
        p, f = np.indices(a.shape)
        assert np.array_equal(out.read(), np.where(1 + p - f >= 0, a, -np.inf))
        with pytest.raises(EngineError, match="affine_select"):
            nc.gpsimd.affine_select(nc.sbuf_tile((3, 3), FP32), t, 0.0)
    report = engine.last_launch()
    plat = constants.PLATFORM
    assert report.busy_ns["vector"] == 0
    assert report.busy_ns["gpsimd"] == pytest.approx(
        (plat.instruction_overhead_cycles + -(-a.size // plat.gpsimd_elements_per_cycle)) / plat.gpsimd_hz * 1e9)


def test_cost_model_numbers():
    p = constants.PLATFORM
    n = 512
    a = np.ones((128, 128), dtype=BF16)
    b = np.ones((128, n), dtype=BF16)
    with launch("cost", 0) as nc:
        sa, sb = nc.sbuf_tile(a.shape, BF16), nc.sbuf_tile(b.shape, BF16)
        sa.data[...] = a
        sb.data[...] = b
        sa.initialized = sb.initialized = True
        acc = nc.psum_tile((128, n), FP32)
        nc.tensor.matmul(acc, sa, sb)
        nc.tensor.matmul(acc, sa, sb, accumulate=True)  # same stationary: no reload
    report = engine.last_launch()
    # first matmul: 512 columns + 128 cycles loading the stationary tile; second: 512 columns
    assert report.busy_ns["tensor"] == pytest.approx((512 + 128 + 512) / p.tensor_hz * 1e9)
    assert report.flops == 2 * 2 * 128 * 128 * n


def test_launch_advances_the_device_clock_seen_by_events():
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    x = torch.ones(1 << 20, device="neuron")
    start.record()
    y = x * 3
    end.record()
    kernel_ms = engine.last_launch().device_ns / 1e6
    assert start.elapsed_time(end) == pytest.approx(kernel_ms, rel=1e-3, abs=1e-6)
    assert y.device.type == "neuron"


def test_launches_do_not_nest_and_failed_kernels_leave_no_trace():
    engine.reset_stats()
    with launch("outer", 0):
        with pytest.raises(RuntimeError, match="do not nest"):
            with launch("inner", 0):
                pass
    with pytest.raises(ZeroDivisionError):
        with launch("failing", 0):
            raise ZeroDivisionError
    assert "failing" not in engine.stats() and engine.stats()["outer"]["launches"] == 1


def test_chrome_trace_is_valid_and_has_one_lane_per_engine(tmp_path):
    a = torch.randn(256, 256, dtype=torch.bfloat16, device="neuron")
    with engine.record_trace() as trace:
        torch.mm(a, a)
        torch.exp(a)
    path = tmp_path / "trace.json"
    trace.save(str(path))
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert complete and all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    assert all(isinstance(e["pid"], int) and isinstance(e["tid"], int) for e in events)
    lanes = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"DMA", "tensorE", "vectorE", "scalarE", "gpsimdE", "kernels"} <= lanes
    kernels = [e["name"] for e in complete if e["cat"] == "kernel"]
    assert kernels == ["mm", "exp"]
    # instructions of a kernel lie inside the kernel's span
    mm = next(e for e in complete if e["cat"] == "kernel" and e["name"] == "mm")
    inside = [e for e in complete if e["cat"] != "kernel" and e["args"]["kernel"] == "mm"]
    assert all(mm["ts"] <= e["ts"] and e["ts"] + e["dur"] <= mm["ts"] + mm["dur"] + 1e-6 for e in inside)


def test_a_launch_s_tiles_are_freed_without_the_garbage_collector():
    """A root tile is its own ``root``; left as a cycle, every tile of every launch waited for the garbage
    collector (whose collections that churn triggered every few calls of a fused chain). The next launch's
    reset breaks the cycle of each tile nothing holds; a tile something still holds keeps working."""
    import gc

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with launch("cycles", 0) as nc:
            kept = nc.sbuf_tile((4, 8), FP32)
            nc.vector.memset(kept, 1.5)
            for shape in ((4, 8), (128, 256), (2, 3)):  # small and large (a retired array) tiles
                t = nc.sbuf_tile(shape, FP32)
                nc.vector.memset(t, 1.0)
                nc.release(t)
            scoped = nc.sbuf_tile((8, 8), FP32)  # left live by the launch
            nc.vector.memset(scoped, 2.0)
            del t, scoped
        with launch("next", 0) as nc:
            nc.vector.memset(nc.sbuf_tile((4, 8), FP32), 0.0)
        gc.collect()
        assert not [o for o in gc.garbage if isinstance(o, Tile)]
        assert kept.root is kept and (kept.read() == 1.5).all()
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _strided(shape, rng, kind: str) -> np.ndarray:
    """A non-contiguous view of ``shape``: every other element, transposed, or broadcast from one row."""
    if kind == "stepped":
        return rng.standard_normal(tuple(2 * n for n in shape)).astype(np.float32)[tuple(slice(None, None, 2)
                                                                                         for _ in shape)]
    if kind == "transposed":
        return rng.standard_normal(shape[::-1]).astype(np.float32).T
    return np.broadcast_to(rng.standard_normal(shape[-1:]).astype(np.float32), shape)


@pytest.mark.parametrize("kind", ["stepped", "transposed", "broadcast"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (4, 1, 6), (2, 3, 1, 5)])
def test_flat_transfers_of_strided_views_move_row_major_ranges(shape, kind):
    """``flat_in``/``flat_copy``/``flat_out`` (DMA's flat loads and stores, eager replay's tiles) copy a
    strided view's row-major range [start, stop) as a few block copies: every range of every layout gives
    the elements numpy's element-by-element ``flat`` iterator gives, and a store writes only that range."""
    from device_impl.engine.isa import flat_copy, flat_in, flat_out
    rng = np.random.default_rng(len(shape))
    view = _strided(shape, rng, kind)
    for start in range(view.size + 1):
        for stop in range(start, view.size + 1):
            expected = np.array([view.flat[i] for i in range(start, stop)], np.float32)
            assert np.array_equal(flat_copy(view, start, stop), expected)
            loaded = np.empty(stop - start, np.float32)
            flat_in(loaded, view, start, stop)
            assert np.array_equal(loaded, expected)
            if kind == "broadcast":
                continue
            dst = _strided(shape, rng, kind)
            before = np.array(dst).reshape(-1)
            values = rng.standard_normal(stop - start).astype(np.float32)
            flat_out(dst, start, stop, values)
            before[start:stop] = values
            assert np.array_equal(np.array(dst).reshape(-1), before)
