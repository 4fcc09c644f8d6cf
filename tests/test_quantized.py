"""Quantized tensors on neuron: refused where one would be created, with the fix named.

The device has no quantized kernels; csrc/aten_ops.cpp registers the refusal on QuantizedPrivateUse1
for the creation ops. Without it the refusal is the generic layout message (or a CPU fallback).
"""

from __future__ import annotations

import warnings

import pytest
import torch

FIX = r"q\.dequantize\(\)\.to\('neuron'\)"


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch 2.13 deprecates quantized tensor creation
        yield


def _quantized() -> torch.Tensor:
    return torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)


def test_moving_a_quantized_tensor_is_refused_with_the_fix():
    with pytest.raises(NotImplementedError, match="neuron has no quantized tensors") as info:
        _quantized().to("neuron")
    assert "bfloat16" in str(info.value)
    with pytest.raises(NotImplementedError, match=FIX):
        torch.quantize_per_channel(torch.randn(2, 3), torch.tensor([0.1, 0.2]), torch.tensor([0, 0]), 0,
                                   torch.quint8).to("neuron")


def test_creating_or_quantizing_on_neuron_is_refused_with_the_fix():
    with pytest.raises(NotImplementedError, match=FIX):
        torch.empty(3, dtype=torch.qint8, device="neuron")
    with pytest.raises(NotImplementedError, match=FIX):
        torch.quantize_per_tensor(torch.randn(3, device="neuron"), 0.1, 0, torch.qint8)


def test_the_suggested_fix_works():
    q = _quantized()
    moved = q.dequantize().to("neuron")
    assert moved.dtype == torch.float32
    assert torch.equal(moved.cpu(), q.dequantize())
