"""Deliberately wrong neuron kernels, planted one at a time to prove the harness catches them.

Each plant swaps one registered kernel of the lowering table for a wrong one
(``TABLE.overridden``), for the length of a ``with plant(name):`` block. The
wrong kernels are device kernels like the real ones: they run the real kernel
for the out= checks and allocation, then read and write device memory through
the engine's HBM views with numpy (never torch CPU kernels), each with one
classic kernel bug. This module imports the device, not the harness, so a
reproducer can run under a plant in a fresh interpreter:

    python tests/harness/planted.py NAME reproducer.py [NAME2 reproducer2.py ...]  # planted, then clean
"""

from __future__ import annotations

import json
import runpy
import sys
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import ml_dtypes
import numpy as np
import torch

import device_impl  # noqa: F401  (registers the device)
from device_impl.dispatch import TABLE
from device_impl.dispatch.table import resolve
from device_impl.engine.hbm import view as hbm
from device_impl.kernels.registry import Binder

F32 = np.float32
P = 128  # partitions: the tile edge


def _bind(op: str, args: tuple, kwargs: dict) -> dict[str, Any]:
    return Binder.of(resolve(op)).bind(args, kwargs)


def _f32(x: torch.Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """A device tensor's values, broadcast to ``shape``, widened to fp32 as the engines read them."""
    return np.broadcast_to(hbm(x), shape).astype(F32)


# --- the wrong kernels: make(original) -> kernel --------------------------------------

def tile_edge(op: str, original: Callable) -> Callable:
    """The remainder tile of a length 128k+1 loop is one short: its element gets its neighbour's value."""
    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        out = _bind(op, args, kwargs)["out"]
        n = out.numel()
        if n > P and n % P == 1 and out.is_contiguous():
            flat = hbm(out).reshape(-1)
            flat[-1] = flat[-2]
        return result
    return kernel


def wrong_broadcast(op: str, original: Callable) -> Callable:
    """A broadcast operand is read as if it had the output's shape and contiguous strides (its
    stride-0 dims ignored): the DMA walks past its data, where reads return the engine's poison (NaN)."""
    def operand(x: Any, shape: tuple[int, ...], numel: int) -> Any:
        if not isinstance(x, torch.Tensor) or x.is_cpu:
            return F32(x.item() if isinstance(x, torch.Tensor) else x)
        if x.numel() >= numel:
            return _f32(x, shape)
        linear = np.full(numel, np.nan, dtype=F32)
        linear[:x.numel()] = np.ascontiguousarray(hbm(x)).reshape(-1)
        return linear.reshape(shape)

    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        a = _bind(op, args, kwargs)
        out = a["out"]
        if out.is_floating_point() and out.numel():
            o = hbm(out)
            x, y = (operand(a[name], o.shape, out.numel()) for name in ("self", "other"))
            o[...] = (x + F32(a["alpha"]) * y).astype(o.dtype)
        return result
    return kernel


def nan_dropped(op: str, original: Callable) -> Callable:
    """relu as a max instruction with fmax semantics: max(NaN, 0) returns 0, dropping the NaN."""
    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        x = _bind(op, args, kwargs)["self"]
        if result.is_floating_point() and result.numel():
            r = hbm(result)
            r[...] = np.where(np.isnan(_f32(x, r.shape)), F32(0), r.astype(F32)).astype(r.dtype)
        return result
    return kernel


def no_promotion(op: str, original: Callable) -> Callable:
    """The result keeps the first operand's dtype instead of the promoted one (int32 // float32 -> int32)."""
    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        x = _bind(op, args, kwargs)["self"]
        if isinstance(x, torch.Tensor) and result.dtype != x.dtype:
            wrong = torch.empty(result.shape, dtype=x.dtype, device=result.device)
            with np.errstate(invalid="ignore", over="ignore"):
                hbm(wrong)[...] = hbm(result).astype(hbm(wrong).dtype)
            return wrong
        return result
    return kernel


def zero_sign(op: str, original: Callable) -> Callable:
    """neg as 0 - x: -(+0.0) must be -0.0, and 0 - 0.0 is +0.0."""
    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        a = _bind(op, args, kwargs)
        out = a["out"]
        if out.is_floating_point() and out.numel():
            o = hbm(out)
            o[...] = (F32(0) - _f32(a["self"], o.shape)).astype(o.dtype)
        return result
    return kernel


def inplace_copy(op: str, original: Callable) -> Callable:
    """zero_ that fills a new tensor and returns it, leaving ``self`` as it was."""
    def kernel(*args, **kwargs):
        x = _bind(op, args, kwargs)["self"]
        fresh = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        hbm(fresh)[...] = 0
        return fresh
    return kernel


def wrong_error(op: str, original: Callable) -> Callable:
    """index_select's bounds check raises RuntimeError where PyTorch raises IndexError."""
    def kernel(*args, **kwargs):
        a = _bind(op, args, kwargs)
        x, dim, index = a["self"], a["dim"], a["index"]
        size = x.shape[dim] if x.dim() else 1
        idx = hbm(index)
        if idx.size and (idx.min() < -size or idx.max() >= size):
            raise RuntimeError(f"index_select(): index {int(idx.max())} out of range for a dimension of size {size}")
        return original(*args, **kwargs)
    return kernel


def wrong_gradient(op: str, original: Callable) -> Callable:
    """sigmoid_backward as grad * y, missing the (1 - y) factor."""
    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        a = _bind(op, args, kwargs)
        g = hbm(a["grad_input"])
        g[...] = (_f32(a["grad_output"], g.shape) * _f32(a["output"], g.shape)).astype(g.dtype)
        return result
    return kernel


def stride0_linear(op: str, original: Callable) -> Callable:
    """An expanded (stride-0) input is read as if contiguous: the DMA walks its storage linearly."""
    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        a = _bind(op, args, kwargs)
        x, out = a["self"], a["out"]
        if x.numel() > 1 and 0 in x.stride() and out.is_floating_point():
            v = hbm(x)
            stored = x.untyped_storage().nbytes() // x.element_size() - x.storage_offset()
            linear = np.lib.stride_tricks.as_strided(v, shape=(stored,), strides=(v.itemsize,))
            o = hbm(out)
            o[...] = np.sin(np.resize(linear, o.shape).astype(F32)).astype(o.dtype)
        return result
    return kernel


def bf16_truncation(op: str, original: Callable) -> Callable:
    """mul stores bfloat16 by dropping the low 16 bits of the fp32 product (truncation, not round-to-nearest-even)."""
    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        a = _bind(op, args, kwargs)
        out, other = a["out"], a["other"]
        if out.dtype == torch.bfloat16 and out.numel() and isinstance(other, torch.Tensor) and not other.is_cpu:
            o = hbm(out)
            product = np.ascontiguousarray(_f32(a["self"], o.shape) * _f32(other, o.shape))
            o[...] = (product.view(np.uint32) >> 16).astype(np.uint16).view(ml_dtypes.bfloat16)
        return result
    return kernel


def host_result(op: str, original: Callable) -> Callable:
    """nonzero leaves its result in host memory (a CPU tensor) instead of device memory."""
    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        host = torch.empty(result.shape, dtype=result.dtype)
        hbm(host)[...] = hbm(result)
        return host
    return kernel


def keepdim_ignored(op: str, original: Callable) -> Callable:
    """logsumexp always keeps the reduced dimensions."""
    def kernel(*args, **kwargs):
        a = _bind(op, args, kwargs)
        return original(a["self"], a["dim"], True)
    return kernel


def contiguous_result(op: str, original: Callable) -> Callable:
    """The result written contiguous whatever its operand's layout (CPU's relu of a transposed tensor keeps the
    transpose): right values, wrong strides; ``strides(...)`` only changes a size-1 dim's stride (no layout)."""
    def kernel(*args, **kwargs):
        result = original(*args, **kwargs)
        fresh = torch.empty(result.shape, dtype=result.dtype, device=result.device)
        hbm(fresh)[...] = hbm(result)
        return fresh
    return kernel


def size1_strides(result: torch.Tensor) -> torch.Tensor:
    """``result``'s elements in a tensor whose size-1 dims have other strides than ``result``'s (the same layout:
    a size-1 dim's stride addresses no second element)."""
    fresh = torch.empty(result.shape, dtype=result.dtype, device=result.device)
    hbm(fresh)[...] = hbm(result)
    strides = [s * 7 + 3 if n == 1 else s for n, s in zip(fresh.shape, fresh.stride())]
    return fresh.as_strided(fresh.shape, strides)


@dataclass(frozen=True)
class Plant:
    op: str  # the overload whose kernel is replaced
    make: Callable[[str, Callable], Callable]
    bug: str


PLANTS: dict[str, Plant] = {
    "tile_edge": Plant("aten::exp.out", tile_edge, "off by one at a tile edge (last element of a 129-element tile)"),
    "broadcast": Plant("aten::add.out", wrong_broadcast, "wrong broadcast"),
    "nan_dropped": Plant("aten::relu", nan_dropped, "NaN dropped"),
    "promotion": Plant("aten::floor_divide", no_promotion, "wrong dtype promotion"),
    "zero_sign": Plant("aten::neg.out", zero_sign, "wrong sign of zero"),
    "inplace": Plant("aten::zero_", inplace_copy, "in-place op returns a new tensor"),
    "error_class": Plant("aten::index_select", wrong_error, "wrong error class"),
    "gradient": Plant("aten::sigmoid_backward.grad_input", wrong_gradient, "wrong backward kernel"),
    "stride0": Plant("aten::sin.out", stride0_linear, "stride-0 (expanded) input mishandled"),
    "bf16_rounding": Plant("aten::mul.out", bf16_truncation, "bfloat16 rounding by truncation"),
    "host_result": Plant("aten::nonzero", host_result, "result left on the host"),
    "keepdim": Plant("aten::logsumexp", keepdim_ignored, "wrong output shape (keepdim ignored)"),
    "layout": Plant("aten::relu", contiguous_result, "result contiguous where CPU keeps a transposed operand's layout"),
}


@contextmanager
def plant(name: str) -> Iterator[Plant]:
    """Run with the planted kernel ``name`` instead of the real one; the real one is back on exit."""
    entry = PLANTS[name]
    with TABLE.overridden(entry.op, entry.make(entry.op, TABLE.kernel(entry.op))):
        yield entry


def run_planted_and_clean(name: str, script: str) -> dict[str, Any]:
    """Run ``script`` (a reproducer) as __main__ with bug ``name`` planted, then with the real kernel:
    what each run asserted (None: it passed)."""
    outcome: dict[str, Any] = {}
    for label, planted in (("planted", True), ("clean", False)):
        with plant(name) if planted else nullcontext():
            try:
                runpy.run_path(script, run_name="__main__")
                outcome[label] = None
            except AssertionError as e:
                outcome[label] = str(e)
    return outcome


def main(argv: list[str]) -> None:
    """``planted.py NAME SCRIPT [NAME SCRIPT ...]``: each reproducer planted then clean; prints a JSON
    object per name, and whether the scripts pulled in the harness (a reproducer must not)."""
    pairs = dict(zip(argv[::2], argv[1::2]))
    outcomes = {name: run_planted_and_clean(name, script) for name, script in pairs.items()}
    harness = any(m == "harness" or m.startswith("harness.") for m in sys.modules)
    print(json.dumps({"outcomes": outcomes, "harness_imported": harness}))


if __name__ == "__main__":
    main(sys.argv[1:])
