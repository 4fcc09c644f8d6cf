"""torch.save / torch.load of neuron tensors, state dicts and checkpoints.

torch 2.13 serializes PrivateUse1 storages itself once the backend is renamed and its device
module registered (torch.serialization's "privateuse1" package: location tag ``neuron:<i>``,
restore through ``torch.neuron.device_count()``), so there is no serialization module of ours;
these tests pin the behaviour users rely on.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pytest
import torch

from device_impl import eager


def _roundtrip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))


def test_storage_location_tag_names_the_core():
    tensor = torch.ones(2, device="neuron:1")
    assert torch.serialization.location_tag(tensor.untyped_storage()) == "neuron:1"
    assert torch.serialization.location_tag(torch.ones(1, device="neuron").untyped_storage()) == "neuron:0"


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool))
def test_tensor_roundtrip_restores_device_dtype_and_values(dtype):
    cpu = (torch.arange(12) - 5).reshape(3, 4).to(dtype)
    loaded = _roundtrip(cpu.to("neuron:1"))
    assert loaded.device == torch.device("neuron:1") and loaded.dtype == dtype
    assert torch.equal(loaded.cpu(), cpu)


def test_views_keep_sharing_their_storage():
    base = torch.arange(12.0, device="neuron").reshape(3, 4)
    loaded = _roundtrip({"base": base, "column": base[:, 1], "t": base.t()})
    assert loaded["column"].stride() == (4,) and loaded["t"].stride() == (1, 4)
    assert loaded["column"].untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    loaded["base"][0, 1] = 100.0  # the views still alias the base on the device
    assert loaded["column"][0].item() == 100.0 and loaded["t"][1, 0].item() == 100.0


@pytest.mark.parametrize("map_location, device", [
    ("neuron", "neuron:0"), ("neuron:1", "neuron:1"), (torch.device("neuron", 1), "neuron:1"),
    ({"neuron:0": "neuron:1"}, "neuron:1"), ("cpu", "cpu"),
])
def test_map_location(map_location, device):
    state = _model().to("neuron:0").state_dict()
    loaded = _roundtrip(state, map_location=map_location)
    for name, value in state.items():
        assert loaded[name].device == torch.device(device), name
        assert torch.equal(loaded[name].cpu(), value.cpu())


def test_cpu_checkpoint_loads_onto_neuron_and_into_a_model(tmp_path):
    path = tmp_path / "cpu.pt"
    reference = _model()
    torch.save({"model": reference.state_dict(), "step": 7}, path)
    checkpoint = torch.load(path, map_location="neuron")
    assert checkpoint["step"] == 7
    assert all(v.device == torch.device("neuron:0") for v in checkpoint["model"].values())
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3)).to("neuron")
    model.load_state_dict(checkpoint["model"])
    x = torch.randn(5, 4)
    torch.testing.assert_close(model(x.to("neuron")).cpu(), reference(x), rtol=1e-5, atol=1e-5)


def test_mmap_load_onto_neuron(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"w": torch.arange(6.0)}, path)
    loaded = torch.load(path, map_location="neuron:1", mmap=True)
    assert loaded["w"].device == torch.device("neuron:1") and loaded["w"].sum().item() == 15.0


def test_training_checkpoint_resumes_on_device(tmp_path):
    """Model, optimizer state (neuron tensors inside) and RNG state survive a save/load."""
    model = _model().to("neuron")
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.randn(2, 4, device="neuron")).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.neuron.get_rng_state()}, path)
    ckpt = torch.load(path)  # no map_location: back onto neuron:0, weights_only (the default) is enough
    exp_avg = next(iter(ckpt["opt"]["state"].values()))["exp_avg"]
    assert exp_avg.device == torch.device("neuron:0")
    restored = _model().to("neuron")
    restored.load_state_dict(ckpt["model"])
    restored_opt = torch.optim.Adam(restored.parameters(), lr=1e-2)
    restored_opt.load_state_dict(ckpt["opt"])
    torch.neuron.set_rng_state(ckpt["rng"])
    first = torch.rand(3, device="neuron").cpu()
    torch.neuron.set_rng_state(ckpt["rng"])
    assert torch.equal(torch.rand(3, device="neuron").cpu(), first)
    for a, b in zip(model.parameters(), restored.parameters()):
        assert torch.equal(a.detach().cpu(), b.detach().cpu())


def test_legacy_format_roundtrip():
    buffer = io.BytesIO()
    torch.save(torch.arange(3.0, device="neuron:1"), buffer, _use_new_zipfile_serialization=False)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert loaded.device == torch.device("neuron:1") and loaded.tolist() == [0.0, 1.0, 2.0]


def test_save_sees_adaptive_eager_results():
    with torch.neuron.eager_mode("adaptive"):
        y = torch.arange(4.0, device="neuron") * 2 + 1
        assert eager.pending() > 0  # y is still queued
        loaded = _roundtrip(y, map_location="cpu")
    assert loaded.tolist() == [1.0, 3.0, 5.0, 7.0]


def test_missing_core_names_the_fix(tmp_path):
    """A checkpoint from neuron:1 in a process that sees one core: PyTorch's error, then map_location works."""
    path = tmp_path / "core1.pt"
    torch.save(torch.arange(3.0, device="neuron:1"), path)
    code = (
        "import torch\n"
        f"try:\n    torch.load({str(path)!r})\n"
        "except RuntimeError as e:\n    print('ERROR', e)\n"
        f"print('MAPPED', torch.load({str(path)!r}, map_location='neuron').device)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    env.update(NEURON_RT_VISIBLE_CORES="0", PYTHONWARNINGS="ignore")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ERROR Attempting to deserialize object on NEURON device 1 but torch.neuron.device_count() is 1" in out.stdout
    assert "map_location" in out.stdout
    assert "MAPPED neuron:0" in out.stdout
