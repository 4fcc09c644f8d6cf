"""A short tour of the device, printed: what `make report` shows first.

Everything here is measured in this run: the devices, a few tensors and
their memory, a training step on each core compared against CPU, and how
each op was served (native / decomposed / CPU fallback).
"""

from __future__ import annotations

import warnings

import torch

import device_impl
from device_impl import dispatch


def _train(device: str, steps: int = 5) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(8, 16, generator=gen).to(device)
    y = torch.randn(8, 4, generator=gen).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main() -> None:
    device_impl.register()
    # Each fallback op warns once; the tally at the end is the readable form.
    warnings.filterwarnings("ignore", message="Operator '.*' executed via CPU fallback")
    print(f"torch {torch.__version__}; accelerator: {torch.accelerator.current_accelerator()}")
    print(f"neuron devices: {torch.neuron.device_count()}")
    for i in range(torch.neuron.device_count()):
        print(f"  neuron:{i}: {torch.neuron.get_device_properties(i)}")
    dispatch.reset_stats()
    cpu = _train("cpu")
    for i in range(torch.neuron.device_count()):
        losses = _train(f"neuron:{i}")
        worst = max(abs(a - b) for a, b in zip(cpu, losses))
        print(f"Linear-ReLU-Linear, 5 SGD steps on neuron:{i}: losses {[round(v, 5) for v in losses]}; "
              f"max |neuron - cpu| = {worst:.2e}")
        print(f"  memory on neuron:{i}: allocated {torch.neuron.memory_allocated(i)} B, "
              f"reserved {torch.neuron.memory_reserved(i)} B, peak {torch.neuron.max_memory_allocated(i)} B")
    counts = dispatch.stats()
    tiers = {t: sum(c[t] for c in counts.values()) for t in ("native", "decomposed", "fallback")}
    print(f"op calls by tier: {tiers} over {len(counts)} overloads")
    for op, c in sorted(counts.items(), key=lambda kv: -sum(kv[1].values()))[:10]:
        print(f"  {op:40s} {c}")


if __name__ == "__main__":
    main()
