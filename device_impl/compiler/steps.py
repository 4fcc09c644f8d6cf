"""Runners of the steps that are not fused groups: one per StableHLO op kind.

Each runner is built once per loaded program (``make_runner(step, program)``)
and called per execution as ``runner(nc, env)`` inside the program's launch;
``env.access(vid)`` gives the HBM view of a value (its buffer seen through
its layout ops). Runners emit engine instructions only, reusing the eager
kernels' tile loops where the work is the same: TensorE tiling of products
(``matmul.matmul_into``), convolution (``spatial.conv.conv_run``), padding
(``spatial.tiles.pad_view``), GpSimd sorts (``indexing.sort_rows``), copies and
fills (``indexing.copy_into`` / ``fill``). Gathers and scatters are in
``gather.py``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import numpy as np

from device_impl.compiler import (bitcast, counters, factories, gather, lowering, opaque_cnn, opaque_conv,
                                  opaque_indexing, opaque_moments, opaque_pads, opaque_products, opaque_resample,
                                  scan_spread)
from device_impl.compiler.groups import Access2D, GroupRunner, handed_pieces
from device_impl.compiler.program import Program
from device_impl.compiler.program import operand_array as _operand_array
from device_impl.engine.constants import PLATFORM
from device_impl.engine.dtypes import compute_dtype
from device_impl.kernels import indexing, matmul
from device_impl.kernels.shape import moves as shape_moves
from device_impl.kernels.common import FREE_MAX, P, flat_tiles
from device_impl.kernels.reduction.extrema import arg_program
from device_impl.kernels.reduction.scans import scan64
from device_impl.kernels.spatial.conv import conv_run, conv_transposed_run
from device_impl.kernels.spatial.tiles import _split, pad_view

I64 = np.dtype(np.int64)
Runner = Callable[[Any, Any], None]


class DotDims(NamedTuple):
    """A stablehlo.dot_general as a batch of [m, k] x [k, n] products: its values, dims and sizes."""

    lhs: int
    rhs: int
    result: int
    lb: list
    rb: list
    lc: list
    rc: list
    lf: list
    rf: list
    batch: int
    m: int
    k: int
    n: int


def dot_dims(step: dict, program: Program) -> DotDims:
    """The batch, free and contracting dims of a dot_general step (its runner and compiler.replay's)."""
    lhs, rhs = step["operands"]
    dn = step["attrs"]["dot_dimension_numbers"]
    lb, rb = dn.get("lhs_batching_dimensions", []), dn.get("rhs_batching_dimensions", [])
    lc, rc = dn.get("lhs_contracting_dimensions", []), dn.get("rhs_contracting_dimensions", [])
    ls, rs = program.shape(lhs), program.shape(rhs)
    lf = [d for d in range(len(ls)) if d not in lb + lc]
    rf = [d for d in range(len(rs)) if d not in rb + rc]
    return DotDims(lhs, rhs, step["results"][0], lb, rb, lc, rc, lf, rf, math.prod(ls[d] for d in lb),
                   math.prod(ls[d] for d in lf), math.prod(ls[d] for d in lc), math.prod(rs[d] for d in rf))


def _dot_general(step: dict, program: Program) -> Runner:
    lhs, rhs, result, lb, rb, lc, rc, lf, rf, batch, m, k, n = dot_dims(step, program)

    epilogue = step.get("epilogue")  # a fused group consuming the product on its evacuation (build.py)
    tail_group = GroupRunner(epilogue) if epilogue is not None else None
    share = step.get("share_lhs")  # products of the same lhs in a row keep its SBUF tiles (build.share_lhs)
    layout = tuple(lb + lf + lc)
    counters.matmul_linked(program.name, program.dtype(lhs) == np.float32 or program.dtype(rhs) == np.float32)
    # later products whose weight tiles this step makes (build.prepare_weights), and their dims
    prepare = [dot_dims(s, program) for s in program.steps
               if s["kind"] == "dot_general" and s["results"][0] in step.get("prepare", ())]

    handoff = step.get("handoff")  # a later product's A^T made from this epilogue's result (build.handoffs)
    keep = step.get("keep")  # this product's blocks kept in SBUF for a later epilogue (build.keep_products)
    reads_kept = step.get("kept")  # an earlier product's kept blocks, read in place by this step's epilogue
    in_flight = _epilogue_in_flight(epilogue, n, k, program.dtype(result))
    attention_taps = step.get("attention_taps", ())  # epilogue results an attention step reads in SBUF

    def run(nc, env) -> None:
        boxes: dict = {}
        given_blocks: dict = {}  # value -> (its epilogue's result blocks, their scope), for an attention step
        keeping: list = []  # the scope of the kept blocks (``keep``), handed to their reader, which frees it
        from_product = None  # (blocks, scope) an earlier product kept for this epilogue (``reads_kept``)
        if epilogue is None and keep is not None:  # never stored: the consumer's epilogue reads the blocks
            out = np.lib.stride_tricks.as_strided(np.zeros(1, program.dtype(result)), (batch, m, n), (0, 0, 0))
            tail = lambda nc_, t, r0, r1, c0, c1: boxes.__setitem__((r0, r1, c0, c1), t)  # noqa: E731
            tail.keeps, tail.reads_psum = keeping, False
        elif epilogue is None:
            out = env.access(result).reshape(batch, m, n)
            tail = None
        else:  # the product never reaches HBM: a stand-in that only gives matmul_into its shape and dtype
            out = np.lib.stride_tricks.as_strided(np.zeros(1, program.dtype(result)), (batch, m, n), (0, 0, 0))
            taps = None
            if handoff is not None:
                pinned: list = []  # the value's result tiles, kept until they are transposed below
                blocks: list[tuple] = []
                taps = {handoff["slot"]: (lambda nc_, t, *box: blocks.append((t, *box)), pinned,
                                          handoff.get("store", True))}
            if keep is not None:  # a result of the epilogue kept in SBUF for a later epilogue, never stored
                taps = dict(taps or {})
                taps[keep["slot"]] = (lambda nc_, t, r0, r1, c0, c1: boxes.__setitem__((r0, r1, c0, c1), t),
                                      keeping, False)
            for entry in attention_taps:  # a value an attention step reads from SBUF (build.attention_inputs)
                found = given_blocks.setdefault(entry["value"], ([], []))
                taps = dict(taps or {})
                taps[entry["slot"]] = (lambda nc_, t, *box, found=found: found[0].append((t, *box)), found[1], True)
            if reads_kept is not None:
                from_product = env.shared.pop(("kept", reads_kept["value"]), None)
                if from_product is None:
                    raise RuntimeError(f"compiled program {program.name}: the product kept in SBUF for a later "
                                       "epilogue was not made (a compiler bug: build.keep_products)")
            tail = tail_group.epilogue(env, batch * m, n, epilogue["product_slot"], nc, min(m, matmul.M_TILE), taps,
                                       None if from_product is None else {reads_kept["slot"]: from_product[0]},
                                       in_flight)
        if out.size == 0:
            return
        a = env.access(lhs).transpose(lb + lf + lc).reshape(batch, m, k)
        b = env.access(rhs).transpose(rb + rc + rf).reshape(batch, k, n)
        made = env.shared.pop(("rhs", result), None)  # this product's weight tiles, made by an earlier step
        # A's row-major blocks an earlier product's epilogue left in SBUF (build.handoffs), and their tiles
        given = env.shared.pop(("raw", lhs, layout), None) if batch == 1 else None
        for i in range(batch):
            with nc.scope():
                block = None if tail is None else (
                    lambda nc_, t, m0, m1, n0, n1, i=i: tail(nc_, t, i * m + m0, i * m + m1, n0, n1))
                if block is not None:
                    block.reads_psum = tail.reads_psum
                    block.splittable = getattr(tail, "splittable", False) and i == batch - 1
                    block.keeps = getattr(tail, "keeps", None)
                    block.holds = getattr(tail, "holds", None)
                kept = None if share is None else env.shared.setdefault((lhs, layout, i), ({}, []))
                matmul.matmul_into(nc, out[i], a[i], b[i], epilogue=block, lhs_tiles=kept,
                                   rhs_tiles=made if batch == 1 else None,
                                   lhs_pieces=None if given is None else given[0])
                if epilogue is not None:
                    tail.flush(nc)  # the blocks it holds (``in_flight``), in this scope, where their PSUM tiles are
        if share is not None and share["last"]:
            for i in range(batch):
                _, live = env.shared.pop((lhs, layout, i), ({}, []))
                with nc.stream(live):
                    nc.release_to(0)
        if epilogue is not None and handoff is not None:
            # the value's blocks, as the later product's row-major pieces of A awaiting their transposes, which
            # its own list scheduler places among its matmuls as the blocks land (a transpose issued here, on a
            # block's evacuation, would hold this product's later matmuls behind that block's epilogue: TensorE
            # runs in program order); that product frees the tiles (``pinned``) once it has transposed them
            env.shared[("raw", handoff["lhs"], tuple(handoff["layout"]))] = (handed_pieces(blocks), pinned)
        if keep is not None:
            env.shared[("kept", keep["value"])] = (boxes, keeping)
        for vid, found in given_blocks.items():  # the attention step reads them and frees their scope
            env.shared[("given", vid)] = found
        for kept_tiles in (made, given, from_product):
            if kept_tiles is not None:
                with nc.stream(kept_tiles[1]):
                    nc.release_to(0)
        for later in prepare:
            _prepare_rhs(nc, env, program, later)

    return run


def _epilogue_in_flight(epilogue: dict | None, n: int, k: int, dtype) -> int:
    """How many of a product's row blocks its row-group epilogue runs at once (``GroupRunner.epilogue``'s
    ``in_flight``): two where two blocks' planned tiles fit the epilogue's SBUF budget (build.EPILOGUE_SBUF_BYTES)
    and the product stays in PSUM for it (fp32, a contraction to run: ``matmul._finish_block``'s ``direct``),
    else one (each block's ops as it is evacuated)."""
    from device_impl.compiler.build import EPILOGUE_SBUF_BYTES

    if epilogue is None or epilogue["reduce_dims"] is None or k == 0 or np.dtype(dtype) != np.float32:
        return 1
    tiles = epilogue["tiles"]
    block = tiles["bytes_per_column"] * min(n, matmul.EVACUATION_CHUNK) + tiles["row_bytes"]
    return 2 if 2 * block <= EPILOGUE_SBUF_BYTES else 1


def _prepare_rhs(nc, env, program: Program, d: DotDims) -> None:
    """Load and transpose a later product's weight tiles now (build.prepare_weights), kept in SBUF for it."""
    if d.batch != 1 or d.m == 0 or d.n == 0 or d.k == 0:
        return
    b2d = env.access(d.rhs).transpose(d.rb + d.rc + d.rf).reshape(d.k, d.n)
    live: list = []
    cache = matmul.prepare_rhs(nc, d.m, program.dtype(d.lhs).itemsize, b2d, live)
    if cache is not None:
        env.shared[("rhs", d.result)] = (cache, live)


def _concatenate(step: dict, program: Program) -> Runner:
    dim = step["attrs"]["dimension"]
    result = step["results"][0]

    def run(nc, env) -> None:
        out = env.access(result)
        offset = 0
        for vid in step["operands"]:
            src = env.access(vid)
            n = src.shape[dim]
            if src.size:
                index = (slice(None),) * dim + (slice(offset, offset + n),)
                nc.dma.hbm_copy(out[index], src)
            offset += n

    return run


def _iota(step: dict, program: Program) -> Runner:
    result = step["results"][0]
    shape = program.shape(result)
    d = step["attrs"]["iota_dimension"]
    inner = math.prod(shape[d + 1:])
    size = shape[d]
    # the coordinate is the flat index // inner % size; a division by 1, and a remainder of an index already
    # below size (no dim before d holds more than one), are the index itself, and then GpSimd's iota writes
    # the coordinate in the result's dtype (the same conversion as VectorE's copy): arange's one instruction
    divides, wraps = inner > 1, math.prod(shape[:d]) > 1

    def run(nc, env) -> None:
        out = env.access(result)
        for start, stop, p, f in flat_tiles(out.size):
            with nc.scope():
                if not divides and not wraps:
                    coord = nc.sbuf_tile((p, f), out.dtype)
                    nc.gpsimd.iota(coord, base=start, partition_step=f, free_step=1)
                    nc.dma.store_flat(out, start, stop, coord)
                    continue
                flat = nc.sbuf_tile((p, f), I64)
                nc.gpsimd.iota(flat, base=start, partition_step=f, free_step=1)
                coord = flat
                if divides:
                    coord = nc.sbuf_tile((p, f), I64)
                    nc.vector.tensor_scalar(coord, flat, "floor_divide", inner)
                if wraps:
                    wrapped = nc.sbuf_tile((p, f), I64)
                    nc.vector.tensor_scalar(wrapped, coord, "remainder", size)
                    coord = wrapped
                if out.dtype != I64:
                    cast = nc.sbuf_tile((p, f), out.dtype)
                    nc.vector.tensor_copy(cast, coord)
                    coord = cast
                nc.dma.store_flat(out, start, stop, coord)

    return run


def _splat_operand(program: Program, vid: int, what: str):
    base = program.base(vid)
    if base not in program.splats:
        from device_impl.compiler.errors import UnsupportedOpError

        raise UnsupportedOpError(f"stablehlo.{what}", "a padding/initial value that is not a constant")
    return program.splats[base]


def _box_free(regions: list[np.ndarray]) -> int:
    """The free size of the memset tile ``kernels.shape.moves._const_tile`` makes for ``regions``."""
    return max((piece.shape[1] for r in regions if r.size
                for piece in shape_moves._pieces2d(shape_moves._in_order(r)[0], FREE_MAX)), default=0)


HELD_CONSTANT_BYTES = 1024  # per partition: the largest constant tile a launch keeps for its pads (a few KiB of SBUF)


def _held_constant(nc, env, dtype: np.dtype, value, free: int):
    """A [128, >= free] SBUF tile of ``value``, memset once per launch and kept for every pad step after it, as the
    eager kernels keep one zero tile for all their stores (eye, tril/triu): a 3-d reflection pad's backward pads
    17 blocks, and each pad's own memset was a VectorE instruction in a chain of 17 (3.06 us against the eager
    kernel's 2.20). None on the static replay's wide core (its tiles are recorded per step: each step memsets its
    own, the same bits) and where the tile would be larger than ``HELD_CONSTANT_BYTES`` a partition."""
    if getattr(nc, "wide", False) or free * np.dtype(dtype).itemsize > HELD_CONSTANT_BYTES:
        return None
    key = ("constant", np.dtype(dtype).str, repr(value))
    held = env.shared.get(key)
    if held is not None and held[0].shape[1] >= free:
        return held[0]
    live = held[1] if held is not None else []
    with nc.stream(live):
        if held is not None:
            nc.release(held[0])
        tile = nc.sbuf_tile((P, free), dtype)
        nc.vector.memset(tile, value)
    env.shared[key] = (tile, live)
    return tile


def _pad_boxes(step: dict, program: Program) -> list[tuple] | None:
    """Without interior padding only the boxes around the copied interior are filled, from one tile memset to
    the value, as the eager constant_pad_nd kernel does (kernels/shape/pad.py), not the whole result first: the
    boxes' index tuples into the result (None with interior padding)."""
    operand, result = step["operands"][0], step["results"][0]
    lo = step["attrs"]["edge_padding_low"]
    if any(step["attrs"].get("interior_padding", [0] * len(lo))):
        return None
    boxes, inner = [], []
    for n, a, o in zip(program.shape(operand), lo, program.shape(result)):
        start, stop = max(a, 0), o - max(o - n - a, 0)
        boxes += [tuple(inner) + (box,) for box in (slice(0, start), slice(stop, o)) if box.stop > box.start]
        inner.append(slice(start, stop))
    return boxes


def _boxes_free(step: dict, program: Program) -> int:
    """``_box_free`` of a pad step's boxes in its result laid out row-major (an arena or output buffer)."""
    boxes = _pad_boxes(step, program)
    if not boxes:
        return 0
    dtype = program.dtype(step["results"][0])
    shape = program.shape(step["results"][0])
    strides = [dtype.itemsize * math.prod(shape[d + 1:]) for d in range(len(shape))]
    out = np.lib.stride_tricks.as_strided(np.empty(1, dtype), shape, strides)  # no bytes: only its layout is read
    return _box_free([out[box] for box in boxes])


def _fill_width(step: dict, program: Program) -> int:
    """The free size of the constant tile a pad step stores: as wide as its boxes' pieces, or where those are
    wider than the result's flat tiles (or there are none), its first flat tile (``_pad``'s choice)."""
    tiles = list(flat_tiles(math.prod(program.shape(step["results"][0]))))
    if not tiles:
        return 0
    box_free = _boxes_free(step, program) if _pad_boxes(step, program) is not None else None
    return tiles[0][3] if box_free is None or box_free > tiles[0][3] else box_free


def _own_memset_cycles(step: dict, program: Program) -> int:
    """VectorE cycles of a pad step's own memsets (no held constant): one tile of ``_fill_width``, or one per flat
    tile where it fills the whole result."""
    overhead = PLATFORM.instruction_overhead_cycles
    tiles = list(flat_tiles(math.prod(program.shape(step["results"][0]))))
    box_free = _boxes_free(step, program) if _pad_boxes(step, program) is not None else None
    if not tiles:
        return 0
    if box_free is None or box_free > tiles[0][3]:
        return sum(overhead + f for _, _, _, f in tiles)
    return overhead + box_free


def _pad(step: dict, program: Program) -> Runner:
    operand, value_vid = step["operands"]
    result = step["results"][0]
    value = _splat_operand(program, value_vid, "pad")
    lo = step["attrs"]["edge_padding_low"]  # the high padding follows from the result shape
    interior = step["attrs"].get("interior_padding", [0] * len(lo))
    out_shape = program.shape(result)
    src_index, dst_index = [], []
    for n, a, s, o in zip(program.shape(operand), lo, interior, out_shape):
        step_ = s + 1
        i0 = -(-(-a) // step_) if a < 0 else 0
        i1 = max(i0, min(n, -(-(o - a) // step_))) if n > 0 else 0
        src_index.append(slice(i0, i1))
        j0 = a + i0 * step_
        dst_index.append(slice(j0, j0 + (i1 - i0 - 1) * step_ + 1 if i1 > i0 else j0, step_))

    boxes = _pad_boxes(step, program)
    # the held constant's width: the widest boxes of this program's pads of the value (the first one memsets it);
    # held only where its one memset costs VectorE no more than the pads' own memsets
    alike = [other for other in program.steps if other["kind"] == "pad"
             and program.dtype(other["results"][0]) == program.dtype(result)
             and repr(_splat_operand(program, other["operands"][1], "pad")) == repr(value)]
    widest = max((_fill_width(other, program) for other in alike), default=0)
    held_cycles = PLATFORM.instruction_overhead_cycles + widest
    # (nothing to hold where no pad of the value fills anything: a crop, F.pad(x, (-1, 0)))
    hold = widest > 0 and held_cycles <= sum(_own_memset_cycles(other, program) for other in alike)

    def run(nc, env) -> None:
        out = env.access(result)
        if out.size == 0:
            return
        regions = [out[box] for box in boxes] if boxes is not None else None
        # boxes whose pieces are wider than the whole result's flat tiles take a longer memset (VectorE's
        # cost follows the free size): the whole result is filled then (reflection_pad3d_backward's pads)
        boxed = regions is not None and _box_free(regions) <= next(iter(flat_tiles(out.size)))[3]
        flat = out.reshape(-1) if out.flags.c_contiguous else None
        held = _held_constant(nc, env, out.dtype, value, widest) if hold and (boxed or flat is not None) else None
        if held is not None:  # a constant tile held for the launch (memset by the first pad)
            if boxed:
                for region in regions:
                    shape_moves._fill(nc, region, held)
            else:
                for start, stop, p, f in flat_tiles(out.size):
                    nc.dma.store(flat[start:stop].reshape(p, f), held[:p, :f])
        elif not boxed:
            indexing.fill(nc, out, value)
        else:
            const = shape_moves._const_tile(nc, out.dtype, value, regions)
            for region in regions:
                shape_moves._fill(nc, region, const)
        src = env.access(operand)[tuple(src_index)]
        if src.size:
            nc.dma.hbm_copy(out[tuple(dst_index)], src)

    return run


def _copy(step: dict, program: Program) -> Runner:
    def run(nc, env) -> None:
        dst = env.output(step["output"])
        if dst.size:
            indexing.copy_into(nc, dst, env.access(step["src"]))

    return run


def _fill(step: dict, program: Program) -> Runner:
    def run(nc, env) -> None:
        dst = env.output(step["output"]) if "output" in step else env.access(step["result"])
        if dst.size:
            indexing.fill(nc, dst, step["value"])

    return run


# a whole-tensor arg reduction of at least this many columns takes the eager kernel's flat tiling (its columns over
# the partitions) instead of one partition's arg_reduce, whose cost grows with the columns: measured one row of
# 513 columns 0.67 us one-partition against 1.51 flat, 1539 columns 1.60 against 1.52, 2049 2.06 against 1.52
# (a flat tiling with a partial piece costs about 0.6 us more than a whole one, so 12 tiles' width is where it
# wins either way)
_FLAT_MIN_COLS = 12 * P


def _read_by_program(program: Program, vid: int) -> bool:
    """Whether any step reads ``vid``'s buffer or the program returns it."""
    from device_impl.compiler.schedule import step_reads

    base = program.base(vid)
    return any(program.base(o) == base for o in program.outputs) or any(
        program.base(r) == base for step in program.steps for r in step_reads(step))


def _arg_reduce(step: dict, program: Program) -> Runner:
    """stablehlo.reduce of (values, iota) with a compare/select body: VectorE's arg_reduce per row
    (first index of the extreme; NaN counts as the extreme, as PyTorch's argmax/argmin); a whole-tensor reduction
    of at least ``_FLAT_MIN_COLS`` columns as the eager kernel's flat tiling (``extrema.arg_program``), its values
    stored only where something reads them."""
    values, _iota_vid = step["operands"][:2]
    out_values, out_indices = step["results"]
    dims = sorted(step["attrs"]["dimensions"])
    shape = program.shape(values)
    keep = [d for d in range(len(shape)) if d not in dims]
    rows = math.prod(shape[d] for d in keep)
    cols = math.prod(shape[d] for d in dims)
    op = "maximum" if step["kind"] == "argmax" else "minimum"
    kept = [shape[d] for d in keep]
    flat = rows == 1 and cols >= _FLAT_MIN_COLS
    values_read = _read_by_program(program, out_values)  # argmax's values: computed, never stored

    def run(nc, env) -> None:
        if rows == 0 or cols == 0:
            return
        # a whole-tensor reduction of many columns: the eager kernel's flat tiling, the columns spread over the
        # partitions (one row per partition put argmax(dim=None) of a [3, 513] tensor on one partition: 2.60 us
        # against the kernel's 2.52)
        if flat:
            arg_program(nc, env.access(values), dims, op,
                        np.reshape(env.access(out_values), kept, copy=False) if values_read else None,
                        np.reshape(env.access(out_indices), kept, copy=False))
            return
        src = Access2D(env.access(values).transpose(keep + dims), len(keep))
        ov = np.reshape(env.access(out_values), (rows, 1), copy=False)
        oi = np.reshape(env.access(out_indices), (rows, 1), copy=False)
        for r0 in range(0, rows, P):
            r1 = min(rows, r0 + P)
            with nc.scope():
                x = nc.sbuf_tile((r1 - r0, cols), src.x.dtype)
                for a0, a1, b0, b1, view in src.pieces(r0, r1, 0, cols):
                    nc.dma.load(x if (a0, a1, b0, b1) == (0, r1 - r0, 0, cols) else x[a0:a1, b0:b1], view)
                v = nc.sbuf_tile((r1 - r0, 1), ov.dtype)
                i = nc.sbuf_tile((r1 - r0, 1), oi.dtype)
                nc.vector.arg_reduce(v, i, x, op)
                nc.dma.store(ov[r0:r1], v)
                nc.dma.store(oi[r0:r1], i)

    return run


def _sort(step: dict, program: Program) -> Runner:
    """stablehlo.sort of (keys[, iota]) along one dimension: GpSimd's per-partition sort with
    PyTorch's order (NaN largest; ties as CPU's std::sort when not stable)."""
    compare = lowering.body_ops(step)[0]
    ascending = (compare["attrs"]["comparison_direction"] == "LT") == (compare["operands"] == ["a0", "a1"])
    return _sort_rows_runner(step, program, step["attrs"]["dimension"], ascending,
                             bool(step["attrs"].get("is_stable", False)))


def _sort_whole(step: dict, program: Program) -> Runner:
    """``sort.stable`` cut whole (compiler/opaque.py): the eager kernel's sort, its order and tie rule the cut's
    options (``kernels.indexing.sort.stable_order``); ``topk`` cut whole likewise, with the eager topk kernel's tie
    rule (``topk``, ``sorted``: CPU's partial sort)."""
    attrs = step["attrs"]
    return _sort_rows_runner(step, program, attrs["dim"], not attrs["descending"], attrs["stable"],
                             topk=bool(attrs.get("topk", False)), sorted_=bool(attrs.get("sorted", True)))


def _sort_rows_runner(step: dict, program: Program, dim: int, ascending: bool, stable: bool, topk: bool = False,
                      sorted_: bool = True) -> Runner:
    """Values[, indices] of keys sorted along ``dim``, row by row on GpSimd (``indexing.sort_rows``); ``topk``: the
    first k of each row with CPU's topk tie order (``sorted_``: its sorted flag)."""
    keys = step["operands"][0]
    results = step["results"]
    shape = program.shape(keys)
    n = shape[dim] if shape else 1
    rows = math.prod(shape) // n if n else 0
    # the first k of each sorted row: k < n where the results are a topk's prefix (compiler/sort_prefix.py)
    out_shape = program.shape(results[0])
    k = out_shape[dim] if out_shape else 1

    def run(nc, env) -> None:
        if rows == 0 or n == 0 or k == 0:
            return
        x = np.moveaxis(_operand_array(env, program, keys), dim, -1).reshape(rows, n)
        values = np.moveaxis(env.access(results[0]), dim, -1)
        v2d = _rows_or_scratch(env, values, rows, k)
        if len(results) > 1:
            perm = np.moveaxis(env.access(results[1]), dim, -1)
            i2d = _rows_or_scratch(env, perm, rows, k, I64)
        else:
            perm, i2d = None, env.scratch_array((rows, k), I64)
        indexing.sort_rows(nc, x, v2d, i2d, descending=not ascending, stable=stable, topk=topk, sorted_=sorted_)
        if not np.shares_memory(v2d, values):
            nc.dma.hbm_copy(values, v2d.reshape(values.shape))
        if perm is not None and not np.shares_memory(i2d, perm):
            indexing.copy_into(nc, perm, i2d.reshape(perm.shape))

    return run


def _rows_or_scratch(env, view: np.ndarray, rows: int, n: int, dtype: np.dtype | None = None) -> np.ndarray:
    dtype = view.dtype if dtype is None else dtype
    if dtype == view.dtype:
        try:
            return np.reshape(view, (rows, n), copy=False)
        except ValueError:
            pass
    return env.scratch_array((rows, n), dtype)


def _reduce_window(step: dict, program: Program) -> Runner:
    operand, init_vid = step["operands"]
    result = step["results"][0]
    init = _splat_operand(program, init_vid, "reduce_window")
    alu = lowering.reducer(step)
    shape = program.shape(operand)
    rank = len(shape)
    attrs = step["attrs"]
    window = attrs["window_dimensions"]
    strides = attrs.get("window_strides", [1] * rank)
    base_dil = attrs.get("base_dilations", [1] * rank)
    win_dil = attrs.get("window_dilations", [1] * rank)
    padding = attrs.get("padding", [[0, 0]] * rank)
    out_shape = program.shape(result)
    scan_dims = [d for d in range(rank) if window[d] != 1 or padding[d] != [0, 0]]
    if (len(scan_dims) == 1 and alu in lowering_scans() and all(s == 1 for s in strides)
            and all(b == 1 for b in base_dil) and all(w == 1 for w in win_dil)
            and window[scan_dims[0]] == shape[scan_dims[0]] and padding[scan_dims[0]] == [shape[scan_dims[0]] - 1, 0]):
        return _scan(scan_dims[0], alu, operand, result, shape)
    offsets = [tuple(int(i) for i in w) for w in np.ndindex(*window)]

    def run(nc, env) -> None:
        out = env.access(result)
        if out.size == 0:
            return
        x = env.access(operand)
        if any(p != [0, 0] for p in padding) or any(b != 1 for b in base_dil):
            x = pad_view(nc, env.scratch, x, [p[0] for p in padding], [p[1] for p in padding], init, step=base_dil)
        compute = compute_dtype(out.dtype)
        views = []
        for w in offsets:
            index = tuple(slice(w[d] * win_dil[d], w[d] * win_dil[d] + (out_shape[d] - 1) * strides[d] + 1,
                                strides[d]) for d in range(rank))
            views.append(x[index])
        for start, stop, p, f in flat_tiles(out.size):
            with nc.scope():
                acc = nc.sbuf_tile((p, f), compute)
                nc.vector.memset(acc, init)  # the init takes part, as StableHLO says (0.0 + -0.0 is 0.0)
                for view in views:
                    t = nc.sbuf_tile((p, f), view.dtype)
                    nc.dma.load_flat(t, view, start, stop)
                    nc.vector.tensor_tensor(acc, acc, t, alu, dtype=compute)
                    nc.release(t)
                final = acc
                if out.dtype != compute:
                    final = nc.sbuf_tile((p, f), out.dtype)
                    nc.vector.tensor_copy(final, acc)
                nc.dma.store_flat(out, start, stop, final)

    return run


def lowering_scans() -> frozenset[str]:
    from device_impl.engine.isa import SCANS

    return frozenset(SCANS)


def _scan(dim: int, alu: str, operand: int, result: int, shape: tuple[int, ...]) -> Runner:
    """A window spanning the whole dimension, padded by n - 1 before: an inclusive scan (cumsum,
    cumprod, cummax, cummin) on VectorE along the free axis."""
    keep = [d for d in range(len(shape)) if d != dim]
    n = shape[dim]
    rows = math.prod(shape) // n if n else 0

    def run(nc, env) -> None:
        if rows == 0:
            return
        src = Access2D(env.access(operand).transpose(keep + [dim]), len(keep))
        dst = Access2D(env.access(result).transpose(keep + [dim]), len(keep))
        compute = compute_dtype(src.x.dtype)
        if scan_spread.spreads(n, rows, alu, src.x.dtype, compute):  # one long integer row: over the partitions
            scan_spread.scan_spread(nc, np.reshape(src.x, (n,), copy=False), np.reshape(dst.x, (n,), copy=False),
                                    alu, compute)
            return
        # CPU's cumsum/cumprod of float32 carry the running value in double (acc_type): the eager kernel's GpSimd
        # double scan (kernels.reduction.scans.scan64), so the compiled scan rounds where CPU's and eager's do
        double = alu in ("add", "multiply") and src.x.dtype == np.float32 and dst.x.dtype == np.float32
        for r0 in range(0, rows, P):
            r1 = min(rows, r0 + P)
            if n > SCAN_CHUNK or double:
                _scan_chunked(nc, src, dst, r0, r1, n, alu, compute, double)
                continue
            with nc.scope():
                x = nc.sbuf_tile((r1 - r0, n), src.x.dtype)
                for a0, a1, b0, b1, view in src.pieces(r0, r1, 0, n):
                    nc.dma.load(x[a0:a1, b0:b1], view)
                y = nc.sbuf_tile((r1 - r0, n), dst.x.dtype)
                nc.vector.tensor_scan(y, x, alu, dtype=compute)
                for a0, a1, b0, b1, view in dst.pieces(r0, r1, 0, n):
                    nc.dma.store(view, y[a0:a1, b0:b1])

    return run


SCAN_CHUNK = 4096  # columns a scan holds in SBUF at once: a longer row (a flattened cumsum of 20k int64 is 160 KB a
# partition, twice) overflows the 192 KiB partition, so it is scanned in chunks carrying the running value


def _scan_chunked(nc, src: Access2D, dst: Access2D, r0: int, r1: int, n: int, alu: str, compute, double: bool) -> None:
    """Rows ``r0:r1`` of a scan chunk by chunk (SCAN_CHUNK columns). ``double``: float32 cumsum/cumprod on GpSimd in
    double, the eager kernel's ``scan64``, carrying the double running value between chunks. Otherwise each chunk
    after the first is scanned behind one extra column holding the previous chunk's last running value, kept in the
    compute dtype: the scan continues from exactly the value the whole-row scan had there (same operations in the
    same order, rounded to the result's dtype only when stored), so the result is the whole-row scan's bit for bit."""
    p = r1 - r0
    with nc.scope():
        carry = nc.sbuf_tile((p, 1), np.float64 if double else compute)
        for c0 in range(0, n, SCAN_CHUNK):
            c1 = min(n, c0 + SCAN_CHUNK)
            k = 0 if c0 == 0 or double else 1
            with nc.scope():
                x = nc.sbuf_tile((p, c1 - c0), src.x.dtype)
                for a0, a1, b0, b1, view in src.pieces(r0, r1, c0, c1):
                    nc.dma.load(x[a0:a1, b0:b1], view)  # pieces are relative to (r0, c0)
                if double:
                    out = nc.sbuf_tile((p, c1 - c0), dst.x.dtype)
                    scan64(nc, out, carry, x, alu, first=c0 == 0)
                else:
                    xc = nc.sbuf_tile((p, k + c1 - c0), compute)
                    if k:
                        nc.vector.tensor_copy(xc[:, 0:1], carry)
                    nc.vector.tensor_copy(xc[:, k:], x)
                    y = nc.sbuf_tile((p, k + c1 - c0), compute)
                    nc.vector.tensor_scan(y, xc, alu, dtype=compute)
                    nc.vector.tensor_copy(carry, y[:, k + c1 - c0 - 1:k + c1 - c0])
                    out = y[:, k:]
                    if dst.x.dtype != compute:
                        out = nc.sbuf_tile((p, c1 - c0), dst.x.dtype)
                        nc.vector.tensor_copy(out, y[:, k:])
                for a0, a1, b0, b1, view in dst.pieces(r0, r1, c0, c1):
                    nc.dma.store(view, out[a0:a1, b0:b1])


def _convolution(step: dict, program: Program) -> Runner:
    """stablehlo.convolution on the eager conv tile loops (TensorE): operands permuted to
    [N, C, spatial...] / [O, I, spatial...], padding and lhs dilation (zero insertion) applied into
    scratch first, then a stride/rhs-dilation/feature-group convolution.

    A transposed convolution (``_transposed``) runs as the eager kernel's instead: by output phase, never
    multiplying the zeros the StableHLO form inserts and pads with, since CPU's col2im and oneDNN
    deconvolution form no such products (an infinite weight or input next to them is not NaN there).
    A direct one that ``compiler.conv_padding`` marked ``skip_padding`` (CPU's kernel for it forms no product
    with padding) runs as the eager kernel's too, with the padding left to ``conv_run``."""
    lhs, rhs, *bias = step["operands"]  # the bias: fold.conv_bias's [O] operand, added as the eager kernel adds it
    result = step["results"][0]
    attrs = step["attrs"]
    layouts = attrs["dimension_numbers"]["layouts"]
    nsp = len(layouts[0]) - 2

    def order(layout: list[str], first: str, second: str) -> list[int]:
        return [layout.index(first), layout.index(second)] + [layout.index(str(i)) for i in range(nsp)]

    lperm, kperm, operm = order(layouts[0], "b", "f"), order(layouts[1], "o", "i"), order(layouts[2], "b", "f")
    strides = attrs.get("window_strides", [1] * nsp)
    padding = attrs.get("padding", [[0, 0]] * nsp)
    lhs_dil = attrs.get("lhs_dilation", [1] * nsp)
    rhs_dil = attrs.get("rhs_dilation", [1] * nsp)
    reversal = attrs.get("window_reversal", [False] * nsp)
    groups = attrs.get("feature_group_count", 1)

    transposed = _transposed(attrs, nsp)
    # compiler.conv_padding's compile-time answer: CPU's direct convolution of this problem forms no product with
    # its padding (set only on a direct convolution in PyTorch's layout with one padding on both sides)
    skip_padding = bool(attrs.get("skip_padding")) and not transposed

    def run(nc, env) -> None:
        out = env.access(result).transpose(operm)
        if out.size == 0:
            return
        x = env.access(lhs).transpose(lperm)
        w = env.access(rhs).transpose(kperm)
        b = env.access(bias[0]) if bias else None
        if transposed:
            # the operand is PyTorch's weight flipped and regrouped to [O, I/G, K...]: undo the flip, split O
            wg = _split(w, 0, (groups, w.shape[0] // groups))[(Ellipsis,) + (slice(None, None, -1),) * nsp]
            pads = [(k - 1) * d - p[0] for k, d, p in zip(w.shape[2:], rhs_dil, padding)]
            conv_transposed_run(nc, env.scratch, out, x, wg, nsp, list(lhs_dil), pads, list(rhs_dil), bias=b)
            return
        if skip_padding:  # as the eager kernel: padding applied by conv_run, which forms no product with it
            conv_run(nc, env.scratch, out, x, w, b, nsp, list(strides), [p[0] for p in padding], list(rhs_dil),
                     False, [0] * nsp, groups, skip_padding=True)
            return
        if any(reversal):
            w = w[(slice(None), slice(None)) + tuple(slice(None, None, -1) if r else slice(None) for r in reversal)]
        x = pad_view(nc, env.scratch, x, [p[0] for p in padding], [p[1] for p in padding], 0, step=lhs_dil)
        conv_run(nc, env.scratch, out, x, w, b, nsp, list(strides), [0] * nsp, list(rhs_dil), False, [0] * nsp,
                 groups)

    return run


def _transposed(attrs: dict, nsp: int) -> bool:
    """Whether a stablehlo.convolution is torch-mlir's form of a transposed convolution (aten.convolution
    with transposed=True): only that lowering sets ``lhs_dilation`` (to the stride, ones included); a direct
    convolution's has none, and its window stride, not lhs dilation, carries the stride. Its padding is
    (K - 1) * dilation - padding below, plus output_padding above, around a flipped weight."""
    return ("lhs_dilation" in attrs and list(attrs.get("window_strides", [1] * nsp)) == [1] * nsp
            and not any(attrs.get("window_reversal", [False] * nsp)) and attrs.get("batch_group_count", 1) == 1)


def _attention(step: dict, program: Program) -> Runner:
    """SDPA's fused forward (compiler/opaque.py cuts it whole out of the graph): the eager kernel's tile
    program (``kernels.attention.forward_program``, FlashAttention-2's schedule with the online softmax),
    so scores and probabilities stay in PSUM/SBUF and the step costs what the eager kernel's launch does."""
    from device_impl.kernels import attention

    read = lse_read(step, program)
    handoff = step.get("handoff")  # O's blocks left in SBUF for the product reading it next (build.attention_handoffs)

    given = step.get("given", {})  # q and k blocks an earlier epilogue left in SBUF (build.attention_inputs)

    def run(nc, env) -> None:
        blocks = {name: env.shared.pop(("given", vid), None) for name, vid in given.items()}
        try:
            call = attention_call(step, program, env, read)
            if call is None:
                return
            hand = None if handoff is None else attention.Handoff(call[0])
            tiles = {}
            for name, found in blocks.items():
                if found is not None:
                    tiles.update(_head_blocks(name, found[0], program.shape(given[name])))
            attention.forward_program(nc, *call, hand=hand, given=tiles)
        finally:
            for found in blocks.values():
                if found is not None:
                    with nc.stream(found[1]):
                        nc.release_to(0)
        if hand is not None:  # the product takes them as its row-major pieces of A and frees them (``pinned``)
            env.shared[("raw", handoff["lhs"], tuple(handoff["layout"]))] = (hand.pieces, hand.pinned)

    return run


def _head_blocks(name: str, blocks: list[tuple], shape: tuple) -> dict:
    """(name, b, h, l0, l1) -> the [l1 - l0, D] columns of head h in an epilogue's result block ``(tile, r0, r1, c0,
    c1)`` of a [B * L, H * D] product's order (build.attention_inputs), for each block within one batch's rows."""
    _, _, length, d = shape
    out = {}
    for tile, r0, r1, c0, c1 in blocks:
        b, l0 = divmod(r0, length)
        if (r1 - 1) // length != b or c0 % d or (c1 - c0) % d:
            continue
        for h in range(c0 // d, c1 // d):
            out[(name, b, h, l0, l0 + r1 - r0)] = tile[:, h * d - c0:(h + 1) * d - c0]
    return out


def lse_read(step: dict, program: Program) -> bool:
    """Whether any step or the program's outputs read an attention step's logsumexp (or a view of it)."""
    from device_impl.compiler.schedule import step_reads

    base = program.base(step["results"][1])
    return (any(program.base(o) == base for o in program.outputs)
            or any(program.base(r) == base for s in program.steps for r in step_reads(s)))


def attention_call(step: dict, program: Program, env, lse_read: bool = True) -> tuple | None:
    """(problem, O, logsumexp) of an attention step's execution in ``env``, or None when it computes nothing:
    what the tile program (``_attention``) and the static replay's wide runner (compiler/replay.py) take.
    The logsumexp is None where ``lse_read`` (``lse_read(step, program)``) is False, nothing reading it (an
    inference graph's: only the backward does), so neither path computes or stores it."""
    from device_impl.kernels import attention

    attrs = step["attrs"]
    out, lse = step["results"]
    q, k, v, *mask = (_operand_array(env, program, vid) for vid in step["operands"])
    pb = attention._Problem(q, k, v, mask[0] if mask else None, 0.0, attrs["causal"], attrs.get("scale"))
    pb.flash_lse, pb.flash_tail = bool(attrs.get("flash")), int(attrs.get("flash_tail", 0))  # CPU's flash rules
    o4, lse3 = env.access(out), (env.access(lse) if lse_read else None)
    return (pb, o4, lse3) if o4.size and pb.L and pb.S else None


def _attention_backward(step: dict, program: Program) -> Runner:
    """SDPA's fused backward: ``kernels.attention.backward_program`` (P recomputed from logsumexp per block,
    never in HBM), with its two fp32 HBM buffers (D = rowsum(dO * O) and the dQ accumulator) in scratch."""
    from device_impl.engine.dtypes import FP32
    from device_impl.kernels import attention

    attrs = step["attrs"]
    dq, dk, dv = step["results"]

    def run(nc, env) -> None:
        g, q, k, v, out, lse, *mask = (_operand_array(env, program, vid) for vid in step["operands"])
        pb = attention._Problem(q, k, v, mask[0] if mask else None, 0.0, attrs["causal"], attrs.get("scale"))
        if not (q.size and k.size):
            return
        rows = env.scratch_array((pb.B, pb.Hq, pb.L), FP32)
        dq32 = env.scratch_array((pb.B, pb.Hq, pb.L, pb.E), FP32)
        attention.backward_program(nc, pb, g, out, lse, rows, dq32, env.access(dq), env.access(dk), env.access(dv),
                                   None)

    return run


def _layer_norm(step: dict, program: Program) -> Runner:
    """``native_layer_norm`` (compiler/opaque.py cuts it whole): the eager kernel's tile program
    (``kernels.reduction.layer_norm.forward_program``) on the step's HBM arrays, so its results are the eager
    kernel's bit for bit (the affine step one multiply-add on GpSimd where CPU's kernels fuse) and the step
    costs what the eager launch does."""
    from device_impl.kernels.reduction.layer_norm import forward_program

    attrs = step["attrs"]
    out, mean, rstd = step["results"]

    def run(nc, env) -> None:
        x, *params = (_operand_array(env, program, vid) for vid in step["operands"])
        w = params.pop(0) if attrs["weight"] else None
        b = params.pop(0) if attrs["bias"] else None
        o, m, r = env.access(out), env.access(mean), env.access(rstd)
        if o.size == 0 and m.size == 0:
            return
        forward_program(nc, x, o, m, r, w, b, attrs["axis"], attrs["eps"], attrs["fused"])

    return run


def _layer_norm_backward(step: dict, program: Program) -> Runner:
    """``native_layer_norm_backward`` (compiler/opaque.py cuts it whole): the eager kernel's tile program
    (``kernels.reduction.layer_norm.backward_program``) on the step's HBM arrays, so the gradients are the eager
    kernel's bit for bit and the step costs what the eager launch does."""
    from device_impl.compiler.ir import numpy_dtype
    from device_impl.kernels.reduction.layer_norm import backward_program

    attrs = step["attrs"]
    stats = numpy_dtype(attrs["stats"]) if attrs.get("stats") else None

    def run(nc, env) -> None:
        dy, x, mean, rstd, *weight = (_operand_array(env, program, vid) for vid in step["operands"])
        if stats is not None:  # CPU's saved statistics of a float16/bfloat16 forward (compiler/opaque.py): [rows]
            mean, rstd = mean.astype(stats), rstd.astype(stats)  # values, rounded as the forward would store them
        results = iter(env.access(v) for v in step["results"])
        dx, dw, db = (next(results) if asked else None for asked in attrs["mask"])
        backward_program(nc, dy, x, mean, rstd, weight[0] if attrs["weight"] else None, dx, dw, db, attrs["axis"])

    return run


def _softmax_backward(step: dict, program: Program) -> Runner:
    """``_softmax_backward_data`` / ``_log_softmax_backward_data`` (compiler/opaque.py cuts them whole): the
    eager kernels' tile program (``kernels.reduction.softmax.backward_program``), CPU's fused multiply-adds on
    GpSimd, so the step's gradient is the eager kernel's bit for bit and costs what its launch does."""
    from device_impl.kernels.reduction.softmax import backward_program

    attrs = step["attrs"]
    (result,) = step["results"]

    def run(nc, env) -> None:
        grad, y = (_operand_array(env, program, vid) for vid in step["operands"])
        out = env.access(result)
        if out.size:
            backward_program(nc, grad, y, out, attrs["dim"], attrs["log"], attrs["fused"])

    return run


def _isin(step: dict, program: Program) -> Runner:
    """``isin`` (compiler/opaque.py cuts it whole): the eager kernel's tile program (``kernels.membership``),
    so the step's bits and device time are the eager launch's; several sorted chunks of test values wait in
    the program's scratch, as the eager kernel's in a device tensor."""
    import torch

    from device_impl.kernels import membership
    from device_impl.kernels.common import numpy_dtype

    attrs = step["attrs"]
    (result,) = step["results"]
    common = getattr(torch, attrs["common"])
    scalar = attrs.get("scalar")  # a None option is not stored

    def run(nc, env) -> None:
        out = env.access(result)
        if scalar is not None:
            (tests,) = (_operand_array(env, program, vid) for vid in step["operands"])
            membership.scalar_among_program(nc, scalar, tests, out, common, attrs["invert"])
            return
        x, tests = (_operand_array(env, program, vid) for vid in step["operands"])
        if out.size == 0:
            return
        chunks = membership.test_chunks(tests.size, common)
        scratch = env.scratch_array(membership.scratch_shape(chunks, common), numpy_dtype(common)) \
            if len(chunks) > 1 else None
        membership.among_program(nc, np.broadcast_to(x, out.shape), tests, out, common, attrs["invert"], scratch)

    return run


def _amp_unscale(step: dict, program: Program) -> Runner:
    """``_amp_foreach_non_finite_check_and_unscale`` cut whole (compiler/opaque.py): the eager kernel's program
    (``amp.scaler.unscale_program``), each gradient's result written tile by tile after its tile is read."""
    from device_impl.amp.scaler import unscale_program

    n = step["attrs"]["grads"]

    def run(nc, env) -> None:
        arrays = [_operand_array(env, program, vid) for vid in step["operands"]]
        outs = [env.access(vid) for vid in step["results"]]
        unscale_program(nc, arrays[:n], outs[:n], arrays[n].reshape(1, 1), outs[n].reshape(1, 1),
                        arrays[n + 1].reshape(1, 1))

    return run


def _amp_update_scale(step: dict, program: Program) -> Runner:
    """``_amp_update_scale`` cut whole (compiler/opaque.py): the eager kernel's program
    (``amp.scaler.update_scale_program``) on the one-element scale, tracker and found_inf."""
    from device_impl.amp.scaler import update_scale_program

    attrs = step["attrs"]

    def run(nc, env) -> None:
        scale, tracker, found = (_operand_array(env, program, vid).reshape(1, 1) for vid in step["operands"])
        scale_out, tracker_out = (env.access(vid).reshape(1, 1) for vid in step["results"])
        update_scale_program(nc, scale, tracker, found, scale_out, tracker_out, attrs["growth"], attrs["backoff"],
                             attrs["interval"])

    return run


def _cumprod(step: dict, program: Program) -> Runner:
    """``cumprod`` cut whole (compiler/opaque.py): the eager kernel's scan program
    (``kernels.reduction.scans.scan_program``), so its bits and device time are the eager kernel's (the
    reduce_window scan, ``_scan``, tiles a dim other than the last less well: 1.83 us against 1.74)."""
    import torch

    from device_impl.kernels.reduction.scans import scan_program
    from device_impl.kernels.reduction.sums import _elem_for

    attrs = step["attrs"]
    (operand,) = step["operands"]
    (result,) = step["results"]
    rd = getattr(torch, attrs["result"])
    elem = _elem_for(torch.empty(0, dtype=getattr(torch, attrs["input"])), rd)

    def run(nc, env) -> None:
        out = env.access(result)
        if out.size:
            scan_program(nc, _operand_array(env, program, operand), out, attrs["dim"], "multiply", rd, elem)

    return run


def _unfold_backward(step: dict, program: Program) -> Runner:
    """``unfold_backward`` cut whole (compiler/opaque.py): the eager kernel's program
    (``kernels.shape.views.unfold_backward_program``), its fp32 accumulator for bfloat16/float16 in scratch."""
    from device_impl.engine.dtypes import FP32
    from device_impl.kernels.shape.views import unfold_backward_program

    attrs = step["attrs"]
    (operand,) = step["operands"]
    (result,) = step["results"]

    def run(nc, env) -> None:
        out = env.access(result)
        scratch = None if out.dtype.kind in "iub" or out.dtype == FP32 else env.scratch_array(out.shape, FP32)
        unfold_backward_program(nc, _operand_array(env, program, operand), out, scratch, attrs["dim"],
                                attrs["size"], attrs["step"])

    return run


def _view_scatter(step: dict, program: Program) -> Runner:
    """``slice_scatter``/``diagonal_scatter`` cut whole (compiler/opaque.py): the eager kernels' program
    (``kernels.indexing.gather_scatter.view_scatter_program``)."""
    import torch

    from device_impl.kernels.indexing.gather_scatter import VIEW_REGIONS, view_scatter_program

    attrs = step["attrs"]
    x, src = step["operands"]
    (result,) = step["results"]
    region, _ = VIEW_REGIONS[attrs["op"]](torch.empty(program.shape(x), device="meta"), *attrs["args"])

    def run(nc, env) -> None:
        out = env.access(result)
        if out.size:
            view_scatter_program(nc, out, _operand_array(env, program, x), _operand_array(env, program, src), region)

    return run


def _index_add(step: dict, program: Program) -> Runner:
    """``index_add`` cut whole (compiler/opaque.py): the eager kernel's program
    (``kernels.indexing.index_put.index_scatter_program``): self moved into the result, then source's slices added
    at the index in index order; its fp32 stage for bfloat16/float16 (CPU's scatter_add path) in scratch, and an
    out-of-range index raises the exception CPU's path raises."""
    from device_impl.engine.dtypes import FP32
    from device_impl.kernels.indexing.index_put import index_add_error, index_scatter_program

    o = step["attrs"]
    x, index, source = step["operands"]
    (result,) = step["results"]
    error = index_add_error(o["once"], o["dim"], program.shape(x)[o["dim"]])

    def run(nc, env) -> None:
        index_scatter_program(nc, env.access(result), _operand_array(env, program, x),
                              _operand_array(env, program, index), _operand_array(env, program, source), o["dim"],
                              "add", error, alpha=o["alpha"], once=o["once"], fused=o["fused"],
                              fp32_temp=lambda shape: env.scratch_array(shape, FP32))

    return run


RUNNERS: dict[str, Callable[[dict, Program], Runner]] = {
    "index_add": _index_add,
    "view_scatter": _view_scatter,
    "unfold_backward": _unfold_backward,
    "cumprod": _cumprod,
    "amp_unscale": _amp_unscale,
    "amp_update_scale": _amp_update_scale,
    "isin": _isin,
    "attention": _attention,
    "attention_backward": _attention_backward,
    "layer_norm": _layer_norm,
    "layer_norm_backward": _layer_norm_backward,
    "softmax_backward": _softmax_backward,
    "dot_general": _dot_general,
    "concatenate": _concatenate,
    "iota": _iota,
    "pad": _pad,
    "copy": _copy,
    "fill": _fill,
    "argmax": _arg_reduce,
    "argmin": _arg_reduce,
    "sort": _sort,
    "sort_whole": _sort_whole,
    "reduce_window": _reduce_window,
    "convolution": _convolution,
    "gather": gather.gather_runner,
    "scatter": gather.scatter_runner,
}
RUNNERS.update(opaque_cnn.RUNNERS)  # CNN ops cut whole (pooling with indices, batch norm)
RUNNERS.update(opaque_products.RUNNERS)  # dot, vdot, addbmm cut whole
RUNNERS.update(opaque_moments.RUNNERS)  # bfloat16/float16 var, std, var_mean, std_mean cut whole
RUNNERS.update(opaque_indexing.RUNNERS)  # embedding_dense_backward and index_copy cut whole
RUNNERS.update(opaque_pads.RUNNERS)  # reflection/replication padding (and reflection's backward) cut whole
RUNNERS.update(factories.RUNNERS)  # float32 linspace cut whole
RUNNERS.update(opaque_conv.RUNNERS)  # convolution_backward torch-mlir cannot import, cut whole
RUNNERS.update(opaque_resample.RUNNERS)  # upsampling's forward where the eager kernel is cheaper
RUNNERS.update(bitcast.RUNNERS)  # bitcast_convert (Tensor.view(dtype)): the operand's bytes copied


def make_runner(step: dict, program: Program) -> Runner:
    if step["kind"] == "fused":
        from device_impl.compiler.groups import GroupRunner

        return GroupRunner(step)
    return RUNNERS[step["kind"]](step, program)

