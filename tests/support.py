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


def warm_call_ns(call) -> tuple[int, object]:
    """``call()`` once to warm it (compiles, adaptive's learning), then again: that call's device-clock advance
    (ns, queued work synchronized) and its result."""
    from device_impl._core import C

    call()
    torch.neuron.synchronize()
    before = C.device_time_ns(0)
    result = call()
    torch.neuron.synchronize()
    return C.device_time_ns(0) - before, result

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


# Direct convolutions with a non-finite weight at taps that meet the padding, in the forms CPU's oneDNN takes (float32
# with a batch of 2, groups, a wide kernel; channels-last in 2-d): which of its kernels runs decides whether CPU
# multiplies the padded zeros (measured in torch 2.13 on an AVX2 host: a batch of 2 with one group and a 3-wide
# kernel skips them, two groups multiply them unless the input is channels-last, ONEDNN_MAX_CPU_ISA=SSE41 always
# multiplies; its native kernels always do). {form: (input shape, weight shape, keyword arguments)}.
PADDED_CONVS = {
    "conv1d": ((2, 2, 7), (3, 2, 3), dict(padding=1)),
    "conv2d": ((2, 2, 6, 7), (3, 2, 3, 3), dict(padding=1)),
    "conv2d-5x5": ((1, 2, 6, 7), (3, 2, 5, 5), dict(padding=2)),
    "conv2d-strided-dilated": ((2, 2, 6, 7), (3, 2, 3, 3), dict(stride=2, padding=(2, 1), dilation=(1, 2))),
    "conv2d-grouped": ((2, 4, 6, 7), (4, 2, 3, 3), dict(padding=1, groups=2)),
    "conv3d": ((2, 2, 4, 5, 5), (3, 2, 3, 3, 3), dict(padding=1)),
}


def padded_conv(form: str, channels_last: bool = False):
    """(conv, x, w) of ``PADDED_CONVS[form]`` on CPU: ``conv(x, w)`` the functional call, ``x`` positive (every
    product with a real input keeps the weight's sign), ``w`` finite but for +inf at its first tap of output channel
    0, NaN at the first tap of channel 1 and -inf at its last tap of the last channel. ``channels_last``: a 2-d
    input in that memory format."""
    import torch.nn.functional as F

    xs, ws, kw = PADDED_CONVS[form]
    g = torch.Generator().manual_seed(0)
    x = torch.rand(xs, generator=g) + 0.1
    w = torch.rand(ws, generator=g) - 0.5
    w[(0,) * len(ws)] = float("inf")
    w[(1,) + (0,) * (len(ws) - 1)] = float("nan")
    w[(-1,) * len(ws)] = float("-inf")
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    fn = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(xs)]
    return (lambda x, w: fn(x, w, **kw)), x, w
