"""The device rule for arguments an op reads: every tensor on the device the op computes on.

Dispatch picks the neuron kernel when any argument is a neuron tensor, so ``torch.mm(a, b)`` with ``a``
on neuron and ``b`` on the host arrives at the neuron kernel with a host ``b``. The engine's HBM
window (``engine.hbm.view``) reads host memory as readily as device memory, so a kernel left to itself
computes with it and returns a result, or fails on the host tensor's missing device index with a
TypeError. PyTorch refuses the call: its generated backend wrappers check every tensor argument
(``device_check: ExactSame`` in native_functions.yaml), TensorIterator does for elementwise ops,
always with ``RuntimeError: Expected all tensors to be on the same device``. So does neuron, in one
place (the lowering table's wrapper, ``dispatch.table``, and the CPU fallback), before anything computes.

What PyTorch accepts stays accepted: a 0-dim host tensor (a scalar, as on CUDA), and host index tensors
for the ops that take them (``HOST_INDEX_OPS``, as CUDA's ``index``/``index_put_``).
"""

from __future__ import annotations

from typing import Any

import torch

# Ops whose index arguments may legitimately live on the host, as on CUDA (device_check: NoCheck).
HOST_INDEX_OPS = frozenset({"aten::index.Tensor", "aten::index.Tensor_out", "aten::index_put_",
                            "aten::_index_put_impl_", "aten::index_put"})

_TENSOR_TYPES = ("Tensor", "Optional[Tensor]", "List[Tensor]", "List[Optional[Tensor]]")

_plans: dict[Any, tuple[tuple[int, str, bool, bool], ...]] = {}


def plan_of(op: torch._ops.OpOverload) -> tuple[tuple[int, str, bool, bool], ...]:
    """(position, name, kwarg_only, written) of ``op``'s tensor arguments, computed once per overload; empty for
    an op that accepts host tensors (``HOST_INDEX_OPS``) or reads no tensor. A written argument only names the
    device the op runs on (``bernoulli(host_p, out=neuron_out)`` runs on neuron and must refuse ``p`` before it
    resizes ``out``); a host one is not refused here: out= is ``written.py``'s rule, and an in-place one the
    kernel's own, with the op's own message (``_amp_foreach_non_finite_check_and_unscale_``: "One of
    scaled_grads was not a neuron tensor")."""
    plan = _plans.get(op)
    if plan is None:
        schema = op._schema
        name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
        plan = _plans[op] = () if name in HOST_INDEX_OPS else tuple(
            (i, a.name, a.kwarg_only, a.alias_info is not None and a.alias_info.is_write)
            for i, a in enumerate(schema.arguments) if str(a.type) in _TENSOR_TYPES)
    return plan


def check(name: str, plan: tuple[tuple[int, str, bool, bool], ...], args: tuple, kwargs: dict) -> None:
    """Raise PyTorch's RuntimeError if a tensor argument the op reads, with dimensions, is on another device than
    the op's first neuron tensor (a host one only matters beside a neuron one: ``empty_like(host,
    device="neuron")`` reaches a neuron kernel legitimately)."""
    # on every kernel call: is_cpu/is_meta and get_device() are flags and an int, where .device builds an object
    index = other = None
    for position, arg_name, kwarg_only, written in plan:
        value = args[position] if not kwarg_only and position < len(args) else kwargs.get(arg_name)
        for t in (value if isinstance(value, (list, tuple)) else (value,)):
            if not isinstance(t, torch.Tensor):
                continue
            if t.is_cpu or t.is_meta:  # a tensor not on neuron
                if other is None and t.dim() and not written:
                    other = t.device
            elif index is None:
                index = t.get_device()
            elif t.get_device() != index and not written:
                other = t.device
    if index is not None and other is not None:
        device = torch.device("neuron", index)
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                           f"{device} and {other}! (when running {name} on neuron; move the tensor with "
                           f".to('{device}'))")
