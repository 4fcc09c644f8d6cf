"""The lowering table: one entry per aten overload, saying how neuron serves it.

Kernels register here (``@TABLE.native("aten::add.Tensor")``), never
directly with torch.library, so the table is the single answer to "what does
the device run natively": the harness, the reports and port-check ask it
instead of keeping lists of their own. Overloads with no entry reach the
boxed CPU fallback, unless PyTorch decomposes them before they reach a
backend (tier ``composite``).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch

from device_impl.dispatch import counters, devices, written
from device_impl.dispatch.tiers import Tier

# Kernels of the C++ core (device_impl/csrc/aten_ops.cpp): metadata, views and copies.
CSRC_KERNELS = (
    "aten::empty.memory_format", "aten::empty_strided", "aten::as_strided", "aten::view", "aten::_reshape_alias",
    "aten::resize_", "aten::set_.source_Tensor", "aten::set_.source_Storage",
    "aten::set_.source_Storage_storage_offset", "aten::copy_", "aten::_copy_from", "aten::_copy_from_and_resize",
    "aten::_local_scalar_dense",
)


@dataclass(frozen=True)
class Lowering:
    op: str
    tier: Tier
    source: str  # where the kernel lives: a module path, "csrc", "torch._decomp", "cpu"


def _is_composite(op: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeImplicitAutograd") or \
        torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeExplicitAutograd")


def resolve(op: str) -> torch._ops.OpOverload:
    """'aten::add.Tensor' -> torch.ops.aten.add.Tensor."""
    packet_name, _, overload = op.split("::", 1)[1].partition(".")
    return getattr(getattr(torch.ops.aten, packet_name), overload or "default")


def _unsupported_dtype(values: Any, supported: frozenset) -> bool:
    for value in values:
        if isinstance(value, torch.Tensor):
            if value.dtype not in supported:
                return True
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], torch.Tensor):
            if any(isinstance(v, torch.Tensor) and v.dtype not in supported for v in value):
                return True
    return False


_Tensor = torch.Tensor


def _one_device(args: tuple, kwargs: dict, dtypes: frozenset | None) -> bool:
    """The common call, told apart cheaply (on every kernel call): its tensor arguments are all neuron tensors
    of one device, with dtypes in ``dtypes``, and none is in a list. Then the written and read device rules
    (``written.check``, ``devices.check``) and the dtype test all pass, so the wrapper skips them; any other
    call (a host or meta tensor: ``get_device()`` is -1 for both; two devices; a tensor list; no tensor)
    takes them all, unchanged."""
    index = -1
    for value in (args, kwargs.values()):
        for v in value:
            if isinstance(v, _Tensor):
                d = v.get_device()
                if d != index:
                    if index != -1:
                        return False
                    index = d
                if d < 0:
                    return False
                if dtypes is not None and v.dtype not in dtypes:
                    return False
            elif isinstance(v, (list, tuple)):
                for x in v:
                    if isinstance(x, _Tensor):
                        return False
    return index != -1


# Set by tests (NEURONSIM_ASSERT_NO_CPU=1): every native kernel runs under a dispatch mode that
# raises if the kernel calls any torch op on host tensors, so "no torch CPU kernel computes
# inside a native kernel" is checked on every kernel call the tests make.
ASSERT_NO_CPU = os.environ.get("NEURONSIM_ASSERT_NO_CPU", "0") == "1"


# Ops that read only metadata (dtypes, shapes) and compute nothing, allowed on host scalars.
_METADATA_OPS = frozenset({"result_type"})


# Adaptive eager's hooks live in the runtime (the lower layer); kernels and eager find them here.
from device_impl.runtime.hooks import HOOKS, EagerHooks  # noqa: E402,F401


class HostComputeError(AssertionError):
    """A native kernel called a torch op on host tensors."""


def _no_cpu_mode(kernel: str):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class NoHostCompute(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func.overloadpacket.__name__ in _METADATA_OPS:
                return func(*args, **kwargs)
            for leaf in tree_leaves((args, kwargs)):
                if isinstance(leaf, torch.Tensor) and leaf.device.type == "cpu":
                    raise HostComputeError(f"native kernel {kernel} called {func} on a host tensor; kernels must "
                                           f"compute on the engine (device_impl.engine) only")
            return func(*args, **kwargs)

    return NoHostCompute()


class LoweringTable:
    def __init__(self) -> None:
        self._entries: dict[str, Lowering] = {op: Lowering(op, Tier.NATIVE, "csrc") for op in CSRC_KERNELS}
        self._served_by: dict[str, str] = {}
        # op -> one-element list holding the kernel its registered wrapper calls (see overridden()).
        self._kernels: dict[str, list[Callable[..., Any]]] = {}
        self._library = torch.library.Library("aten", "IMPL")

    def native(self, *ops: str, dtypes: frozenset | None = None, serves: tuple[str, ...] = ()
               ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register ``fn`` as the neuron kernel of each overload in ``ops``.

        ``dtypes``: tensor dtypes the kernel computes on; a call with any other
        (float64, complex) takes the counted CPU fallback instead.
        ``serves``: overloads PyTorch routes to these kernels through its own
        composite kernels (``add.Tensor`` and ``add_.Tensor`` reach ``add.out``).
        """

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            for op in ops:
                self._register(op, fn, Tier.NATIVE, counters.NATIVE_SLOT, fn.__module__, dtypes)
            for op in serves:
                self.serves(op, ops[0])
            return fn

        return register

    def serves(self, op: str, target: str) -> None:
        """Record that PyTorch's composite kernel of ``op`` reaches our kernel ``target``."""
        self._served_by.setdefault(op, target)

    def decomposed(self, op: str, decomposition: Callable[..., Any]) -> None:
        """Serve ``op`` by a decomposition into ops the device runs."""
        self._register(op, decomposition, Tier.DECOMPOSED, counters.DECOMPOSED_SLOT, "torch._decomp", None)

    def _register(self, op: str, fn: Callable[..., Any], tier: Tier, slot: int, source: str,
                  dtypes: frozenset | None) -> None:
        if op in self._entries:
            raise ValueError(f"{op} already has a neuron lowering ({self._entries[op].source})")
        counts = counters._counts  # counters.record, inlined in the wrapper below (every call counts)
        overload = resolve(op)
        hooks = HOOKS
        outside = HOOKS.outside
        # A decomposition only dispatches other ops (each ordered against the queue by its own wrapper), so
        # what it dispatches may wait; a native kernel's launches read and write memory directly.
        native = tier is not Tier.DECOMPOSED
        kernel = [fn]  # the wrapper calls kernel[0]; overridden() swaps it for a test
        self._kernels[op] = kernel
        written_plan = written.plan_of(overload, outs_only=True)
        check_written = written.check
        device_plan = devices.plan_of(overload)
        check_devices = devices.check
        # A kernel may serve a recurring call first (``fn.serve(args, kwargs)``: the call's result, or None):
        # kernels/elementwise/recurring.py's plans, made only from calls whose tensors were all on one device
        # with dtypes the kernel computes, that this wrapper passed to it, so every check below would pass.
        # Not while a test overrides the kernel; under ASSERT_NO_CPU inside the no-host-compute mode, as a kernel.
        serve = getattr(fn, "serve", None)
        registered = fn

        def counted(*args: Any, **kwargs: Any) -> Any:
            if serve is not None and kernel[0] is registered:
                if ASSERT_NO_CPU:
                    with _no_cpu_mode(op):
                        served = serve(args, kwargs)
                else:
                    served = serve(args, kwargs)
                if served is not None:
                    slots = counts.get(op)
                    if slots is None:
                        slots = counts[op] = [0, 0, 0]
                    slots[slot] += 1
                    return served
            if not _one_device(args, kwargs, dtypes):  # else every check below passes: skip them
                if written_plan:
                    check_written(op, written_plan, args, kwargs)
                if device_plan:
                    check_devices(op, device_plan, args, kwargs)
                if dtypes is not None and (_unsupported_dtype(args, dtypes)
                                           or _unsupported_dtype(kwargs.values(), dtypes)):
                    from device_impl.dispatch.fallback import cpu_fallback

                    return cpu_fallback(overload, *args, **kwargs)
            slots = counts.get(op)
            if slots is None:
                slots = counts[op] = [0, 0, 0]
            slots[slot] += 1
            fn = kernel[0]
            # Family kernels (kernels/registry.py) route their computation through HOOKS.submit, which
            # decides between queueing and a barrier; any other kernel needs the barrier first.
            if hooks.barrier is not None and not getattr(fn, "submits", False):
                hooks.barrier("unqueueable", op, args, kwargs)
                if native:  # it writes device memory itself: what it dispatches must not wait (Outside)
                    outside.depth += 1
                    try:
                        if ASSERT_NO_CPU:
                            with _no_cpu_mode(op):
                                return fn(*args, **kwargs)
                        return fn(*args, **kwargs)
                    finally:
                        outside.depth -= 1
            if ASSERT_NO_CPU:
                with _no_cpu_mode(op):
                    return fn(*args, **kwargs)
            return fn(*args, **kwargs)

        counted.__name__ = f"neuron_{op.replace('::', '_').replace('.', '_')}"
        self._library.impl(op.split("::", 1)[1], counted, "PrivateUse1")
        self._entries[op] = Lowering(op, tier, source)

    def kernel(self, op: str) -> Callable[..., Any]:
        """The Python kernel registered for ``op`` (KeyError for C++ core kernels and unknown ops)."""
        if op not in self._kernels:
            raise KeyError(f"{op} has no Python kernel in the neuron lowering table")
        return self._kernels[op][0]

    @contextmanager
    def overridden(self, op: str, fn: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
        """Test only: run ``fn`` instead of ``op``'s kernel inside the block; yields the original.

        The harness's own tests plant deliberately wrong kernels this way to prove the
        harness catches them. Dispatch (dtype checks, counters, the host-compute guard)
        is unchanged; only the kernel called is swapped, and it is restored on exit even
        if the block raises. ``fn`` takes the overload's arguments as the kernel does.
        """
        original = self.kernel(op)
        slot = self._kernels[op]
        slot[0] = fn
        try:
            yield original
        finally:
            slot[0] = original

    def lookup(self, op: str) -> Lowering:
        entry = self._entries.get(op)
        if entry is not None:
            return entry
        served_by = self._served_by.get(op)
        if served_by is not None:
            target = self._entries[served_by]
            return Lowering(op, target.tier, f"{target.source} (via {served_by})")
        if _is_composite(op):
            return Lowering(op, Tier.COMPOSITE, "torch")
        return Lowering(op, Tier.FALLBACK, "cpu")

    def entries(self) -> Iterable[Lowering]:
        return self._entries.values()

    def ops(self, tier: Tier) -> list[str]:
        return sorted(op for op, entry in self._entries.items() if entry.tier is tier)


TABLE = LoweringTable()
