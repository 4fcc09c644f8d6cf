"""Issue 21's bfloat16 losers (benches/compiled_vs_eager_specs.py --dtype bfloat16): the compiled programs whose
device time exceeded the eager kernel's, each with the structure that fixed it (the layout of a scan, the tiles of
a gather, the order a flat group walks its views in, ...). Structural checks: instruction shapes and DMA runs, not
timings."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from device_impl.compiler import breakdown, flat_order, gather, scan_spread
from device_impl.engine import isa
from device_impl.kernels.common import P, flat_tiles

pytestmark = pytest.mark.usefixtures("no_neff_cache")


def _program_call(fn, *inputs):
    """(the warm compiled call's outputs, its executable and arguments)."""
    torch._dynamo.reset()
    run = torch.compile(fn, backend="neuron", dynamic=False)
    run(*inputs)
    with breakdown.capture() as calls:
        out = run(*inputs)
    torch.neuron.synchronize()
    executable, args = calls[-1]
    return out, executable, args


def _masked_scatter_case():
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(5, 513, generator=g).to(torch.bfloat16)
    x1 = torch.randn(5, 1026, generator=g)[:, ::2]  # the sweep's float32 mask source, every other column
    x2 = torch.randn(2568, generator=g).to(torch.bfloat16)
    return x0, x1, x2


def _masked_scatter(a, b, c):
    return a.masked_scatter(b > 0, c)


def test_a_long_integer_scan_is_spread_over_the_partitions(monkeypatch):
    """masked_scatter's decomposition scans its flattened mask (2565 int64) as one reduce_window row: on one
    partition that was one VectorE scan of 2565 columns (4.64 us of a 7.65 us program). Spread [p, f] over the
    partitions (compiler/scan_spread.py) no scan is wider than ceil(2565 / 128) columns, and the result is CPU's
    bit for bit."""
    x0, x1, x2 = _masked_scatter_case()
    widths: list[int] = []
    original = isa.VectorE.tensor_scan

    def scan(self, out, a, op, dtype=None):
        widths.append(a.free)
        return original(self, out, a, op, dtype)

    monkeypatch.setattr(isa.VectorE, "tensor_scan", scan)
    out, executable, args = _program_call(_masked_scatter, x0.to("neuron"), x1.to("neuron"), x2.to("neuron"))
    assert any(step["kind"] == "reduce_window" for step in executable.program.steps)
    widths.clear()
    breakdown.step_figures(executable, args)  # the program once more at the instruction level
    assert widths and max(widths) <= math.ceil(5 * 513 / P), widths
    assert torch.equal(out.cpu(), _masked_scatter(x0, x1, x2))


def _gpsimd_programs(monkeypatch) -> list[str]:
    """The names of the GpSimd programs the engines run from now on (appended as they run)."""
    names: list[str] = []
    original = isa.GpSimdE.run

    def run(self, name, *rest, **options):
        names.append(name)
        return original(self, name, *rest, **options)

    monkeypatch.setattr(isa.GpSimdE, "run", run)
    return names


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("n", [scan_spread.MIN_COLUMNS, 3001])
def test_a_spread_cumsum_is_the_one_row_scan_bit_for_bit(dtype, n, monkeypatch):
    """Integer adds are exact, so the spread scan (each partition's scan, the partitions' exclusive prefix on
    GpSimd, one combine) gives the sequential scan's values, wrapping included; a ragged last partition too."""
    g = torch.Generator().manual_seed(1)
    info = torch.iinfo(dtype)
    x = torch.randint(info.min // 4, info.max // 4, (n,), generator=g, dtype=dtype)
    names = _gpsimd_programs(monkeypatch)
    out, executable, args = _program_call(lambda t: torch.cumsum(t, 0), x.to("neuron"))
    names.clear()
    breakdown.step_figures(executable, args)
    assert "partition_scan_add" in names, names
    assert torch.equal(out.cpu(), torch.cumsum(x, 0))


def test_a_scan_too_long_to_spread_in_sbuf_keeps_the_chunked_one_partition_scan():
    """A flattened int64 cumsum of 2,000,000 elements spread [128, 15625] needed three 125000-byte tiles a partition
    (SBUF has 196608): the compiled call raised EngineError (sbuf overflow) where CPU answers. Past
    ``MAX_COLUMNS`` a partition the row keeps the one-partition scan, chunked, with CPU's result."""
    n = 2_000_000
    assert not scan_spread.spreads(n, 1, "add", np.dtype(np.int64), np.dtype(np.int64))
    assert scan_spread.spreads(P * scan_spread.MAX_COLUMNS, 1, "add", np.dtype(np.int64), np.dtype(np.int64))
    x = torch.randint(-100, 100, (n,), generator=torch.Generator().manual_seed(6))
    torch._dynamo.reset()
    got = torch.compile(lambda t: torch.cumsum(t, 0), backend="neuron", dynamic=False)(x.to("neuron"))
    assert torch.equal(got.cpu(), torch.cumsum(x, 0))


def test_a_short_scan_keeps_one_partition():
    """Below MIN_COLUMNS the one-partition scan costs less than the spread form's extra instructions; float scans
    round in order and are never spread."""
    assert not scan_spread.spreads(scan_spread.MIN_COLUMNS - 1, 1, "add", np.dtype(np.int64), np.dtype(np.int64))
    assert not scan_spread.spreads(4096, 1, "add", np.dtype(np.float32), np.dtype(np.float32))
    assert not scan_spread.spreads(4096, 2, "add", np.dtype(np.int64), np.dtype(np.int64))
    assert scan_spread.spreads(4096, 1, "maximum", np.dtype(np.int32), np.dtype(np.int64))


def test_a_gather_of_many_single_elements_computes_offsets_per_flat_tile(monkeypatch):
    """masked_scatter's gather of 2565 source elements (single-element rows of a 1-d source) ran an index load and a
    GpSimd offsets program per 128 rows (21 programs, 1.02 us of GpSimd issue in a 1.24 us step); by flat tiles of
    FLAT_COLUMNS columns it runs one per tile (four: two [128, 8], [64, 8] and [1, 5])."""
    x0, x1, x2 = _masked_scatter_case()
    names = _gpsimd_programs(monkeypatch)
    out, executable, args = _program_call(_masked_scatter, x0.to("neuron"), x1.to("neuron"), x2.to("neuron"))
    assert any(step["kind"] == "gather" for step in executable.program.steps)
    names.clear()
    breakdown.step_figures(executable, args)
    assert names.count("row_offsets") == len(list(flat_tiles(5 * 513, gather.FLAT_COLUMNS))) == 4, names
    assert torch.equal(out.cpu(), _masked_scatter(x0, x1, x2))


def test_a_gather_out_of_range_still_raises_from_a_flat_tile():
    """The offsets program's bounds check holds for the [p, f] tiles: an index past the end raises CPU's error (its
    class is the op's: gather's RuntimeError, through driver's index_error)."""
    n = gather.FLAT_ROWS + 500
    x = torch.randn(n).to("neuron")
    index = torch.arange(n)
    index[n - 300] = n

    def fn(a, i):
        return torch.gather(a, 0, i)

    with pytest.raises(RuntimeError, match=f"index {n} is out of bounds for dimension 0 with size {n}"):
        torch._dynamo.reset()
        torch.compile(fn, backend="neuron", dynamic=False)(x, index.to("neuron"))
        torch.neuron.synchronize()


def test_a_flat_group_walks_the_memory_order_of_a_transposed_operand_and_its_result(monkeypatch):
    """``torch.where(x0 > 0, x1, x2)`` of a transposed float32 x0 and broadcast bfloat16 x1, x2: the result takes
    x0's layout (CPU's strides), stored straight into it. Walked in the logical order, x0's loads and the result's
    stores moved one element a run (2.72 us against adaptive eager's 2.20); walked in x0's memory order
    (compiler/flat_order.py) each is one run."""
    g = torch.Generator().manual_seed(2)
    x0 = torch.randn(1, 513, 5, 2, generator=g).permute(0, 3, 2, 1)
    x1 = torch.randn(2, 5, 1, generator=g).to(torch.bfloat16)
    x2 = torch.randn(2, 5, 1, generator=g).to(torch.bfloat16)
    contiguous: dict[str, list[bool]] = {"x0": [], "out": []}
    loads, stores = isa.DMA.load_flat, isa.DMA.store_flat

    def load_flat(self, dst, src, start, stop):
        if src.dtype == np.float32:
            contiguous["x0"].append(src.flags.c_contiguous)
        return loads(self, dst, src, start, stop)

    def store_flat(self, dst, start, stop, src):
        contiguous["out"].append(dst.flags.c_contiguous)
        return stores(self, dst, start, stop, src)

    def fn(a, b, c):
        return torch.where(a > 0, b, c)

    torch._dynamo.reset()
    run = torch.compile(fn, backend="neuron", dynamic=False)
    args = (x0.to("neuron"), x1.to("neuron"), x2.to("neuron"))
    run(*args)
    monkeypatch.setattr(isa.DMA, "load_flat", load_flat)
    monkeypatch.setattr(isa.DMA, "store_flat", store_flat)
    out = run(*args)
    torch.neuron.synchronize()
    assert out.stride() == fn(x0, x1, x2).stride()
    assert contiguous["x0"] and all(contiguous["x0"]), contiguous
    assert contiguous["out"] and all(contiguous["out"]), contiguous
    assert torch.equal(out.cpu(), fn(x0, x1, x2))


def test_a_flat_group_of_contiguous_views_walks_the_logical_order():
    """Ties go to the logical order: contiguous views (the layout the schedule is recorded with) and broadcasts of
    them walk as before."""
    a = np.zeros((2, 5, 513), np.float32)
    b = np.broadcast_to(np.zeros((2, 5, 1), np.float32), (2, 5, 513))
    assert flat_order.order([a, b, a.copy()], a.shape) is None
    t = np.zeros((513, 5, 2), np.float32).transpose(2, 1, 0)
    assert flat_order.order([t, b, np.zeros((2, 5, 513), np.float32)], t.shape) is None  # one run each way lost
    assert flat_order.order([t, b, t.copy(order="K")], t.shape) == (2, 1, 0)


def _steps(executable) -> list[tuple[str, list[str]]]:
    return [(step["kind"], [op["op"] for op in step.get("ops", ())]) for step in executable.program.steps]


def test_a_widening_convert_of_a_broadcast_operand_runs_in_its_readers_group():
    """fold.SINK_WIDENING_LIMIT: bfloat16 addcmul(x0, x1, x2, value=-1.5) of [1, 1, 1] x0, x2 and a [1, 5, 2, 513]
    x1 widens x0 and x2 to float32; above SINK_LIMIT (5130 elements) each convert stayed a step of its own whose
    float32 result the group then loaded broadcast (2.34 us against eager's 2.19). A convert to a wider dtype moves
    into its readers' group up to SINK_WIDENING_LIMIT: one step, the broadcast loads of bfloat16."""
    g = torch.Generator().manual_seed(3)
    x0, x1, x2 = (torch.randn(s, generator=g).to(torch.bfloat16) for s in [(1, 1, 1), (1, 5, 2, 513), (1, 1, 1)])

    def fn(a, b, c):
        return torch.addcmul(a, b, c, value=-1.5)

    out, executable, _ = _program_call(fn, x0.to("neuron"), x1.to("neuron"), x2.to("neuron"))
    steps = _steps(executable)
    assert len(steps) == 1 and steps[0][0] == "fused", steps
    with torch.neuron.eager_mode("eager"):
        eager = fn(x0.to("neuron"), x1.to("neuron"), x2.to("neuron")).cpu()
    torch.testing.assert_close(out.cpu().float(), fn(x0, x1, x2).float(), rtol=1.6e-2, atol=1e-5)
    assert torch.equal(out.cpu(), eager)


def test_a_narrowing_convert_spread_past_the_limit_stays_a_step():
    """lt of a [3, 3, 3, 513] float32 tensor and a 0-d int64 one: the int64 -> float32 convert narrows, so its
    broadcast load would widen; spread onto 13851 elements (> SINK_LIMIT) it stays a step (sunk: 2.96 us against
    2.83)."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 3, 3, 513, generator=g)
    y = torch.tensor(0)
    out, executable, _ = _program_call(torch.lt, x.to("neuron"), y.to("neuron"))
    assert [ops for _, ops in _steps(executable)][0] == ["convert"], _steps(executable)
    assert torch.equal(out.cpu(), torch.lt(x, y))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_safe_softmax_tests_the_row_max_for_all_infinite_rows(dtype):
    """fold.infinite_rows_from_max: ``_safe_softmax`` zeroes the rows that are all -inf by ``all(x == -inf)``, a
    full pass of compares and a logical-and reduction beside the softmax's own max (bfloat16 [3, 513]: 3.24 us
    against eager's 3.15); as ``max(x) == -inf`` on the max the softmax already takes, no logical-and reduction
    and no full-size compare remain. Rows all -inf give 0, a row with a NaN NaN, as CPU's."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 513, generator=g)
    x[1] = float("-inf")
    x[2, 7] = float("nan")
    x[3, :500] = float("-inf")
    x = x.to(dtype)

    def fn(t):
        return torch.ops.aten._safe_softmax(t, -1)

    out, executable, _ = _program_call(fn, x.to("neuron"))
    ops = [op for step in executable.program.steps for op in step.get("ops", ())]
    assert not [op for op in ops if op["op"] == "reduce" and op["attrs"].get("alu") == "logical_and"], ops
    assert not [op for op in ops if op["op"] == "compare" and ["imm", float("-inf")] in op["args"]
                and op["dtype"] == "bool" and executable.program.steps[0]["slots"][op["args"][0][1]][1] == "full"], ops
    want = fn(x)
    torch.testing.assert_close(out.cpu(), want, equal_nan=True)
    assert torch.equal(out.cpu()[1], torch.zeros(513, dtype=dtype))
    assert torch.isnan(out.cpu()[2]).all()


def test_a_bfloat16_arange_is_one_generated_iota():
    """iotas._fold: ``arange(3, 129)`` in bfloat16 is ``iota + 3`` in bfloat16; the integer fold skipped every
    bfloat16 op (ml_dtypes' bfloat16 is numpy kind ``V``), so the add ran on VectorE after GpSimd's iota (1.18 us
    against eager's 1.17). Folded, the step generates 3..128 with one iota and stores it (exact in bfloat16)."""
    out, executable, _ = _program_call(lambda t: torch.arange(3, 129, 1, dtype=torch.bfloat16, device=t.device),
                                       torch.zeros(1).to("neuron"))
    (step,) = executable.program.steps
    assert step["kind"] == "fused" and step["ops"] == [] and step.get("generated"), step
    assert torch.equal(out.cpu(), torch.arange(3, 129, 1, dtype=torch.bfloat16))


def test_a_bfloat16_iota_op_that_rounds_is_not_folded():
    """Past 256 a bfloat16 integer rounds: ``iota + 3`` of 300 elements stays an add, so the result is the
    compiled graph's (its rounding, not the exact integers)."""
    out, executable, _ = _program_call(lambda t: torch.arange(3, 303, 1, dtype=torch.bfloat16, device=t.device),
                                       torch.zeros(1).to("neuron"))
    ops = [op["op"] for step in executable.program.steps for op in step.get("ops", ())]
    assert "add" in ops, ops
