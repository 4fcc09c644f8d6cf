"""The queue of adaptive eager: what is waiting, when it must run, and running it.

Only family kernels whose computation is a chain of ``common.elementwise``
launches are queued (``QUEUEABLE_MODULES``); their checks run at the call and
the launch is captured as a ``Step``. Everything else meets a *barrier*: it runs
eagerly, after the queued work it depends on, which is all queued work whose
storages its tensor arguments share (its written arguments included, so a
queued read cannot see a later write). ``flush`` runs the whole queue in order,
fused group by group (fusion.py).

A queued output is *observable* if anything outside the queue still holds its
storage (a tensor, a view, autograd, a Python storage object). An unobservable
output that only its own group reads is never stored: the user dropped the
last reference before the data was needed, so nothing can tell.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import Any, Callable, Iterable

import torch

from device_impl.dispatch import table
from device_impl.eager import fusion
from device_impl.eager.capture import Step, capture
from device_impl.eager.stats import STATS
from device_impl.kernels.common import elementwise, is_device_tensor

# Kernel modules whose family computes consist only of common.elementwise launches.
QUEUEABLE_MODULES = frozenset({"device_impl.kernels.elementwise", "device_impl.kernels.copy"})
# Ops whose kernels raise on data (integer division by zero): run eagerly so the error is raised at the op.
DATA_CHECKED_PACKETS = frozenset({"remainder", "fmod", "floor_divide", "div"})

DEFAULT_MAX_OPS = 256
DEFAULT_MAX_BYTES = 512 * 2**20

_use_count = torch._C._storage_Use_Count


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


def _storage_refs(storage: torch.UntypedStorage) -> tuple[int, int]:
    return _use_count(storage._cdata), sys.getrefcount(storage)


class Queue:
    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.refs: Counter[int] = Counter()  # storage data_ptr -> snapshots the queue holds over it
        self.bytes = 0
        self.max_ops = DEFAULT_MAX_OPS
        self.max_bytes = DEFAULT_MAX_BYTES
        self.lock = threading.RLock()
        self._baseline: tuple[int, int] | None = None

    # --- entering the queue -------------------------------------------------------------------------

    def submit(self, op: str, compute: Callable[[torch.Tensor, dict], None], out: torch.Tensor,
               args: dict[str, Any]) -> None:
        """Queue ``compute(out, args)`` if it is an elementwise chain, else run it after a barrier."""
        queueable = compute.__module__ in QUEUEABLE_MODULES and not (
            _packet(op) in DATA_CHECKED_PACKETS and not (out.dtype.is_floating_point or out.dtype.is_complex))
        with self.lock:
            if not queueable:
                self.barrier("unqueueable", op, (out,), args)
                STATS.ops_run_eagerly += 1
                compute(out, args)
                return
            steps = capture(op, compute, out, args)
            for step in steps:
                self.steps.append(step)
                for t in step.tensors():
                    self.refs[t.untyped_storage().data_ptr()] += 1
                self.bytes += step.out.numel() * step.out.element_size()
            STATS.ops_queued += 1
            if len(self.steps) >= self.max_ops:
                self.flush("op_limit")
            elif self.bytes >= self.max_bytes:
                self.flush("byte_limit")

    # --- leaving it ----------------------------------------------------------------------------------

    def depends(self, tensors: Iterable[torch.Tensor]) -> bool:
        """Whether any of ``tensors`` shares a storage with queued work."""
        refs = self.refs
        return any(t.numel() and t.untyped_storage().data_ptr() in refs for t in tensors)

    def barrier(self, reason: str, op: str = "", args: Any = None, kwargs: Any = None) -> None:
        """Flush before ``op`` if its tensor arguments touch queued storages (``args=None``: always)."""
        if not self.steps:
            return
        if args is not None:
            found: list[torch.Tensor] = []
            _tensors(args, found)
            _tensors(kwargs, found)
            if not self.depends(found):
                return
        self.flush(reason)

    def flush(self, reason: str) -> None:
        """Run every queued step, in order, fused where the hazards allow."""
        with self.lock:
            if not self.steps:
                return
            steps, self.steps = self.steps, []
            refs, self.refs = self.refs, Counter()
            self.bytes = 0
            STATS.flushes[reason] += 1
            groups = fusion.partition(steps)
            stored = self._observable(groups, refs)
            if table.ASSERT_NO_CPU:
                with table._no_cpu_mode(f"adaptive eager flush ({reason})"):
                    self._run(groups, stored, reason)
            else:
                self._run(groups, stored, reason)

    def _run(self, groups: list[list[Step]], stored: list[list[bool]], reason: str) -> None:
        for group, group_stored in zip(groups, stored):
            STATS.groups += 1
            try:
                if len(group) == 1:
                    s = group[0]
                    try:
                        elementwise(s.name, s.out, s.operands, s.emit, s.free_max, s.common_dtype, s.promoted,
                                    s.round_scalars)
                    except Exception as error:
                        raise fusion.StepError(s) from error
                else:
                    STATS.fused_groups += 1
                    STATS.fused_ops += len(group)
                    fusion.run(fusion.program_for(group, group_stored), group)
            except fusion.StepError as failed:
                STATS.errors += 1
                raise _named(failed.__cause__, failed.step.op, reason) from failed.__cause__

    def _observable(self, groups: list[list[Step]], refs: Counter[int]) -> list[list[bool]]:
        """Per step, whether its output must reach HBM (see the module docstring)."""
        if self._baseline is None:  # the counts of a storage held by one tensor, measured as below
            probe = torch.empty(1, device=groups[0][0].out.device)
            storage = probe.untyped_storage()
            self._baseline = _storage_refs(storage)
            del probe, storage
        base_count, base_py = self._baseline
        group_of: dict[int, set[int]] = {}
        for g, group in enumerate(groups):
            for step in group:
                for t in step.tensors():
                    group_of.setdefault(t.untyped_storage().data_ptr(), set()).add(g)
        result = []
        for g, group in enumerate(groups):
            flags = []
            for step in group:
                storage = step.out.untyped_storage()
                ptr = storage.data_ptr()
                count, py = _storage_refs(storage)
                outside = count - base_count + 1 > refs[ptr] or py > base_py
                flags.append(outside or group_of[ptr] != {g})
            result.append(flags)
        return result


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
