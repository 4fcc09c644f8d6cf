"""The C++ core's data-reading kernels, ordered against the queue while adaptive eager is on.

``copy_``, ``_copy_from``, ``_copy_from_and_resize`` and ``_local_scalar_dense``
live in csrc/aten_ops.cpp and never pass through the Python dispatch table. While
adaptive mode is on, ``install()`` registers Python kernels for them on
PrivateUse1 that run the queued work the copy depends on and then call the C++
kernel (``torch.library.get_kernel``, its intended use); ``uninstall()`` drops
the registrations, which restores the C++ kernels, so eager mode pays nothing.
While one thread alone runs adaptive (``mode.thread_eager_mode``) they stay
registered, and pass the other threads, whose ``HOOKS.submit`` is None, straight to
the C++ kernels.

A device-to-device copy on one core between compute dtypes (a cast such as
``x.float()``, or a same-dtype copy from ``clone()``, ``contiguous()``, ``reshape``)
is an elementwise launch (kernels/copy.py: ``device_cast``; an engine copy of the
same bytes), so it is queued rather than forcing a flush. Copies whose source and
destination overlap keep the C++ kernel (memmove-like) after a flush.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from device_impl.eager.capture import EAGER_RUNNERS, Step
from device_impl.eager.queue import OUTSIDE, QUEUE
from device_impl.engine.dtypes import COMPUTE_DTYPES
from device_impl.kernels.common import copy_emit, elementwise
from device_impl.runtime.hooks import HOOKS

_KEY = "PrivateUse1"
_KEYS = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)
_library: torch.library.Library | None = None


def _cast_compute(out: torch.Tensor, args: dict) -> None:
    from device_impl.kernels.copy import device_cast

    device_cast(out, args["src"])


def _copy_compute(out: torch.Tensor, args: dict) -> None:
    elementwise("copy", out, (args["src"],), copy_emit)


# Family-style computes of that module (queue.queueable).
_cast_compute.__module__ = _copy_compute.__module__ = "device_impl.kernels.copy"


def _queueable_copy(dst: torch.Tensor, src: torch.Tensor) -> bool:
    if not (dst.device.type == "neuron" and src.device == dst.device):
        return False
    if dst.dtype not in COMPUTE_DTYPES or src.dtype not in COMPUTE_DTYPES:
        return False
    if src.is_conj() or src.is_neg() or dst.is_conj() or dst.is_neg():
        return False
    if not _broadcasts_to(src.shape, dst.shape):
        return False
    return not torch._C._overlaps(dst, src)


def _broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    """``torch.broadcast_shapes(shape, target) == target`` without torch's Python broadcasting helper
    (about 30 us a call, on every device copy): each trailing size equal, or 1."""
    if len(shape) > len(target):
        return False
    return all(s == t or s == 1 for s, t in zip(reversed(shape), reversed(target)))


def install() -> None:
    """Route the C++ copy and scalar-read kernels through the queue (idempotent)."""
    global _library
    if _library is not None:
        return
    original = {op: torch.library.get_kernel(f"aten::{op}", _KEY)
                for op in ("copy_", "_copy_from", "_copy_from_and_resize", "_local_scalar_dense")}

    def copy_(keys, dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
        if HOOKS.submit is None:  # a thread in eager mode while another runs adaptive (mode.thread_eager_mode)
            return original["copy_"].call_boxed(keys, dst, src, non_blocking)
        if dst is src:  # a tensor onto itself: nothing to move (the C++ kernel's is_same rule)
            return dst
        if dst.numel() and not OUTSIDE.depth and _queueable_copy(dst, src):
            compute = _cast_compute if dst.dtype != src.dtype else _copy_compute
            QUEUE.submit("aten::copy_", compute, dst, {"src": src})
            return dst
        if QUEUE.steps or QUEUE.flushing or QUEUE.poisoned:  # queued, flushed by another thread, or failed
            QUEUE.barrier("copy", "", (dst, src))
        return original["copy_"].call_boxed(keys, dst, src, non_blocking)

    def copy_from(keys, src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> Any:
        if HOOKS.submit is None:
            return original["_copy_from"].call_boxed(keys, src, dst, non_blocking)
        if QUEUE.steps or QUEUE.flushing or QUEUE.poisoned:  # queued, flushed by another thread, or failed
            QUEUE.barrier("copy", "", (dst, src))
        return original["_copy_from"].call_boxed(keys, src, dst, non_blocking)

    def copy_from_and_resize(keys, src: torch.Tensor, dst: torch.Tensor) -> Any:
        if HOOKS.submit is None:
            return original["_copy_from_and_resize"].call_boxed(keys, src, dst)
        if QUEUE.steps or QUEUE.flushing or QUEUE.poisoned:  # queued, flushed by another thread, or failed
            QUEUE.barrier("copy", "", (dst, src))
        return original["_copy_from_and_resize"].call_boxed(keys, src, dst)

    def local_scalar_dense(keys, self: torch.Tensor) -> Any:
        if HOOKS.submit is None:
            return original["_local_scalar_dense"].call_boxed(keys, self)
        if QUEUE.steps or QUEUE.flushing or QUEUE.poisoned:
            QUEUE.barrier("item", "", (self,))
        return original["_local_scalar_dense"].call_boxed(keys, self)

    def copy_alone(step: Step) -> None:
        # a queued same-dtype copy no fusion took: the C++ kernel, exactly as in eager mode
        original["copy_"].call_boxed(_KEYS, step.out, step.operands[0], False)

    EAGER_RUNNERS[("aten::copy_", "copy")] = copy_alone
    # the same when the queue runs such a copy at the call (queue.submit: ``alone``)
    _copy_compute.alone = lambda out, args: original["copy_"].call_boxed(_KEYS, out, args["src"], False)
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Overriding a previously registered kernel": intended, and undone
        for op, fn in (("copy_", copy_), ("_copy_from", copy_from), ("_copy_from_and_resize", copy_from_and_resize),
                       ("_local_scalar_dense", local_scalar_dense)):
            library.impl(op, fn, _KEY, with_keyset=True)
    _library = library


def uninstall() -> None:
    """Restore the C++ kernels."""
    global _library
    if _library is not None:
        EAGER_RUNNERS.pop(("aten::copy_", "copy"), None)
        del _copy_compute.alone
        _library._destroy()
        _library = None
