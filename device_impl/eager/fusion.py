"""Grouping queued steps into launches: which consecutive steps can share one tile loop.

Three kinds of group (programs.py runs them):

* ``elementwise``: consecutive elementwise steps whose outputs enumerate their
  elements in the same order (same shape and memory order, or all contiguous
  with the same element count), so flat element ``i`` is the same element in
  every step. One pass over flat tiles runs every step per tile.
* ``reduce``: an elementwise group followed by a reduction over the last
  dimension of one of its outputs, or a softmax/log_softmax/layer_norm along it: the
  consumer takes the producer's tiles as they are computed, instead of reading
  them back from HBM.
* ``matmul``: a matmul followed by elementwise steps on its result (bias,
  activation, scale, residual): they run on each output block as it leaves
  PSUM, instead of a store and a reload. A step joins only if it reads the
  product or an earlier epilogue result, and no reduction reads its own
  result (that step rather starts a group the reduction can fuse into).

Hazards decide where a group ends. Within a group, elements are processed tile
by tile, so a step may read a tensor the group wrote only if it reads exactly
that tensor's elements in the same order (``View.key`` equal), and a step may
write only where nothing the group touched overlaps, except exactly. A matmul
reads all of its inputs throughout its launch, so its epilogue may not write
where the matmul reads at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import torch

from device_impl.eager.capture import AnyStep, MatmulStep, Step, row_shape
from device_impl.kernels.common import memory_order

MAX_GROUP = 64  # elementwise steps per program: bounds the signature and the per-tile Python loop


class View(NamedTuple):
    """Where a tensor's elements are, for hazard checks: storage, byte span and element order.

    ``key`` identifies the elements and their order: two contiguous tensors over the same span
    (a [6, 4] tensor and its [2, 3, 4] view) enumerate the same elements in the same order.
    (A NamedTuple, not a frozen dataclass: every tensor of every queued step gets one at a flush.)"""

    storage: int
    lo: int
    hi: int
    key: tuple

    @classmethod
    def of(cls, t: torch.Tensor) -> "View":
        size = t.element_size()
        offset = t.storage_offset()
        lo = offset * size
        numel = t.numel()
        # A tensor's data pointer is its storage's plus its offset; reading it avoids building a Python
        # storage object (an empty tensor's data pointer is null, so it asks the storage).
        storage = t.data_ptr() - lo if numel else t.untyped_storage().data_ptr()
        if numel and t.is_contiguous():  # its last element is numel - 1 elements after its first
            return cls(storage, lo, lo + numel * size, (storage, offset, "C", numel, t.dtype))
        span = 0
        for n, s in zip(t.shape, t.stride()):
            span += (n - 1) * s
        hi = lo + size + span * size
        if t.is_contiguous():
            key = (storage, offset, "C", numel, t.dtype)
        else:
            key = (storage, offset, tuple(t.shape), t.stride(), t.dtype)
        return cls(storage, lo, hi, key)

    def overlaps(self, other: "View") -> bool:
        return self.storage == other.storage and self.lo < other.hi and other.lo < self.hi


_VIEWS: dict[int, tuple[torch.Tensor, View]] = {}


def view_of(t: torch.Tensor) -> View:
    """``View.of(t)``, computed once per tensor while a flush runs (partition, signature, the chain plan
    and the store decisions all ask about the same step tensors). The entry holds ``t``, so its id
    cannot be reused while cached; ``forget_views`` empties the cache when the flush ends."""
    entry = _VIEWS.get(id(t))
    if entry is None:
        entry = _VIEWS[id(t)] = (t, View.of(t))
    return entry[1]


def forget_views() -> None:
    _VIEWS.clear()


def conflicts(view: View, others: Sequence[View]) -> bool:
    """Overlaps one of ``others`` without being exactly it."""
    return any(view.overlaps(o) and view.key != o.key for o in others)


def order_key(out: torch.Tensor, free_max: int) -> tuple:
    """Outputs with equal keys enumerate their flat elements in the same order."""
    if out.is_contiguous():
        return (out.device.index, "C", out.numel(), free_max)
    return (out.device.index, tuple(out.shape), tuple(memory_order(out)), free_max)


@dataclass
class Group:
    kind: str  # "elementwise" | "reduce" | "matmul"
    steps: list = field(default_factory=list)
    key: tuple | None = None
    written: list = field(default_factory=list)  # Views the group writes
    touched: list = field(default_factory=list)  # Views it reads or writes
    pinned: list = field(default_factory=list)  # Views a matmul reads for its whole launch
    closed: bool = False  # nothing may join (a reduction ended it, or a step must run alone)
    # written/touched by storage: only views of one storage can overlap, so the hazard checks of a step
    # look at those alone instead of every view the group has seen
    written_on: dict = field(default_factory=dict)
    touched_on: dict = field(default_factory=dict)

    def add(self, step: AnyStep, reads: list[View], write: View) -> None:
        self.steps.append(step)
        self.written.append(write)
        self.written_on.setdefault(write.storage, []).append(write)
        self.touched.extend(reads)
        self.touched.append(write)
        touched_on = self.touched_on
        for v in reads:
            touched_on.setdefault(v.storage, []).append(v)
        touched_on.setdefault(write.storage, []).append(write)

    def reads_safely(self, reads: list[View]) -> bool:
        written_on = self.written_on
        return not any(conflicts(r, written_on.get(r.storage, ())) for r in reads)

    def writes_safely(self, write: View) -> bool:
        return not conflicts(write, self.touched_on.get(write.storage, ())) \
            and not any(write.overlaps(p) for p in self.pinned)


def _epilogue_fits(group: Group, step: Step, reads: list[View], write: View, reduced: set) -> bool:
    """An elementwise step can run on the matmul's output blocks: same elements, same order; it
    reads the product (or the epilogue's results); and no reduction reads its result (it then
    starts an elementwise group the reduction can fuse into instead)."""
    product = group.steps[0].out
    written = {w.key for w in group.written}
    return (len(group.steps) <= MAX_GROUP and product.is_contiguous() and step.out.is_contiguous()
            and step.out.numel() == product.numel() and step.out.device == product.device
            and any(r.key in written for r in reads) and write.key not in reduced)


def _reduction_fits(group: Group, shape: tuple[int, int] | None, reads: list[View], write: View) -> bool:
    """The row consumer reads exactly an output of this elementwise group, laid out as its rows."""
    return (shape is not None and group.kind == "elementwise" and not group.closed and group.key is not None
            and group.key[1] == "C" and group.key[2] == shape[0] * shape[1]
            and any(r.key == w.key for r in reads for w in group.written)
            and group.reads_safely(reads) and group.writes_safely(write))


def partition(steps: Sequence[AnyStep]) -> list[Group]:
    """Split the queue, in order, into groups (see the module docstring)."""
    groups: list[Group] = []
    current: Group | None = None
    reduced = {view_of(step.plan.x).key for step in steps if row_shape(step) is not None}

    def start(kind: str, key: tuple | None = None) -> Group:
        group = Group(kind, key=key)
        groups.append(group)
        return group

    for step in steps:
        reads = [view_of(t) for t in step.reads()]
        write = view_of(step.out)
        if isinstance(step, MatmulStep):
            current = start("matmul")
            current.pinned = list(reads)
            current.add(step, reads, write)
            continue
        if not isinstance(step, Step):  # a reduction or a row kernel
            if current is not None and _reduction_fits(current, row_shape(step), reads, write):
                current.kind = "reduce"
            else:
                current = start("reduce")
            current.add(step, reads, write)
            current.closed = True
            continue
        # An elementwise step partially overlapping its own output depends on eager's tiling: it runs alone.
        alone = conflicts(write, reads)
        key = order_key(step.out, step.free_max)
        if current is not None and not current.closed and not alone and current.reads_safely(reads) \
                and current.writes_safely(write):
            if current.kind == "elementwise" and key == current.key and len(current.steps) < MAX_GROUP:
                current.add(step, reads, write)
                continue
            if current.kind == "matmul" and _epilogue_fits(current, step, reads, write, reduced):
                current.add(step, reads, write)
                continue
        current = start("elementwise", key)
        current.add(step, reads, write)
        current.closed = alone
    return groups


def split(group: Group) -> list[Group]:
    """The same steps as groups that need no fusion across kinds (when a fused program cannot be
    built): a reduction apart from its producers, a matmul apart from its epilogue."""
    if group.kind == "reduce":
        producers = group.steps[:-1]
        parts = [Group("elementwise", producers, group.key)] if producers else []
        return parts + [Group("reduce", [group.steps[-1]], closed=True)]
    if group.kind == "matmul":
        epilogue = group.steps[1:]
        key = order_key(epilogue[0].out, epilogue[0].free_max) if epilogue else None
        # Epilogue steps share the product's element order, so they form one elementwise group when
        # their outputs agree on it (all contiguous, same count): _epilogue_fits ensured both.
        return [Group("matmul", group.steps[:1])] + ([Group("elementwise", epilogue, key)] if epilogue else [])
    return [group]
