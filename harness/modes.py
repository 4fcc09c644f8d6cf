"""Execution modes: how a case's expression runs on the device under test.

``eager`` evaluates it as is. ``adaptive`` (queued, fused eager) and
``compiled`` (torch.compile with the device's backend) plug in through the
same interface; a mode the device does not provide yet reports itself
unavailable and its cases are skipped with the reason, never marked
expected-to-fail.
"""

from __future__ import annotations

import contextlib
import sys
import types

from typing import Any, Callable, Iterator

import torch

MODES = ("eager", "adaptive", "compiled")


class ModeUnavailable(Exception):
    """This device does not provide the mode (yet); the case is skipped, not failed."""


class Mode:
    name = ""
    # Whether results' significant strides must be CPU eager's (harness.compare.compare_strides); a pytest run's
    # ``--check-strides on|off`` overrides it for every mode (harness.runner.STRIDES). A layout passes where it is
    # CPU's or the meta kernels' (FakeTensor's answer: group_norm's channels-last gradient is contiguous there).
    # Off in every mode for now: the check lands active only for a mode whose every failure is fixed in the device,
    # and with it on the designed eager suite still fails 3 cases the device lays out as neither (a structured
    # comparison ``ge(uint8 expanded, float32)``, whose functional form ATen's composite lays out without CPU's
    # cast, while CPU and meta cast first; sdpa_overrideable_backward of two layouts), compiled mode many more
    # (its backward's gradients); docs/architecture.md lists them. Turn a mode on here once its run is clean.
    strides_checked = False

    def available(self, device: str) -> str | None:
        """None when usable, else the reason it is not."""
        return None

    def run(self, fn: Callable[[], Any], device: str) -> Any:
        raise NotImplementedError

    def repeat(self, fn: Callable[[], Any], device: str) -> Any:
        """``fn`` again, as a program calling the same code a second time runs it (harness.runner's repeated
        calls): in eager modes a plain run."""
        return self.run(fn, device)

    def synchronize(self, device: str) -> None:
        module = getattr(torch, torch.device(device).type, None)
        sync = getattr(module, "synchronize", None)
        if callable(sync):
            sync()


class Eager(Mode):
    name = "eager"

    def run(self, fn: Callable[[], Any], device: str) -> Any:
        return fn()


class Adaptive(Mode):
    """Runs the case with the device module's adaptive eager mode switched on, if it has one."""

    name = "adaptive"

    def available(self, device: str) -> str | None:
        module = getattr(torch, torch.device(device).type, None)
        if module is None or not hasattr(module, "set_eager_mode"):
            return f"adaptive eager is not available on {device} (torch.{torch.device(device).type}.set_eager_mode)"
        return None

    def run(self, fn: Callable[[], Any], device: str) -> Any:
        module = getattr(torch, torch.device(device).type)
        previous = module.get_eager_mode()
        module.set_eager_mode("adaptive")
        try:
            found = _expression_of(fn)
            if found is not None:
                stage_pending(list(found[1].values()), device)
            result = fn()
            self.synchronize(device)
            return result
        finally:
            module.set_eager_mode(previous)


def stage_pending(values: list, device: str) -> None:
    """Each device tensor of ``values`` moved, in place (``set_``), onto a fresh storage that a device-to-device
    copy of its old one fills, issued in the current (adaptive) mode, so the case's op reads inputs whose producer
    is still queued, as an op of a real program does (its input the last op's result): a kernel that reads its
    inputs when called, before the queued work writing them has run (found: linalg_cross's own launch read
    zeros), or that fuses with a producer wrongly, is caught; with every input written before the call, as the
    cases were made, adaptive mode only ever ran an op on settled memory. Tensors sharing a storage keep sharing
    it; sizes, strides, offsets, dtypes, ``requires_grad`` and the tensor objects themselves are unchanged."""
    moved: dict[int, Any] = {}
    with torch.no_grad():
        for t in values:
            if not isinstance(t, torch.Tensor) or t.device.type != torch.device(device).type \
                    or t.layout != torch.strided:
                continue
            storage = t.untyped_storage()
            if storage.nbytes() == 0 or storage.nbytes() % t.element_size():
                continue
            key = storage.data_ptr()
            fresh = moved.get(key)
            if fresh is None:
                count = storage.nbytes() // t.element_size()
                old = torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, 0, (count,), (1,))
                fresh = moved[key] = _unlike(old)
                fresh.copy_(old)
            t.set_(fresh.untyped_storage(), t.storage_offset(), t.size(), t.stride())


def _unlike(old: torch.Tensor) -> torch.Tensor:
    """A tensor of ``old``'s size holding another value in every element (NaN, or 0 where ``old`` is NaN; the
    bitwise complement of an integer or bool), written before the copy that fills it is queued: a kernel that
    reads it before that copy runs reads values unlike the case's (a fresh allocation may hold an earlier case's
    very inputs, which a stale read would pass)."""
    if old.dtype.is_floating_point or old.dtype.is_complex:
        nan = torch.full_like(old, float("nan"))
        fresh = torch.where(torch.isnan(old), torch.zeros_like(old), nan)
    elif old.dtype == torch.bool:
        fresh = torch.logical_not(old)
    else:
        fresh = torch.bitwise_not(old)
    sync = getattr(getattr(torch, old.device.type, None), "synchronize", None)
    if callable(sync):
        sync()
    return fresh


class Compiled(Mode):
    """torch.compile(backend=<device type>, dynamic=False) over the case's expression.

    The expression is compiled as a function of its tensors (``lambda x0, x1: <expression>``),
    so the tensors are graph inputs as in a real model, not constants folded into the graph.
    Graph breaks are allowed (``fullgraph=False``): a data-dependent op (``nonzero``, ``.item()``)
    splits the function into subgraphs that compile on their own, as they would for a user.
    """

    name = "compiled"

    def __init__(self) -> None:
        self._registered: set[str] = set()  # backends found once: a registered backend stays registered
        # (expression, tensor names, compiled function) of the latest ``run``, for ``repeat`` alone: reused by a
        # later case of another size it would recompile under Dynamo's recompile limit
        self._last: tuple[str, list[str], Callable[..., Any]] | None = None

    def available(self, device: str) -> str | None:
        """Asked before every case; ``list_backends`` costs about 11 ms, so a backend once found is remembered."""
        backend = torch.device(device).type
        if backend in self._registered:
            return None
        try:
            import torch._dynamo as dynamo  # a plain `import torch._dynamo` would make `torch` local here

            if backend not in dynamo.list_backends(exclude_tags=()):
                return f"no torch.compile backend named {backend!r} is registered"
        except Exception as e:  # noqa: BLE001
            return f"torch.compile unavailable: {e}"
        self._registered.add(backend)
        return None

    def repeat(self, fn: Callable[[], Any], device: str) -> Any:
        """The function ``run`` compiled last, called on ``fn``'s tensors (a model's second step: Dynamo's guards
        pass, the backend runs what it built and kept), where ``fn`` is that expression; else ``run``."""
        found = _expression_of(fn)
        if found is None or self._last is None or self._last[0] != found[0]:
            return self.run(fn, device)
        _, names, compiled = self._last
        namespace = found[1]
        if any(not isinstance(namespace.get(n), torch.Tensor) for n in names):
            return self.run(fn, device)
        with _no_guard_latency_profile():  # a guard that fails recompiles, as ``run`` compiles
            return compiled(*(namespace[n] for n in names))

    def run(self, fn: Callable[[], Any], device: str) -> Any:
        backend = torch.device(device).type
        self._last = None
        found = _expression_of(fn)
        with _no_guard_latency_profile():
            if found is None:
                return torch.compile(_fresh_code(fn), backend=backend, dynamic=False)()
            expression, namespace = found
            names = sorted((k for k, v in namespace.items() if isinstance(v, torch.Tensor)), key=_tensor_order)
            scope = {k: v for k, v in namespace.items() if k not in names}
            scope.update(_CONTINUATIONS)
            target = eval(f"lambda {', '.join(names)}: {expression}", scope)  # noqa: S307 - the spec's own call text
            compiled = torch.compile(target, backend=backend, dynamic=False)
            self._last = (expression, names, compiled)
            try:
                return compiled(*(namespace[n] for n in names))
            finally:
                _CONTINUATIONS.update((k, v) for k, v in scope.items() if k.startswith(_CARRIED))


# Dynamo's graph-break continuations (``__resume_at_<offset>_<n>``), kept across cases. Dynamo caches a
# continuation by its code object, and code objects compare by value: the same expression text compiled again
# (another case of the spec, a fresh globals dict) gets the first compile's continuation, whose function Dynamo
# installed in the first case's globals only, so the second call raised NameError (add_out/mul_out 0-dim cases;
# reproduced with backend="eager"). Each case's globals get every continuation made so far, as one module's do.
# The same holds for the compiled graphs a continuation calls (``__compiled_fn_<n>_<uuid>``): the continuation
# Dynamo found for a later case of one expression (add_out_sized's 0-dim case, after its drawn cases had compiled
# the out's resize at other sizes) called a graph that only the first case's globals held (NameError).
_CONTINUATIONS: dict[str, Any] = {}
_CARRIED = ("__resume_at_", "__compiled_fn_")


def _no_latency(*args: Any, **kwargs: Any) -> float:
    return 0.0


@contextlib.contextmanager
def _no_guard_latency_profile() -> Iterator[None]:
    """Dynamo without its guard-latency measurement while a case compiles.

    After building a frame's guards, Dynamo checks them once on the frame's own inputs (kept: a guard that
    fails there is a Dynamo bug) and then *times* them for a metric, ``guard_latency_us``
    (``torch._dynamo.guards.profile_guard_manager``), first evicting the CPU caches by writing a buffer the size
    of a last-level cache. That eviction costs 15-45 ms a compile on the report's machine (cProfile, 139
    elementwise designed cases: 40 ms of a case's ~150 ms, more than Dynamo's tracing), is paid once per
    compiled frame, and every op-suite case compiles a new frame; the figure it produces is read by nothing
    here and changes nothing that is compiled or run. So it is replaced by 0.0 for the call and restored after;
    a torch without that function is left alone."""
    guards = sys.modules.get("torch._dynamo.guards")
    if guards is None:
        import torch._dynamo.guards as guards  # noqa: PLW0621 - loaded with Dynamo, which compiling needs anyway
    original = getattr(guards, "profile_guard_manager", None)
    if original is None:
        yield
        return
    guards.profile_guard_manager = _no_latency
    try:
        yield
    finally:
        guards.profile_guard_manager = original


def _fresh_code(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` over a copy of its code object. Dynamo caches graphs per code object, guarded on what the
    frame reads; a closure cell holding a method descriptor (``torch.Tensor.sin_`` for one check,
    ``torch.Tensor.sin`` for the next) gets no guard (torch 2.13, any backend: reproduced with
    backend="eager"), so the second call would replay the first call's graph, mutation included. A
    fresh code object per call gives every call its own cache, as separate call sites in a model have."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return fn
    return types.FunctionType(code.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _tensor_order(name: str) -> tuple[int, str]:
    digits = name.lstrip("x")
    return (int(digits), name) if digits.isdigit() else (1 << 30, name)


def _expression_of(fn: Callable[[], Any]) -> tuple[str, dict[str, Any]] | None:
    """(expression, namespace) when ``fn`` is the runner's ``lambda: eval(expression, ns)``, else None."""
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    if code is None or "eval" not in code.co_names:
        return None
    captured = dict(zip(code.co_freevars, (c.cell_contents for c in cells)))
    expression = next((v for v in captured.values() if isinstance(v, str)), None)
    namespace = next((v for v in captured.values() if isinstance(v, dict)), None)
    if expression is None or namespace is None:
        return None
    return expression, namespace


REGISTRY: dict[str, Mode] = {m.name: m for m in (Eager(), Adaptive(), Compiled())}


def get(name: str) -> Mode:
    if name not in REGISTRY:
        raise ValueError(f"unknown mode {name!r}; choose from {', '.join(MODES)}")
    return REGISTRY[name]
