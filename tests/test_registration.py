"""The neuron device is registered through PrivateUse1, by `import torch` alone once installed."""

import pytest
import torch

from support import run_python


def test_plain_import_torch_registers_the_device():
    result = run_python(
        "import torch\n"
        "x = torch.arange(6, device='neuron').reshape(2, 3)\n"
        "print(torch.neuron.device_count(), x.device, x.is_neuron, torch.accelerator.current_accelerator())\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "neuron:0", "True", "neuron"]


def test_autoload_can_be_disabled_and_explicit_import_still_works():
    result = run_python(
        "import torch\n"
        "print(hasattr(torch, 'neuron'))\n"
        "import device_impl\n"
        "print(hasattr(torch, 'neuron'), torch.zeros(1, device='neuron').device)\n",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "neuron:0"]


def test_visible_cores_narrow_the_device_count():
    result = run_python(
        "import torch\n"
        "print(torch.neuron.device_count(), torch.neuron.get_device_properties(0).physical_core)\n",
        NEURON_RT_NUM_CORES="4", NEURON_RT_VISIBLE_CORES="2-3",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "2"]


def test_bad_environment_fails_loudly_with_the_variable_named():
    result = run_python("import torch", NEURON_RT_VISIBLE_CORES="7")
    assert result.returncode != 0
    assert "NEURON_RT_VISIBLE_CORES='7'" in result.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in result.stderr


def test_hbm_capacity_from_the_environment():
    result = run_python("import torch; print(torch.neuron.get_device_properties(1).total_memory)",
                        NEURON_HBM_BYTES="3GiB")
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == 3 * 2**30


def test_generated_tensor_and_storage_methods():
    x = torch.ones(3).neuron()
    assert x.is_neuron and x.device == torch.device("neuron", 0)
    assert x.untyped_storage().is_neuron
    assert torch.ones(2).to("neuron:1").device.index == 1


def test_accelerator_api_reports_neuron():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == torch.neuron.device_count() == 2


def test_registration_is_idempotent():
    import device_impl

    device_impl.register()
    device_impl.register()
    assert torch._C._get_privateuse1_backend_name() == "neuron"


@pytest.mark.parametrize("bad", ["neuron:2", "neuron:7"])
def test_invalid_device_index_is_a_clear_error(bad):
    with pytest.raises(RuntimeError, match="NeuronCore"):
        torch.empty(2, device=bad)
    # The device is still usable afterwards.
    assert torch.ones(2, device="neuron").cpu().tolist() == [1.0, 1.0]
