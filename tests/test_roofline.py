"""benches/roofline.py: compulsory bytes are what a call reads without having made it, plus what it returns."""

from __future__ import annotations

import torch

from benches.roofline import Roofline, compulsory_bytes


def test_matmul_reads_both_operands_and_writes_the_product():
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    assert compulsory_bytes(lambda: a @ b) == (64 * 32 + 32 * 16 + 64 * 16) * 4


def test_intermediates_and_views_are_not_compulsory():
    """A chain's temporaries stay on chip in the ideal schedule; a transposed weight is the weight."""
    linear = torch.nn.Linear(32, 8).to(torch.bfloat16)
    x = torch.randn(4, 32, dtype=torch.bfloat16)

    def chain() -> torch.Tensor:
        with torch.no_grad():
            return torch.tanh(linear(x) * 2.0 + 1.0).sigmoid()

    assert compulsory_bytes(chain) == (32 * 8 + 8 + 4 * 32 + 4 * 8) * 2


def test_roofline_is_the_slower_of_compute_and_traffic():
    r = Roofline(device_seconds=4e-6, tensore_flops=2_000_000, hbm_bytes=400_000, compulsory_bytes=100_000,
                 peak_flops=1e12, peak_bytes_per_second=1e11)
    assert r.seconds == max(2e-6, 1e-6)
    assert abs(r.mfu - 0.5) < 1e-12 and abs(r.mbu - 1.0) < 1e-12
