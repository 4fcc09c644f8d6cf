"""A long one-row integer scan spread over the partitions (the compiled reduce_window scan's layout for it).

``steps._scan`` scans each row of a reduce_window scan along the free axis, one row per partition. A flattened
cumsum is one row: masked_scatter's decomposition scans its flattened mask (``cumsum(mask.reshape(-1))``, 2565
int64 elements for the sweep's bfloat16 [5, 513] case) on one partition, a VectorE scan of 2565 columns (4.64 us of
a 7.65 us program; compiled 8.65 us against adaptive eager's 4.23, benches/compiled_vs_eager_specs.py). The eager
nonzero/masked kernels lay a flat tensor as [p, f] tiles (``kernels.indexing.masked._nonzero_into``); here the row
is laid the same way, f = ceil(n / 128) columns a partition, and scanned in three instructions besides the DMA:

* VectorE scans each partition's f columns (the last partition's columns past the row's end zeroed first: scanned,
  never stored, their total read by none);
* GpSimd's general-purpose cores combine the partitions' totals (the last column) into each partition's exclusive
  prefix, the identity for the first (``gpsimd.run``: a cross-partition walk of p values);
* VectorE combines each partition's prefix into its columns (``tensor_scalar`` with a per-partition scalar).

Only integer scans are spread: their ops (add, multiply, maximum, minimum, wrapping in the compute dtype) are
associative and exact, so the result is the one-partition scan's bit for bit. A float scan rounds in order and
keeps the one-partition form (a float32 cumsum runs in double on GpSimd there: CPU's acc_type).
"""

from __future__ import annotations

import numpy as np

from device_impl.kernels.common import P

# the shortest row spread: below it the one-partition scan's 2 VectorE cycles a column cost less than the spread
# form's extra instructions (a GpSimd walk and a combine, ~64 cycles of issue each, and their dependencies). A
# compiled int64 cumsum alone, one partition against spread: 48 columns 1.293 us against 1.315, 64 columns 1.323
# against 1.315, 512 columns 2.149 against 1.351
MIN_COLUMNS = P // 2
# the longest: a row spread over more columns a partition than this keeps the one-partition scan, chunked
# (``steps._scan_chunked``). The spread form holds three [p, f] tiles at once (the source, the scan in the compute
# dtype, the result): at most 24 bytes a column, 96 KiB of a 192 KiB partition here; a flattened int64 cumsum of
# 2,000,000 elements (15625 columns, 125000 bytes a tile) overflowed SBUF (EngineError) where CPU answers
MAX_COLUMNS = 4096

# op -> its identity in an integer compute dtype (the first partition's prefix)
_IDENTITY = {
    "add": lambda dtype: 0,
    "multiply": lambda dtype: 1,
    "maximum": lambda dtype: np.iinfo(dtype).min,
    "minimum": lambda dtype: np.iinfo(dtype).max,
}


def spreads(n: int, rows: int, alu: str, src_dtype: np.dtype, compute: np.dtype) -> bool:
    """Whether a scan of ``rows`` rows of ``n`` columns is spread over the partitions: one long integer row whose
    tiles fit in SBUF (``MAX_COLUMNS``)."""
    return (rows == 1 and MIN_COLUMNS <= n <= P * MAX_COLUMNS and alu in _IDENTITY and np.dtype(compute).kind in "iu"
            and np.dtype(src_dtype).kind in "iu")


def _exclusive(alu: str, identity: int):
    """The GpSimd program: each partition's exclusive prefix of the partitions' totals, ``identity`` first."""
    from device_impl.engine.isa import SCANS

    def program(prefix: np.ndarray, totals: np.ndarray) -> None:
        prefix[0, 0] = identity
        if totals.shape[0] > 1:
            prefix[1:, 0] = SCANS[alu](totals[:-1, 0], axis=0)

    return program


def scan_spread(nc, src: np.ndarray, dst: np.ndarray, alu: str, compute: np.dtype) -> None:
    """``dst`` (1-d, n) = the inclusive ``alu`` scan of ``src`` (1-d, n) in ``compute``, laid [p, f] over the
    partitions."""
    n = src.shape[0]
    compute = np.dtype(compute)
    f = -(-n // P)
    full, rem = divmod(n, f)
    p = full + (1 if rem else 0)
    identity = _IDENTITY[alu](compute)
    with nc.scope():
        x = nc.sbuf_tile((p, f), src.dtype)
        if rem:  # columns past the row's end: scanned, never stored (the last partition's total is read by none)
            nc.vector.memset(x[full:p, rem:f], 0)
        nc.dma.load(x[:full], np.reshape(src[:full * f], (full, f), copy=False))
        if rem:
            nc.dma.load(x[full:p, :rem], np.reshape(src[full * f:], (1, rem), copy=False))
        y = nc.sbuf_tile((p, f), compute)
        nc.vector.tensor_scan(y, x, alu, dtype=compute)
        prefix = nc.sbuf_tile((p, 1), compute)
        nc.gpsimd.run(f"partition_scan_{alu}", _exclusive(alu, identity), (prefix,), (y[:, f - 1:f],))
        out = nc.sbuf_tile((p, f), dst.dtype)
        nc.vector.tensor_scalar(out, y, alu, prefix, dtype=compute)
        nc.dma.store(np.reshape(dst[:full * f], (full, f), copy=False), out[:full])
        if rem:
            nc.dma.store(np.reshape(dst[full * f:], (1, rem), copy=False), out[full:p, :rem])
