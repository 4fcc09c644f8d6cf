"""Weight layout: a parameter a product reads as its K-major operand is kept on the device in TensorE's layout.

TensorE multiplies ``stationary[K, M].T @ moving[K, N]``: both operands need the contraction dim on SBUF
partitions. A linear layer's ``x @ W.t()`` reads its weight ``W [N, K]`` as ``B = W.t()``, whose rows are not
contiguous, so every product would load W row-major and transpose each [128, 128] block on TensorE (an identity
matmul, 512 fp32 cycles a block: the decoder block's 36 weight transposes were 6.6 us of TensorE). A compiler for
such a device lays a constant weight out once instead (weight layout optimisation; TVM, for one, folds a
constant weight's layout_transform into the weight: discuss.tvm.apache.org/t/11523); here:

* ``plan`` (a build pass): a dot_general whose B is, through layout ops only, a graph input AOTAutograd marks
  static (a parameter or buffer: ``static_input_indices``, the inputs cudagraphs also treat as fixed) and
  would need those transposes reads instead a *layout buffer* ``L = B`` as one contiguous [K, N] matrix
  (buffer kind ``layout``: its source input, the layout ops from it and the [K, N] order);
* ``Layouts`` (the runtime, one per linked program): before an execution's launch it finds each layout
  buffer's kept device copy, or makes it with a device program of its own, ``neff:<program>:layout``, whose
  loads, TensorE transposes, evacuations and stores are counted like any launch (device clock, engine
  statistics, HBM bytes), run when the copy is first needed and again whenever the weight changed. The copy is
  a tensor from the caching allocator, so device memory statistics count it.

A kept copy is good while its source is the same bytes: an update through the tensor (``w.add_(1)``, an
optimizer step, ``load_state_dict``) bumps the version counter or moves the data and is repacked without a
look at the bytes; one through ``.data``, which no version counter sees, is caught by comparing the source with
the copy of its bytes taken when it was packed (the simulator's bookkeeping, not device work). Numerics: the
same products, the same fp32 accumulation order; only where B's tiles come from changes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from device_impl.compiler.program import apply_view


def _chain(vid: int, views: dict, shapes: dict) -> list[tuple[dict, tuple[int, ...]]] | None:
    """The layout ops from ``vid``'s base to ``vid`` (first to last, each with its result's shape), or None
    where one broadcasts (a stride-0 operand is no weight matrix to lay out)."""
    chain = []
    while vid in views:
        view = views[vid]
        if view["op"] == "broadcast_in_dim":
            return None
        chain.append((view, tuple(shapes[vid])))
        vid = view["src"]
    return chain[::-1]


def _operand(source: np.ndarray, entry: dict) -> np.ndarray:
    """B as the product reads it, [K, N], a view of the source input's array (never a copy: ``plan`` checks)."""
    x = source
    for view, shape in entry["chain"]:
        x = apply_view(x, view, tuple(shape))
    return x.transpose(entry["order"]).reshape(entry["shape"])


def plan(steps: list[dict], views: dict, inputs: list[int], weights: frozenset[int], types: dict
         ) -> dict[int, dict]:
    """Point each product whose B is a static input read against TensorE's layout at a layout buffer (a new
    value, its ``ir.TensorType`` added to ``types``, the graph's); returns {layout vid: buffer entry}."""
    from device_impl.compiler.ir import TensorType
    from device_impl.kernels.matmul import needs_transpose

    position = {vid: i for i, vid in enumerate(inputs) if i in weights}
    shapes = {vid: t.shape for vid, t in types.items()}
    made: dict[tuple, int] = {}  # (source, chain, order) -> the layout vid already made for it
    found: dict[int, dict] = {}
    for step in steps:
        if step["kind"] != "dot_general":
            continue
        rhs = step["operands"][1]
        dn = step["attrs"]["dot_dimension_numbers"]
        if dn.get("lhs_batching_dimensions") or dn.get("rhs_batching_dimensions"):
            continue
        chain = _chain(rhs, views, shapes)
        source = chain[0][0]["src"] if chain else rhs
        if chain is None or source not in position:
            continue
        rc = list(dn.get("rhs_contracting_dimensions", []))
        order = rc + [d for d in range(len(shapes[rhs])) if d not in rc]
        k = math.prod(shapes[rhs][d] for d in rc)
        n = math.prod(shapes[rhs]) // max(k, 1)
        if k == 0 or n == 0:
            continue
        entry = {"kind": "layout", "index": position[source], "chain": [[view, list(s)] for view, s in chain],
                 "order": order, "shape": [k, n]}
        dtype = types[source].np_dtype
        # an uninitialised stand-in (never read) with the input's strides: is B a view of it, against
        # TensorE's layout?
        probe = np.empty(shapes[source], dtype)
        b = _operand(probe, entry)
        if not np.shares_memory(b, probe) or not needs_transpose(b):
            continue  # the layout ops copy (no view of the weight), or TensorE reads B as it lies
        key = (source, repr(entry["chain"]), tuple(order))
        vid = made.get(key)
        if vid is None:
            vid = max(types) + 1
            types[vid] = TensorType((k, n), types[source].dtype)
            made[key] = vid
            found[vid] = entry
        step["operands"] = [step["operands"][0], vid]
        step["attrs"] = dict(step["attrs"], dot_dimension_numbers=dict(
            dn, rhs_contracting_dimensions=[0], rhs_batching_dimensions=[]))
    return found


def _np_dtype(dtype: Any) -> np.dtype:
    from device_impl.compiler.ir import numpy_dtype

    return numpy_dtype(dtype) if isinstance(dtype, str) else np.dtype(dtype)


def _raw(array: np.ndarray) -> np.ndarray:
    """An array's bytes as unsigned integers: equal exactly where the bits are (-0.0 is not 0.0, NaN is NaN)."""
    return array.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(array.dtype.itemsize, np.uint8))


def _libc_memcmp():
    """libc's memcmp through ctypes (which releases the GIL for the call), or None where it cannot be found."""
    try:
        import ctypes

        memcmp = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError, TypeError):
        return None
    memcmp.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
    memcmp.restype = ctypes.c_int
    return memcmp


_MEMCMP = _libc_memcmp()


def same_bytes(array: np.ndarray, saved: np.ndarray) -> bool:
    """Whether ``array`` holds the bytes of ``saved`` (a C-contiguous copy taken earlier, of its shape and dtype):
    bit for bit, so -0.0 is not 0.0 and a NaN equals itself. One memcmp where both lie contiguous (numpy's
    comparison writes and then reads a bool per element: a decoder block's seven weight checks, 0.43 -> 0.36 ms of
    thread time a call), else numpy's comparison of the bytes as unsigned integers."""
    if array.shape != saved.shape or array.dtype != saved.dtype:
        return False
    if _MEMCMP is not None and array.flags.c_contiguous and saved.flags.c_contiguous:
        return array.nbytes == 0 or _MEMCMP(array.__array_interface__["data"][0],
                                            saved.__array_interface__["data"][0], array.nbytes) == 0
    return np.array_equal(_raw(np.ascontiguousarray(array)), _raw(np.ascontiguousarray(saved)))


class _Kept:
    """One layout buffer's device copy and what it was made from."""

    __slots__ = ("ptr", "version", "saved", "packed", "array")

    def __init__(self, ptr: int, version: int, source: np.ndarray, packed: Any, array: np.ndarray) -> None:
        self.ptr, self.version = ptr, version
        self.saved = source.copy()  # the source's bytes when it was laid out (C-contiguous: ``same_bytes``)
        self.packed, self.array = packed, array  # the device copy (held) and its HBM array

    def fresh(self, arg: Any, source: np.ndarray) -> bool:
        if arg.data_ptr() != self.ptr or arg._version != self.version:
            return False  # written through the tensor (its version counter) or another buffer
        return same_bytes(source, self.saved)


class Layouts:
    """The layout buffers of one linked program and their kept device copies (per device)."""

    def __init__(self, program: Any) -> None:
        self.name = program.name
        self.entries = [(vid, b) for vid, b in sorted(program.buffers.items()) if b["kind"] == "layout"]
        self.kept: dict[tuple[int, int], _Kept] = {}
        self.repacks = 0  # layout launches run (tests count them)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def arrays(self, args: list, in_arrays: list[np.ndarray], device: Any) -> dict[int, np.ndarray]:
        """Each layout buffer's HBM array for this execution; a missing or stale one is made first, in one
        launch of its own (``neff:<program>:layout``) before the program's."""
        import torch

        from device_impl.engine import launch
        from device_impl.kernels.common import hbm
        from device_impl.kernels.matmul import layout_into

        index = device.index or 0
        result: dict[int, np.ndarray] = {}
        stale = []
        for vid, entry in self.entries:
            arg, source = args[entry["index"]], in_arrays[entry["index"]]
            kept = self.kept.get((index, vid))
            if kept is not None and kept.fresh(arg, source):
                result[vid] = kept.array
            else:
                stale.append((vid, entry, arg, source))
        if not stale:
            return result
        self.repacks += 1
        with launch(f"neff:{self.name}:layout", index) as nc:
            for vid, entry, arg, source in stale:
                packed = torch.empty(entry["shape"], dtype=arg.dtype, device=device)
                target = hbm(packed)
                layout_into(nc, target, _operand(source, entry))
                self.kept[(index, vid)] = _Kept(arg.data_ptr(), arg._version, source, packed, target)
                result[vid] = target
        return result

    def zeros(self, types: dict) -> dict[int, np.ndarray]:
        """Host stand-ins for the layout buffers (``executor.record_schedule``'s zero-filled run)."""
        return {vid: np.zeros(entry["shape"], _np_dtype(types[vid][1])) for vid, entry in self.entries}
