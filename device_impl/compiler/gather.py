"""stablehlo.gather and stablehlo.scatter: row moves by indirect DMA, addresses computed on GpSimd.

Both ops move *rows*: the innermost result (gather) or update (scatter)
dimension, when it is a window dimension, is a run of L elements at a fixed
stride in the operand; otherwise rows are single elements. For 128 rows at a
time (one per partition):

1. the index components of each row are DMA'd from HBM through a view that
   broadcasts the index tensor over the window dimensions (stride 0), so no
   index is copied or expanded in memory;
2. a GpSimd program turns them into the element offset of the row's first
   element (index x stride, plus the window coordinates of the row x stride),
   checking every index against the operand's bounds;
3. indirect DMA moves the rows (``dma.load_rows`` / ``dma.store_rows`` with
   compute-on-write accumulation for scatter-add, each row added in order, as
   CPU's serial loops add: ``x + a + b``, not ``x + (a + b)``) through a table
   view of the operand whose row ``o`` starts at element offset ``o``.

Dimension numbers StableHLO prints only when not their default (``index_vector_dim`` 0, an empty
list) are read with those defaults: a 0-d index (``F.embedding(torch.tensor(3), w)``) has none.

Out-of-range indices raise IndexError naming the index, as PyTorch does,
rather than being clamped (gather) or skipped (scatter) as StableHLO
specifies: the graph came from PyTorch, whose semantics the results must keep.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from numpy.lib.stride_tricks import as_strided

from device_impl.compiler.groups import Access2D
from device_impl.compiler.program import Program
from device_impl.kernels import indexing
from device_impl.kernels.common import P, flat_tiles

I64 = np.dtype(np.int64)
ROW_CHUNK = 8192  # elements per partition moved per indirect DMA (32 KiB of fp32)


def _estrides(v: np.ndarray) -> list[int]:
    return [s // v.itemsize for s in v.strides]


def _table(v: np.ndarray, run_stride: int, length: int) -> np.ndarray:
    """Rows of ``length`` elements at ``run_stride``, one starting at every element offset of ``v``."""
    span = 1 + sum((n - 1) * s for n, s in zip(v.shape, _estrides(v)) if n > 0)
    rows = max(span - (length - 1) * run_stride, 1)
    return as_strided(v, shape=(rows, length), strides=(v.itemsize, run_stride * v.itemsize),
                      writeable=v.flags.writeable)


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """The same elements at the same addresses (a copy from one to the other moves nothing)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.strides == b.strides \
        and a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


def _plain(nc, env, v: np.ndarray) -> np.ndarray:
    """``v`` itself when its strides are non-negative, else a contiguous copy in scratch."""
    if all(s >= 0 for s in v.strides):
        return v
    copy = env.scratch_array(v.shape, v.dtype)
    nc.dma.hbm_copy(copy, v)
    return copy


class _Rows:
    """The row structure shared by gather and scatter (see module docstring)."""

    def __init__(self, data_shape: tuple[int, ...], window_dims: list[int], window_operand_dims: list[int],
                 index_shape: tuple[int, ...], index_vector_dim: int, index_map: list[int],
                 operand_shape: tuple[int, ...], window_sizes: list[int]):
        rank = len(data_shape)
        self.run = bool(window_dims) and window_dims[-1] == rank - 1
        self.length = data_shape[-1] if self.run else 1
        self.row_shape = tuple(data_shape[:-1]) if self.run else tuple(data_shape)
        self.rows = math.prod(self.row_shape)
        self.run_operand_dim = window_operand_dims[-1] if self.run else None
        self.scatter_dims = [d for d in range(rank) if d not in window_dims]
        # row axes that are window dims: (row axis, operand dim)
        self.window_axes = [(a, od) for a, od in zip(window_dims, window_operand_dims)
                            if a < len(self.row_shape)]
        self.index_vector_dim = index_vector_dim
        self.index_map = index_map
        self.k = len(index_map)
        self.operand_shape = operand_shape
        self.high = [operand_shape[d] - window_sizes[d] for d in index_map]

    def index_views(self, indices: np.ndarray) -> list[np.ndarray]:
        """Per index component k, a view over the row space holding each row's k-th index."""
        full = indices[..., None] if self.index_vector_dim == indices.ndim else indices
        views = []
        for k in range(self.k):
            comp = full[(slice(None),) * self.index_vector_dim + (k,)]
            strides = [0] * len(self.row_shape)
            for j, axis in enumerate(self.scatter_dims):
                if axis < len(self.row_shape):
                    strides[axis] = comp.strides[j] if comp.shape[j] != 1 else 0
            views.append(as_strided(comp, shape=self.row_shape, strides=strides, writeable=False))
        return views

    def offsets(self, nc, index_views: list[np.ndarray], strides: list[int], r0: int, r1: int, f: int = 1):
        """[p, f] int64 tile of the element offsets of rows ``r0:r1``, computed on GpSimd from DMA'd indices: a row a
        partition (f = 1), else column j holding rows ``r0 + j * p ...`` (consecutive rows down the partitions:
        the indices are loaded row-major, [p, f] consecutive elements, one run, and the program writes each
        row's offset to its column)."""
        p = (r1 - r0) // f
        tiles = []
        for view in index_views:
            t = nc.sbuf_tile((p, f), view.dtype)
            nc.dma.load_flat(t, view, r0, r1)
            tiles.append(t)
        offs = nc.sbuf_tile((p, f), I64)
        row_shape, window_axes, index_map, high = self.row_shape, self.window_axes, self.index_map, self.high
        sizes = self.operand_shape

        def program(out, *index_arrays):
            total = np.zeros((p, f), dtype=I64)
            if window_axes:
                coords = np.unravel_index(np.arange(r0, r1).reshape(p, f), row_shape)
                for axis, od in window_axes:
                    total += coords[axis].astype(I64) * strides[od]
            for k, values in enumerate(index_arrays):
                v = values.astype(I64)
                bad = (v < 0) | (v > high[k])
                if bad.any():
                    d = index_map[k]
                    raise IndexError(f"index {int(v[bad][0])} is out of bounds for dimension {d} with size "
                                     f"{sizes[d]}")
                total += v * strides[index_map[k]]
            out[...] = total.reshape(f, p).T if f > 1 else total

        nc.gpsimd.run("row_offsets", program, (offs,), tuple(tiles),
                      elements=(r1 - r0) * (self.k + len(window_axes) + 1))
        return offs


def gather_runner(step: dict, program: Program) -> Callable[[Any, Any], None]:
    operand, indices = step["operands"]
    result = step["results"][0]
    dn = step["attrs"]["dimension_numbers"]
    oshape = program.shape(operand)
    collapsed = dn.get("collapsed_slice_dims", [])
    rows = _Rows(program.shape(result), dn.get("offset_dims", []),
                 [d for d in range(len(oshape)) if d not in collapsed], program.shape(indices),
                 dn.get("index_vector_dim", 0), dn.get("start_index_map", []), oshape, step["attrs"]["slice_sizes"])

    def run(nc, env) -> None:
        out = env.access(result)
        if out.size == 0:
            return
        src = _plain(nc, env, env.access(operand))
        strides = _estrides(src)
        run_stride = strides[rows.run_operand_dim] if rows.run else 1
        table = _table(src, run_stride, rows.length)
        out2d = np.reshape(out, (rows.rows, rows.length), copy=False)
        views = rows.index_views(env.access(indices))
        if rows.length == 1 and rows.rows > FLAT_ROWS and rows.k == 1 and not rows.window_axes:  # a long 1-d take
            _gather_flat(nc, rows, views, strides, table, out2d[:, 0])
            return
        for r0 in range(0, rows.rows, P):
            r1 = min(rows.rows, r0 + P)
            with nc.scope():
                offs = rows.offsets(nc, views, strides, r0, r1)
                for c0 in range(0, rows.length, ROW_CHUNK):
                    c1 = min(rows.length, c0 + ROW_CHUNK)
                    data = nc.sbuf_tile((r1 - r0, c1 - c0), src.dtype)
                    nc.dma.load_rows(data, table[:, c0:c1], offs)
                    nc.dma.store(out2d[r0:r1, c0:c1], data)
                    nc.release(data)

    return run


# a long 1-d take (one index component, single-element rows, more than FLAT_ROWS of them) walks flat tiles of up to
# FLAT_COLUMNS columns (``_gather_flat``): masked_scatter's gather of 2565 source elements ran 21 GpSimd offsets
# programs a row a partition, 1.24 us, GpSimd-bound; flat, [128, 8] tiles, 0.74 us. Fewer rows (interpolate_linear1d's
# two gathers of 1026 rows: 4.07 -> 4.18 us flat) or gathers of several index components (interpolate_trilinear3d's,
# DMA-bound: 26.55 -> 26.64-27.97 us by the tile width) pipeline better a row a partition, each 128 rows' offsets
# and moves starting as soon as their indices are stored
FLAT_ROWS = 16 * P
FLAT_COLUMNS = 8


def _gather_flat(nc, rows: _Rows, views: list[np.ndarray], strides: list[int], table: np.ndarray,
                 out: np.ndarray) -> None:
    """Single-element rows by flat tiles (``flat_tiles``' [p, f] of consecutive rows, as the eager masked and nonzero
    kernels lay a flat tensor): one index load and one GpSimd offsets program per tile, which leaves column j the
    offsets of rows ``start + j * p ...``; then per column an indirect DMA into a tile of its own (writes into one
    tile wait for each other) and its store, p consecutive rows (one run, as a row a partition stores). A row a
    partition took an index load and an offsets program per 128 rows: masked_scatter's gather of 2565 source
    elements ran 21 GpSimd programs, 1.02 us of GpSimd issue in a 1.24 us step."""
    for start, stop, p, f in flat_tiles(rows.rows, FLAT_COLUMNS):
        with nc.scope():
            offs = rows.offsets(nc, views, strides, start, stop, f)
            for j in range(f):
                data = nc.sbuf_tile((p, 1), table.dtype)
                nc.dma.load_rows(data, table, offs[:, j:j + 1])
                nc.dma.store(np.reshape(out[start + j * p:start + (j + 1) * p], (p, 1), copy=False), data)


def scatter_runner(step: dict, program: Program) -> Callable[[Any, Any], None]:
    operand, indices, updates = step["operands"]
    result = step["results"][0]
    dn = step["attrs"]["scatter_dimension_numbers"]
    oshape = program.shape(operand)
    ushape = program.shape(updates)
    inserted = dn.get("inserted_window_dims", [])
    window_dims = dn.get("update_window_dims", [])
    window_operand_dims = [d for d in range(len(oshape)) if d not in inserted]
    sizes = [1] * len(oshape)
    for a, od in zip(window_dims, window_operand_dims):
        sizes[od] = ushape[a]
    rows = _Rows(ushape, window_dims, window_operand_dims, program.shape(indices), dn.get("index_vector_dim", 0),
                 dn.get("scatter_dims_to_operand_dims", []), oshape, sizes)
    body = [b for b in step.get("body", []) if b["name"] != "return"]
    accumulate = bool(body)  # lowering.supported_step admits an empty body (assign) or add

    def run(nc, env) -> None:
        out = env.access(result)
        if out.size == 0:
            return
        source = env.access(operand)
        if not _same_memory(out, source):  # written into its operand (executor.writable_into): nothing to copy
            indexing.copy_into(nc, out, source)
        if rows.rows == 0 or rows.length == 0:
            return
        strides = _estrides(out)
        run_stride = strides[rows.run_operand_dim] if rows.run else 1
        table = _table(out, run_stride, rows.length)
        upd = env.access(updates)
        upd2d = Access2D(upd if rows.run else upd[..., None], len(rows.row_shape))
        views = rows.index_views(env.access(indices))
        for r0 in range(0, rows.rows, P):
            r1 = min(rows.rows, r0 + P)
            with nc.scope():
                offs = rows.offsets(nc, views, strides, r0, r1)
                for c0 in range(0, rows.length, ROW_CHUNK):
                    c1 = min(rows.length, c0 + ROW_CHUNK)
                    data = nc.sbuf_tile((r1 - r0, c1 - c0), upd.dtype)
                    for a0, a1, b0, b1, view in upd2d.pieces(r0, r1, c0, c1):
                        nc.dma.load(data[a0:a1, b0:b1], view)
                    nc.dma.store_rows(table[:, c0:c1], offs, data, accumulate=accumulate, in_order=True)
                    nc.release(data)

    return run
