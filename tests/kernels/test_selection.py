"""kthvalue and mode pick CPU's index among ties: the ports of ATen's quickselect and libstdc++'s std::sort
(device_impl/kernels/reduction/selection.py) held to the live CPU on lines full of ties, NaNs and signed zeros,
short (insertion sort only), past 16 (introsort) and long (a line spread over the partitions)."""

from __future__ import annotations

import pytest
import torch


def _lines(length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (5, length), generator=g).float()
    x[x == 3] = float("nan")
    x[x == 2] = -0.0
    x[x == -2] = 0.0
    return x


def _same(cpu, dev) -> None:
    values, indices = dev.values.cpu(), dev.indices.cpu()
    assert torch.equal(indices, cpu.indices)
    assert torch.equal(values.isnan(), cpu.values.isnan())
    assert torch.equal(values.nan_to_num(), cpu.values.nan_to_num())
    assert torch.equal(values.signbit(), cpu.values.signbit())


@pytest.mark.parametrize("length", [1, 2, 5, 16, 17, 40, 300, 9000])
def test_kthvalue_ties_are_cpus(length: int) -> None:
    x = _lines(length, length)
    for k in sorted({1, (length + 1) // 2, length}):
        _same(torch.kthvalue(x, k, 1), torch.kthvalue(x.to("neuron"), k, 1))


@pytest.mark.parametrize("length", [1, 2, 5, 16, 17, 40, 300, 9000])
def test_mode_ties_are_cpus(length: int) -> None:
    x = _lines(length, 100 + length)
    _same(torch.mode(x, 1), torch.mode(x.to("neuron"), 1))
    ints = torch.randint(0, 4, (length, 3), generator=torch.Generator().manual_seed(length))
    _same(torch.mode(ints, 0), torch.mode(ints.to("neuron"), 0))


def test_errors_are_cpus() -> None:
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="selected number k out of range"):
        torch.kthvalue(x.to("neuron"), 5, 1)
    with pytest.raises(IndexError, match="Expected reduction dim 1 to have non-zero size"):
        torch.mode(torch.zeros(3, 0, device="neuron"), 1)
