"""Timeline of one 512x512x512 bf16 matmul: Chrome-trace JSON (open in Perfetto) and TensorE utilization.

Writes build/traces/matmul_512_bf16_<layout>.json for the two layouts of A: K-major (A stored
transposed, the operand layout TensorE consumes directly, as NKI's lhsT) and row-major (A's
blocks are transposed on TensorE first). Utilization is TensorE flops / (peak x simulated time);
the roofline is max(flops / peak, minimum HBM bytes / HBM bandwidth) for the shape.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

import device_impl  # noqa: F401
from device_impl import engine

OUT = Path(__file__).resolve().parent.parent / "build" / "traces"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    p = engine.PLATFORM
    n = 512
    flops = 2 * n ** 3
    roofline_s = max(flops / p.tensor_flops_per_second, 3 * n * n * 2 / p.dma_bytes_per_second)
    a = torch.randn(n, n, dtype=torch.bfloat16, device="neuron")
    b = torch.randn(n, n, dtype=torch.bfloat16, device="neuron")
    layouts = {"k_major": a.t().contiguous().t(), "row_major": a}
    print(f"platform {p.name}: peak {p.tensor_flops_per_second / 1e12:.1f} TFLOPS bf16, "
          f"{p.dma_bytes_per_second / 1e9:.0f} GB/s; roofline for {n}^3 bf16: {roofline_s * 1e6:.2f} us "
          f"(TensorE utilization at best {flops / p.tensor_flops_per_second / roofline_s:.1%})")
    for name, lhs in layouts.items():
        with engine.record_trace() as trace:
            torch.mm(lhs, b)
        report = trace.reports[-1]
        kernel_s = (report.device_ns - p.launch_overhead_ns) / 1e9
        utilization = flops / p.tensor_flops_per_second / kernel_s
        roof_util = flops / p.tensor_flops_per_second / roofline_s
        path = OUT / f"matmul_512_bf16_{name}.json"
        trace.save(str(path))
        busy = ", ".join(f"{k} {v / 1e3:.2f}us" for k, v in report.busy_ns.items() if v)
        print(f"A {name:9s}: {kernel_s * 1e6:.2f} us on the core (+{p.launch_overhead_ns / 1e3:.1f} us launch); "
              f"TensorE utilization {utilization:.1%} = {utilization / roof_util:.1%} of the roofline; busy: {busy}; "
              f"trace: {path}")


if __name__ == "__main__":
    sys.exit(main())
