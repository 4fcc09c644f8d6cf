"""Turning a kernel call into queued steps without running it.

Three kinds of launch can wait in the queue:

* ``Step``: one ``common.elementwise`` launch. A family kernel's ``compute(out,
  args)`` validates its arguments (dtype refusals, range checks, shape errors)
  and then calls ``common.elementwise``; capturing runs ``compute`` with
  ``common.CAPTURE`` set, so every check still raises at the op that caused it,
  and each launch it would have made is recorded instead.
* ``ReduceStep``: a reduction over the last dimension of a contiguous tensor
  (``kernels.reduction.RowReduction``), which the fuser can feed from the tiles
  of the elementwise launches producing its input.
* ``RowKernelStep``: a softmax/log_softmax/layer_norm launch (``kernels.reduction.RowKernel``),
  whose input tiles the fuser can compute from the launches producing them.
* ``MatmulStep``: an mm/addmm/bmm/baddbmm launch (``kernels.matmul.MatmulPlan``),
  onto whose PSUM evacuation the fuser can attach elementwise ops on its result.

The last three come from computes that carry a ``plan(out, args)`` method; a plan
of None means that call cannot wait (it runs at once, after a barrier).

Steps hold *snapshots* of their tensors (``detach()``: a new TensorImpl over the
same storage with the sizes, strides and offset of the call), so a later
metadata change of the user's tensor (``resize_``, ``set_``, ``t_()``) cannot
change what the queued op reads or writes, exactly as in eager. Host scalars are
read at capture, so mutating a CPU 0-d tensor after the call cannot either.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, NamedTuple, Sequence

import torch

from device_impl.engine import core
from device_impl.kernels import common
from device_impl.kernels.matmul import MatmulPlan
from device_impl.kernels.reduction import RowKernel, RowReduction


# (op, kernel name) -> a function running such a step as plain eager mode runs that op, where that is not
# an engine launch: eager's same-dtype device copy is the C++ core's memcpy (csrc/aten_ops.cpp), far cheaper
# on the host than a Python tile loop. hooks.install registers it; a step with a runner that fusion leaves
# alone runs through it (programs.finalize), so queueing it costs nothing where fusing it gains nothing.
EAGER_RUNNERS: dict[tuple[str, str], Callable[["Step"], None]] = {}


class Step(NamedTuple):
    """One queued elementwise launch: ``common.elementwise``'s arguments, frozen at the call."""

    op: str  # the aten overload that queued it (named in deferred errors)
    name: str  # the kernel name elementwise would launch
    out: torch.Tensor
    operands: tuple
    emit: Callable[..., None]
    free_max: int
    common_dtype: torch.dtype | None
    promoted: Sequence[int] | None
    round_scalars: bool

    def reads(self) -> list[torch.Tensor]:
        return [o for o in self.operands if isinstance(o, torch.Tensor)]

    def tensors(self) -> Iterator[torch.Tensor]:
        yield self.out
        yield from self.reads()

    def run(self) -> None:
        """Run it on its own, as eager would have."""
        runner = EAGER_RUNNERS.get((self.op, self.name))
        if runner is not None:
            runner(self)
            return
        common.elementwise(self.name, self.out, self.operands, self.emit, self.free_max, self.common_dtype,
                           self.promoted, self.round_scalars)


class ReduceStep(NamedTuple):
    """One queued reduction over the last dimension (see kernels.reduction.RowReduction)."""

    op: str
    plan: RowReduction

    @property
    def out(self) -> torch.Tensor:
        return self.plan.out

    def reads(self) -> list[torch.Tensor]:
        return [self.plan.x]

    def tensors(self) -> Iterator[torch.Tensor]:
        yield self.plan.out
        yield self.plan.x

    def run(self) -> None:
        self.plan.run_alone()


class MatmulStep(NamedTuple):
    """One queued mm/addmm/bmm/baddbmm launch (see kernels.matmul.MatmulPlan)."""

    op: str
    plan: MatmulPlan

    @property
    def out(self) -> torch.Tensor:
        return self.plan.out

    def reads(self) -> list[torch.Tensor]:
        p = self.plan
        return [p.a, p.b] + ([p.bias] if p.bias is not None else [])

    def tensors(self) -> Iterator[torch.Tensor]:
        yield self.plan.out
        yield from self.reads()

    def run(self) -> None:
        p = self.plan
        with common.launch(p.name, p.out.device.index) as nc:
            p.run(nc)


class RowKernelStep(NamedTuple):
    """One queued softmax/log_softmax/layer_norm launch (see kernels.reduction.RowKernel)."""

    op: str
    plan: RowKernel

    @property
    def out(self) -> torch.Tensor:
        return self.plan.outs[0]

    def reads(self) -> list[torch.Tensor]:
        return [self.plan.x] + [t for t in self.plan.inputs if t is not None]

    def tensors(self) -> Iterator[torch.Tensor]:
        yield from self.plan.outs
        yield from self.reads()

    def run(self) -> None:
        self.plan.run()


AnyStep = Step | ReduceStep | MatmulStep | RowKernelStep


def row_shape(step: Any) -> tuple[int, int] | None:
    """(rows, cols) of a step that consumes its input row by row along the last dimension, else None."""
    if isinstance(step, ReduceStep):
        return step.plan.rows, step.plan.cols
    if isinstance(step, RowKernelStep):
        return step.plan.shape()
    return None


def _freeze(operand: Any) -> Any:
    if common.is_device_tensor(operand):
        return operand.detach()
    if isinstance(operand, torch.Tensor):
        return common.scalar_of(operand)
    return operand


def _frozen(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach()


class NotCapturable(Exception):
    """A compute opened a launch of its own while being captured (``_RefuseLaunch``)."""


class _RefuseLaunch:
    """``engine.core.divert``'s stand-in while a compute is captured: a launch the compute opens itself, not through
    ``common.elementwise`` (whose launches are recorded), would run now, reading its inputs before the queued work
    that writes them has run (``linalg_cross(a * 2, b)`` read the product's memory unwritten: zeros), so it is
    refused before it starts and the call runs after a barrier instead (``queue.Queue.submit``)."""

    def enter(self, kernel: str, device: int) -> Any:
        raise NotCapturable(kernel)

    def exit(self, exc_type, exc, tb) -> bool:  # never reached: enter raised
        return False


_REFUSE = _RefuseLaunch()


def capture(op: str, compute: Callable[[torch.Tensor, dict], None], out: torch.Tensor,
            args: dict[str, Any]) -> list[Step] | None:
    """Run ``compute``'s checks and return the elementwise launches it would make (empty ones dropped); None where
    the compute opens a launch of its own (``_RefuseLaunch``): it cannot wait."""
    steps: list[Step] = []

    def record(name, target, operands, emit, free_max, common_dtype, promoted, round_scalars):
        if target.numel():
            steps.append(Step(op, name, target.detach(), tuple(_freeze(o) for o in operands), emit, free_max,
                              common_dtype, None if promoted is None else tuple(promoted), round_scalars))
        return target

    previous = common.CAPTURE[0]
    common.CAPTURE[0] = record
    core.divert(_REFUSE)
    try:
        compute(out, args)
    except NotCapturable:
        return None
    finally:
        common.CAPTURE[0] = previous
        core.divert(None)
    return steps


def capture_plan(op: str, compute: Any, out: torch.Tensor, args: dict[str, Any]) -> list[AnyStep] | None:
    """The step a planned compute (reduction or matmul) would launch, or None if it cannot wait."""
    plan = compute.plan(out, args)
    if isinstance(plan, RowReduction):
        return [ReduceStep(op, plan._replace(x=plan.x.detach(), out=plan.out.detach()))]
    if isinstance(plan, RowKernel):
        return [RowKernelStep(op, plan._replace(x=plan.x.detach(), outs=tuple(o.detach() for o in plan.outs),
                                                inputs=tuple(_frozen(t) for t in plan.inputs)))]
    if isinstance(plan, MatmulPlan):
        frozen = plan._replace(out=plan.out.detach(), a=plan.a.detach(), b=plan.b.detach(),
                               bias=_frozen(plan.bias))
        return [MatmulStep(op, frozen)] if plan.out.numel() else []
    return None
