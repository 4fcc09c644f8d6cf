"""Neuron eager / CPU eager wall time per call, measured in one run, with simulated device time beside it.

Usage: python benches/ratios.py [CASE ...] [--dtype float32|bfloat16] [--repeats N]
Default cases: the ones the engine issue reports (matmul 1024^3 fp32, 1M add, softmax and
layer_norm over 4096x1024). Wall time on neuron is the simulator's cost on this machine; the
device column is the simulated NeuronCore time of the same call.
"""

from __future__ import annotations

import os.path as _path  # noqa: E402
import sys as _sys  # noqa: E402

_sys.path.insert(0, _path.dirname(_path.abspath(__file__)))  # run as a script or imported by asv's discovery
import threads  # noqa: E402,F401  (one BLAS thread for the simulator: before torch loads numpy)

import argparse
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from cases import CASES, device_seconds, wall_seconds  # noqa: E402

DEFAULT = ("matmul_1024", "add_1m", "softmax_4096x1024", "layer_norm_4096x1024", "add_1k")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", metavar="CASE", help=f"one of {', '.join(sorted(CASES))}")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    threads.pin_torch()
    dtype = getattr(torch, args.dtype)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {sorted(CASES)}")
    names = args.cases or list(DEFAULT)
    warnings.filterwarnings("ignore", message="Operator '.*' executed via CPU fallback")
    print(f"{'case':24s} {'dtype':9s} {'cpu eager':>12s} {'neuron eager':>13s} {'ratio':>8s} {'device time':>12s}")
    for name in names:
        case = CASES[name]
        cpu = wall_seconds(case.build("cpu", dtype), "cpu", args.repeats)
        workload = case.build("neuron", dtype)
        neuron = wall_seconds(workload, "neuron", args.repeats)
        device = device_seconds(workload)
        print(f"{name:24s} {args.dtype:9s} {cpu * 1e3:10.3f}ms {neuron * 1e3:11.3f}ms {neuron / cpu:7.1f}x "
              f"{device * 1e6:10.2f}us")


if __name__ == "__main__":
    main()
