"""multinomial (with and without replacement), multinomial.out.

Tiling: distributions sit on partitions (one row of probabilities per partition, up to
128 per tile, categories along the free axis). Validity is checked first, on the
engines (VectorE compares, reduces; GpSimdE across partitions), before any draw.

* without replacement (or one sample): the Gumbel trick as CPU: keys ``p / q`` with
  ``q = -log(1 - u)`` (ScalarE, VectorE), then VectorE arg-max or a GpSimd sort for top-k;
* with replacement: VectorE scans the row to a cumulative sum, normalises it, and a
  GpSimd program binary-searches one uniform per sample (``1 - u`` in (0, 1]);
* rows wider than ``_CATEGORIES_MAX``: each row is its own [128, F] tile (padding holds
  probability 0, key -1) and the top-k or the search is a GpSimd program.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from device_impl.engine import launch
from device_impl.engine.dtypes import FP32
from device_impl.kernels.common import FREE_MAX, P, SCALAR_TYPE_NAMES, hbm, row_tiles
from device_impl.kernels.random.tiles import BOOL, FLOATS, I64, check_generator, flat_layout, native, reserve_draws


_CATEGORIES_MAX = 4096  # categories one partition row holds (values, keys, sort indices)


@native("aten::multinomial", "aten::multinomial.out")
def _multinomial(a: dict) -> torch.Tensor:
    self, n_sample, replacement = a["self"], int(a["num_samples"]), bool(a["replacement"])
    generator, out = a.get("generator"), a.get("out")
    if out is not None and out.device != self.device:
        raise RuntimeError("multinomial arguments must have the same device")
    if not 0 < self.dim() <= 2:
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if self.dtype not in FLOATS:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: "
                           f"{SCALAR_TYPE_NAMES[self.dtype]}")
    if out is not None and out.dtype != torch.int64:
        raise RuntimeError(f"multinomial expects Long tensor out, got: {SCALAR_TYPE_NAMES[out.dtype]}")
    if n_sample <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    cats = self.shape[-1]
    if not replacement and n_sample > cats:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if cats > 1 << 24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    check_generator(generator)
    rows = 1 if self.dim() == 1 else self.shape[0]
    shape = (n_sample,) if self.dim() == 1 else (rows, n_sample)
    if out is None:
        out = torch.empty(shape, dtype=torch.int64, device=self.device)
    elif tuple(out.shape) != shape:
        out.resize_(shape)
    if out.numel() == 0:
        return out
    probs = hbm(self).reshape(rows, cats)
    result = hbm(out).reshape(rows, n_sample)
    if cats > _CATEGORIES_MAX:
        if cats > _ROW_MAX:
            raise NotImplementedError(f"multinomial on neuron holds a distribution's row in SBUF: at most {_ROW_MAX} "
                                      f"categories, got {cats}")
        _multinomial_wide(self, probs, result, n_sample, replacement, generator)
        return out
    if not replacement or n_sample == 1:
        _multinomial_keys(self, probs, result, n_sample, generator)
    else:
        _multinomial_search(self, probs, result, n_sample, generator)
    return out


def _load_rows(nc, probs: np.ndarray, r0: int, r1: int):
    x = nc.sbuf_tile((r1 - r0, probs.shape[1]), probs.dtype)
    nc.dma.load(x, probs[r0:r1])
    xf = nc.sbuf_tile(x.shape, FP32)
    nc.vector.tensor_copy(xf, x)
    return xf


def _all_rows(nc, flags) -> bool:
    row = nc.sbuf_tile((flags.partitions, 1), BOOL)
    nc.vector.tensor_reduce(row, flags, "logical_and")
    col = nc.sbuf_tile((1, 1), BOOL)
    nc.gpsimd.partition_reduce(col, row, "logical_and")
    return bool(col.read()[0, 0])


def _check_row_sums(nc, xf, compare: str) -> None:
    """Each row's sum (VectorE) must compare to 0 as ``compare`` says (CPU: != 0 without, > 0 with replacement)."""
    total = nc.sbuf_tile((xf.partitions, 1), FP32)
    nc.vector.tensor_reduce(total, xf, "add", dtype=FP32)
    positive = nc.sbuf_tile((xf.partitions, 1), BOOL)
    nc.vector.tensor_scalar(positive, total, compare, 0.0, dtype=FP32)
    if not _all_rows(nc, positive):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")


def _multinomial_keys(self, probs, result, n_sample: int, generator) -> None:
    """Without replacement (or one sample): top-k of p / q with q ~ Exp(1) (the Gumbel trick, as CPU)."""
    rows, cats = probs.shape
    device = self.device.index
    with launch("multinomial", device) as nc:
        tiles = []
        for r0, r1 in row_tiles(rows):  # validity first: CPU checks before it draws
            mark = nc.mark()
            xf = _load_rows(nc, probs, r0, r1)
            ok = nc.sbuf_tile(xf.shape, BOOL)
            finite = nc.sbuf_tile(xf.shape, BOOL)
            nc.vector.tensor_scalar(ok, xf, "greater_equal", 0.0, dtype=FP32)
            nc.vector.tensor_scalar(finite, xf, "less", math.inf, dtype=FP32)
            nc.vector.tensor_tensor(ok, ok, finite, "logical_and", dtype=BOOL)
            if not _all_rows(nc, ok):
                raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
            _check_row_sums(nc, xf, "not_equal")
            tiles.append((r0, r1))
            nc.release_to(mark)
    seed, offset = reserve_draws(generator, device, rows * cats)
    with launch("multinomial", device) as nc:
        for r0, r1 in tiles:
            mark = nc.mark()
            xf = _load_rows(nc, probs, r0, r1)
            u = nc.sbuf_tile(xf.shape, FP32)
            nc.gpsimd.random(u, seed, offset + r0 * cats, "uniform")
            q = nc.sbuf_tile(xf.shape, FP32)
            nc.scalar.activation(q, u, "log", scale=-1.0, bias=1.0)
            nc.vector.tensor_scalar(q, q, "multiply", -1.0, dtype=FP32)
            nc.vector.tensor_scalar(q, q, "maximum", 2.0 ** -30, dtype=FP32)  # Exp(1) > 0 (u = 0 has mass 2^-24)
            keys = nc.sbuf_tile(xf.shape, FP32)
            nc.vector.tensor_tensor(keys, xf, q, "divide", dtype=FP32)
            index = nc.sbuf_tile((r1 - r0, n_sample if n_sample > 1 else 1), I64)
            if n_sample == 1:
                best = nc.sbuf_tile((r1 - r0, 1), FP32)
                nc.vector.arg_reduce(best, index, keys, "maximum")
            else:
                ordered = nc.sbuf_tile(xf.shape, FP32)
                order = nc.sbuf_tile(xf.shape, I64)
                nc.gpsimd.sort(ordered, order, keys, descending=True)
                index = order[:, :n_sample]
            nc.dma.store(result[r0:r1], index)
            nc.release_to(mark)


_ROW_MAX = P * 8192  # categories of one SBUF-resident row (probabilities, keys and the top-k indices)


def _flat_tile(nc, n: int, dtype, fill=None):
    """A tile holding n elements in row-major order ([1, n] or [128, ceil(n / 128)]), padding set to ``fill``."""
    tile = nc.sbuf_tile(flat_layout(n), dtype)
    if fill is not None:
        nc.vector.memset(tile, fill)
    return tile


def _flat_regions(tile, n: int):
    """The (sub-tile, start, stop) regions covering the first n elements of a flat tile."""
    f = tile.free
    rows, rest = divmod(n, f)
    regions = []
    if rows:
        regions.append((tile[:rows, :], 0, rows * f))
    if rest:
        regions.append((tile[rows:rows + 1, :rest], rows * f, n))
    return regions


def _padding(tile, n: int):
    """The sub-tiles after the first n elements of a flat tile."""
    p, f = tile.shape
    rows, rest = divmod(n, f)
    regions = []
    if rest:
        regions.append(tile[rows:rows + 1, rest:])
        rows += 1
    if rows < p:
        regions.append(tile[rows:, :])
    return regions


def _load_row(nc, row: np.ndarray, cats: int):
    x = _flat_tile(nc, cats, row.dtype, 0)
    for region, s0, s1 in _flat_regions(x, cats):
        nc.dma.load(region, row[s0:s1])
    xf = nc.sbuf_tile(x.shape, FP32)
    nc.vector.tensor_copy(xf, x)
    return xf


def _multinomial_wide(self, probs, result, n_sample: int, replacement: bool, generator) -> None:
    """Rows too long for one partition: each row is a [128, F] tile (padding holds probability 0)."""
    rows, cats = probs.shape
    device = self.device.index
    fast = not replacement or n_sample == 1
    with launch("multinomial", device) as nc:  # validation before any draw, as CPU
        for r in range(rows):
            mark = nc.mark()
            xf = _load_row(nc, probs[r], cats)
            flags = nc.sbuf_tile(xf.shape, BOOL)
            nc.vector.tensor_scalar(flags, xf, "greater_equal", 0.0, dtype=FP32)
            finite = nc.sbuf_tile(xf.shape, BOOL)
            nc.vector.tensor_unary(finite, xf, "isfinite", dtype=FP32)
            if fast:
                nc.vector.tensor_tensor(flags, flags, finite, "logical_and", dtype=BOOL)
                if not _all_rows(nc, flags):
                    raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
            else:
                if not _all_rows(nc, flags):
                    raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
                if not _all_rows(nc, finite):
                    raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity "
                                       "or NaN)")
            part = nc.sbuf_tile((xf.partitions, 1), FP32)
            nc.vector.tensor_reduce(part, xf, "add", dtype=FP32)
            total = nc.sbuf_tile((1, 1), FP32)
            nc.gpsimd.partition_reduce(total, part, "add", dtype=FP32)
            positive = nc.sbuf_tile((1, 1), BOOL)
            nc.vector.tensor_scalar(positive, total, "greater", 0.0, dtype=FP32)
            if not _all_rows(nc, positive):
                raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
            nc.release_to(mark)
    seed, offset = reserve_draws(generator, device, rows * (cats if fast else n_sample))
    with launch("multinomial", device) as nc:
        for r in range(rows):
            mark = nc.mark()
            xf = _load_row(nc, probs[r], cats)
            if fast:  # top-k of p / q, q ~ Exp(1); padding keys are -1 so they are never chosen
                u = nc.sbuf_tile(xf.shape, FP32)
                nc.gpsimd.random(u, seed, offset + r * cats, "uniform")
                q = nc.sbuf_tile(xf.shape, FP32)
                nc.scalar.activation(q, u, "log", scale=-1.0, bias=1.0)
                nc.vector.tensor_scalar(q, q, "multiply", -1.0, dtype=FP32)
                nc.vector.tensor_scalar(q, q, "maximum", 2.0 ** -30, dtype=FP32)
                keys = nc.sbuf_tile(xf.shape, FP32)
                nc.vector.tensor_tensor(keys, xf, q, "divide", dtype=FP32)
                for region in _padding(keys, cats):
                    nc.vector.memset(region, -1.0)
                index = _flat_tile(nc, n_sample, I64)

                def top(index_out, ks, k=n_sample):
                    order = np.argsort(-ks.reshape(-1)[:cats], kind="stable")[:k]
                    flat = index_out.reshape(-1)
                    flat[:k] = order
                    flat[k:] = 0

                nc.gpsimd.run("multinomial_topk", top, (index,), (keys,), elements=cats,
                              factor=max(1.0, math.log2(cats)))
                for region, s0, s1 in _flat_regions(index, n_sample):
                    nc.dma.store(result[r, s0:s1], region)
            else:  # normalised cumulative sums and a binary search per sample
                for c0 in range(0, n_sample, P * FREE_MAX):
                    c1 = min(n_sample, c0 + P * FREE_MAX)
                    inner = nc.mark()
                    u = nc.sbuf_tile(flat_layout(c1 - c0), FP32)
                    nc.gpsimd.random(u, seed, offset + r * n_sample + c0, "uniform")
                    nc.scalar.activation(u, u, "identity", scale=-1.0, bias=1.0)  # (0, 1]
                    index = nc.sbuf_tile(u.shape, I64)

                    def search(index_out, x, us, m=c1 - c0):
                        cdf = np.cumsum(x.reshape(-1)[:cats], dtype=np.float32)
                        cdf = cdf / cdf[-1]
                        cdf[-1] = 1.0
                        flat = index_out.reshape(-1)
                        flat[:m] = np.searchsorted(cdf, us.reshape(-1)[:m], side="left")
                        flat[m:] = 0

                    nc.gpsimd.run("multinomial_search", search, (index,), (xf, u), elements=cats + (c1 - c0),
                                  factor=max(1.0, math.log2(cats)))
                    for region, s0, s1 in _flat_regions(index, c1 - c0):
                        nc.dma.store(result[r, c0 + s0:c0 + s1], region)
                    nc.release_to(inner)
            nc.release_to(mark)


def _multinomial_search(self, probs, result, n_sample: int, generator) -> None:
    """With replacement: normalised cumulative sums, one uniform per sample, binary search (GpSimd)."""
    rows, cats = probs.shape
    device = self.device.index
    with launch("multinomial", device) as nc:
        for r0, r1 in row_tiles(rows):
            mark = nc.mark()
            xf = _load_rows(nc, probs, r0, r1)
            flags = nc.sbuf_tile(xf.shape, BOOL)
            nc.vector.tensor_scalar(flags, xf, "greater_equal", 0.0, dtype=FP32)
            if not _all_rows(nc, flags):
                raise RuntimeError("invalid multinomial distribution (encountering probability entry < 0)")
            nc.vector.tensor_unary(flags, xf, "isfinite", dtype=FP32)
            if not _all_rows(nc, flags):
                raise RuntimeError("invalid multinomial distribution (encountering probability entry = infinity or "
                                   "NaN)")
            _check_row_sums(nc, xf, "greater")
            nc.release_to(mark)
    seed, offset = reserve_draws(generator, device, rows * n_sample)
    chunk = FREE_MAX

    def search(index, cdf, u):
        for r in range(cdf.shape[0]):
            index[r] = np.searchsorted(cdf[r], u[r], side="left")

    with launch("multinomial", device) as nc:
        for r0, r1 in row_tiles(rows):
            mark = nc.mark()
            xf = _load_rows(nc, probs, r0, r1)
            cdf = nc.sbuf_tile(xf.shape, FP32)
            nc.vector.tensor_scan(cdf, xf, "add", dtype=FP32)
            total = cdf[:, cats - 1:cats]
            norm = nc.sbuf_tile((r1 - r0, 1), FP32)
            nc.vector.tensor_copy(norm, total)
            nc.vector.tensor_tensor(cdf, cdf, norm, "divide", dtype=FP32)
            nc.vector.memset(cdf[:, cats - 1:cats], 1.0)  # the last bucket closes at 1
            for s0 in range(0, n_sample, chunk):
                s1 = min(n_sample, s0 + chunk)
                inner = nc.mark()
                u = nc.sbuf_tile((r1 - r0, s1 - s0), FP32)
                # one stream per row; u' = 1 - u in (0, 1] so a leading zero-probability class is never drawn
                for r in range(r0, r1):
                    nc.gpsimd.random(u[r - r0:r - r0 + 1, :], seed, offset + r * n_sample + s0, "uniform")
                nc.scalar.activation(u, u, "identity", scale=-1.0, bias=1.0)
                index = nc.sbuf_tile(u.shape, I64)
                nc.gpsimd.run("multinomial_search", search, (index,), (cdf, u), elements=u.data.size,
                              factor=max(1.0, math.log2(max(cats, 2))))
                nc.dma.store(result[r0:r1, s0:s1], index)
                nc.release_to(inner)
            nc.release_to(mark)
