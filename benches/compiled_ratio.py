"""torch.compile(backend="neuron") against neuron eager and CPU eager, for the decoder block and Llama forwards, in one run.

Usage: python benches/compiled_ratio.py [--case CASE ...] [--repeats N] [--breakdown] [--host-cores]

Prints, for each case (default: the Llama-style decoder block forward, harness.models.DecoderBlock,
batch 2, seq 128, hidden 256; and the tiny LlamaForCausalLM forward; benches/cases.py), measured in this run:
  * wall time per forward: CPU eager, neuron eager, neuron compiled, and the ratios
    compiled / eager neuron and compiled / CPU eager;
  * simulated device time per forward (the sum of its launches' device time: engine statistics;
    the device clock also counts the gaps while the host prepares the next eager launch, shown
    beside it) and HBM bytes moved, eager versus compiled;
  * cold compile seconds (empty NEFF cache) and warm ones: in this process after clearing every
    in-memory cache (Dynamo's and the compiler's), and in a new process; both warm compiles are
    served by the NEFF cache on disk (the hit is checked, not assumed);
  * the roofline (benches/roofline.py): compulsory HBM bytes (external inputs read once, outputs
    written once, found on a CPU run), max(TensorE flops / peak, compulsory bytes / DMA bandwidth),
    and MFU / MBU of eager and compiled;
  * the host floor of the wall-time target: the compiled program's TensorE flops at this host's numpy float32
    matmul rate, measured in this run on one product tile (stationary 128x128, moving 128x512: the replay's
    BLAS call), plus the elements one call passes through ScalarE's float64 exp (silu's, sigmoid's: counted in
    one call, timed in this run), as a fraction of neuron eager's wall; the simulator cannot run the program
    faster than those two alone, so a floor near or above the 0.2 target says the target is out of this host's
    reach on one thread;
  * issue 21's targets, each with the figure it is judged by and whether this run met it.
The NEFF cache lives in a temporary directory, so "cold" is cold.

All of the above is measured pinned, by default to one host thread (benches/threads.py; the targets' label,
``threads.pinned_label``, names the threads in force). ``--host-cores`` adds, clearly
labelled, the wall figures and their targets at the host's core count (``threads.at_host_cores``: the simulator's
host threads and CPU eager's torch threads at ``threads.host_cores()``, numpy's BLAS still one thread per call, so the
bits stay), and the host floor at that count: the same sgemm and float64 exp, each split among the threads as the
static replay splits them (``workers.split``), at the speedup this host gives them in this run (``parallel_seconds``:
a host whose vCPUs share a physical core gives well under the core count); device time, HBM bytes and compiles do
not depend on threads.

``--breakdown`` prints instead, per case, where the compiled program's HBM bytes and device time go: one row
per step, reads by buffer class (weights, inputs, constants, scratch, outputs) and writes (scratch, outputs),
with the device-clock advance over the step (device_impl/compiler/breakdown.py), and the compulsory bytes; then per
step its instructions' span, each engine's busy time and the engine bounding it, and each engine's idle time.
"""

from __future__ import annotations

import os.path as _path  # noqa: E402
import sys as _sys  # noqa: E402

_sys.path.insert(0, _path.dirname(_path.abspath(__file__)))  # run as a script or imported by asv's discovery
import threads  # noqa: E402,F401  (one BLAS thread for the simulator: before torch loads numpy)

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Callable
import warnings
from pathlib import Path

CACHE = tempfile.mkdtemp(prefix="neff-bench-")
os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = CACHE  # read at the first compile

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from cases import CASES, Case, device_seconds, wall_seconds  # noqa: E402
from roofline import compulsory_bytes, measure as roofline_of  # noqa: E402

import device_impl.compiler as compiler  # noqa: E402
from device_impl import engine  # noqa: E402

DEFAULT = ("decoder_block_b2_s128", "llama_forward")
# issue 21 sets the device-time, roofline and HBM targets on the decoder block; Llama gets the wall ones
DEVICE_TARGETS = ("decoder_block_b2_s128",)

_WARM_PROCESS = """
import json, os, sys, time
sys.path.insert(0, {benches!r}); sys.path.insert(0, {root!r})
import torch
from cases import CASES
import device_impl.compiler as compiler
fn = CASES[{case!r}].build("neuron", torch.float32, compile=lambda m: torch.compile(m, backend="neuron", fullgraph=True))
started = time.perf_counter()
fn()
torch.neuron.synchronize()
print(json.dumps({{"first_call": time.perf_counter() - started, "stats": compiler.stats()}}))
"""


def _compile(model):
    return torch.compile(model, backend="neuron", fullgraph=True)


def _traffic(fn) -> tuple[float, float, int]:
    """(device seconds of its launches, device-clock seconds, HBM bytes) of one call."""
    engine.reset_stats()
    clock = device_seconds(fn)
    launches = engine.stats().values()
    return sum(s["device_ns"] for s in launches) / 1e9, clock, int(sum(s["hbm_bytes"] for s in launches))


def sgemm_seconds_per_flop(repeats: int = 200) -> float:
    """This host's numpy float32 matmul time per flop on one product tile ([128, 128] @ [128, 512], the
    shape of one TensorE matmul the static replay issues as one BLAS call), best of three batches."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128), dtype=np.float32)
    b = rng.standard_normal((128, 512), dtype=np.float32)
    out = np.empty((128, 512), np.float32)
    return _best_seconds(lambda: np.matmul(a, b, out=out), repeats) / (2 * 128 * 128 * 512)


def _best_seconds(call: Callable[[], object], repeats: int) -> float:
    """Seconds per ``call()``: the best of three batches of ``repeats`` calls."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeats):
            call()
        best = min(best, (time.perf_counter() - started) / repeats)
    return best


def float64_exp_elements(fn) -> int:
    """Elements one call of ``fn`` passes through ScalarE's float64 exp (``isa._exp_neg_into``: sigmoid's and
    silu's exp, widened to float64 so every host rounds it alike; attention's softmax exp is float32 and not
    counted). Counted by wrapping the function for one call: ``_sigmoid_into`` and ``_silu_into`` look it up
    in their module at each call."""
    from device_impl.engine import isa

    original, count = isa._exp_neg_into, [0]

    def counting(x, out):
        count[0] += out.size
        original(x, out)

    isa._exp_neg_into = counting
    try:
        fn()
        torch.neuron.synchronize()
    finally:
        isa._exp_neg_into = original
    return count[0]


def float64_exp_seconds(elements: int, repeats: int = 20) -> float:
    """This host's time for ``isa._exp_neg_into`` over ``elements`` float32 elements as one call, best of
    three batches (0 for none)."""
    import numpy as np

    from device_impl.engine import isa

    if elements == 0:
        return 0.0
    x = np.random.default_rng(0).standard_normal(elements, dtype=np.float32)
    out = np.empty_like(x)
    return _best_seconds(lambda: isa._exp_neg_into(x, out), repeats)


def _output(result) -> torch.Tensor:
    """The tensor a forward returns: itself, or a Hugging Face output's logits."""
    return result if isinstance(result, torch.Tensor) else result.logits


def _first_call(build) -> tuple[object, float, dict]:
    compiler.reset_stats()
    fn = build()
    started = time.perf_counter()
    fn()
    torch.neuron.synchronize()
    return fn, time.perf_counter() - started, compiler.stats()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="+", default=list(DEFAULT), choices=sorted(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--breakdown", action="store_true",
                        help="per-step HBM bytes and device time of each case's compiled program, nothing else")
    parser.add_argument("--host-cores", action="store_true",
                        help="also the wall figures and their targets at the host's core count (simulator host "
                             "threads and CPU eager's torch threads at the cores this process may use, numpy BLAS "
                             "one thread per call), after the pinned one-thread figures")
    args = parser.parse_args(argv)
    threads.pin_torch()
    warnings.filterwarnings("ignore", message="Operator '.*' executed via CPU fallback")
    if args.breakdown:
        for name in args.case:
            breakdown(CASES[name], name)
        return
    met = [report(CASES[name], name, args.repeats, args.host_cores) for name in args.case]
    if not all(met):
        print("\nsome targets are not met (listed above)")


def breakdown(case: Case, name: str) -> None:
    """The compiled program's per-step HBM bytes and device time (compiler.breakdown), one table per graph."""
    from device_impl.compiler import breakdown as steps_of

    models: list[torch.nn.Module] = []

    def compile_and_keep(model):
        models.append(model)
        return _compile(model)

    fn = case.build("neuron", torch.float32, compile=compile_and_keep)
    fn()  # compile
    with steps_of.capture() as calls:
        fn()
    torch.neuron.synchronize()
    owned = {t.untyped_storage().data_ptr() for m in models for t in (*m.parameters(), *m.buffers())}
    print(f"{name}: {case.description}")
    for executable, args in calls:
        weights = {i for i, a in enumerate(args)
                   if isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() in owned}
        rows = steps_of.step_figures(executable, args, weights)
        print(f"program {executable.name}: {len(rows)} steps, scratch arena {executable.scratch_bytes:,d} B")
        print(steps_of.table(rows))
        print(steps_of.engine_table(rows))
    print(f"compulsory HBM bytes {compulsory_bytes(case.build('cpu', torch.float32)):,d}\n")


WALL_TARGETS = (("compiled >= 5x faster than neuron eager (wall)", "eager", 0.2),
                ("compiled <= 2x CPU eager (wall)", "cpu", 2.0))


def _print_targets(targets: list[tuple[str, float, float]]) -> bool:
    for text, value, limit in targets:
        print(f"  {'met    ' if value <= limit else 'NOT MET'}  {text:58s} {value:8.3f} (limit {limit})")
    return all(value <= limit for _, value, limit in targets)


def parallel_seconds(share: Callable[[int, int], object], extent: int, cores: int, repeats: int) -> tuple[float, float]:
    """Seconds ``share(0, extent)`` takes on one thread, and split among ``cores`` host threads the way the static
    replay splits a product's blocks (``workers.split``: contiguous shares, the caller takes the first), best of
    three batches each. Their ratio is the host's parallel speedup: ideal is ``cores``; two vCPUs that share one
    physical core, or a host that packs a woken thread onto the waker's core, give less, and the simulator's
    arithmetic can go no faster than this."""
    from device_impl.compiler import workers

    return (_best_seconds(lambda: share(0, extent), repeats),
            _best_seconds(lambda: workers.split(extent, share, cores), repeats))


def host_parallel_floor(tensore_flops: int, exp_elements: int, cores: int, repeats: int = 20) -> tuple[float, float, float]:
    """The host floor (``report``: the products' sgemm and ScalarE's float64 exp alone) when both are split among
    ``cores`` threads, each as this host runs it split now (``parallel_seconds``): product tiles of the replay's
    BLAS shape (one [128, 128] @ [128, 512] per block, blocks shared out), scaled to the program's flops, and the
    exp's elements. Returns (floor seconds, sgemm speedup, exp speedup)."""
    import numpy as np

    from device_impl.engine import isa

    blocks = 8 * cores
    rng = np.random.default_rng(0)
    a = rng.standard_normal((blocks, 128, 128), dtype=np.float32)
    b = rng.standard_normal((blocks, 128, 512), dtype=np.float32)
    out = np.empty((blocks, 128, 512), np.float32)
    one, split = parallel_seconds(lambda i, j: np.matmul(a[i:j], b[i:j], out=out[i:j]), blocks, cores, repeats)
    floor, blocks_speedup = tensore_flops * split / (2 * blocks * 128 * 128 * 512), one / split
    exp_speedup = 1.0
    if exp_elements:
        x = rng.standard_normal(exp_elements, dtype=np.float32)
        y = np.empty_like(x)
        one, split = parallel_seconds(lambda i, j: isa._exp_neg_into(x[i:j], y[i:j]), exp_elements, cores, repeats)
        floor, exp_speedup = floor + split, one / split
    return floor, blocks_speedup, exp_speedup


def host_cores_report(cpu, eager, compiled, repeats: int, tensore_flops: int = 0, exp_elements: int = 0) -> bool:
    """The wall figures and their targets at the host's core count (``threads.at_host_cores``), and the host floor
    at that count (``host_parallel_floor``, where ``tensore_flops`` is given); True when the targets are met."""
    with threads.at_host_cores() as cores:
        walls = {"cpu": wall_seconds(cpu, "cpu", repeats), "eager": wall_seconds(eager, "neuron", repeats),
                 "compiled": wall_seconds(compiled, "neuron", repeats)}
        floor = host_parallel_floor(tensore_flops, exp_elements, cores) if tensore_flops else None
    print(threads.host_cores_label(cores) + ":")
    print(f"{'':34s} {walls['cpu'] * 1e3:10.2f}ms {walls['eager'] * 1e3:11.2f}ms {walls['compiled'] * 1e3:14.2f}ms")
    if floor is not None:
        seconds, blocks_speedup, exp_speedup = floor
        print(f"host parallel speedup at {cores} threads (ideal {cores}x): product blocks {blocks_speedup:.2f}x, "
              f"float64 exp {exp_speedup:.2f}x; host floor {seconds * 1e3:.2f}ms = "
              f"{seconds / walls['eager']:.3f}x neuron eager wall at {cores} cores")
    print(f"targets (issue 21), {cores} host cores:")
    return _print_targets([(text, walls["compiled"] / walls[base], limit) for text, base, limit in WALL_TARGETS])


def report(case: Case, name: str, repeats: int, host_cores: bool = False) -> bool:
    """Every figure of one case, then its targets (``host_cores``: then its wall figures and targets at the host's
    core count); True when all are met."""
    cpu = case.build("cpu", torch.float32)
    eager = case.build("neuron", torch.float32)
    cpu_wall = wall_seconds(cpu, "cpu", repeats)
    eager_wall = wall_seconds(eager, "neuron", repeats)
    eager_device, eager_clock, eager_bytes = _traffic(eager)

    compiled, cold_first, cold = _first_call(lambda: case.build("neuron", torch.float32, compile=_compile))
    assert cold["compiles"] >= 1 and cold["fallbacks"] == 0, cold
    compiled_wall = wall_seconds(compiled, "neuron", repeats)
    compiled_device, compiled_clock, compiled_bytes = _traffic(compiled)
    difference = (_output(compiled()).float().cpu() - _output(cpu()).float()).abs().max().item()

    torch._dynamo.reset()
    compiler.clear_cache()
    _, warm_first, warm = _first_call(lambda: case.build("neuron", torch.float32, compile=_compile))
    assert warm["compiles"] == 0 and warm["cache_hits_by_source"]["disk"] >= 1, warm

    code = _WARM_PROCESS.format(benches=str(Path(__file__).parent), root=str(Path(__file__).parent.parent),
                                case=name)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    if result.returncode != 0:
        raise SystemExit(f"warm-process run failed:\n{result.stderr[-2000:]}")
    process = json.loads(result.stdout.strip().splitlines()[-1])
    assert process["stats"]["compiles"] == 0 and process["stats"]["cache_hits_by_source"]["disk"] >= 1

    print(f"{case.name}: {case.description}; max |compiled - CPU| = {difference:.2e}")
    print(f"{'wall per forward':34s} {'CPU eager':>12s} {'neuron eager':>13s} {'neuron compiled':>16s}")
    print(f"{'':34s} {cpu_wall * 1e3:10.2f}ms {eager_wall * 1e3:11.2f}ms {compiled_wall * 1e3:14.2f}ms")
    print(f"compiled neuron / eager neuron wall   {compiled_wall / eager_wall:8.3f}x")
    print(f"compiled neuron / CPU eager wall      {compiled_wall / cpu_wall:8.3f}x")
    print(f"simulated device time  eager {eager_device * 1e6:10.1f}us  compiled {compiled_device * 1e6:10.1f}us  "
          f"({eager_device / compiled_device:.2f}x less compiled)")
    print(f"device clock advance   eager {eager_clock * 1e6:10.1f}us  compiled {compiled_clock * 1e6:10.1f}us  "
          f"(includes the device idling between eager launches)")
    print(f"HBM bytes              eager {eager_bytes:12,d}  compiled {compiled_bytes:12,d}  "
          f"({eager_bytes / compiled_bytes:.2f}x less compiled)")
    print(f"cold compile (empty cache)       {cold['compile_seconds']:7.2f}s compile, first call {cold_first:6.2f}s")
    print(f"warm compile (this process, caches cleared) {warm['compile_seconds']:7.2f}s compile, first call "
          f"{warm_first:6.2f}s  [disk hits {warm['cache_hits_by_source']['disk']}]")
    print(f"warm compile (new process)       {process['stats']['compile_seconds']:7.2f}s compile, first call "
          f"{process['first_call']:6.2f}s  [disk hits {process['stats']['cache_hits_by_source']['disk']}]")
    print(f"cold / warm compile seconds      {cold['compile_seconds'] / warm['compile_seconds']:7.2f}x (this process)")

    compulsory = compulsory_bytes(cpu)
    roof = {mode: roofline_of(fn, torch.float32, compulsory) for mode, fn in (("eager", eager), ("compiled", compiled))}
    bound = roof["compiled"]
    print(f"compulsory HBM bytes   {compulsory:12,d}  (inputs and weights read once, outputs written once)")
    print(f"roofline               {bound.seconds * 1e6:10.1f}us  = max(TensorE {bound.tensore_flops:,d} flop at "
          f"{bound.peak_flops / 1e12:.0f} TFLOP/s, {compulsory:,d} B at {bound.peak_bytes_per_second / 1e9:.0f} GB/s)")
    for mode, r in roof.items():
        print(f"{mode:9s} device {r.device_seconds * 1e6:9.1f}us = {r.device_seconds / r.seconds:5.2f}x roofline; "
              f"HBM {r.hbm_bytes / compulsory:5.2f}x compulsory; MFU {r.mfu:6.1%}  MBU {r.mbu:6.1%}")

    per_flop = sgemm_seconds_per_flop()
    products = bound.tensore_flops * per_flop
    exps = float64_exp_elements(compiled)
    exp_seconds = float64_exp_seconds(exps)
    floor = products + exp_seconds
    print(f"host floor of the wall target: {bound.tensore_flops:,d} TensorE flop at this host's numpy sgemm rate "
          f"({1 / per_flop / 1e9:.0f} GFLOP/s) = {products * 1e3:.2f}ms, + {exps:,d} elements of ScalarE's float64 "
          f"exp (sigmoid, silu) {exp_seconds * 1e3:.2f}ms = {floor * 1e3:.2f}ms = {floor / eager_wall:.3f}x neuron "
          "eager wall (those two alone, every other step free)")

    walls = {"cpu": cpu_wall, "eager": eager_wall}
    targets = [(text, compiled_wall / walls[base], limit) for text, base, limit in WALL_TARGETS] + [
        ("warm compile from the disk cache <= 0.1 s (new process)", process["stats"]["compile_seconds"], 0.1),
    ]
    if name in DEVICE_TARGETS:
        targets += [
            ("compiled device time <= 0.3x eager", bound.device_seconds / roof["eager"].device_seconds, 0.3),
            ("compiled device time <= 2x roofline", bound.device_seconds / bound.seconds, 2.0),
            ("compiled HBM bytes <= 1.5x compulsory", bound.hbm_bytes / compulsory, 1.5),
        ]
    print(f"targets (issue 21), {threads.pinned_label()}:")
    met = _print_targets(targets)
    if host_cores:
        met = host_cores_report(cpu, eager, compiled, repeats, bound.tensore_flops, exps) and met
    return met


if __name__ == "__main__":
    main()
