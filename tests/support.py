"""Helpers shared by the unit tests (a module of its own: ``conftest`` is ambiguous when pytest
collects tests/ and opsuite/ in one session)."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

ALL_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64)


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (for import-time and environment behaviour)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=300)


def sample(dtype: torch.dtype, shape=(4, 5), seed: int = 0) -> torch.Tensor:
    """A CPU tensor of ``dtype`` with varied values (negative, fractional, large) where the dtype allows."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.randn(shape, dtype=dtype, generator=g) * 100
    if dtype.is_floating_point:
        return (torch.randn(shape, dtype=torch.float64, generator=g) * 1000).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, dtype=torch.int64, generator=g).to(dtype)


def compile_traced(fn, *inputs):
    """Trace ``fn`` on neuron copies of ``inputs`` to an ATen graph (core decompositions, fake tensors) and compile
    it with the neuron backend's settings: (runner, its program). Fails if the graph fell back to eager."""
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    from device_impl.compiler import backend, driver

    device_inputs = [t.to("neuron") for t in inputs]
    gm = make_fx(fn, decomposition_table=core_aten_decompositions(), tracing_mode="fake")(*device_inputs)
    run = driver.compile_graph(gm, "test", 0, backend.settings())
    assert hasattr(run, "executable"), "the graph fell back to eager"
    return run, run.executable.program


def device_ns() -> int:
    """Simulated device time (ns) of every launch since the engine's statistics were last reset, queued work
    synchronized first."""
    from device_impl import engine

    torch.neuron.synchronize()
    return sum(s["device_ns"] for s in engine.stats().values())


def eager_run(fn, *inputs: torch.Tensor) -> tuple[torch.Tensor, int]:
    """``fn`` on neuron copies of ``inputs`` (neuron tensors as they are), twice: adaptive eager learns the call's
    launch on the first. The second call's output (on CPU) and its device time."""
    from device_impl import engine

    device = [t.to("neuron") for t in inputs]
    fn(*device)
    torch.neuron.synchronize()
    engine.reset_stats()
    out = fn(*device)
    return out.cpu(), device_ns()


def compiled_run(fn, *inputs: torch.Tensor) -> tuple[torch.Tensor, int, list[dict]]:
    """``fn`` compiled (static shapes) on neuron copies of ``inputs``: a warm call, then one whose engine statistics
    start afresh, recorded by ``breakdown.capture``. That call's output (on CPU), device time and its programs'
    steps (the compiler's step dicts)."""
    from device_impl import engine
    from device_impl.compiler import breakdown

    compiled = torch.compile(fn, backend="neuron", dynamic=False)
    device = [t.to("neuron") for t in inputs]
    compiled(*device)
    torch.neuron.synchronize()
    with breakdown.capture() as calls:
        engine.reset_stats()
        out = compiled(*device)
        ns = device_ns()
    return out.cpu(), ns, [step for executable, _ in calls for step in executable.program.steps]
