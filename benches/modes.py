"""The execution modes a benchmark compares, and the one place that knows how each runs a case.

``cpu-eager`` is the baseline (the same case on CPU, in the same process); ``eager``,
``adaptive`` and ``compiled`` run it on neuron. asv and pytest-benchmark both go through
``open_workload``: a mode that does not exist yet raises ``ModeUnavailable``, a
``NotImplementedError``, which asv reports as a skipped benchmark (its ``setup`` raised it) and
pytest-benchmark as a skipped test. Nothing is faked: when ``torch.compile(backend="neuron")``
lands, the compiled benchmarks start measuring without a change here.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from threadpoolctl import threadpool_limits

from benches.cases import CASES, Case, Workload, synchronize

DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}
MODES = ("cpu-eager", "eager", "adaptive", "compiled")
NEURON_MODES = MODES[1:]
BASELINE = "cpu-eager"

# Both sides compute on one thread (NEURONSIM_BENCH_THREADS overrides): CPU eager's intra-op pool,
# and the BLAS that numpy (the simulator's arithmetic) calls. On this project's two shared cores a
# two-thread kernel waits for a core another process holds, and the time of a call swings 3-150x
# between runs (measured under load: torch softmax over 256x512, 56 us on one thread, 6.4-7.9 ms on
# two; the simulator's 128^3 fp32 matmul, 0.15 ms with one OpenBLAS thread, 24-32 ms with two).
BENCH_THREADS = int(os.environ.get("NEURONSIM_BENCH_THREADS", "1"))

# The compiler's own word that it cannot run (yet): an error whose message says the backend or
# compiler is "not available" / "not implemented yet" skips the benchmark instead of failing it.
_NOT_AVAILABLE = re.compile(r"not (yet )?available|not implemented yet", re.IGNORECASE)


class ModeUnavailable(NotImplementedError):
    """The mode (or this case in it) cannot run on this build; asv and pytest skip, never fail."""


class Mode:
    """How a mode prepares a case: the device, the process-wide switch, and torch.compile if any."""

    name = ""
    device = "neuron"

    def unavailable(self) -> str | None:
        """None when the mode can run here, else why not."""
        return None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The process-wide state the mode needs while its workloads are built and run."""
        yield

    def build(self, case: Case, dtype: torch.dtype) -> Workload:
        return case.build(self.device, dtype)

    def sync(self) -> None:
        synchronize(self.device)


class CpuEager(Mode):
    name = "cpu-eager"
    device = "cpu"


class _NeuronEagerMode(Mode):
    eager_mode = "eager"

    def unavailable(self) -> str | None:
        if not hasattr(torch, "neuron"):
            return "the neuron device is not registered (import device_impl)"
        if self.eager_mode != "eager" and not hasattr(torch.neuron, "set_eager_mode"):
            return f"{self.eager_mode} eager is not available (torch.neuron.set_eager_mode is missing)"
        return None

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        set_mode = getattr(torch.neuron, "set_eager_mode", None)
        if set_mode is None:  # a device without adaptive eager is always eager
            yield
            return
        previous = torch.neuron.get_eager_mode()
        set_mode(self.eager_mode)
        try:
            yield
        finally:
            set_mode(previous)


class Eager(_NeuronEagerMode):
    name = "eager"


class Adaptive(_NeuronEagerMode):
    """Queued, fused eager: each timed call ends with a synchronize, so the flush is measured."""

    name = "adaptive"
    eager_mode = "adaptive"


class Compiled(Eager):
    """torch.compile(backend="neuron", fullgraph=True, dynamic=False), as the real backend asks."""

    name = "compiled"
    _answer: list[str | None] = []  # list_backends imports every Dynamo backend: ask once per process

    def unavailable(self) -> str | None:
        reason = super().unavailable()
        if reason:
            return reason
        if not self._answer:
            import torch._dynamo

            registered = "neuron" in torch._dynamo.list_backends(exclude_tags=())
            self._answer.append(None if registered else
                                "torch.compile backend 'neuron' is not registered yet (device_impl.compiler)")
        return self._answer[0]

    def build(self, case: Case, dtype: torch.dtype) -> Workload:
        def compile(obj: Any) -> Any:
            return torch.compile(obj, backend="neuron", fullgraph=True, dynamic=False)

        if case.compile_scope == "module":
            return case.build(self.device, dtype, compile=compile)
        return compile(case.build(self.device, dtype))


REGISTRY: dict[str, Mode] = {m.name: m for m in (CpuEager(), Eager(), Adaptive(), Compiled())}


def available_modes() -> list[str]:
    return [name for name, mode in REGISTRY.items() if mode.unavailable() is None]


@dataclass
class Prepared:
    """One case built and warmed in one mode: call it to run the workload once, synchronized."""

    case: Case
    mode: Mode
    dtype: torch.dtype
    workload: Workload
    warmup_seconds: float  # the first call: for compiled mode, tracing + compiling + one run
    _exit: contextlib.ExitStack = field(repr=False)

    def __call__(self) -> Any:
        out = self.workload()
        self.mode.sync()
        return out

    @property
    def facts(self) -> dict[str, Callable[[], float]]:
        return getattr(self.workload, "facts", {})

    def close(self) -> None:
        self._exit.close()


def _lookup(case_name: str, mode_name: str, dtype_name: str) -> tuple[Case, Mode, torch.dtype]:
    if case_name not in CASES:
        raise KeyError(f"unknown benchmark case {case_name!r}; benches/cases.py defines {sorted(CASES)}")
    if mode_name not in REGISTRY:
        raise KeyError(f"unknown mode {mode_name!r}; choose from {MODES}")
    if dtype_name not in DTYPES:
        raise KeyError(f"unknown dtype {dtype_name!r}; choose from {sorted(DTYPES)}")
    return CASES[case_name], REGISTRY[mode_name], DTYPES[dtype_name]


def open_workload(case_name: str, mode_name: str, dtype_name: str) -> Prepared:
    """Build ``case`` for ``mode`` and ``dtype`` and run it once (the warm-up: plans, compiles, caches).

    Raises ModeUnavailable when the mode does not exist on this build or the case is not defined
    for the dtype. The mode stays switched on until ``close()``.
    """
    import time

    case, mode, dtype = _lookup(case_name, mode_name, dtype_name)
    reason = mode.unavailable()
    if reason:
        raise ModeUnavailable(f"{mode_name}: {reason}")
    if dtype not in case.dtypes:
        raise ModeUnavailable(f"{case_name} is defined for {[str(d) for d in case.dtypes]} only")
    stack = contextlib.ExitStack()
    try:
        threads = torch.get_num_threads()
        if threads != BENCH_THREADS:
            torch.set_num_threads(BENCH_THREADS)
            stack.callback(torch.set_num_threads, threads)
        stack.enter_context(threadpool_limits(limits=BENCH_THREADS, user_api="blas"))
        stack.enter_context(mode.active())
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message="Operator '.*' executed via CPU fallback")
        workload = mode.build(case, dtype)
        started = time.perf_counter()
        try:
            workload()
            mode.sync()
        except Exception as e:
            if _NOT_AVAILABLE.search(str(e)):
                raise ModeUnavailable(f"{mode_name}: {e}") from e
            raise
        warmup = time.perf_counter() - started
    except BaseException:
        stack.close()
        raise
    return Prepared(case, mode, dtype, workload, warmup, stack)


def cases_tagged(tag: str) -> list[str]:
    return [name for name, case in CASES.items() if tag in case.tags]
