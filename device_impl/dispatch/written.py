"""The device rule for arguments an op writes (``out=``, in-place ``self``), checked in one place.

Every neuron call reaches either a native kernel's wrapper (``dispatch.table``) or the boxed CPU
fallback (``dispatch.fallback``); both call :func:`check` before anything computes. Dispatch picks the
neuron kernel when any argument is a neuron tensor, so ``torch.add(a, b, out=cpu_tensor)`` with ``a``
on neuron arrives here with a host ``out``. CPU and CUDA refuse that with a RuntimeError before
writing (structured kernels: "Expected out tensor to have device ..."; TensorIterator in-place:
"Expected all tensors to be on the same device"); so does neuron, and the written tensor is left
untouched. A 0-dim host tensor is accepted as an *input* (a scalar, as on CUDA) but never as a
written argument: a kernel that took it as a scalar would write nothing back, silently.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from device_impl.engine.dtypes import SCALAR_TYPE_NAMES

class WrittenPlan:
    """What an overload's schema says it writes, computed once per overload: ``entries`` (position,
    name, kwarg_only, is_out) of the written arguments, and the positions and names of the others,
    where the device the op computes on is found."""

    __slots__ = ("entries", "positions", "names")

    def __init__(self, entries: tuple[tuple[int, str, bool, bool], ...]) -> None:
        self.entries = entries
        self.positions = frozenset(p for p, _, _, _ in entries)
        self.names = frozenset(n for _, n, _, _ in entries)

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __iter__(self):
        return iter(self.entries)


_plans: dict[Any, WrittenPlan] = {}


def plan_of(op: torch._ops.OpOverload, outs_only: bool = False) -> WrittenPlan:
    """The arguments ``op``'s schema marks as written (``outs_only``: its out= arguments), computed once
    per overload. Native kernels check their in-place arguments themselves, with the op's own message
    (``_amp_foreach_non_finite_check_and_unscale_``: "One of scaled_grads was not a neuron tensor")."""
    key = (op, outs_only)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = WrittenPlan(tuple(
            (i, a.name, a.kwarg_only, a.is_out) for i, a in enumerate(op._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write and (a.is_out or not outs_only)))
    return plan


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _compute_device(plan: WrittenPlan, args: tuple, kwargs: dict) -> torch.device | None:
    """The device the op computes on: its first neuron input (an argument it does not write)."""
    for i, value in enumerate(args):
        if i not in plan.positions:
            for t in _tensors(value):
                if t.device.type == "neuron":
                    return t.device
    for k, value in kwargs.items():
        if k not in plan.names:
            for t in _tensors(value):
                if t.device.type == "neuron":
                    return t.device
    return None


def check(name: str, plan: WrittenPlan, args: tuple, kwargs: dict) -> None:
    """Raise PyTorch's RuntimeError if a written argument is not on the device the op computes on
    (its first neuron input, else the first written tensor's)."""
    device = None
    for position, arg_name, kwarg_only, is_out in plan.entries:
        value = args[position] if not kwarg_only and position < len(args) else kwargs.get(arg_name)
        for t in _tensors(value):
            if device is None:
                device = _compute_device(plan, args, kwargs) or t.device
            if t.device != device:
                if is_out:
                    raise RuntimeError(
                        f"Expected out tensor to have device {device}, but got {t.device} instead "
                        f"(when running {name} on neuron; allocate the out tensor on {device})")
                raise RuntimeError(
                    f"Expected all tensors to be on the same device, but found at least two devices, "
                    f"{device} and {t.device}! (when running {name} in place on neuron; move the tensor "
                    f"written in place with .to('{device}'))")


_guard_library: torch.library.Library | None = None

# Composite out= kernels that refuse devices other than CPU/CUDA/XPU by name ("mode only supports CPU,
# CUDA and XPU device type"): served as CPU's out= kernel behaves, the functional op (the device's, or
# the counted fallback) into out, with CPU's dtype check and resize_output.
_OUT_VIA_FUNCTIONAL = {"aten::mode.values": ("aten::mode.default", ("values", "indices"))}


def guard_composite_writes(resolve: Callable[[str], torch._ops.OpOverload]) -> int:
    """Give every aten overload that writes an argument and is served by PyTorch's
    CompositeExplicitAutograd kernel (``addr.out``, ``logsumexp.out``: compute functionally, then copy
    into ``out``) a neuron kernel that checks :func:`check` and then runs that same composite kernel.

    Without it such an ``out=`` on the host is written by a device-to-host copy_, which is legal, so
    nothing refuses it. Run after the native kernels are registered (an overload with a neuron kernel
    of its own is checked by its wrapper). ``resolve``: 'aten::x.y' -> its OpOverload (dispatch.table's,
    passed in so this module stays below the table). Returns how many overloads were guarded."""
    global _guard_library
    if _guard_library is not None:
        return 0
    _guard_library = torch.library.Library("aten", "IMPL")
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    explicit = torch._C.DispatchKey.CompositeExplicitAutograd
    guarded = 0
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::") or not has(name, "CompositeExplicitAutograd") \
                or has(name, "PrivateUse1") or has(name, "CompositeImplicitAutograd"):
            continue
        try:
            overload = resolve(name)
        except (AttributeError, RuntimeError):
            continue
        plan = plan_of(overload)
        if not plan:
            continue
        via = _OUT_VIA_FUNCTIONAL.get(name)
        kernel = _via_functional(name, plan, resolve(via[0]), via[1]) if via else _guarded(name, overload, plan, explicit)
        _guard_library.impl(name.split("::", 1)[1], kernel, "PrivateUse1")
        guarded += 1
    return guarded


def _guarded(name: str, overload: torch._ops.OpOverload, plan: WrittenPlan, key: Any):
    call = overload._op_dk
    outs = [(position, arg_name, kwarg_only) for position, arg_name, kwarg_only, is_out in plan if is_out]
    single_out = outs[0] if len(outs) == 1 else None

    def kernel(*args: Any, **kwargs: Any) -> Any:
        check(name, plan, args, kwargs)
        if single_out is not None:
            position, arg_name, kwarg_only = single_out
            in_args = not kwarg_only and position < len(args)
            out = args[position] if in_args else kwargs.get(arg_name)
            if isinstance(out, torch.Tensor) and _is_input(out, position, args, kwargs, arg_name):
                return _staged(call, key, out, position, arg_name, in_args, args, kwargs)
        return call(key, *args, **kwargs)

    kernel.__name__ = f"neuron_written_guard_{name.replace('::', '_').replace('.', '_')}"
    return kernel


def _via_functional(name: str, plan: WrittenPlan, target: torch._ops.OpOverload, out_names: tuple[str, ...]):
    def kernel(*args: Any, **kwargs: Any) -> Any:
        check(name, plan, args, kwargs)
        outs = [kwargs.pop(n) for n in out_names]
        results = target(*args, **kwargs)
        for out_name, out, result in zip(out_names, outs, results):
            if out.dtype != result.dtype:
                raise RuntimeError(f"expected scalar type '{SCALAR_TYPE_NAMES.get(result.dtype, result.dtype)}' but got "
                                   f"'{SCALAR_TYPE_NAMES.get(out.dtype, out.dtype)}' for {out_name} output")
        for out, result in zip(outs, results):
            resize_output(out, result.shape, stacklevel=3)
            out.copy_(result)
        return tuple(outs)

    return kernel


def resize_output(out: torch.Tensor, shape, memory_format=None, stacklevel: int = 4) -> None:
    """at::native::resize_output: resize ``out`` to ``shape`` (restrided to ``memory_format`` if given),
    warning as CPU does when an out that had elements changes shape. The one copy of that rule: the
    kernels' out= helpers (kernels/common.py, kernels/shape/moves.py) call it too."""
    shape = tuple(int(s) for s in shape)
    if tuple(out.shape) == shape:
        return
    if out.numel() != 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(out.shape)}, which does "
            f"not match the required output shape {list(shape)}. This behavior is deprecated, and in a future "
            f"PyTorch release outputs will not be resized unless they have zero elements. You can explicitly "
            f"reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).", UserWarning,
            stacklevel=stacklevel)
    if memory_format is None:
        out.resize_(shape)
    else:
        out.resize_(shape, memory_format=memory_format)


def _is_input(out: torch.Tensor, position: int, args: tuple, kwargs: dict, arg_name: str) -> bool:
    others = [v for i, v in enumerate(args) if i != position] + [v for k, v in kwargs.items() if k != arg_name]
    return any(t is out for value in others for t in _tensors(value))


def _staged(call, key, out: torch.Tensor, position: int, arg_name: str, in_args: bool, args: tuple,
            kwargs: dict) -> torch.Tensor:
    """An out that is also an input (``addr_`` runs ``addr_out(self, self, ...)``) is read-write: CPU's
    kernels never resize or broadcast it. The composite kernel resizes its out to the result, so it
    writes into a fresh tensor here, and ``out`` is written only if the shapes agree."""
    fresh = torch.empty(0, dtype=out.dtype, device=out.device)
    if in_args:
        args = args[:position] + (fresh,) + args[position + 1:]
    else:
        kwargs = {**kwargs, arg_name: fresh}
    call(key, *args, **kwargs)
    if fresh.shape != out.shape:
        raise RuntimeError(f"output with shape {list(out.shape)} doesn't match the broadcast shape "
                           f"{list(fresh.shape)}")
    out.copy_(fresh)
    return out
