"""Dynamo-graph rewrites: attention written out op by op becomes scaled_dot_product_attention.

Models often spell attention as its math (``softmax(q @ k^T * scale + mask) @ v``: the Llama-style
``harness.models.DecoderBlock``, transformers' "eager" attention). Lowered op by op, its scores and
probabilities go through HBM between groups; as SDPA, the neuron backend compiles it to one
flash-attention step (``compiler/opaque.py``) whose scores stay in SBUF/PSUM. A Neuron compiler
recognises the pattern the same way. ``rewrite_attention`` runs on the graph Dynamo hands the backend,
before AOTAutograd, so training graphs get SDPA's fused backward as well.

A chain is rewritten only where SDPA computes the same function:
  * ``matmul(q, k.transpose(-2, -1))`` of 4-D operands with the same batch and head sizes;
  * then optionally a multiplication (or division) by a Python number: SDPA's ``scale`` (none: 1.0);
  * then optionally a mask: ``masked_fill(~ones(L, S, dtype=bool).tril(), -inf)`` (PyTorch's own
    ``is_causal``, top-left aligned; no row is fully masked), or the addition of a float tensor of the
    scores' dtype that broadcasts to them (``attn_mask``: added to the scores as SDPA does); a general
    bool mask is not taken (a fully masked row is NaN written out, 0 in SDPA);
  * ``softmax`` over the last dim (optionally in float32, then cast back to the scores' dtype), an
    optional dropout that does nothing (``p == 0`` or ``training=False``), ``matmul`` with v;
  * every intermediate has no other user (a model that returns its attention probabilities keeps them);
  * at least ``MIN_QUERIES`` queries (below that the written-out chain is the cheaper program).
Key and value heads repeated for grouped-query attention (``repeat_interleave`` or transformers'
``repeat_kv``) and read only by the chain are taken unrepeated, with ``enable_gqa``.
The arithmetic is then the flash kernel's: scores and softmax in float32 (the written-out form rounds
them to a bfloat16 model's dtype), within the tolerances compiled outputs are held to.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

_MATMUL = (operator.matmul, torch.matmul)
_MUL = (operator.mul, torch.mul)
_DIV = (operator.truediv, torch.div)
_ADD = (operator.add, torch.add)
_SOFTMAX = (torch.softmax, F.softmax)
_FLOATS = (torch.float32, torch.bfloat16, torch.float16)
# The flash kernel works one (batch, head, block of <= 128 queries) at a time: with fewer queries than
# partitions each block pays its instructions' fixed costs for a sliver of work, while the written-out
# chain's products and softmax run over all heads' rows at once. The tiny Llama (32 tokens, 8 heads of 16):
# compiled 48.9 us as written, 66.4 us as SDPA. Chains with fewer queries stay as written.
MIN_QUERIES = 128


def _call(node: Any, functions: tuple = (), methods: tuple = ()) -> bool:
    return isinstance(node, torch.fx.Node) and (
        (node.op == "call_function" and node.target in functions)
        or (node.op == "call_method" and node.target in methods))


def _value(node: Any) -> torch.Tensor | None:
    meta = node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None
    return meta if isinstance(meta, torch.Tensor) else None


def _arg(node: torch.fx.Node, index: int, name: str, default: Any = None) -> Any:
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _last_two(node: torch.fx.Node, rank: int) -> bool:
    """``node`` swaps the last two of ``rank`` dims (``transpose(-2, -1)``, ``transpose(2, 3)``, ``.mT``)."""
    if _call(node, (torch.transpose,), ("transpose",)):
        dims = {_arg(node, 1, "dim0") % rank, _arg(node, 2, "dim1") % rank}
        return dims == {rank - 2, rank - 1}
    return node.op == "call_function" and node.target is getattr and node.args[1] == "mT"


def _sole_user(node: torch.fx.Node, user: torch.fx.Node) -> bool:
    return list(node.users) == [user]


def _causal_keep(node: Any, rows: int, cols: int) -> bool:
    """``node`` is ``ones(rows, cols, dtype=bool).tril()`` (diagonal 0): PyTorch's is_causal mask."""
    if not _call(node, (torch.tril,), ("tril",)) or _arg(node, 1, "diagonal", 0) != 0:
        return False
    ones = node.args[0]
    if not _call(ones, (torch.ones,)):
        return False
    value = _value(node)
    return value is not None and value.dtype == torch.bool and tuple(value.shape) == (rows, cols)


def _softmax_input(p: torch.fx.Node, dtype: torch.dtype) -> torch.fx.Node | None:
    """The scores a probability node ``p`` (the second matmul's left operand) is the softmax of, or None."""
    chain = p
    if _call(chain, (F.dropout, torch.dropout)):
        if _arg(chain, 1, "p", 0.5) != 0 and _arg(chain, 2, "training", True) is not False:
            return None
        if not _sole_user(chain.args[0], chain):
            return None
        chain = chain.args[0]
    if _call(chain, (), ("to", "type")):
        if not _sole_user(chain.args[0], chain) or _value(chain) is None or _value(chain).dtype != dtype:
            return None
        chain = chain.args[0]
    if not _call(chain, _SOFTMAX, ("softmax",)):
        return None
    dim = _arg(chain, 1, "dim")
    value = _value(chain.args[0])
    if value is None or dim is None or dim % value.dim() != value.dim() - 1:
        return None
    dtype_arg = chain.kwargs.get("dtype")
    if chain.target is not F.softmax and len(chain.args) > 2:  # torch.softmax / Tensor.softmax(dim, dtype)
        dtype_arg = chain.args[2]
    if dtype_arg not in (None, torch.float32):
        return None
    if _value(p) is None or _value(p).dtype != dtype:
        return None
    return chain.args[0] if _sole_user(chain.args[0], chain) else None


def _match(final: torch.fx.Node) -> tuple[list, dict, list[torch.fx.Node]] | None:
    """(q, k, v), SDPA's keyword arguments and the chain's nodes, when ``final`` ends an attention chain."""
    if not _call(final, _MATMUL) or len(final.args) != 2:
        return None
    p, v = final.args
    qk_value, v_value = _value(p), _value(v)
    if qk_value is None or v_value is None or v_value.dim() != 4 or v_value.dtype not in _FLOATS:
        return None
    dtype = v_value.dtype
    scores = _softmax_input(p, dtype) if isinstance(p, torch.fx.Node) else None
    if scores is None:
        return None
    chain = [final]
    node = p
    while node is not scores:
        chain.append(node)
        node = node.args[0]
    chain.append(scores)
    kwargs: dict[str, Any] = {"attn_mask": None, "is_causal": False, "scale": 1.0}
    value = _value(scores)
    if value is None or value.dim() != 4 or value.dtype != dtype:
        return None
    rows, cols = value.shape[-2:]
    try:
        if int(rows) < MIN_QUERIES:
            return None
    except Exception:  # noqa: BLE001 - a symbolic query length: leave the chain alone
        return None
    if _call(scores, (), ("masked_fill",)) and isinstance(scores.args[1], torch.fx.Node):
        inverted = scores.args[1]
        if (not _call(inverted, (operator.invert, torch.bitwise_not, torch.logical_not)) or _arg(scores, 2, "value")
                != -math.inf or not _causal_keep(inverted.args[0], rows, cols) or not _sole_user(inverted, scores)):
            return None
        kwargs["is_causal"] = True
        scores = scores.args[0]
        chain.append(scores)
    elif _call(scores, _ADD) and len(scores.args) == 2 and all(isinstance(a, torch.fx.Node) for a in scores.args):
        left, mask = scores.args
        mask_value = _value(mask)
        if mask_value is None or mask_value.dtype != dtype or mask_value.dim() > 4 or _value(left) is None \
                or tuple(_value(left).shape) != tuple(value.shape) or len(scores.kwargs):
            return None
        kwargs["attn_mask"] = mask
        scores = left
        chain.append(scores)
    if not isinstance(scores, torch.fx.Node):
        return None
    if _call(scores, _MUL + _DIV) and len(scores.args) == 2:
        left, factor = scores.args
        if isinstance(left, (int, float)) and scores.target in _MUL:
            left, factor = factor, left
        if not isinstance(left, torch.fx.Node) or not isinstance(factor, (int, float)) or isinstance(factor, bool) \
                or not _sole_user(left, scores) or factor == 0:
            return None
        kwargs["scale"] = float(factor) if scores.target in _MUL else 1.0 / float(factor)
        scores = left
        chain.append(scores)
    if not _call(scores, _MATMUL) or len(scores.args) != 2:
        return None
    q, k_t = scores.args
    if not isinstance(k_t, torch.fx.Node) or not _last_two(k_t, 4) or not _sole_user(k_t, scores):
        return None
    k = k_t.args[0]
    chain.append(k_t)
    values = [_value(q), _value(k), v_value]
    if any(t is None or t.dim() != 4 or t.dtype != dtype for t in values):
        return None
    try:
        same = (values[0].shape[:2] == values[1].shape[:2] == values[2].shape[:2]
                and values[1].shape[2] == values[2].shape[2] == cols and values[0].shape[3] == values[1].shape[3]
                and values[0].shape[2] == rows)
        same = bool(same)
    except Exception:  # noqa: BLE001 - symbolic sizes that cannot be decided: leave the chain alone
        return None
    if not same:
        return None
    if any(not _sole_user(n, user) for n, user in zip(chain[1:], chain[:-1]) if n is not k_t):
        return None
    k, v = _absorb_repeats(q, k, v, (k_t, final), kwargs, chain)
    return [q, k, v], kwargs, chain


def _repeated_heads(node: torch.fx.Node) -> tuple[torch.fx.Node, list[torch.fx.Node]] | None:
    """(x, the repeat's nodes) when 4-D ``node`` repeats each head of ``x`` consecutively along dim 1: what
    SDPA's ``enable_gqa`` does to key and value. ``x.repeat_interleave(n, dim=1)`` or transformers'
    ``repeat_kv``: ``x[:, :, None].expand(b, h, n, s, d).reshape(b, h * n, s, d)``."""
    if _call(node, (torch.repeat_interleave,), ("repeat_interleave",)):
        repeats, dim = _arg(node, 1, "repeats"), _arg(node, 2, "dim")
        if isinstance(repeats, int) and dim is not None and dim % 4 == 1 and _value(node.args[0]) is not None:
            return node.args[0], [node]
        return None
    if not _call(node, (torch.reshape,), ("reshape", "view")):
        return None
    expand = node.args[0]
    if not _call(expand, (), ("expand",)) or not _sole_user(expand, node):
        return None
    item = expand.args[0]
    if not _call(item, (operator.getitem,)) or not _sole_user(item, expand):
        return None
    x, index = item.args
    full = slice(None, None, None)
    if index != (full, full, None, full, full) and index != (full, full, None):
        return None
    src, out = _value(x), _value(node)
    if src is None or out is None or src.dim() != 4 or out.dim() != 4:
        return None
    try:
        same = bool(out.shape[0] == src.shape[0] and out.shape[2:] == src.shape[2:]
                    and out.shape[1] % src.shape[1] == 0)
    except Exception:  # noqa: BLE001 - undecidable symbolic sizes
        return None
    return (x, [node, expand, item]) if same else None


def _absorb_repeats(q: torch.fx.Node, k: torch.fx.Node, v: torch.fx.Node, users: tuple[torch.fx.Node, torch.fx.Node],
                    kwargs: dict, chain: list) -> tuple[torch.fx.Node, torch.fx.Node]:
    """Key and value heads repeated for grouped-query attention, read by the chain alone: SDPA takes the
    unrepeated heads with ``enable_gqa`` (the kernel maps each query head to its group's key/value head)."""
    found = [_repeated_heads(k), _repeated_heads(v)]
    if any(f is None for f in found) or not _sole_user(k, users[0]) or not _sole_user(v, users[1]):
        return k, v
    (k0, k_nodes), (v0, v_nodes) = found
    kv, vv = _value(k0), _value(v0)
    if kv is None or vv is None or kv.shape[1] != vv.shape[1]:
        return k, v
    kwargs["enable_gqa"] = True
    chain.extend(k_nodes + v_nodes)
    return k0, v0


def rewrite_attention(gm: torch.fx.GraphModule) -> int:
    """Replace each written-out attention chain of ``gm`` (in place) by one SDPA call; the count."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if getattr(node, "_erased", False):
            continue
        found = _match(node)
        if found is None:
            continue
        (q, k, v), kwargs, chain = found
        with graph.inserting_before(node):
            sdpa = graph.call_function(F.scaled_dot_product_attention, (q, k, v), kwargs)
        sdpa.meta = dict(node.meta)
        node.replace_all_uses_with(sdpa)
        for dead in chain:  # final matmul first: each node's only user is gone before it goes
            if not dead.users:
                graph.erase_node(dead)
        count += 1
    if count:
        for dead in [n for n in reversed(graph.nodes) if n.op == "call_function" and not n.users
                     and n.target in (operator.invert, torch.bitwise_not, torch.logical_not, torch.tril, torch.ones)]:
            graph.erase_node(dead)
        for dead in [n for n in reversed(graph.nodes) if n.op == "call_method" and not n.users and n.target == "tril"]:
            graph.erase_node(dead)
        graph.lint()
        gm.recompile()
    return count
