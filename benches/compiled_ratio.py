"""torch.compile(backend="neuron") against neuron eager and CPU eager, for the decoder block forward, in one run.

Usage: python benches/compiled_ratio.py [--case decoder_block_b2_s128] [--repeats N]

Prints, for the Llama-style decoder block forward (harness.models.DecoderBlock, batch 2, seq 128,
hidden 256; benches/cases.py), measured in this run:
  * wall time per forward: CPU eager, neuron eager, neuron compiled, and the ratios
    compiled / eager neuron and compiled / CPU eager;
  * simulated device time per forward (the sum of its launches' device time: engine statistics;
    the device clock also counts the gaps while the host prepares the next eager launch, shown
    beside it) and HBM bytes moved, eager versus compiled;
  * cold compile seconds (empty NEFF cache) and warm ones: in this process after clearing every
    in-memory cache (Dynamo's and the compiler's), and in a new process; both warm compiles are
    served by the NEFF cache on disk (the hit is checked, not assumed).
The NEFF cache lives in a temporary directory, so "cold" is cold.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

CACHE = tempfile.mkdtemp(prefix="neff-bench-")
os.environ["TORCH_NEURONX_NEFF_CACHE_DIR"] = CACHE  # read at the first compile

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))
from cases import CASES, device_seconds, wall_seconds  # noqa: E402

import device_impl.compiler as compiler  # noqa: E402
from device_impl import engine  # noqa: E402

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


def _first_call(build) -> tuple[object, float, dict]:
    compiler.reset_stats()
    fn = build()
    started = time.perf_counter()
    fn()
    torch.neuron.synchronize()
    return fn, time.perf_counter() - started, compiler.stats()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="decoder_block_b2_s128", choices=sorted(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    case = CASES[args.case]
    warnings.filterwarnings("ignore", message="Operator '.*' executed via CPU fallback")

    cpu = case.build("cpu", torch.float32)
    eager = case.build("neuron", torch.float32)
    cpu_wall = wall_seconds(cpu, "cpu", args.repeats)
    eager_wall = wall_seconds(eager, "neuron", args.repeats)
    eager_device, eager_clock, eager_bytes = _traffic(eager)

    compiled, cold_first, cold = _first_call(lambda: case.build("neuron", torch.float32, compile=_compile))
    assert cold["compiles"] >= 1 and cold["fallbacks"] == 0, cold
    compiled_wall = wall_seconds(compiled, "neuron", args.repeats)
    compiled_device, compiled_clock, compiled_bytes = _traffic(compiled)
    difference = (compiled().float().cpu() - cpu().float()).abs().max().item()

    torch._dynamo.reset()
    compiler.clear_cache()
    _, warm_first, warm = _first_call(lambda: case.build("neuron", torch.float32, compile=_compile))
    assert warm["compiles"] == 0 and warm["cache_hits_by_source"]["disk"] >= 1, warm

    code = _WARM_PROCESS.format(benches=str(Path(__file__).parent), root=str(Path(__file__).parent.parent),
                                case=args.case)
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


if __name__ == "__main__":
    main()
