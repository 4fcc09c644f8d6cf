"""Copies host <-> device <-> device are exact for every dtype, layout and direction."""

import pytest
import torch

from support import ALL_DTYPES, sample


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_round_trip_every_dtype(dtype):
    cpu = sample(dtype, (5, 7))
    on0 = cpu.to("neuron:0")
    on0_again = on0.to("neuron:0", copy=True)
    on1 = on0.to("neuron:1")
    assert on0.dtype == on1.dtype == dtype
    for t in (on0, on0_again, on1):
        back = t.cpu()
        assert back.dtype == dtype
        assert torch.equal(back, cpu)
        assert back.view(torch.uint8).equal(cpu.view(torch.uint8))  # bit-exact (nan payloads, -0.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_special_float_values_survive(dtype):
    cpu = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-40, -3.5], dtype=dtype)
    back = cpu.to("neuron").to("neuron:1").cpu()
    assert back.view(torch.uint8).equal(cpu.view(torch.uint8))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_item_every_dtype(dtype):
    cpu = sample(dtype, (3,))
    dev = cpu.to("neuron")
    assert dev[1].item() == cpu[1].item()
    assert type(dev[1].item()) is type(cpu[1].item())


def test_local_scalar_dense_reads_the_first_element_of_a_longer_tensor_as_cpu_does():
    """item() checks for one element above the kernel; aten::_local_scalar_dense itself reads the element at the data
    pointer, on CPU (and CUDA) whatever the length (designed case local_scalar_dense-float32-negative-contiguous-7:
    the device raised "a Tensor with 7 elements cannot be converted to Scalar")."""
    cpu = torch.arange(24.0).reshape(4, 6) - 5
    dev = cpu.to("neuron")
    for view in (lambda t: t, lambda t: t.t(), lambda t: t[1:, ::2], lambda t: t.reshape(-1)[3:]):
        assert torch.ops.aten._local_scalar_dense(view(dev)) == torch.ops.aten._local_scalar_dense(view(cpu))
    with pytest.raises(RuntimeError, match="0 elements"):
        torch.ops.aten._local_scalar_dense(torch.empty(0, device="neuron"))
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        dev.item()


def test_non_contiguous_copies_both_ways():
    cpu = torch.arange(60.0).reshape(3, 4, 5)
    dev = cpu.to("neuron")
    assert torch.equal(dev.permute(2, 0, 1).cpu(), cpu.permute(2, 0, 1))
    assert torch.equal(dev[:, ::2, 1:].cpu(), cpu[:, ::2, 1:])
    target = torch.zeros(5, 4, 3, device="neuron")
    target.copy_(cpu.permute(2, 1, 0))
    assert torch.equal(target.cpu(), cpu.permute(2, 1, 0))
    strided_target = torch.zeros(3, 8, device="neuron")[:, ::2]
    strided_target.copy_(cpu[:, :, 0])
    assert torch.equal(strided_target.cpu(), cpu[:, :, 0])


def test_expanded_source():
    row = torch.arange(4.0)
    target = torch.empty(3, 4, device="neuron")
    target.copy_(row.to("neuron").expand(3, 4))
    assert torch.equal(target.cpu(), row.expand(3, 4))


def test_dtype_converting_copies_match_cpu():
    cpu = torch.randn(64) * 300
    for dtype in (torch.bfloat16, torch.float16, torch.int32, torch.uint8, torch.bool):
        assert torch.equal(cpu.to("neuron").to(dtype).cpu(), cpu.to(dtype))
        assert torch.equal(cpu.to("neuron", dtype=dtype).cpu(), cpu.to(dtype))


def test_cross_device_strided_copy():
    cpu = torch.arange(24.0).reshape(4, 6)
    dst = torch.zeros(6, 4, device="neuron:1")
    dst.copy_(cpu.to("neuron:0").t())
    assert torch.equal(dst.cpu(), cpu.t())


def test_conjugate_and_negative_views_materialise():
    cpu = torch.randn(4, dtype=torch.complex64)
    dev = cpu.to("neuron")
    assert torch.equal(dev.conj().cpu(), cpu.conj())
    assert torch.equal(dev.conj().resolve_conj().cpu(), cpu.conj().resolve_conj())


def test_zero_size_copies():
    assert torch.empty(0, 3).to("neuron").cpu().shape == (0, 3)
