"""torch.neuron device management: current device per thread, context managers, properties."""

import threading

import pytest
import torch


def test_current_device_and_set_device():
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device(1)
    try:
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device == torch.device("neuron", 1)
    finally:
        torch.neuron.set_device(0)
    assert torch.empty(1, device="neuron").device.index == 0


def test_device_context_manager_restores_the_previous_device():
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        with torch.neuron.device("neuron:0"):
            assert torch.neuron.current_device() == 0
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0


def test_device_of_follows_a_tensor():
    x = torch.zeros(1, device="neuron:1")
    with torch.neuron.device_of(x):
        assert torch.neuron.current_device() == 1
    assert torch.neuron.current_device() == 0


def test_current_device_is_per_thread():
    seen = {}
    torch.neuron.set_device(1)
    try:
        def worker():
            seen["thread"] = torch.neuron.current_device()
            torch.neuron.set_device(0)
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert seen["thread"] == 0
        assert torch.neuron.current_device() == 1
    finally:
        torch.neuron.set_device(0)


def test_set_device_out_of_range_raises_and_keeps_the_current_device():
    with pytest.raises(RuntimeError, match="Invalid device neuron:5"):
        torch.neuron.set_device(5)
    assert torch.neuron.current_device() == 0


def test_properties():
    props = torch.neuron.get_device_properties(0)
    assert props.total_memory == 16 * 2**30
    assert "NeuronCore" in props.name and props.platform == "trn1"
    assert torch.neuron.get_device_name(1) == props.name
    with pytest.raises(RuntimeError):
        torch.neuron.get_device_properties(3)


def test_synchronize_validates_its_device():
    torch.neuron.synchronize()
    torch.neuron.synchronize("neuron:1")
    torch.accelerator.synchronize()
    with pytest.raises(RuntimeError):
        torch.neuron.synchronize(9)


def test_primary_context_exists_after_first_use():
    torch.empty(1, device="neuron:1")
    assert torch._C._get_accelerator() == torch.device("neuron")
    from device_impl._core import C
    assert C.context_created(1)


def test_devices_are_distinct():
    a = torch.arange(4.0).to("neuron:0")
    b = a.to("neuron:1")
    assert b.device.index == 1 and a.device.index == 0
    assert a.data_ptr() != b.data_ptr()
    assert torch.equal(b.cpu(), a.cpu())
    with pytest.raises(RuntimeError, match="same device"):
        a + b
