"""The compiler passes, in order: StableHLO (as ``ir.Graph``) -> ``Program``.

1. ``fold``: constant folding; ``dynamic_iota`` with constant lengths -> ``iota``;
2. ``check_static``: any ``?`` dimension left is a shape-contract violation; ``expansions.fold_expansions``:
   torch-mlir's expansion of erf (a rational approximation, ~40 ops), asinh, acosh, atanh, asin or acos
   becomes the one ScalarE op the eager kernel evaluates, numerics' floor division, remainder and trunc
   VectorE's one ALU op; ``fold.sink_small_ops``: a small input's convert read only through views moves
   onto the views, into its readers' group;
3. ``concat.reversed_blocks``: a concatenation of a value's blocks in reverse order (rotate_half) becomes
   layout ops, so it does not cut the chain around it into groups;
   dead-code elimination, then ``schedule.order_ops`` (heavy ops early, chains kept whole);
4. ``fusion.plan``: layout ops become views, elementwise chains and reductions
   fused groups, heavy ops steps (an op without a lowering raises
   UnsupportedOpError here, before anything runs);
5. ``layout.plan``: a product's B that is a static input (a parameter) read against TensorE's layout is read
   from a layout buffer, kept on the device in that layout by the runtime (``layout.Layouts``);
   ``memory.group_plan``: tile sizes of each fused group within SBUF; ``rotations`` found first, then
   ``attach_epilogues`` (groups run on a product's evacuation, also one reading it through a transpose: the
   rotary on the q and k projections), ``share_lhs`` (consecutive products of one operand keep its SBUF tiles),
   (``rotations``: a flat group's rotate_half as one GpSimd permutation of its source's tile),
   ``prepare_weights`` (a later product's weight tiles loaded and transposed by an earlier product step),
   ``handoffs`` (an epilogue's result blocks kept in SBUF as the next product's A), ``keep_products`` (a
   product's blocks kept in SBUF for a later product's epilogue), ``producer_layouts`` (an attention output kept
   in the arena in the order its product reads it);
6. ``schedule.finish``: buffers, output materialisation, HBM arena, waits.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from device_impl.compiler import concat, expansions, fold, fusion, iotas, layout, memory, schedule, sort_prefix
from device_impl.compiler import conv_padding as conv_padding_
from device_impl.compiler.ir import Graph
from device_impl.compiler.program import Program


def eliminate_dead_code(graph: Graph) -> Graph:
    needed = set(graph.outputs)
    kept = []
    for op in reversed(graph.ops):
        if any(r in needed for r in op.results):
            kept.append(op)
            needed.update(op.operands)
    graph.ops = kept[::-1]
    return graph


def _group_step(group: "fusion._Group", used: set[int], views: dict, types: dict) -> dict:
    rows, cols = group.rows_cols
    stores = [[slot, vid] for slot, (vid, cls, dtype) in enumerate(group.slots)
              if vid in used and slot not in group.loaded]
    step = {"kind": "fused", "shape": list(group.shape), "reduce_dims": group.reduce_dims, "rows": rows,
            "cols": cols, "slots": group.slots, "loaded": sorted(group.loaded), "loads": group.loads,
            "ops": group.ops, "stores": stores, "row_consumers": group.row_consumers}
    # a load broadcast along its innermost dims moves a DMA run per few elements: see memory.group_plan
    broadcast = any(_short_runs(vid, views, types) for _, vid in group.loads)
    step["tiles"] = memory.group_plan(step, balance=not broadcast)
    return step


SHORT_RUN = 16  # elements: a DMA run this short costs its descriptor (16 bytes) more than its payload


def _short_runs(vid: int, views: dict, types: dict) -> bool:
    """Does a load of ``vid`` read through a broadcast whose innermost non-broadcast run is shorter than
    ``SHORT_RUN`` elements (a 0-d value spread onto every element: a run, and a descriptor, per element)?"""
    while vid in views:
        view = views[vid]
        if view["op"] == "broadcast_in_dim":
            out, src = types[vid].shape, types[view["src"]].shape
            mapped = dict(zip(view["broadcast_dimensions"], src))
            run = 1
            for d in range(len(out) - 1, -1, -1):
                if mapped.get(d) != out[d] and out[d] != 1:
                    break
                run *= out[d]
            if run < SHORT_RUN:
                return True
        vid = view["src"]
    return False


EPILOGUE_SBUF_BYTES = 32 * 1024  # per partition, for one evacuated block's epilogue tiles


def _view_base(vid: int, views: dict) -> int:
    """The value ``vid`` is a view (chain) of, or ``vid`` itself."""
    while vid in views:
        vid = views[vid]["src"]
    return vid


def _reshapes_of(vid: int, base: int, views: dict) -> bool:
    """Is ``vid`` the value ``base`` itself or a chain of reshapes of it (the same row-major order)?"""
    while vid != base:
        view = views.get(vid)
        if view is None or view["op"] != "reshape":
            return False
        vid = view["src"]
    return True


def _product_order(group: dict, slots: list[int], product: int, views: dict, shapes: dict, n: int) -> dict | None:
    """How a flat group that reads the product [rows, n] through a transpose of its reshapes (a decoder's q
    projection read as [B, H, S, D] by the rotary: ``q.view(b, s, h, d).transpose(1, 2)``) iterates the product's
    row-major order: {"slot": the product's load, "perm": the transpose's permutation, "rows_dims": how many
    leading dims of the reshaped product make its rows, "drop": the product's other loads, each the reversed
    view a rotate_half reads (``rotations``: its rotated ops read the source slot's tile instead)}; None where
    that is not the case. The group is elementwise, so computing it per block of the product, every load and
    store read in the product's order, gives each element the same instructions (the rotation unit, whole in a
    block's row, stays innermost: the permutation keeps the last dim last)."""
    if group["reduce_dims"] is not None:
        return None
    rotations = group.get("rotations") or []
    dropped = {r["drop"][1] for r in rotations}
    main = [slot for slot in slots if slot not in dropped]
    if len(main) != 1:
        return None
    (slot,) = main
    loads = dict(group["loads"])
    if any(r["source"] != slot for r in rotations if r["drop"][1] in slots):
        return None
    view = views.get(loads[slot])
    if view is None or view["op"] != "transpose" or not _reshapes_of(view["src"], product, views):
        return None
    perm = list(view["permutation"])
    reshaped = tuple(shapes[view["src"]])
    if perm[-1] != len(perm) - 1 or tuple(group["shape"]) != tuple(reshaped[d] for d in perm):
        return None
    rows_dims = next((k for k in range(len(reshaped) + 1) if math.prod(reshaped[k:]) == n), None)
    if rows_dims is None or any(reshaped[-1] % r["unit"] or n % r["unit"] for r in rotations):
        return None
    from device_impl.kernels.matmul import EVACUATION_CHUNK

    if any(EVACUATION_CHUNK % r["unit"] for r in rotations):
        return None
    drop = sorted({r["drop"][0] for r in rotations} | dropped)
    if any(tuple(shapes[vid]) != tuple(group["shape"]) for s, vid in group["loads"] if s not in drop) or \
            any(tuple(shapes[vid]) != tuple(group["shape"]) for _, vid in group["stores"]):
        return None
    return {"slot": slot, "perm": perm, "rows_dims": rows_dims, "drop": drop}


def _one_block(shape) -> bool:
    """Is a product of ``shape`` (batch dims, rows, columns) evacuated as one block: one matrix of at most 128
    rows and ``matmul.EVACUATION_CHUNK`` columns? F.linear's [6, 17] @ [17, 3] and its bias add: as a group of
    its own the add was a step, the product's store and reload (1.885 us against eager addmm's 1.740)."""
    from device_impl.kernels.common import P
    from device_impl.kernels.matmul import EVACUATION_CHUNK

    return math.prod(shape[:-2]) == 1 and shape[-2] <= P and shape[-1] <= EVACUATION_CHUNK


def attach_epilogues(steps: list[dict], views: dict, outputs: set[int], shapes: dict) -> list[dict]:
    """Run a fused group that reads a matmul's product on the product's PSUM evacuation (issue 21:
    "elementwise and normalisation chains fused into matmul epilogues"), instead of storing the
    product to HBM and loading it back: the group becomes the ``epilogue`` of the dot_general step.

    The product [B*M, N] (batch, rows, columns of the dot; M >= 128) is evacuated in blocks of at most 128 rows
    and ``matmul.EVACUATION_CHUNK`` columns; a group can take over when it reads the product in
    row-major order (through reshapes) and every block is a block of its iteration space: a flat
    group of the product's element count, or a row group whose reduced dims are its trailing dims
    spanning exactly N <= EVACUATION_CHUNK columns (whole rows: a softmax over attention scores).
    The product must have no other reader and not be an output (nor a view of one), and the group's other inputs must
    exist when the dot runs (made by earlier steps). Results are the same bits: the group computes
    on the tile the store would have written, with the same instructions."""
    from device_impl.kernels.common import P
    from device_impl.kernels.matmul import EVACUATION_CHUNK

    def base(vid: int) -> int:
        return _view_base(vid, views)

    producer = {}
    readers: dict[int, list[int]] = {}
    for i, step in enumerate(steps):
        for vid in schedule.step_writes(step):
            producer[vid] = i
        for vid in schedule.step_reads(step):
            readers.setdefault(base(vid), []).append(i)
    returned = {base(vid) for vid in outputs}  # outputs (or views of them: copied out at the end) need HBM
    fused_into: dict[int, int] = {}
    for i, step in enumerate(steps):
        if step["kind"] != "dot_general":
            continue
        (product,) = step["results"]
        users = set(readers.get(product, []))
        if product in returned or len(users) != 1:
            continue
        (j,) = users
        group = steps[j]
        if group["kind"] != "fused" or j in fused_into or j < i:
            continue
        slots = [slot for slot, vid in group["loads"] if base(vid) == product]
        n = shapes[product][-1]
        order = None  # the group reads the product through a transpose (``_product_order``)
        if len(slots) != 1 or not _reshapes_of(dict(group["loads"])[slots[0]], product, views):
            order = _product_order(group, slots, product, views, shapes, n)
            if order is None:
                continue
            slots = [order["slot"]]
        numel = 1
        for d in shapes[product]:
            numel *= d
        if len(shapes[product]) < 2 or (shapes[product][-2] < P and not _one_block(shapes[product])):
            # fewer rows per matrix than partitions: the group alone runs over all batches' rows in
            # full 128-row tiles; as an epilogue it would pay every instruction per small block (Llama's
            # 8 x [32, 32] attention scores: 6.4 -> 9.2 us). A product evacuated in one block is the
            # exception: the epilogue pays each instruction once there too, as the group would
            continue
        if group["reduce_dims"] is None:
            fits = group["rows"] * group["cols"] == numel and group["tiles"]["free"] >= min(n, EVACUATION_CHUNK)
        else:
            trailing = list(range(len(group["shape"]) - len(group["reduce_dims"]), len(group["shape"])))
            fits = (sorted(group["reduce_dims"]) == trailing and group["cols"] == n <= EVACUATION_CHUNK
                    and group["rows"] * n == numel and group["tiles"]["chunk"] == n)
        # its tiles for one block sit beside the matmul's resident operands (at most 96 KiB a partition)
        fits = fits and group["tiles"]["bytes_per_column"] * min(n, EVACUATION_CHUNK) \
            + group["tiles"]["row_bytes"] <= EPILOGUE_SBUF_BYTES
        others = [vid for slot, vid in group["loads"] if slot not in slots
                  and (order is None or slot not in order["drop"])]
        if not fits or any(producer.get(base(v), -1) >= i for v in others):
            continue
        step["epilogue"] = dict(group, product_slot=slots[0])
        if order is not None:
            step["epilogue"]["order"] = order
        fused_into[j] = i
    return [step for j, step in enumerate(steps) if j not in fused_into]


def share_lhs(steps: list[dict]) -> list[dict]:
    """Consecutive products of the same left operand, read through the same dims (a decoder's q, k and v
    projections of the normalised activations; the MLP's gate and up), share its SBUF tiles: the first
    loads (and transposes) each stationary tile of A^T, the next take it from SBUF, the last frees them
    (``share_lhs`` of each step: ``last`` marks the one that frees; steps._dot_general,
    ``matmul.matmul_into``'s ``lhs_tiles``). Issue 21: "a weight or activation read from HBM once"."""
    def operand(step: dict):
        if step["kind"] != "dot_general":
            return None
        dn = step["attrs"]["dot_dimension_numbers"]
        return (step["operands"][0], tuple(dn.get("lhs_batching_dimensions", [])),
                tuple(dn.get("lhs_contracting_dimensions", [])))

    i = 0
    while i < len(steps):
        key = operand(steps[i])
        j = i + 1
        while key is not None and j < len(steps) and operand(steps[j]) == key:
            j += 1
        if j - i >= 2:
            for t in range(i, j):
                steps[t]["share_lhs"] = {"last": t == j - 1}
        i = max(j, i + 1)
    return steps


def handoffs(steps: list[dict], views: dict, shapes: dict, dtypes: dict, outputs: set[int] = frozenset()
             ) -> list[dict]:
    """A product whose epilogue stores a value the next product reads as its A (the o projection's norm result,
    read by the gate and up projections; the gated MLP's ``silu(g) * u``, read by the down projection) hands
    that product the value's blocks on chip: the epilogue computes each block into a tile that outlives it
    (``GroupRunner.epilogue``'s ``taps``), and the product takes them as its row-major pieces of A^T
    (``matmul_into``'s ``lhs_pieces``, ``steps._handed_pieces``), transposed by its own list scheduler among its
    matmuls as each block lands, instead of waiting for the stores, loading the blocks back and only then
    transposing them. Issue 21: "activations in the consumer's layout", as far as a row-major product goes
    (decoder block 49.4 -> 47.0 us). The value is still stored where another step or an output reads it
    (``_read_elsewhere``); the fast path computes it into its buffer either way.

    Only where the tiles line up: the producer's product has no batch dims and at least 128 rows, the value is
    a full (not per-row) result of the group that is the product itself in row-major order (reshapes only) and
    is the consumer's A as [M, K] (contracting its last dim, no batch dims), the consumer's operands are
    resident (it takes the pieces only then) and every step between the two is a product (no group's tiles
    beside the kept ones). A standalone row group hands its blocks over the same way (the attention norm's result,
    the q, k and v projections' A: ``GroupRunner.__call__``), where it holds whole rows of its trailing dims."""
    from device_impl.kernels.matmul import K_TILE, M_TILE, operands_resident

    for i, step in enumerate(steps):
        epilogue = step.get("epilogue")
        if step["kind"] == "fused":
            # a standalone row group (the attention norm before the q, k and v projections): its blocks are whole
            # rows of P rows, like a product's evacuated blocks, where it reduces over its trailing dims and holds
            # whole rows (``_pipelined``, not ``_phased``)
            trailing = list(range(len(step["shape"]) - len(step["reduce_dims"] or []), len(step["shape"])))
            if step["reduce_dims"] is None or sorted(step["reduce_dims"]) != trailing or \
                    step["tiles"]["chunk"] < step["cols"] or step["rows"] < M_TILE:
                continue
            rows, cols, group = step["rows"], step["cols"], step
        elif step["kind"] != "dot_general" or epilogue is None:
            continue
        else:
            dn = step["attrs"]["dot_dimension_numbers"]
            if dn.get("lhs_batching_dimensions"):
                continue
            (product,) = step["results"]
            rows = math.prod(shapes[product][:-1])
            cols = shapes[product][-1]
            if rows < M_TILE:
                continue
            group = epilogue
        stored = {vid: slot for slot, vid in group["stores"]}
        full = {slot for slot, (_, cls, _) in enumerate(group["slots"]) if cls == "full"}
        for j in range(i + 1, len(steps)):
            consumer = steps[j]
            if consumer["kind"] != "dot_general":
                break
            cdn = consumer["attrs"]["dot_dimension_numbers"]
            lhs = consumer["operands"][0]
            value = _view_base(lhs, views)
            if value not in stored:
                continue
            rank = len(shapes[lhs])
            if (cdn.get("lhs_batching_dimensions") or list(cdn.get("lhs_contracting_dimensions", [])) != [rank - 1]
                    or shapes[lhs][-1] != cols or math.prod(shapes[lhs]) != rows * cols
                    or math.prod(shapes[value]) != rows * cols or shapes[value][-1] != cols
                    or not _reshapes_of(lhs, value, views) or stored[value] not in full):
                break
            rc = cdn.get("rhs_contracting_dimensions", [])
            rhs = consumer["operands"][1]
            n = math.prod(extent for d, extent in enumerate(shapes[rhs]) if d not in rc)
            if operands_resident(-(-cols // K_TILE), rows, n, dtypes[lhs].itemsize, dtypes[rhs].itemsize):
                step["handoff"] = {"slot": stored[value], "lhs": lhs, "layout": list(range(rank)),
                                   "store": _read_elsewhere(steps, j, value, views, outputs, shapes, dtypes)}
            break
    return steps


# per partition: an attention output held in SBUF for the next product (all of it), in place of the A tiles that
# product would load itself (within its resident operands' 96 KiB: ``operands_resident``)
HANDED_OUTPUT_BYTES = 16 * 1024


def attention_inputs(steps: list[dict], shapes: dict) -> list[dict]:
    """An attention step whose q or k is stored by an earlier product's transposed epilogue (``_product_order``:
    the decoder's rotary on the q and k projections, computed per [128 tokens, heads * D] block of the product)
    takes that value's blocks on chip: the epilogue computes each block into a tile that outlives it
    (``GroupRunner.epilogue``'s ``taps``) and the attention reads each head's [128, D] columns of it in place of its
    load (``kernels.attention.forward_program``'s ``given``), instead of loading the value back after the
    epilogue's stores (the stores stay: the fast path and any other reader take the value from its buffer).
    Only where a query or key block is one of those blocks' rows (the sequence a multiple of 128, or one batch)
    and a head's D columns lie in one block (D divides the product's evacuation chunk and its columns). The same
    bits: the attention reads the same values."""
    from device_impl.kernels.attention import K_TILE, Q_TILE
    from device_impl.kernels.matmul import EVACUATION_CHUNK

    stored: dict[int, tuple[int, int]] = {}  # value -> (product step, its epilogue's slot)
    for j, step in enumerate(steps):
        tail = step.get("epilogue") if step["kind"] == "dot_general" else None
        if tail is None or "order" not in tail:
            continue
        order = tail["order"]
        if order["perm"] != [0, 2, 1, 3] or order["rows_dims"] != 2:
            continue
        for slot, vid in tail["stores"]:
            stored[vid] = (j, slot)
    for i, step in enumerate(steps):
        if step["kind"] != "attention":
            continue
        given = {}
        for name, vid, tile in (("q", step["operands"][0], Q_TILE), ("k", step["operands"][1], K_TILE)):
            if vid not in stored or stored[vid][0] >= i or len(shapes[vid]) != 4:
                continue
            j, slot = stored[vid]
            b, _, length, d = shapes[vid]
            n = shapes[vid][1] * d
            if (b > 1 and length % tile) or EVACUATION_CHUNK % d or n % d:
                continue
            producer = steps[j]
            if producer.get("handoff", {}).get("slot") == slot or producer.get("keep", {}).get("slot") == slot:
                continue
            producer.setdefault("attention_taps", []).append({"slot": slot, "value": vid})
            given[name] = vid
        if given:
            step["given"] = given
    return steps


def attention_handoffs(steps: list[dict], views: dict, shapes: dict, dtypes: dict, outputs: set[int]) -> list[dict]:
    """An attention step whose output O [B, H, L, Ev] is read only by the next step, a product reading it as its
    A = O.transpose(1, 2).reshape(B * L, H * Ev) (the decoder's o projection), hands that product O's blocks on
    chip (``kernels.attention.Handoff``): each query block's heads compute their outputs side by side into SBUF
    tiles the product takes as its row-major pieces of A^T (``matmul_into``'s ``lhs_pieces``), transposed by its
    list scheduler as they land, instead of loading O back after the attention's stores (the stores, and the
    producer layout that lets the loads read them in place, stay: the fast path and any reader take O from its
    buffer). Only where the pieces line up with the product's tiles: a query block in one M tile (B = 1 or L a
    multiple of 128), heads that tile its K tiles (Ev divides 128 or 128 divides Ev), resident operands, and
    all of O within ``HANDED_OUTPUT_BYTES`` a partition. The same bits: the product reads the same values."""
    from device_impl.kernels.matmul import K_TILE, M_TILE, operands_resident

    returned = {_view_base(vid, views) for vid in outputs}
    for i, step in enumerate(steps[:-1]):
        if step["kind"] != "attention":
            continue
        out = step["results"][0]
        consumer = steps[i + 1]
        if out in returned or consumer["kind"] != "dot_general" or len(shapes[out]) != 4:
            continue
        if any(_view_base(vid, views) == out for t, other in enumerate(steps) if t != i + 1
               for vid in schedule.step_reads(other)):
            continue
        b, h, length, ev = shapes[out]
        lhs = consumer["operands"][0]
        vid = lhs
        while vid in views and views[vid]["op"] == "reshape":
            vid = views[vid]["src"]
        view = views.get(vid)
        if view is None or view["op"] != "transpose" or view["src"] != out or \
                list(view["permutation"]) != [0, 2, 1, 3]:
            continue
        dn = consumer["attrs"]["dot_dimension_numbers"]
        rank = len(shapes[lhs])
        if dn.get("lhs_batching_dimensions") or list(dn.get("lhs_contracting_dimensions", [])) != [rank - 1] \
                or shapes[lhs][-1] != h * ev or (b > 1 and length % M_TILE):
            continue
        if K_TILE % ev and ev % K_TILE:
            continue
        rc = dn.get("rhs_contracting_dimensions", [])
        rhs = consumer["operands"][1]
        n = math.prod(extent for d, extent in enumerate(shapes[rhs]) if d not in rc)
        itemsize = dtypes[out].itemsize
        if b * -(-length // M_TILE) * h * ev * itemsize > HANDED_OUTPUT_BYTES or \
                not operands_resident(-(-(h * ev) // K_TILE), b * length, n, dtypes[lhs].itemsize,
                                      dtypes[rhs].itemsize):
            continue
        step["handoff"] = {"lhs": lhs, "layout": list(range(rank))}
    return steps


def _read_elsewhere(steps: list[dict], j: int, value: int, views: dict, outputs: set[int], shapes: dict,
                    dtypes: dict) -> bool:
    """Must a handed-off ``value`` still be stored? Not where the handoff's consumer ``steps[j]`` and the products
    of its ``share_lhs`` run after it (which take the consumer's transposed tiles: their operands resident) are
    its only readers and it is no output: no instruction would read the stored bytes (the fast path computes its
    own; the stores were 786 KB of the decoder block's on-chip DMA)."""
    from device_impl.kernels.matmul import K_TILE, operands_resident

    if value in {_view_base(vid, views) for vid in outputs}:
        return True
    lhs = steps[j]["operands"][0]
    takers = {j}
    if steps[j].get("share_lhs") is not None and not steps[j]["share_lhs"]["last"]:
        for t in range(j + 1, len(steps)):
            step = steps[t]
            if step.get("share_lhs") is None or step["operands"][0] != lhs or \
                    step["attrs"]["dot_dimension_numbers"] != steps[j]["attrs"]["dot_dimension_numbers"]:
                return True
            rhs = step["operands"][1]
            rc = step["attrs"]["dot_dimension_numbers"].get("rhs_contracting_dimensions", [])
            k = math.prod(shapes[rhs][d] for d in rc)
            n = math.prod(extent for d, extent in enumerate(shapes[rhs]) if d not in rc)
            if not operands_resident(-(-k // K_TILE), math.prod(shapes[lhs]) // max(k, 1), n,
                                     dtypes[lhs].itemsize, dtypes[rhs].itemsize):
                return True
            takers.add(t)
            if step["share_lhs"]["last"]:
                break
    return any(_view_base(vid, views) == value for t, step in enumerate(steps) if t not in takers
               for vid in schedule.step_reads(step))


# per partition: a product's evacuated blocks kept in SBUF for a later product's epilogue (``keep_products``); with
# the arena (32 KiB), resident operands (96), an epilogue block (32) and prepared weights (24) within 192 KiB
KEPT_PRODUCT_BYTES = 8 * 1024


def keep_products(steps: list[dict], views: dict, outputs: set[int], shapes: dict, dtypes: dict) -> list[dict]:
    """A product that only a later product's epilogue reads (the gated MLP's gate, read by the silu * mul epilogue
    of the up product) keeps its evacuated blocks in SBUF, in the partition layout its evacuation wrote, and that
    epilogue reads them in place (``GroupRunner.epilogue``'s ``kept``) instead of the product being stored to the
    arena and loaded back: 1 MB of the decoder block's on-chip DMA, on its critical path. Issue 21: "activations
    in the consumer's layout".

    Only where the blocks line up: both products have the same batch, rows and columns (so ``matmul_into`` cuts
    them into the same [<= 128, <= EVACUATION_CHUNK] blocks), the consumer's epilogue is a flat group reading the
    value through reshapes only (row-major, as the product) in a slot no op writes and nothing else loads, the
    value has no other reader and is no output, every step between the two is a product (no group's tiles beside
    the kept ones) and the kept blocks fit ``KEPT_PRODUCT_BYTES`` a partition."""

    returned = {_view_base(vid, views) for vid in outputs}
    readers: dict[int, list[int]] = {}
    for j, step in enumerate(steps):
        for vid in schedule.step_reads(step):
            readers.setdefault(_view_base(vid, views), []).append(j)

    def dims(step: dict) -> tuple[int, int, int] | None:
        lhs, rhs = step["operands"]
        dn = step["attrs"]["dot_dimension_numbers"]
        lb, lc = dn.get("lhs_batching_dimensions", []), dn.get("lhs_contracting_dimensions", [])
        rb, rc = dn.get("rhs_batching_dimensions", []), dn.get("rhs_contracting_dimensions", [])
        ls, rs = shapes[lhs], shapes[rhs]
        return (math.prod(ls[d] for d in lb), math.prod(e for d, e in enumerate(ls) if d not in lb + lc),
                math.prod(e for d, e in enumerate(rs) if d not in rb + rc))

    for i, step in enumerate(steps):
        if step["kind"] != "dot_general":
            continue
        if "epilogue" in step:  # a value its epilogue stores, whole (not per row), in the product's row-major order
            tail = step["epilogue"]
            handed = step.get("handoff", {}).get("slot")
            candidates = [(vid, slot) for slot, vid in tail["stores"]
                          if tail["slots"][slot][1] == "full" and slot != handed]
        else:
            candidates = [(step["results"][0], None)]
        for value, source in candidates:
            if _keep(steps, i, value, source, readers, returned, views, shapes, dtypes, dims):
                break
    return steps


def _keep(steps: list[dict], i: int, value: int, source: int | None, readers: dict, returned: set, views: dict,
          shapes: dict, dtypes: dict, dims: Callable) -> bool:
    """``keep_products`` for one value of ``steps[i]`` (its product, ``source`` None, or its epilogue's result in
    slot ``source``): marks the producer and the consumer, True where it keeps it."""
    from device_impl.kernels.common import P
    from device_impl.kernels.matmul import EVACUATION_CHUNK

    step = steps[i]
    users = readers.get(value, [])
    if value in returned or len(users) != 1 or users[0] <= i:
        return False
    (j,) = users
    consumer = steps[j]
    if consumer["kind"] != "dot_general" or "epilogue" not in consumer or dims(consumer) != dims(step) or \
            "kept" in consumer:
        return False
    if any(steps[t]["kind"] != "dot_general" for t in range(i + 1, j)):
        return False
    tail = consumer["epilogue"]
    if tail["reduce_dims"] is not None:
        return False
    slots = [slot for slot, vid in tail["loads"] if _view_base(vid, views) == value]
    if len(slots) != 1 or slots[0] == tail["product_slot"]:
        return False
    (slot,) = slots
    if not _reshapes_of(dict(tail["loads"])[slot], value, views) or \
            any(op["slot"] == slot for op in tail["ops"]):
        return False
    batch, m, n = dims(step)
    if batch * m * n == 0 or batch * m * n != math.prod(shapes[value]):
        return False
    if source is not None and steps[i]["epilogue"]["reduce_dims"] is not None and n > EVACUATION_CHUNK:
        return False  # a row epilogue's blocks are whole rows: the consumer's are EVACUATION_CHUNK columns
    if batch * -(-m // P) * n * dtypes[value].itemsize > KEPT_PRODUCT_BYTES:  # a row block's n columns each
        return False
    step["keep"] = {"value": value, "slot": source}
    consumer["kept"] = {"value": value, "slot": slot}
    return True


def producer_layouts(steps: list[dict], views: dict, outputs: set[int]) -> dict[int, list[int]]:
    """value -> permutation: an attention step's output whose one reader is a product reading it through a
    transpose first (the decoder's o projection: O [B, H, S, D] read as [B, S, H, D] -> [B*S, H*D]) is kept in
    the arena in that transposed order (``executor.Executable``: the buffer a view of its bytes laid out
    permuted), so the product's A is a plain view of the arena and its tiles' loads read the attention's stores
    in place, each waiting for the stores of the bytes it reads, instead of the reshape copying the value off the
    device (read as HBM bytes, all at once after the whole attention step). The attention stores each
    (batch, head) block as rows of D elements (strided DMA). Issue 21: "activations in the consumer's layout"."""
    returned = {_view_base(vid, views) for vid in outputs}
    readers: dict[int, list[tuple[int, int]]] = {}
    for j, step in enumerate(steps):
        for vid in schedule.step_reads(step):
            readers.setdefault(_view_base(vid, views), []).append((j, vid))
    found: dict[int, list[int]] = {}
    for step in steps:
        if step["kind"] != "attention":
            continue
        out = step["results"][0]
        users = readers.get(out, [])
        if out in returned or not users or len({j for j, _ in users}) != 1 or \
                steps[users[0][0]]["kind"] != "dot_general":
            continue
        perms = set()
        for _, vid in users:
            while vid in views and views[vid]["src"] != out:
                vid = views[vid]["src"]
            view = views.get(vid)
            perms.add(tuple(view["permutation"]) if view is not None and view["op"] == "transpose" else None)
        (perm,) = perms if len(perms) == 1 else (None,)
        if perm is not None and list(perm) != sorted(perm):
            found[out] = list(perm)
    return found


PREPARE_SBUF_BYTES = 24 * 1024  # per partition: weight tiles made ahead and held for later products, at once


def prepare_weights(steps: list[dict], views: dict, inputs: set[int], shapes: dict, dtypes: dict) -> list[dict]:
    """Make a later product's weight tiles early, where TensorE idles (issue 21: "prefetch weights while the
    previous matmul runs"): a dot_general whose B is a graph input (a linear layer's weight, ``W.t()``) is
    loaded and transposed on TensorE by the first product of the run of consecutive dot_general steps it is in
    (``prepare`` lists the later products' results; ``steps._dot_general`` runs ``matmul.prepare_rhs`` after its
    own product) and kept in SBUF until its product takes it.

    TensorE runs in program order: the MLP's gate, up and down weights, transposed by their own steps, waited
    behind the gate product, which waits for the o projection's norm epilogue; made by the o projection's step,
    they are transposed while that epilogue runs (decoder block 53.3 -> 52.5 us). Made any earlier (before the
    rotary and attention steps, where TensorE idles longer), their loads went ahead of those steps' in the DMA
    queues and cost more than they saved (58.8 us). At most ``PREPARE_SBUF_BYTES`` a partition of prepared tiles
    are alive at once (estimated from the shapes as ``prepare_rhs`` allocates them; it makes nothing for a
    product whose operands are not resident)."""
    from device_impl.kernels.matmul import K_TILE, operands_resident

    live: list[tuple[int, int, int]] = []  # (preparer, target, bytes per partition)
    for j, step in enumerate(steps):
        if step["kind"] != "dot_general" or _view_base(step["operands"][1], views) not in inputs:
            continue
        dn = step["attrs"]["dot_dimension_numbers"]
        if dn.get("lhs_batching_dimensions") or dn.get("rhs_batching_dimensions"):
            continue
        preparer = j
        while preparer > 0 and steps[preparer - 1]["kind"] == "dot_general":
            preparer -= 1
        if preparer == j:
            continue
        lhs, rhs = step["operands"]
        rc = dn.get("rhs_contracting_dimensions", [])
        k = math.prod(shapes[rhs][d] for d in rc)
        n = math.prod(extent for d, extent in enumerate(shapes[rhs]) if d not in rc)
        m = math.prod(shapes[lhs]) // max(k, 1)
        k_tiles = -(-k // K_TILE)
        if not operands_resident(k_tiles, m, n, dtypes[lhs].itemsize, dtypes[rhs].itemsize):
            continue  # prepare_rhs makes nothing for it
        b_bytes = k_tiles * n * dtypes[rhs].itemsize
        if sum(b for f, t, b in live if not (t < preparer or j < f)) + b_bytes > PREPARE_SBUF_BYTES:
            continue
        live.append((preparer, j, b_bytes))
        steps[preparer].setdefault("prepare", []).append(step["results"][0])
    return steps


def rotations(step: dict, views: dict, constants: dict, shapes: dict) -> list[dict]:
    """A flat group's rotate_half (``concat.reversed_blocks``: ``select(mask, -r, r)`` where ``r`` is a value the
    group also loads, read through a reshape and a reverse of its block axis, and ``mask`` a constant over the
    blocks), as one GpSimd permutation of the loaded value's tile (``groups._emit_rotate``): the value is read
    from HBM once, not twice, the mask not at all, and VectorE's negate and select passes go (the decoder's
    rotary was DMA- and VectorE-bound). Each entry names the select's slot and the source slot, the blocks and
    which are negated, and the rotation unit (elements of a whole concatenated row); ``groups.GroupRunner`` uses
    it for every call whose tiles hold whole units. The same bits: a negation and copies."""
    if step["kind"] != "fused" or step["reduce_dims"] is not None:
        return []
    ops, loads = step["ops"], dict(step["loads"])
    slot_of_load = {vid: slot for slot, vid in step["loads"]}
    producer = {op["slot"]: op for op in ops}
    uses: dict[int, int] = {}
    for op in ops:
        for kind, x in op["args"]:
            if kind == "slot":
                uses[x] = uses.get(x, 0) + 1
    found = []
    for op in ops:
        if op["op"] != "select" or [k for k, _ in op["args"]] != ["slot"] * 3:
            continue
        (_, m), (_, neg), (_, r) = op["args"]
        negate = producer.get(neg)
        if negate is None or negate["op"] != "negate" or [tuple(a) for a in negate["args"]] != [("slot", r)]:
            continue
        if m not in loads or r not in loads or uses.get(m) != 1 or uses.get(neg) != 1 or uses.get(r) != 2:
            continue
        flipped = views.get(loads[r])
        if flipped is None or flipped["op"] != "reverse" or len(flipped.get("dimensions", [])) != 1:
            continue
        split = views.get(flipped["src"])
        if split is None or split["op"] != "reshape" or split["src"] not in slot_of_load:
            continue
        source = split["src"]
        wide = views.get(loads[m])
        if wide is None or wide["op"] != "broadcast_in_dim" or wide["src"] not in constants:
            continue
        (d,) = flipped["dimensions"]
        xs, ss = tuple(shapes[source]), tuple(shapes[flipped["src"]])
        if tuple(step["shape"]) != xs or len(ss) != len(xs) + 1 or ss[:d] != xs[:d] or ss[d + 2:] != xs[d + 1:]:
            continue
        n, w = ss[d], ss[d + 1]
        mask = np.asarray(constants[wide["src"]])
        if mask.shape != (n, w) or wide["broadcast_dimensions"] != [d, d + 1]:
            continue
        if not all(mask[k].all() or not mask[k].any() for k in range(n)):
            continue
        inner = 1
        for extent in xs[d + 1:]:
            inner *= extent
        found.append({"slot": op["slot"], "source": slot_of_load[source], "blocks": n, "unit": n * w * inner,
                      "negated": [bool(mask[k, 0]) for k in range(n)], "drop": [m, r, neg]})
    return found


def build(graph: Graph, name: str, input_names: list[str] | None = None, weights: frozenset[int] = frozenset(),
          conv_padding: dict[str, bool] | None = None) -> Program:
    """``weights``: positions of the graph inputs that hold still between executions (parameters and buffers:
    AOTAutograd's static inputs), which ``layout.plan`` may keep on the device in TensorE's layout.
    ``conv_padding``: ``compiler.conv_padding.decide``'s answers, recorded on the convolutions they name."""
    conv_padding_.mark(graph, conv_padding or {})
    graph = fold.fold_constants(graph)
    fold.check_static(graph, input_names)
    fold.merge_reductions(graph)
    fold.infinite_rows_from_max(graph)
    expansions.fold_expansions(graph)
    fold.sink_small_ops(eliminate_dead_code(graph))  # the expansions' replaced ops no longer read the values
    fold.conv_bias(graph)
    concat.reversed_blocks(graph)
    sort_prefix.sort_prefixes(graph)
    eliminate_dead_code(graph)
    schedule.order_ops(graph)
    planned, views, used = fusion.plan(graph)
    steps = []
    for step in planned:
        steps.append(_group_step(step["group"], used, views, graph.types) if step["kind"] == "fused" else step)
    layouts = layout.plan(steps, views, list(graph.inputs), weights, graph.types) if weights else {}
    shapes = {vid: t.shape for vid, t in graph.types.items()}
    for step in steps:  # before the epilogues: a rotary group read through a transpose becomes one (its rotations)
        found = rotations(step, views, graph.constants, shapes)
        if found:
            step["rotations"] = found
            step["tiles"] = memory.group_plan(step)  # uneven: its tiles keep whole rotation units (groups._flat)
    steps = attach_epilogues(steps, views, set(graph.outputs), shapes)
    steps = share_lhs(steps)
    dtypes = {vid: t.np_dtype for vid, t in graph.types.items()}
    steps = iotas.generate(steps, views, shapes, dtypes)
    steps = prepare_weights(steps, views, set(graph.inputs), shapes, dtypes)
    steps = handoffs(steps, views, shapes, dtypes, set(graph.outputs))
    steps = keep_products(steps, views, set(graph.outputs), shapes, dtypes)
    steps = attention_handoffs(steps, views, shapes, dtypes, set(graph.outputs))
    steps = attention_inputs(steps, shapes)
    referenced = set(graph.inputs) | set(graph.outputs) | set(views) | {v["src"] for v in views.values()}
    referenced.update(vid for step in steps if "epilogue" in step for vid in step["results"])
    for step in steps:
        referenced.update(schedule.step_reads(step))
        referenced.update(step.get("operands", ()))  # also those a runner takes as immediates (schedule.UNREAD)
        referenced.update(schedule.step_writes(step))
    constants = {vid: payload for vid, payload in graph.constants.items() if vid in referenced}
    splats = {vid: x for vid, x in graph.splats.items() if vid in referenced}
    types = {vid: (graph.types[vid].shape, graph.types[vid].dtype) for vid in referenced}
    program = Program(name=name, inputs=list(graph.inputs), outputs=list(graph.outputs), types=types,
                      views={v: views[v] for v in views if v in referenced}, splats=splats, buffers={},
                      steps=steps, constants=constants)
    program = schedule.finish(program)
    for vid, perm in producer_layouts(steps, views, set(graph.outputs)).items():
        if program.buffers.get(vid, {}).get("kind") == "scratch":
            program.buffers[vid]["perm"] = perm  # its bytes in this order (executor.Executable.arrays)
    program.buffers.update(layouts)  # read by steps, made before the launch (layout.Layouts), never written
    return program
