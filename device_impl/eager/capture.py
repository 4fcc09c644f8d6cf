"""Turning a family kernel's computation into queued steps without running it.

A family kernel's ``compute(out, args)`` validates its arguments (dtype refusals,
range checks, shape errors) and then calls ``common.elementwise``. Capturing runs
``compute`` with ``common.CAPTURE`` set, so every check still raises at the op
that caused it, and the launch it would have made is recorded as a ``Step``.

A step holds *snapshots* of its tensors (``detach()``: a new TensorImpl over the
same storage with the sizes, strides and offset of the call), so a later
metadata change of the user's tensor (``resize_``, ``set_``, ``t_()``) cannot
change what the queued op reads or writes, exactly as in eager. Host scalars are
read at capture, so mutating a CPU 0-d tensor after the call cannot either.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Sequence

import torch

from device_impl.kernels import common


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

    def tensors(self):
        yield self.out
        for o in self.operands:
            if isinstance(o, torch.Tensor):
                yield o


def _freeze(operand: Any) -> Any:
    if common.is_device_tensor(operand):
        return operand.detach()
    if isinstance(operand, torch.Tensor):
        return common.scalar_of(operand)
    return operand


def capture(op: str, compute: Callable[[torch.Tensor, dict], None], out: torch.Tensor,
            args: dict[str, Any]) -> list[Step]:
    """Run ``compute``'s checks and return the launches it would make, as steps (empty ones dropped)."""
    steps: list[Step] = []

    def record(name, target, operands, emit, free_max, common_dtype, promoted, round_scalars):
        if target.numel():
            steps.append(Step(op, name, target.detach(), tuple(_freeze(o) for o in operands), emit, free_max,
                              common_dtype, None if promoted is None else tuple(promoted), round_scalars))
        return target

    previous = common.CAPTURE[0]
    common.CAPTURE[0] = record
    try:
        compute(out, args)
    finally:
        common.CAPTURE[0] = previous
    return steps
