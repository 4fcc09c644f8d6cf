"""Concatenations that are layout ops: a value's blocks in reverse order, some negated (rotate_half).

Rotary embeddings (Llama's ``rotate_half``: ``cat((-x2, x1), dim=-1)``) reach StableHLO as a
``concatenate`` of slices of one value, some negated. ``concatenate`` is a step of its own
(``lowering.STEP_OPS``): it closes the open fused group, and ``x * cos + rotate_half(x) * sin`` became four
steps, each writing and reading HBM scratch (the decoder block's rotary moved 3.1 MB for 0.4 MB of q and k).

Cutting ``x`` along the concatenated dim into n equal blocks, a concatenation of its blocks n-1, ..., 0 is
``reverse`` of the block axis: ``reshape(reverse(reshape(x, [..., n, w, ...]), [d]), shape)``, layout ops
the reading DMA applies as an access pattern (a negative stride). Negated blocks become ``select(mask, -v, v)``
with a constant mask over the blocks, so every element is the same bits as before (the negation is the
same op on the same value). The chain then stays one fused group, which reads ``x`` (twice: two access
patterns) and writes once; in a flat group whose tiles hold whole concatenated rows, ``build.rotations`` turns
the select of the negated reversed view into one GpSimd permutation of ``x``'s tile, so ``x`` is read once.
"""

from __future__ import annotations

import numpy as np

from device_impl.compiler.ir import Graph, Op, TensorType


def _block(op: Op | None, producers: dict[int, Op], dim: int, shape: tuple[int, ...]):
    """(source value, first index along ``dim``, negated) when ``op`` is slice(x) or negate(slice(x)) taking
    a whole, unit-stride range of ``dim`` and all of every other dim of x; else None."""
    negated = False
    if op is not None and op.name == "negate":
        negated = True
        op = producers.get(op.operands[0])
    if op is None or op.name != "slice":
        return None
    a = op.attrs
    start, limit = list(a.get("start_indices", [])), list(a.get("limit_indices", []))
    strides = list(a.get("strides", [1] * len(start)))
    if len(start) != len(shape) or any(s != 1 for s in strides):
        return None
    for d, (lo, hi, n) in enumerate(zip(start, limit, shape)):
        if d != dim and (lo, hi) != (0, n):
            return None
    return op.operands[0], start[dim], negated


def _fresh(graph: Graph, t: TensorType) -> int:
    vid = max(max(graph.types, default=0), max(graph.constants, default=0), max(graph.splats, default=0)) + 1
    graph.types[vid] = t
    return vid


def reversed_blocks(graph: Graph) -> Graph:
    """Rewrite every concatenation of a value's equal blocks in reverse order (each block optionally
    negated) into layout ops plus, where a block is negated, a select (see the module docstring)."""
    producers = graph.producers()
    ops: list[Op] = []
    for op in graph.ops:
        new = _rewrite(graph, op, producers) if op.name == "concatenate" and len(op.operands) >= 2 else None
        ops.extend(new if new is not None else [op])
    graph.ops = ops
    return graph


def _rewrite(graph: Graph, op: Op, producers: dict[int, Op]) -> list[Op] | None:
    dim = int(op.attrs["dimension"])
    out = op.type
    n = len(op.operands)
    blocks = [_block(producers.get(v), producers, dim, out.shape) for v in op.operands]
    if any(b is None for b in blocks):
        return None
    source = blocks[0][0]
    src_type = graph.types.get(source)
    if src_type is None or src_type != TensorType(out.shape, out.dtype) or out.shape[dim] % n:
        return None
    width = out.shape[dim] // n
    # output block k is input block n - 1 - k
    if any(b[0] != source or b[1] != (n - 1 - k) * width for k, b in enumerate(blocks)):
        return None
    if any(graph.types[v].shape[dim] != width for v in op.operands):
        return None
    split = TensorType(out.shape[:dim] + (n, width) + out.shape[dim + 1:], out.dtype)
    reshaped, flipped = _fresh(graph, split), _fresh(graph, split)
    new = [Op("reshape", (source,), (reshaped,), (split,), {}),
           Op("reverse", (reshaped,), (flipped,), (split,), {"dimensions": [dim]})]
    negated = [b[2] for b in blocks]
    value = flipped
    if any(negated):
        negative = _fresh(graph, split)
        new.append(Op("negate", (flipped,), (negative,), (split,), {}))
        if all(negated):
            value = negative
        else:
            # [n, w], not [n] broadcast along the block: a stride-0 inner axis would cost a DMA descriptor
            # per element
            mask_type = TensorType((n, width), "bool")
            mask = _fresh(graph, mask_type)
            graph.constants[mask] = np.repeat(np.array(negated, dtype=np.bool_)[:, None], width, axis=1)
            wide_type = TensorType(split.shape, "bool")
            wide = _fresh(graph, wide_type)
            chosen = _fresh(graph, split)
            new += [Op("broadcast_in_dim", (mask,), (wide,), (wide_type,), {"broadcast_dimensions": [dim, dim + 1]}),
                    Op("select", (wide, negative, flipped), (chosen,), (split,), {})]
            value = chosen
    new.append(Op("reshape", (value,), op.results, op.types, {}))
    return new
