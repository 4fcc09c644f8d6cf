"""Membership: ``isin`` (is each element among the test elements?), every overload.

Comparisons are exact, in the promoted dtype CPU uses (``result_type(elements,
test_elements)``; test values are converted to it first, so an int8 test value
wraps and a float32 one rounds to bf16 exactly as ``test_elements.to(common)``
does). NaN equals nothing, -0.0 equals 0.0.

* Few test values (<= COMPARE_MAX, generate()'s end-of-sequence ids): they are
  broadcast to every partition once, and each element tile takes one VectorE
  compare against each value (a per-partition scalar) and an OR.
* More: GpSimd sorts the test values once (per chunk of CHUNK_BYTES per partition,
  kept in SBUF; longer sets are sorted chunk by chunk into a device scratch
  tensor and streamed back per tile), then one GpSimd binary search per element
  tile and chunk: O(n log m) instead of CPU's O(n m) loop or sort of both.
* ``isin(tensor, scalar)`` is CPU's ``eq``/``ne`` against the scalar (PyTorch
  redispatches it so, ``assume_unique`` ignored); ``isin(scalar, tensor)`` is a
  compare-and-reduce over the test values into a 0-dim result.

``assume_unique`` only selects CPU's algorithm; results do not depend on it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from device_impl.engine import Tile, launch
from device_impl.engine.dtypes import COMPUTE_DTYPES, is_float
from device_impl.kernels.common import (
    SCALAR_TYPE_NAMES,
    P,
    cast_scalar,
    elementwise,
    flat_tiles,
    hbm,
    is_device_tensor,
    numpy_compute,
    numpy_dtype,
    prepare_elementwise,
    result_type,
    scalar_of,
)
from device_impl.kernels.registry import register_family

BOOL = np.dtype(np.bool_)
# CPU's isin takes its brute-force loop (test values cast to result_type(elements, tests)) while the test values number
# fewer than int(10 * elements.numel() ** 0.145) (numpy's heuristic), else isin_sorting; for one element: 10
_SORTING_MIN = 10
_SCALAR_DTYPES = {"Bool": torch.bool, "Long": torch.int64, "Double": torch.float64, "ComplexDouble": torch.complex128}
COMPARE_MAX = 32  # test values compared one by one on VectorE; above this, sort + binary search on GpSimd
CHUNK_BYTES = 64 * 1024  # per partition, for one sorted chunk of test values held in SBUF


def _scalar_type_name(value: Any) -> str:
    """c10's ScalarType of a Python scalar (a Scalar argument's ``type()``)."""
    return "Bool" if isinstance(value, bool) else "Long" if isinstance(value, int) else \
        "ComplexDouble" if isinstance(value, complex) else "Double"


def _check_supported(value: Any) -> None:
    """CPU refuses bool and complex inputs (check_for_unsupported_isin_dtype)."""
    if isinstance(value, torch.Tensor):
        name = SCALAR_TYPE_NAMES.get(value.dtype, str(value.dtype))
        bad = value.dtype == torch.bool or value.dtype.is_complex
    else:
        name = _scalar_type_name(scalar_of(value))
        bad = name in ("Bool", "ComplexDouble")
    if bad:
        raise RuntimeError(f"Unsupported input type encountered for isin(): {name}")


def _operands(a: dict) -> tuple[Any, Any]:
    elements = a["elements"] if "elements" in a else a["element"]
    tests = a["test_elements"] if "test_elements" in a else a["test_element"]
    return elements, tests


def _meta(a: dict) -> tuple:
    elements, tests = _operands(a)
    _check_supported(elements)
    _check_supported(tests)
    shape = tuple(elements.shape) if isinstance(elements, torch.Tensor) else ()
    return shape, torch.bool, tuple(t for t in (elements, tests) if isinstance(t, torch.Tensor))


def _compute(out: torch.Tensor, a: dict) -> None:
    elements, tests = _operands(a)
    invert = bool(a.get("invert", False))
    common = common_dtype(elements, tests)
    if not isinstance(tests, torch.Tensor) or (not is_device_tensor(tests) and tests.dim() == 0):
        _against_scalar(out, elements, tests, common, invert)
    elif not isinstance(elements, torch.Tensor):
        _scalar_among(out, scalar_of(elements), tests, common, invert)
    elif not is_device_tensor(tests):
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{elements.device} and {tests.device}! (test_elements of isin on neuron)")
    else:
        _among(out, elements, tests, common, invert)


def common_dtype(elements: Any, tests: Any) -> torch.dtype:
    """The dtype CPU compares in: ``result_type(elements, tests)``, except for isin(scalar, tensor) with
    ``_SORTING_MIN`` or more test values: CPU's sorting path cats the scalar's tensor (no longer a wrapped number
    once flattened) with the test values, so they compare in promote_types(the scalar's own dtype, tests'):
    isin(2.2e-16, a float16 tensor with a 0 and 10 or more elements) is False there, True below (the 2.2e-16
    rounds to 0 in float16)."""
    if not isinstance(elements, torch.Tensor) and isinstance(tests, torch.Tensor) and tests.numel() >= _SORTING_MIN:
        return torch.promote_types(_SCALAR_DTYPES[_scalar_type_name(scalar_of(elements))], tests.dtype)
    return result_type(elements, tests)


def _against_scalar(out: torch.Tensor, elements: torch.Tensor, test: Any, common: torch.dtype, invert: bool) -> None:
    op = "not_equal" if invert else "equal"
    cd = numpy_compute(common)
    elementwise("isin", out, (elements, test), lambda nc, o, x, s: nc.vector.tensor_scalar(o, x, op, s, dtype=cd),
                common_dtype=common)


def _scalar_among(out: torch.Tensor, element: Any, tests: torch.Tensor, common: torch.dtype, invert: bool) -> None:
    """isin(scalar, tensor): any(tests == element), a 0-dim result."""
    with launch("isin", out.device.index) as nc:
        scalar_among_program(nc, element, hbm(tests), hbm(out), common, invert)


def scalar_among_program(nc, element: Any, tests: np.ndarray, out: np.ndarray, common: torch.dtype,
                         invert: bool) -> None:
    """``_scalar_among``'s tile program on HBM arrays (the compiler's ``isin`` step runs it too, compiler/opaque.py):
    ``out`` a one-element array, ``common`` the dtype the comparison is made in."""
    cd = numpy_compute(common)
    value = cast_scalar(element, common)
    view = tests
    found = nc.sbuf_tile((1, 1), BOOL)
    nc.vector.memset(found, False)
    for start, stop, p, f in flat_tiles(view.size):
        mark = nc.mark()
        raw = nc.sbuf_tile((p, f), view.dtype)
        nc.dma.load_flat(raw, view, start, stop)
        hit = nc.sbuf_tile((p, f), BOOL)
        nc.vector.tensor_scalar(hit, raw, "equal", value, dtype=cd)
        rows = nc.sbuf_tile((p, 1), BOOL)
        nc.vector.tensor_reduce(rows, hit, "logical_or")
        tile_found = nc.sbuf_tile((1, 1), BOOL)
        nc.gpsimd.partition_reduce(tile_found, rows, "logical_or")
        nc.vector.tensor_tensor(found, found, tile_found, "logical_or")
        nc.release_to(mark)
    if invert:
        nc.vector.tensor_unary(found, found, "logical_not")
    nc.dma.store(out.reshape(1, 1), found)


def _load_flat(nc, view: np.ndarray, start: int, stop: int, dtype: np.dtype) -> list[Tile]:
    """Elements [start, stop) of ``view`` as tiles converted (rounded) to ``dtype``: a [p, f] block and a
    [1, rest] tail."""
    tiles = []
    for s0, s1, p, f in flat_tiles(stop - start):
        raw = nc.sbuf_tile((p, f), view.dtype)
        nc.dma.load_flat(raw, view, start + s0, start + s1)
        if raw.dtype != dtype:
            converted = nc.sbuf_tile((p, f), dtype)
            nc.vector.tensor_copy(converted, raw)
            raw = converted
        tiles.append(raw)
    return tiles


def _sort_program(n: int):
    """GpSimd: the n values of the input tiles, sorted (NaN last), laid out row-major over a [P, m]
    tile and padded with the largest value (a repeated test value changes no membership)."""

    def program(sorted_out, *pieces):
        values = np.sort(np.concatenate([_widened(piece).reshape(-1) for piece in pieces]))
        flat = sorted_out.reshape(-1)
        flat[:n] = values
        flat[n:] = values[-1]

    return program


def _widened(values: np.ndarray) -> np.ndarray:
    """bf16/fp16 values as fp32 (exact): GpSimd's cores compute floats in fp32."""
    return values.astype(np.float32) if is_float(values.dtype) and values.dtype != np.float32 else values


def _search(o: np.ndarray, x: np.ndarray, table: np.ndarray) -> None:
    """GpSimd: o = x is in the sorted ``table`` (binary search, then an equality test)."""
    keys = _widened(table).reshape(-1)
    x = _widened(x)
    at = np.minimum(np.searchsorted(keys, x), keys.size - 1)
    o[...] = keys[at] == x


def _among(out: torch.Tensor, elements: torch.Tensor, tests: torch.Tensor, common: torch.dtype, invert: bool) -> None:
    """isin(tensor, tensor) over flat tiles of the output (in its memory order)."""
    if out.numel() == 0:
        return
    pw = prepare_elementwise(out, (elements,), common_dtype=common)
    chunks = test_chunks(tests.numel(), common)
    # Sorted chunks that do not all fit in SBUF wait in a device scratch tensor, one [P, k] block each.
    scratch = None
    if len(chunks) > 1:
        scratch = hbm(torch.empty(scratch_shape(chunks, common), dtype=common, device=out.device))
    with launch("isin", out.device.index) as nc:
        among_program(nc, pw.views[0], hbm(tests), pw.out_view, common, invert, scratch)


def test_chunks(m: int, common: torch.dtype) -> list[tuple[int, int]]:
    """The chunks [c0, c1) of ``m`` test values sorted one at a time (each fits SBUF); none where they are
    compared one by one (``COMPARE_MAX``)."""
    if m <= COMPARE_MAX:
        return [(0, m)] if m else []
    per_partition = max(1, CHUNK_BYTES // numpy_compute(common).itemsize)
    return [(c0, min(m, c0 + P * per_partition)) for c0 in range(0, m, P * per_partition)]


def scratch_shape(chunks: list[tuple[int, int]], common: torch.dtype) -> tuple[int, int, int]:
    """The HBM scratch several sorted chunks wait in: one [P, per_partition] block each."""
    return (len(chunks), P, max(1, CHUNK_BYTES // numpy_compute(common).itemsize))


def among_program(nc, x_view: np.ndarray, tests: np.ndarray, out_view: np.ndarray, common: torch.dtype,
                  invert: bool, scratch: np.ndarray | None) -> None:
    """``_among``'s tile program on HBM arrays (the compiler's ``isin`` step runs it too, compiler/opaque.py):
    ``x_view`` the elements in ``out_view``'s shape and order, ``scratch`` (``scratch_shape``) where
    ``test_chunks`` gives more than one chunk."""
    cd = numpy_compute(common)  # engines compare in this (fp32 for floats) ...
    target = numpy_dtype(common)  # ... values first rounded to the common dtype, as CPU's .to(common)
    m = tests.size
    chunks = test_chunks(m, common)
    tables = _prepare_tests(nc, tests, m, chunks, target, scratch)
    convert = common in COMPUTE_DTYPES and x_view.dtype != target  # as prepare_elementwise's convert
    for start, stop, p, f in flat_tiles(out_view.size):
        mark = nc.mark()
        x = nc.sbuf_tile((p, f), x_view.dtype)
        nc.dma.load_flat(x, x_view, start, stop)
        if convert:
            converted = nc.sbuf_tile((p, f), target)
            nc.vector.tensor_copy(converted, x)
            x = converted
        found = nc.sbuf_tile((p, f), BOOL)
        if m == 0:
            nc.vector.memset(found, False)
        elif m <= COMPARE_MAX:
            _compare_each(nc, found, x, tables[0], m, cd)
        else:
            _search_chunks(nc, found, x, tables, scratch, chunks)
        if invert:
            nc.vector.tensor_unary(found, found, "logical_not")
        nc.dma.store_flat(out_view, start, stop, found)
        nc.release_to(mark)


def _prepare_tests(nc, view: np.ndarray, m: int, chunks, dtype: np.dtype, scratch: np.ndarray | None
                   ) -> list[Tile]:
    """Test values rounded to the common ``dtype``. Few: one [P, m] tile, every partition holding all
    of them. More: each chunk sorted on GpSimd into a [P, k] tile, kept in SBUF (one chunk) or stored
    to ``scratch`` (several)."""
    if m == 0:
        return []
    if m <= COMPARE_MAX:
        row = nc.sbuf_tile((1, m), view.dtype)
        nc.dma.load_flat(row, view, 0, m)
        if row.dtype != dtype:
            converted = nc.sbuf_tile((1, m), dtype)
            nc.vector.tensor_copy(converted, row)
            row = converted
        everywhere = nc.sbuf_tile((P, m), dtype)
        nc.gpsimd.partition_broadcast(everywhere, row)
        return [everywhere]
    tables = []
    for i, (c0, c1) in enumerate(chunks):
        mark = nc.mark()
        n = c1 - c0
        pieces = _load_flat(nc, view, c0, c1, dtype)
        table = nc.sbuf_tile((P, math.ceil(n / P)), dtype)
        nc.gpsimd.run("isin_sort", _sort_program(n), (table,), tuple(pieces), elements=n,
                      factor=max(1.0, math.log2(n)))
        if scratch is not None:
            nc.dma.store(scratch[i][:, :table.free], table)
            nc.release_to(mark)
            continue
        for piece in pieces:
            nc.release(piece)
        tables.append(table)
    return tables


def _compare_each(nc, found: Tile, x: Tile, table: Tile, m: int, cd: np.dtype) -> None:
    """found = OR over j of (x == test_j), test_j a per-partition scalar column of ``table``."""
    p = x.partitions
    nc.vector.tensor_tensor(found, x, table[:p, 0:1], "equal", dtype=cd)
    if m > 1:
        hit = nc.sbuf_tile(x.shape, BOOL)
        for j in range(1, m):
            nc.vector.tensor_tensor(hit, x, table[:p, j:j + 1], "equal", dtype=cd)
            nc.vector.tensor_tensor(found, found, hit, "logical_or")


def _search_chunks(nc, found: Tile, x: Tile, tables: list[Tile], scratch: np.ndarray | None, chunks) -> None:
    """found = x is in any sorted chunk (resident tables, or reloaded from ``scratch``)."""
    steps = max(1.0, math.log2(max(c1 - c0 for c0, c1 in chunks)))
    if scratch is None:
        nc.gpsimd.run("isin_search", _search, (found,), (x, tables[0]), elements=x.data.size, factor=steps)
        return
    hit = nc.sbuf_tile(x.shape, BOOL)
    for i, (c0, c1) in enumerate(chunks):
        mark = nc.mark()
        block = scratch[i][:, :math.ceil((c1 - c0) / P)]
        table = nc.sbuf_tile(block.shape, block.dtype)
        nc.dma.load(table, block)
        nc.gpsimd.run("isin_search", _search, (hit if i else found,), (x, table), elements=x.data.size,
                      factor=steps)
        if i:
            nc.vector.tensor_tensor(found, found, hit, "logical_or")
        nc.release_to(mark)


register_family("isin", _compute, _meta)
