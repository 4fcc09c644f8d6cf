"""The queue of adaptive eager: what is waiting, when it must run, and running it.

What may wait (capture.py): family kernels whose computation is a chain of
``common.elementwise`` launches (``queueable``), and computes carrying a
``plan`` (sum/mean/amax/amin over the last dimension, softmax/log_softmax,
layer_norm, mm/addmm/bmm/baddbmm). Their
checks run at the call; their launches become steps. Everything else meets a
*barrier*: it runs eagerly, after the queued work it depends on, which is all
queued work whose storages its tensor arguments share (its written arguments
included, so a queued read cannot see a later write). ``flush`` runs the whole
queue in order, fused group by group (fusion.py, programs.py).

Storages are recognised by their StorageImpl (``_cdata``), not their address:
``resize_`` may move a storage's bytes while work on it waits.

A queued output is *observable* if anything outside the queue still holds its
storage (a tensor, a view, autograd, a Python storage object). An unobservable
output that only its own group reads is never stored: the user dropped the
last reference before the data was needed, so nothing can tell.
"""

from __future__ import annotations

import sys
import threading
import traceback
import weakref
from collections import Counter
from typing import Any, Callable, Iterable

import torch

from device_impl.bounded import BoundedDict
from device_impl.dispatch import table
from device_impl.dispatch.table import HOOKS
from device_impl.eager import fusion, programs
from device_impl.eager.capture import AnyStep, capture, capture_plan
from device_impl.eager.chain import StepError
from device_impl.eager.stats import STATS
from device_impl.kernels.common import is_device_tensor

# Kernel modules whose family computes consist only of common.elementwise launches: every op-group module of
# the elementwise package (a new one is queueable without being listed) and copy.
QUEUEABLE_PACKAGES = ("device_impl.kernels.elementwise.",)
QUEUEABLE_MODULES = frozenset({"device_impl.kernels.copy"})


def queueable(module: str) -> bool:
    return module in QUEUEABLE_MODULES or module.startswith(QUEUEABLE_PACKAGES)
# Ops whose kernels raise on data (integer division by zero): run eagerly so the error is raised at the op.
DATA_CHECKED_PACKETS = frozenset({"remainder", "fmod", "floor_divide", "div"})

# How a compute enters the queue, by (op, its module, whether it has a plan): found once (``_how``), looked up
# per call (the string tests cost more than the rest of the decision).
_ELEMENTWISE, _CHECKED, _PLANNED, _NEVER = "elementwise", "checked", "planned", "never"
_HOW: dict[tuple, str] = {}


def _how(op: str, module: str, planned: bool) -> str:
    """``_ELEMENTWISE``: its launches are captured; ``_CHECKED``: so too, unless an integer division (it raises
    on data: run at the op); ``_PLANNED``: it carries a plan; ``_NEVER``: it runs after a barrier."""
    if queueable(module):
        return _CHECKED if _packet(op) in DATA_CHECKED_PACKETS else _ELEMENTWISE
    return _PLANNED if planned else _NEVER


DEFAULT_MAX_OPS = 256
DEFAULT_MAX_BYTES = 512 * 2**20

_use_count = torch._C._storage_Use_Count
OUTSIDE = HOOKS.outside


def _packet(op: str) -> str:
    return op.split("::", 1)[1].split(".", 1)[0].rstrip("_")


def _tensors(value: Any, found: list[torch.Tensor]) -> None:
    if isinstance(value, torch.Tensor):
        if is_device_tensor(value):
            found.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors(v, found)


def storage_id(t: torch.Tensor) -> int:
    """The identity of ``t``'s StorageImpl (stable across resize_, shared by every view)."""
    return t.untyped_storage()._cdata


def _storage_refs(storage: torch.UntypedStorage) -> tuple[int, int]:
    return _use_count(storage._cdata), sys.getrefcount(storage)


class Queue:
    def __init__(self) -> None:
        self.steps: list[AnyStep] = []
        self.refs: Counter[int] = Counter()  # storage id -> snapshots the queue holds over it
        self.bytes = 0
        self.max_ops = DEFAULT_MAX_OPS
        self.max_bytes = DEFAULT_MAX_BYTES
        self.lock = threading.RLock()
        # Flushes running now, on any thread: their steps have left ``steps`` but may not have run yet, so a
        # read that finds ``steps`` empty must still wait for them (``barrier``): two threads in adaptive mode
        # share this queue, and one's flush runs the other's steps.
        self.flushing = 0
        self.head: tuple | None = None  # _head_key of the call whose launches head the queue
        self.owners: list[int] = []  # beside ``steps``: the thread that submitted each (threading.get_ident)
        # Storages a failed flush left unwritten (the failed step's output and every later step's), by storage id:
        # (the error, a weak reference to the storage's Python object, which PyTorch keeps while the storage lives,
        # so an entry never outlives its storage and a later storage at the same address is not taken for it). A
        # read of one, or a call taking one, raises that error, on whichever thread: two threads share this queue,
        # and the flush that failed may have been another thread's (``_run``).
        self.poisoned: dict[int, tuple[BaseException, weakref.ref]] = {}

    # --- entering the queue -------------------------------------------------------------------------

    def _capture(self, op: str, compute: Callable[[torch.Tensor, dict], None], out: torch.Tensor,
                 args: dict[str, Any]) -> list[AnyStep] | None:
        key = (op, compute.__module__, hasattr(compute, "plan"))  # computes may be per-call objects
        how = _HOW.get(key)
        if how is None:
            how = _HOW[key] = _how(*key)
        if how is _ELEMENTWISE:
            return capture(op, compute, out, args)
        if how is _CHECKED:
            return capture(op, compute, out, args) if out.dtype.is_floating_point or out.dtype.is_complex else None
        if how is _PLANNED:
            return capture_plan(op, compute, out, args)
        return None

    def submit(self, op: str, compute: Callable[[torch.Tensor, dict], None], out: torch.Tensor,
               args: dict[str, Any]) -> None:
        """Queue ``compute(out, args)`` if its launches can wait, else run it after a barrier."""
        with self.lock:
            # Inside a kernel running outside the queue (runtime.hooks.Outside) nothing may wait: that
            # kernel's own launch reads or writes what this computes, before any later flush.
            head = None
            if not self.steps and not OUTSIDE.depth:
                head = _head_key(op, out, args)
                if _ALONE.get(head):
                    # Every flush this call headed ran its launch alone, and nothing waits before it: it runs
                    # now, as eager runs it (``alone``: a compute's eager form, the C++ copy for a device copy),
                    # instead of after the queue's bookkeeping, at a flush that would run it the same way.
                    STATS.ops_run_alone += 1
                    OUTSIDE.depth += 1
                    try:
                        getattr(compute, "alone", compute)(out, args)
                    finally:
                        OUTSIDE.depth -= 1
                    return
            if self.poisoned:
                found = [out]
                _tensors(args, found)
                self.check_poisoned(found)
            steps = None if OUTSIDE.depth else self._capture(op, compute, out, args)
            if steps is None:
                self.barrier("unqueueable", op, (out,), args)
                STATS.ops_run_eagerly += 1
                OUTSIDE.depth += 1  # what this compute dispatches itself runs at once too
                try:
                    compute(out, args)
                finally:
                    OUTSIDE.depth -= 1
                return
            refs, queued = self.refs, self.steps
            if not queued and len(steps) == 1:
                self.head = head  # what the next flush learns about (see _ALONE)
            self.owners.extend([threading.get_ident()] * len(steps))
            for step in steps:
                queued.append(step)
                for t in step.tensors():
                    refs[t.untyped_storage()._cdata] += 1  # storage_id, inlined
                out = step.out
                self.bytes += out.numel() * out.element_size()
            STATS.ops_queued += 1
            STATS.steps += len(steps)
            if len(self.steps) >= self.max_ops:
                self.flush("op_limit")
            elif self.bytes >= self.max_bytes:
                self.flush("byte_limit")

    # --- leaving it ----------------------------------------------------------------------------------

    def depends(self, tensors: Iterable[torch.Tensor]) -> bool:
        """Whether any of ``tensors`` shares a storage with queued work."""
        refs = self.refs
        return any(t.numel() and storage_id(t) in refs for t in tensors)

    def barrier(self, reason: str, op: str = "", args: Any = None, kwargs: Any = None) -> None:
        """Flush before ``op`` if its tensor arguments touch queued storages (``args=None``: always); first wait
        for a flush another thread is running (it holds the lock), which may be running this thread's steps."""
        if not self.steps and not self.flushing and not self.poisoned:
            return
        with self.lock:
            found: list[torch.Tensor] = []
            if args is not None:
                _tensors(args, found)
                _tensors(kwargs, found)
            if self.steps and (args is None or self.depends(found)):
                self.flush(reason)
            if self.poisoned:
                self.check_poisoned(found)

    def check_poisoned(self, tensors: Iterable[torch.Tensor]) -> None:
        """Raise the error of the failed flush that left any of ``tensors``' storages unwritten (``poisoned``)."""
        failed = self._poisoning(tensors)
        del tensors  # the raised error's frames must not hold the storages (see _run)
        if failed is not None:
            raise _again(failed)

    def _poisoning(self, tensors: Iterable[torch.Tensor]) -> BaseException | None:
        with self.lock:
            for key in [k for k, (_, storage) in self.poisoned.items() if storage() is None]:
                del self.poisoned[key]  # freed: nobody can read it
            for t in tensors:
                entry = self.poisoned.get(storage_id(t)) if t.numel() else None
                if entry is not None and entry[1]() is not None:
                    return entry[0]
        return None

    def flush(self, reason: str) -> None:
        """Run every queued step, in order, fused where the hazards allow."""
        with self.lock:
            if not self.steps:
                return
            self.flushing += 1  # before the steps leave the queue (see __init__)
            steps, self.steps = self.steps, []
            owners, self.owners = self.owners, []
            refs, self.refs = self.refs, Counter()
            head, self.head = self.head, None
            self.bytes = 0
            STATS.flushes[reason] += 1
            try:
                if table.ASSERT_NO_CPU:
                    with table._no_cpu_mode(f"adaptive eager flush ({reason})"):
                        self._run(steps, refs, reason, head, owners)
                else:
                    self._run(steps, refs, reason, head, owners)
            finally:
                self.flushing -= 1
                fusion.forget_views()

    def _run(self, steps: list[AnyStep], refs: Counter[int], reason: str, head: tuple | None = None,
             owners: list[int] | None = None) -> None:
        if len(steps) == 1:  # nothing to fuse: the step runs as eager runs it, with no grouping bookkeeping
            ready = [programs.Ready(fusion.Group("single", steps), None, [])]
            stored = [[True]]
        else:
            ready = programs.plan_flush(steps)
            stored = self._observable(ready, refs)
        if head is not None:
            _learn(head, programs.runs_as_eager(ready, 0))
        failure: tuple[str, BaseException, AnyStep] | None = None
        i = 0
        while i < len(ready):
            end = programs.run_end(ready, i)  # products of one A run in one launch
            STATS.groups += 1
            try:
                if end - i > 1:
                    programs.run_shared(ready[i:end], stored[i:end])
                else:
                    programs.run(ready[i], stored[i])
            except StepError as failed:
                STATS.errors += 1
                failure = (failed.step.op, failed.__cause__, failed.step)
                traceback.clear_frames(failed.__traceback__)
                break
            i = end
        if failure is None:
            return
        # Raised outside the handler, with the frames' tensors dropped: the error may live long (a user's
        # handler, a test report) and must not keep the queue's device memory alive.
        op, cause, failed_step = failure
        failure = None  # (it holds the failed step, and with it the step's tensors)
        traceback.clear_frames(cause.__traceback__)
        # kept while a poisoned output lives, so it holds no frames (nor, through them, the outputs themselves):
        # never raised itself (each raise is a copy, _again), its cause stripped of traceback and context
        cause.__traceback__ = cause.__context__ = None
        error = _named(cause, op, reason)
        if error is not cause:
            error.__cause__ = cause
        # The failed step's output and every later step's (the rest of its group, the groups after it) were never
        # (or partly) written: poisoned, so whoever reads them, on any thread, gets this error rather than stale
        # memory. The thread flushing raises it only if some of those steps are its own; another thread's failed
        # work surfaces at that thread's read of it (as an asynchronous CUDA error surfaces at its owner's next
        # synchronizing call).
        me = threading.get_ident()
        owner_of = {id(step): owner for step, owner in zip(steps, owners or ())}
        group = ready[i].group.steps
        unrun = group[next((k for k, step in enumerate(group) if step is failed_step), 0):]
        unrun += [step for item in ready[i + 1:] for step in item.group.steps]
        mine = False
        for step in unrun:
            storage = step.out.untyped_storage()
            self.poisoned[storage._cdata] = (error, weakref.ref(storage))
            mine = mine or owner_of.get(id(step), me) == me
        del step, storage, group, unrun, failed_step
        steps.clear()
        ready.clear()
        stored.clear()
        owner_of.clear()
        if mine:
            raise _again(error)

    def _observable(self, ready: list[programs.Ready], refs: Counter[int]) -> list[list[bool]]:
        """Per step, whether its output must reach HBM (see the module docstring). A group without a
        program is one launch that stores its output, so it is not asked."""
        if all(item.program is None for item in ready):
            return [[True] * len(item.group.steps) for item in ready]
        # The counts of a storage held by one tensor, measured as below, at every flush: measured once and
        # kept, it went stale after a run of compiled tests (every output then looked observable, and no
        # store was elided again in the process).
        probe = torch.empty(1, device=ready[0].group.steps[0].out.device)
        storage = probe.untyped_storage()
        base_count, base_py = _storage_refs(storage)
        del probe, storage
        result = []
        for item in ready:
            if item.program is None:
                result.append([True] * len(item.group.steps))
                continue
            flags = []
            for step, shared in zip(item.group.steps, item.shared):  # shared: another group touches it
                if shared:
                    flags.append(True)
                    continue
                storage = step.out.untyped_storage()
                count, py = _storage_refs(storage)
                flags.append(count - base_count + 1 > refs[storage._cdata] or py > base_py)
            result.append(flags)
        return result


# Whether the launch of a call that headed a flush ran alone there, by ``_head_key`` (the call: op, layouts,
# static arguments; not where its tensors are): True while every flush it headed ran it alone, as eager mode
# runs it (``programs.runs_as_eager``: not fused, not sharing a launch, not a product, whose recurring launch a
# flush replays), False for good once one did not. Such a call is run at once when nothing is queued before it
# (``submit``): the flush would run it the same way, after the queue's bookkeeping (capture, flush plan,
# observability), and its checks and errors are then eager's, at the call. A call whose launch could have
# fused with what followed only loses that fusion if it ran alone every time before; the bits are eager's.
ALONE_LIMIT = 4096
_ALONE: BoundedDict = BoundedDict(ALONE_LIMIT)


def _head_key(op: str, out: torch.Tensor, args: dict[str, Any]) -> tuple:
    """A submitted call as plain data: op, each tensor's layout (offset, sizes, strides, dtype, device, and which
    of the call's tensors share a storage), the other arguments' values (numbers, dtypes, dims)."""
    storages: dict[int, int] = {}

    def key(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return (storages.setdefault(v.untyped_storage()._cdata, len(storages)), v.storage_offset(), v.shape,
                    v.stride(), v.dtype, v.device)
        if isinstance(v, (list, tuple)):
            return tuple([key(x) for x in v])
        if v is None or isinstance(v, (bool, int, float, complex, str, torch.dtype)):
            return (type(v), v)
        return type(v)

    return (op, key(out)) + tuple([(name, key(v)) for name, v in args.items()])


def _learn(key: tuple, alone: bool) -> None:
    known = _ALONE.get(key)
    if known is None:
        _ALONE[key] = alone
    elif known and not alone:
        _ALONE[key] = False


def forget_alone() -> None:
    """Forget which launches ran alone (tests; ``eager.clear_cache``)."""
    _ALONE.clear()


def _again(error: BaseException) -> BaseException:
    """A fresh exception of ``error``'s class and message, caused by what caused it: a poisoned output's error is
    raised at every read of it, and one object raised again and again would gather every raise's frames (and the
    tensors in them)."""
    try:
        copy = type(error)(str(error))
    except Exception:  # noqa: BLE001 - an exception class with a custom constructor
        return error
    copy.__cause__ = error.__cause__
    return copy


def _named(error: BaseException, op: str, reason: str) -> BaseException:
    """The same exception class, with a message that names the queued op that raised it."""
    message = f"{error} [raised by {op}, queued by adaptive eager and run at a '{reason}' flush]"
    try:
        named = type(error)(message)
    except Exception:  # noqa: BLE001 - an exception class with a custom constructor
        error.add_note(message)
        return error
    return named


QUEUE = Queue()
