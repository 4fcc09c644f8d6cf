"""Neuron eager time per op / CPU eager time per op, for a small elementwise op, in one run.

Both sides time the same op on the same shapes back to back, best of several
repeats, so the ratio is robust on a noisy shared machine.
Usage: python benches/elementwise_ratio.py [--numel N] [--iters K]
"""

from __future__ import annotations

import argparse
import timeit

import torch

import device_impl  # noqa: F401  (registers the device when autoload is off)


def per_op_seconds(device: str, numel: int, iters: int, repeats: int) -> float:
    a = torch.rand(numel, device=device)
    b = torch.rand(numel, device=device)
    torch.add(a, b)  # warm-up: first-call costs (plans, warnings) are not what we measure
    timer = timeit.Timer(lambda: torch.add(a, b))
    best = min(timer.repeat(repeat=repeats, number=iters))
    return best / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cpu = per_op_seconds("cpu", args.numel, args.iters, args.repeats)
    neuron = per_op_seconds("neuron", args.numel, args.iters, args.repeats)
    print(f"add of two {args.numel}-element fp32 tensors: cpu eager {cpu * 1e6:.2f} us/op, "
          f"neuron eager {neuron * 1e6:.2f} us/op, ratio neuron/cpu = {neuron / cpu:.1f}x")


if __name__ == "__main__":
    main()
