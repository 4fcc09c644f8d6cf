"""randperm.generator_out: a uniform random permutation of [0, n).

Tiling: up to ``_PERM_MAX`` elements the permutation is SBUF-resident: n random keys in
one [1, n] or [128, ceil(n / 128)] tile (row-major), a GpSimd program argsorts them, and
VectorE casts the int64 result to the dtype before DMA stores it. Larger n is two-level:
each element draws a bucket (VectorE ``bits mod buckets``), a GpSimd histogram and prefix
sum place buckets in an HBM scratch, indirect DMA scatters each index into its bucket,
then each bucket is loaded and shuffled by its own keys as above. The argsort of i.i.d.
keys is uniform, and so is the (bucket, key) order.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import torch

from device_impl.engine import launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import FREE_MAX, P, flat_tiles, hbm
from device_impl.kernels.random.tiles import I64, check_generator, flat_layout, native, refuse, reserve_draws, serve
from device_impl.kernels.scalars import checked_convert


_PERM_MAX = P * 8192  # elements one SBUF-resident permutation handles (keys + result: 16 B per element)
_BUCKET = P * 4096  # target bucket size of the two-level permutation of larger n


def _argsort_program(n: int):
    def program(out, keys):
        order = np.argsort(keys.reshape(-1)[:n], kind="stable")
        flat = out.reshape(-1)
        flat[:n] = order
        flat[n:] = 0

    return program


@native("aten::randperm.generator_out")
def _randperm_out(a: dict) -> torch.Tensor:
    n, out, generator = int(a["n"]), a["out"], a.get("generator")
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    check_generator(generator)
    dtype = out.dtype
    if dtype == torch.bool:
        raise refuse("randperm", dtype)
    checked_convert(n - 1 if n > 0 else n, dtype)  # CPU: scalar_tensor(n - 1) of the result's dtype must exist
    if dtype == torch.float16 and n > (1 << 11) + 1:
        raise RuntimeError("n cannot be greater than 2049 for Half type.")
    if dtype == torch.float32 and n > (1 << 24) + 1:
        raise RuntimeError("n cannot be greater than 2^24+1 for Float type.")
    if tuple(out.shape) != (n,):
        out.resize_((n,))
    if n == 0:
        return out
    if n <= _PERM_MAX:
        _randperm_small(out, n, generator)
    else:
        _randperm_large(out, n, generator)
    return out


def _store_perm(nc, out_view: np.ndarray, perm, n: int, start: int = 0) -> None:
    """Cast an int64 permutation tile (first n elements in row-major order) to out's dtype and store it."""
    p, f = perm.shape
    if out_view.dtype != I64:
        cast = nc.sbuf_tile((p, f), out_view.dtype)
        if out_view.dtype in (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)):
            wide = nc.sbuf_tile((p, f), FP32)  # static_cast<Half>(int64): via float
            nc.vector.tensor_copy(wide, perm)
            nc.vector.tensor_copy(cast, wide)
        else:
            nc.vector.tensor_copy(cast, perm)
        perm = cast
    rows, rest = divmod(n, f)
    if rows:
        nc.dma.store(out_view[start:start + rows * f], perm[:rows, :])
    if rest:
        nc.dma.store(out_view[start + rows * f:start + n], perm[rows:rows + 1, :rest])


def _randperm_small(out: torch.Tensor, n: int, generator) -> None:
    """Sort n random 62-bit keys on GpSimd: argsort of i.i.d. keys is a uniform permutation."""
    seed, offset = reserve_draws(generator, out.device.index, n)
    p, f = flat_layout(n)
    view = hbm(out)
    with launch("randperm", out.device.index) as nc:
        keys = nc.sbuf_tile((p, f), I64)
        nc.gpsimd.random(keys, seed, offset, "bits")
        perm = nc.sbuf_tile((p, f), I64)
        nc.gpsimd.run("randperm_sort", _argsort_program(n), (perm,), (keys,), elements=n,
                      factor=max(1.0, math.log2(n)))
        _store_perm(nc, view, perm, n)


def _randperm_large(out: torch.Tensor, n: int, generator) -> None:
    """Two-level permutation for n beyond SBUF: random bucket per element (a stable counting scatter into
    HBM scratch by indirect DMA), then each bucket shuffled by random keys. Lexicographic (bucket, key)
    order of i.i.d. keys, so the permutation is uniform."""
    buckets = math.ceil(n / _BUCKET)
    seed, offset = reserve_draws(generator, out.device.index, 2 * n)
    scratch = torch.empty((n, 1), dtype=torch.int64, device=out.device)
    table = hbm(scratch)
    view = hbm(out)
    with launch("randperm", out.device.index) as nc:
        counts = nc.sbuf_tile((1, buckets), I64)
        nc.vector.memset(counts, 0)

        def histogram(counts_out, ids, counts_in):
            counts_out[0] = counts_in[0] + np.bincount(ids.reshape(-1), minlength=buckets)

        tiles = list(flat_tiles(n, FREE_MAX))
        for start, stop, p, f in tiles:  # pass 1: bucket sizes
            mark = nc.mark()
            ids = _bucket_ids(nc, seed, offset + start, p, f, buckets)
            nc.gpsimd.run("randperm_histogram", histogram, (counts,), (ids, counts), elements=p * f)
            nc.release_to(mark)
        base = nc.sbuf_tile((1, buckets), I64)  # exclusive prefix sum: where each bucket starts
        nc.vector.tensor_scan(base, counts, "add", dtype=I64)
        nc.vector.tensor_tensor(base, base, counts, "subtract", dtype=I64)
        fill = nc.sbuf_tile((1, buckets), I64)
        nc.vector.tensor_copy(fill, base)

        def positions(dest, fill_out, ids, fill_in):
            flat = ids.reshape(-1)
            order = np.argsort(flat, kind="stable")
            sorted_ids = flat[order]
            first = np.searchsorted(sorted_ids, np.arange(buckets))
            rank = np.empty_like(flat)
            rank[order] = np.arange(flat.size) - first[sorted_ids]
            dest.reshape(-1)[:] = fill_in[0][flat] + rank
            fill_out[0] = fill_in[0] + np.bincount(flat, minlength=buckets)

        for start, stop, p, f in tiles:  # pass 2: scatter each index to its bucket slot (same bucket draws)
            mark = nc.mark()
            ids = _bucket_ids(nc, seed, offset + start, p, f, buckets)
            dest = nc.sbuf_tile((p, f), I64)
            nc.gpsimd.run("randperm_positions", positions, (dest, fill), (ids, fill), elements=p * f, factor=4.0)
            index = nc.sbuf_tile((p, f), I64)
            nc.gpsimd.iota(index, base=start, partition_step=f, free_step=1)
            _scatter_rows(nc, table, dest, index)
            nc.release_to(mark)
        sizes = counts.read()[0].tolist()
        starts = base.read()[0].tolist()
        for b in range(buckets):  # pass 3: shuffle each bucket in SBUF
            m, s = int(sizes[b]), int(starts[b])
            if m == 0:
                continue
            mark = nc.mark()
            pp, ff = flat_layout(m)
            values = nc.sbuf_tile((pp, ff), I64)
            rows, rest = divmod(m, ff)
            flat_table = table.reshape(-1)
            if rows:
                nc.dma.load(values[:rows, :], flat_table[s:s + rows * ff])
            if rest:
                nc.dma.load(values[rows:rows + 1, :rest], flat_table[s + rows * ff:s + m])
            keys = nc.sbuf_tile((pp, ff), I64)
            nc.gpsimd.random(keys, seed, offset + n + s, "bits")
            shuffled = nc.sbuf_tile((pp, ff), I64)

            def shuffle(result, vals, ks, m=m):
                order = np.argsort(ks.reshape(-1)[:m], kind="stable")
                flat = result.reshape(-1)
                flat[:m] = vals.reshape(-1)[:m][order]
                flat[m:] = 0

            nc.gpsimd.run("randperm_sort", shuffle, (shuffled,), (values, keys), elements=m,
                          factor=max(1.0, math.log2(m)))
            _store_perm(nc, view, shuffled, m, start=s)
            nc.release_to(mark)


def _bucket_ids(nc, seed: int, counter: int, p: int, f: int, buckets: int):
    bits = nc.sbuf_tile((p, f), I64)
    nc.gpsimd.random(bits, seed, counter, "bits")
    ids = nc.sbuf_tile((p, f), I64)
    nc.vector.tensor_scalar(ids, bits, "remainder", buckets, dtype=I64)
    return ids


def _scatter_rows(nc, table: np.ndarray, dest, index) -> None:
    """table[dest[p, j]] = index[p, j] for every element, by indirect DMA in columns of <= 128 rows."""
    p, f = dest.shape
    for j in range(f):
        nc.dma.store_rows(table, dest[:, j:j + 1], index[:, j:j + 1])


# --- overloads PyTorch's composites route to the kernels above ------------------------------

serve("aten::randperm.generator_out", "aten::randperm", "aten::randperm.generator", "aten::randperm.out")
