"""The explicit CPU fallback: copy in, run the CPU kernel, copy out.

This is the only place a torch CPU kernel computes a neuron op. It is boxed
(one function serves every overload) and must be exactly as correct as the
CPU kernel it borrows, for every kind of op:

* functional ops: inputs are copied to host, outputs copied back;
* in-place and ``out=`` ops: arguments the schema marks as written are
  copied back into the original neuron tensors (resized first if the CPU
  kernel resized them);
* view ops: an output that aliases an input's host copy becomes a neuron
  tensor over the *same device storage* with the same sizes, strides and
  offset, so writes through the view reach the base;
* random ops: the neuron generator (explicit or the core's default) seeds
  a CPU generator, so ``torch.neuron.manual_seed`` governs the result.

Inputs that share a device storage share one host copy, so aliasing inside
an op (``x.add_(x[0])``, ``out`` overlapping an input) behaves as on CPU.
A tensor is copied as the byte span its elements occupy, so strides and
storage offsets are preserved without copying whole storages.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from device_impl._core import C
from device_impl.dispatch import counters, written
from device_impl.dispatch.devices import HOST_INDEX_OPS
from device_impl.dispatch.strict import is_strict, refuse
from device_impl.runtime.hooks import HOOKS
from device_impl.runtime.random import reserve

_ALIGN = 16  # bytes; a multiple of every element size, so shared spans stay aligned


def _op_name(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


class _Plan:
    """What the schema says about an overload, computed once per overload."""

    __slots__ = ("name", "written", "generator_args", "tensor_args")

    def __init__(self, op: torch._ops.OpOverload):
        self.name = _op_name(op)
        args = op._schema.arguments
        self.written = frozenset(
            a.name for a in args if a.alias_info is not None and a.alias_info.is_write)
        self.generator_args = tuple(
            (i, a.name, a.kwarg_only) for i, a in enumerate(args) if "Generator" in str(a.type))
        self.tensor_args = tuple((i, a.name) for i, a in enumerate(args) if str(a.type) == "Tensor")


_plans: dict[torch._ops.OpOverload, _Plan] = {}


def _plan(op: torch._ops.OpOverload) -> _Plan:
    plan = _plans.get(op)
    if plan is None:
        plan = _plans[op] = _Plan(op)
    return plan


def _walk(value: Any, fn: Callable[[torch.Tensor], Any]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_walk(v, fn) for v in value)
    return value


def _neuron_tensors(values: Any, out: list[torch.Tensor]) -> None:
    if isinstance(values, torch.Tensor):
        if values.device.type == "neuron":
            out.append(values)
    elif isinstance(values, (list, tuple)):
        for v in values:
            _neuron_tensors(v, out)
    elif isinstance(values, dict):
        for v in values.values():
            _neuron_tensors(v, out)


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last+1) bytes of the storage that ``t``'s elements occupy."""
    size = t.element_size()
    lo = t.storage_offset() * size
    hi = lo + size
    for n, s in zip(t.shape, t.stride()):
        hi += (n - 1) * s * size
    return lo, hi


class _HostMirror:
    """Host copies of the neuron tensors one op touches, grouped by device storage."""

    def __init__(self, tensors: list[torch.Tensor]):
        self.groups: dict[int, tuple[int, torch.UntypedStorage, torch.Tensor]] = {}
        spans: dict[int, list[int]] = {}
        storages: dict[int, torch.UntypedStorage] = {}
        for t in tensors:
            if t.numel() == 0:
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            lo, hi = _byte_span(t)
            span = spans.setdefault(key, [lo, hi])
            span[0], span[1] = min(span[0], lo), max(span[1], hi)
            storages[key] = storage
        for key, (lo, hi) in spans.items():
            lo -= lo % _ALIGN
            device_bytes = torch.empty(0, dtype=torch.uint8, device=storages[key].device)
            device_bytes.set_(storages[key], lo, (hi - lo,), (1,))
            self.groups[key] = (lo, storages[key], device_bytes.cpu())
        self.host_of: dict[int, torch.Tensor] = {}  # id(neuron tensor) -> host copy

    def to_host(self, t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "neuron":
            return t
        cached = self.host_of.get(id(t))
        if cached is not None:
            return cached
        if t.numel() == 0:
            host = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
        else:
            lo, _, buffer = self.groups[t.untyped_storage().data_ptr()]
            offset = (t.storage_offset() * t.element_size() - lo) // t.element_size()
            host = torch.empty(0, dtype=t.dtype).set_(buffer.untyped_storage(), offset, t.shape, t.stride())
            if t.is_conj():
                host = host._conj()
            if t.is_neg():
                host = host._neg_view()
        host.requires_grad_(False)
        self.host_of[id(t)] = host
        return host

    def device_view_of(self, host: torch.Tensor, device: torch.device) -> torch.Tensor | None:
        """If ``host`` aliases one of the host copies, the same view over the device storage."""
        if host.numel() == 0:
            return None
        ptr = host.untyped_storage().data_ptr()
        for lo, storage, buffer in self.groups.values():
            if buffer.untyped_storage().data_ptr() == ptr:
                byte_offset = host.storage_offset() * host.element_size() + lo
                view = torch.empty(0, dtype=host.dtype, device=storage.device)
                return view.set_(storage, byte_offset // host.element_size(), host.shape, host.stride())
        return None


def _rewrap_numbers(plan: _Plan, args: list, kwargs: dict, tensors: list[torch.Tensor]) -> None:
    """Wrapped numbers (a Python scalar PyTorch turned into a 0-d tensor for a Tensor argument, as in
    ``copysign(x, 2.0)``) reach a Python kernel as plain numbers. The CPU kernel needs a tensor back:
    a 0-d host tensor of the dtype the number takes against the op's tensors (weak scalar typing)."""
    for index, name in plan.tensor_args:
        in_args = index < len(args)
        value = args[index] if in_args else kwargs.get(name)
        if isinstance(value, (bool, int, float, complex)) and not isinstance(value, torch.Tensor):
            dtype = _weak_dtype(value, tensors)
            wrapped = torch.tensor(value, dtype=dtype)
            if in_args:
                args[index] = wrapped
            else:
                kwargs[name] = wrapped


def _weak_dtype(value, tensors: list[torch.Tensor]) -> torch.dtype:
    kind = bool if isinstance(value, bool) else int if isinstance(value, int) else \
        complex if isinstance(value, complex) else float
    for t in tensors:
        if kind is float and t.dtype.is_floating_point or kind is int and not (
                t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool) or \
                kind is bool and t.dtype == torch.bool:
            return t.dtype
    return {bool: torch.bool, int: torch.int64, float: torch.get_default_dtype(), complex: torch.complex64}[kind]


def _check_devices(name: str, tensors: list[torch.Tensor], args: Any, kwargs: dict) -> torch.device:
    device = tensors[0].device
    for t in tensors[1:]:
        if t.device != device:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{device} and {t.device}! (when running {name} on neuron)")
    if name not in HOST_INDEX_OPS:
        host_tensors: list[torch.Tensor] = []
        _walk(list(args) + list(kwargs.values()),
              lambda t: host_tensors.append(t) if t.device.type != "neuron" and t.dim() > 0 else None)
        if host_tensors:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, "
                               f"{device} and {host_tensors[0].device}! (when running {name} on neuron; "
                               f"move the host tensor with .to('{device}'))")
    return device


def _factory_device(kwargs: dict) -> torch.device:
    device = kwargs.get("device")
    if device is None:
        return torch.device("neuron", C.current_device())
    device = torch.device(device)
    return device if device.index is not None else torch.device("neuron", C.current_device())


def _host_generator(generator: torch.Generator | None, device: torch.device, draws: int) -> torch.Generator:
    seed, offset = reserve(generator, device.index, draws)
    host = torch.Generator()
    host.manual_seed((seed * 0x9E3779B97F4A7C15 + offset) % 2**63)
    return host


def _copy_back(original: torch.Tensor, host: torch.Tensor) -> None:
    """Make the neuron tensor hold what the CPU kernel wrote into its host copy."""
    if host.shape != original.shape or host.stride() != original.stride():
        original.resize_(host.shape)
        if original.stride() != host.stride():
            # The CPU kernel chose a strided layout (linalg_lstsq's solution is a view of a taller
            # column-major buffer): the storage must reach the layout's last element first.
            lo, hi = _byte_span(host) if host.numel() else (0, 0)
            original.resize_((hi - lo) // host.element_size())
            original.as_strided_(host.shape, host.stride())
    if original.numel():
        original.copy_(host)


def cpu_fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    plan = _plan(op)
    name = plan.name
    written_plan = written.plan_of(op)
    if written_plan:
        written.check(name, written_plan, args, kwargs)
    if is_strict():
        raise refuse(name)
    counters.record(name, counters.FALLBACK_SLOT)
    counters.warn_fallback_once(name)
    if HOOKS.barrier is not None:  # adaptive eager: the host copies below must see queued results
        HOOKS.barrier("fallback", name, args, kwargs)

    tensors: list[torch.Tensor] = []
    _neuron_tensors(args, tensors)
    _neuron_tensors(kwargs, tensors)
    device = _check_devices(name, tensors, args, kwargs) if tensors else _factory_device(kwargs)

    mirror = _HostMirror(tensors)
    host_args = [_walk(a, mirror.to_host) for a in args]
    host_kwargs = {k: _walk(v, mirror.to_host) for k, v in kwargs.items()}
    _rewrap_numbers(plan, host_args, host_kwargs, tensors)
    if "device" in host_kwargs:
        host_kwargs["device"] = torch.device("cpu")
    if host_kwargs.get("pin_memory"):
        host_kwargs["pin_memory"] = False
    if plan.generator_args:
        draws = max((t.numel() for t in tensors), default=1)
        for index, arg_name, kwarg_only in plan.generator_args:
            if not kwarg_only and index < len(host_args):
                host_args[index] = _host_generator(host_args[index], device, draws)
            else:  # passed by name, or omitted: the core's default generator
                host_kwargs[arg_name] = _host_generator(host_kwargs.get(arg_name), device, draws)

    started = time.perf_counter_ns()
    result = op(*host_args, **host_kwargs)
    C.advance_device_time(device.index, time.perf_counter_ns() - started)

    # Write back every argument the schema marks as mutated.
    originals: dict[int, torch.Tensor] = {}
    schema_args = op._schema.arguments
    for i, a in enumerate(schema_args):
        if a.name not in plan.written:
            continue
        value = args[i] if i < len(args) and not a.kwarg_only else kwargs.get(a.name)
        host_value = host_args[i] if i < len(args) and not a.kwarg_only else host_kwargs.get(a.name)
        pairs = zip(value, host_value) if isinstance(value, (list, tuple)) else [(value, host_value)]
        for original, host in pairs:
            if isinstance(original, torch.Tensor) and original.device.type == "neuron":
                _copy_back(original, host)
                originals[id(host)] = original

    def to_device(host: torch.Tensor) -> torch.Tensor:
        original = originals.get(id(host))
        if original is not None:
            return original
        if host.layout != torch.strided:  # to_sparse, to_mkldnn: a layout the device does not hold
            raise NotImplementedError(
                f"neuron supports only torch.strided (dense) tensors, but {name} returns a {host.layout} tensor. "
                f"Keep sparse work on the CPU (x.cpu().{'to_sparse()' if host.is_sparse else 'op()'}) or stay dense "
                f"on neuron.")
        view = mirror.device_view_of(host, device)
        if view is not None:
            return view
        return host.to(device)

    return _walk(result, to_device)
