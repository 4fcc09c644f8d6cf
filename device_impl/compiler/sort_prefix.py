"""A sort read only through a prefix of its sorted dim (topk) writes that prefix, and nothing else.

torch-mlir says ``topk(x, k, dim)`` as a ``stablehlo.sort`` of (x, iota) along ``dim`` and a ``slice`` of the
first k of each result. The sort step wrote both whole results (every row, n wide) to the scratch arena and two
copy steps then moved their k-wide slices into the outputs, each waiting for the sort (compiled topk of
[3, 1, 2, 513], k = 2 along dim 0: 3.42 us against the eager kernel's 3.19). GpSimd's row sort
(``indexing.sort_rows``) already stores only the first ``k`` (its output's width) of each sorted row, as the
eager topk kernel does, so ``sort_prefixes`` gives the sort op the slices' results: each result k wide along the
sorted dim, no slice, no copy; the runner (``steps._sort_rows_runner``) sorts the whole row and stores its prefix.
The same bits: the same sorted rows (and tie order), of which the slice kept the same first k. ``topk`` itself is
cut whole since (compiler/opaque.py ``_topk``: CPU's partial-sort tie order, which a full sort does not give), as
``sort`` is (``_sort``), and torch-mlir folds a topk along a dim of one element to a copy: no graph the backend
builds was found to reach this pass with a sort since (sort or argsort and prefix slices, msort, quantile, a
one-element topk: measured), so it serves only a ``stablehlo.sort`` that comes from elsewhere
(tests/compiler/test_compile_passes.py imports a topk directly to keep it tested).

Only where every result of the sort that anything reads is read by exactly one ``slice``, that slice keeps the first
k along the sorted dim and everything along the other dims (stride 1), the same k for every result, and no result
is a graph output itself.
"""

from __future__ import annotations

from device_impl.compiler.ir import Graph, Op, TensorType


def _prefix(op: Op, shape: tuple[int, ...], dim: int) -> int | None:
    """k where slice ``op`` of a value of ``shape`` keeps [0, k) along ``dim`` and all of every other dim."""
    a = op.attrs
    start, limit = list(a.get("start_indices", ())), list(a.get("limit_indices", ()))
    strides = list(a.get("strides", [1] * len(shape)))
    if len(start) != len(shape) or len(limit) != len(shape) or any(s != 1 for s in strides) or any(start):
        return None
    if any(limit[d] != shape[d] for d in range(len(shape)) if d != dim):
        return None
    return int(limit[dim])


def sort_prefixes(graph: Graph) -> Graph:
    """Each sort whose results are read only through one prefix slice each (the module docstring) made to
    produce those slices."""
    users = graph.users()
    outputs = set(graph.outputs)
    replaced: dict[int, Op | None] = {}  # id(op) -> its replacement (None: dropped)
    for op in graph.ops:
        if op.name != "sort" or not op.results:
            continue
        dim = op.attrs.get("dimension")
        shape = op.types[0].shape
        if not isinstance(dim, int) or not shape or any(r in outputs for r in op.results):
            continue
        slices: list[Op | None] = []
        ks = set()
        for r in op.results:
            readers = users.get(r, [])
            if not readers:
                slices.append(None)
                continue
            if len(readers) != 1 or readers[0].name != "slice" or id(readers[0]) in replaced:
                break
            k = _prefix(readers[0], graph.types[r].shape, dim)
            if k is None:
                break
            slices.append(readers[0])
            ks.add(k)
        else:
            if len(ks) != 1 or not any(slices):
                continue
            (k,) = ks
            if k >= shape[dim]:
                continue  # the whole row: the slice is an identity the planner already skips
            results, types = [], []
            for r, t, sl in zip(op.results, op.types, slices):
                if sl is None:  # unread: a value of the prefix's shape nobody reads
                    new = max(graph.types) + 1
                    graph.types[new] = TensorType(tuple(k if d == dim else n for d, n in enumerate(t.shape)),
                                                  t.dtype)
                    results.append(new)
                    types.append(graph.types[new])
                else:
                    results.append(sl.result)
                    types.append(sl.type)
                    replaced[id(sl)] = None
            replaced[id(op)] = Op(op.name, op.operands, tuple(results), tuple(types), dict(op.attrs))
    if replaced:
        graph.ops = [replaced.get(id(op), op) for op in graph.ops if replaced.get(id(op), op) is not None]
    return graph
