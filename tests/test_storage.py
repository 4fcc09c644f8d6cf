"""Views, strides and storage on neuron behave exactly as on CPU."""

import pytest
import torch

from support import ALL_DTYPES, sample


def pair(shape=(4, 6)):
    cpu = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    return cpu, cpu.to("neuron")


def test_transpose_strides():
    cpu, dev = pair()
    assert dev.t().stride() == cpu.t().stride()
    assert dev.t().is_contiguous() == cpu.t().is_contiguous()


def test_index_storage_offset():
    cpu, dev = pair()
    assert dev[1].storage_offset() == cpu[1].storage_offset()
    assert dev[2, 3:].storage_offset() == cpu[2, 3:].storage_offset()
    assert torch.equal(dev[2, 3:].cpu(), cpu[2, 3:])


def test_view_and_reshape():
    cpu, dev = pair()
    assert dev.view(3, 8).shape == cpu.view(3, 8).shape
    assert dev.view(3, 8).data_ptr() == dev.data_ptr()
    assert torch.equal(dev.view(-1, 2).cpu(), cpu.view(-1, 2))
    with pytest.raises(RuntimeError) as dev_error:
        dev.t().view(24)
    with pytest.raises(RuntimeError) as cpu_error:
        cpu.t().view(24)
    assert str(dev_error.value) == str(cpu_error.value)
    assert torch.equal(dev.t().reshape(24).cpu(), cpu.t().reshape(24))


def test_as_strided():
    cpu, dev = pair()
    args = ((3, 3), (5, 2), 1)
    assert dev.as_strided(*args).stride() == cpu.as_strided(*args).stride()
    assert torch.equal(dev.as_strided(*args).cpu(), cpu.as_strided(*args))


def test_storage_nbytes_and_sharing():
    for dtype in ALL_DTYPES:
        cpu = sample(dtype, (3, 7))
        dev = cpu.to("neuron")
        assert dev.untyped_storage().nbytes() == cpu.untyped_storage().nbytes()
        assert dev[1:].untyped_storage().data_ptr() == dev.untyped_storage().data_ptr()


def test_in_place_on_a_view_changes_its_base():
    cpu, dev = pair()
    for t in (cpu, dev):
        t[1].mul_(10)
        t.t()[2].fill_(-1)
        t.diagonal().add_(100)
    assert torch.equal(dev.cpu(), cpu)


def test_writes_through_a_strided_view_of_a_view():
    cpu, dev = pair((6, 6))
    for t in (cpu, dev):
        v = t[::2, 1::2]
        v.copy_(torch.full(v.shape, 7.0))
    assert torch.equal(dev.cpu(), cpu)


def test_resize_matches_cpu():
    for new_shape in [(2, 3), (5, 7), (0,), (24,)]:
        cpu, dev = pair()
        cpu.resize_(new_shape)
        dev.resize_(new_shape)
        assert dev.shape == cpu.shape and dev.stride() == cpu.stride()
        keep = min(24, cpu.numel())
        assert torch.equal(dev.flatten()[:keep].cpu(), cpu.flatten()[:keep])
        assert dev.untyped_storage().nbytes() == cpu.untyped_storage().nbytes()


def test_resize_channels_last():
    dev = torch.empty(2, 3, 4, 5, device="neuron")
    dev.resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert dev.stride() == torch.empty(2, 3, 4, 5).to(memory_format=torch.channels_last).stride()


def test_untyped_storage_resize():
    dev = torch.arange(4.0, device="neuron")
    storage = dev.untyped_storage()
    storage.resize_(64)
    assert storage.nbytes() == 64
    assert torch.equal(dev.cpu(), torch.arange(4.0))


def test_set_overloads():
    src = torch.arange(12.0).to("neuron")
    a = torch.empty(0, device="neuron").set_(src)
    assert a.data_ptr() == src.data_ptr() and a.shape == src.shape
    b = torch.empty(0, device="neuron").set_(src.untyped_storage())
    assert b.shape == (12,) and torch.equal(b.cpu(), torch.arange(12.0))
    c = torch.empty(0, device="neuron").set_(src.untyped_storage(), 2, (2, 3), (3, 1))
    assert torch.equal(c.cpu(), torch.arange(12.0).as_strided((2, 3), (3, 1), 2))
    c.fill_(0)
    assert src.cpu()[2:8].eq(0).all()


def test_channels_last_tensors():
    cpu = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    dev = cpu.to("neuron")
    assert dev.stride() == cpu.stride()
    assert dev.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(dev.cpu(), cpu)


def test_empty_strided_and_zero_size():
    dev = torch.empty_strided((2, 3), (1, 2), device="neuron")
    assert dev.stride() == (1, 2)
    z = torch.empty(0, 5, device="neuron")
    assert z.shape == (0, 5) and z.cpu().shape == (0, 5)


def test_only_strided_layout():
    with pytest.raises(NotImplementedError, match="only torch.strided"):
        torch.empty(2, device="neuron", layout=torch.sparse_coo)
    with pytest.raises(NotImplementedError, match="only torch.strided"):
        torch.eye(3).to_sparse().to("neuron")
