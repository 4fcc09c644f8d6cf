"""Operator dependence (harness.port.operators): every op one forward executes, with its tier on the device, custom
ops by name, the CPU fallback and ops the device refuses; and graceful answers on a device module without counters."""

from __future__ import annotations

import types

import pytest
import torch

from harness.port import operators
from harness.port.device import NOT_AVAILABLE, DeviceProbe


@torch.library.custom_op("porttest::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
    """A custom op written in torch: the device runs the ops inside it."""
    return torch.nn.functional.gelu(x) * scale


@scaled_gelu.register_fake
def _(x, scale):
    return torch.empty_like(x)


_LIB = torch.library.Library("porttest", "FRAGMENT")
_LIB.define("devicefree(Tensor x) -> Tensor")
_LIB.impl("devicefree", lambda x: x * 2, "CPU")


def _refuse(x):
    raise NotImplementedError("porttest::devicefree has no kernel for this device")


_LIB.impl("devicefree", _refuse, "PrivateUse1")


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = scaled_gelu(self.linear(x), 0.5)
        counts = torch.histc(h, bins=4)  # no neuron kernel: the CPU fallback
        h = torch.ops.porttest.devicefree(h)  # the device refuses it even with the fallback
        return h + counts.sum()


@pytest.fixture(scope="module")
def report():
    model = Model().to("neuron")
    return operators.dependence(model, {"x": torch.randn(2, 8)}, "neuron")


def test_every_op_is_listed_with_its_count_and_tier(report):
    by_op = {e["op"]: e for e in report["ops"]}
    assert by_op["aten::addmm"]["tier"] == "native" and by_op["aten::addmm"]["count"] == 1
    assert by_op["aten::histc"]["tier"] == "fallback"
    assert report["fallback"] == ["aten::histc"]
    assert report["calls_per_forward"] == sum(e["count"] for e in report["ops"])
    assert sum(report["by_tier"].values()) == report["distinct_ops"] == len(report["ops"])


def test_custom_ops_are_named(report):
    assert report["custom"] == ["porttest::devicefree", "porttest::scaled_gelu"]
    by_op = {e["op"]: e for e in report["ops"]}
    # written in torch: PyTorch runs its body in ops the device serves (the op is listed once, as the model calls it)
    assert by_op["porttest::scaled_gelu"]["tier"] == "decomposed" and by_op["porttest::scaled_gelu"]["custom"]
    assert by_op["porttest::scaled_gelu"]["via"].startswith("composite")
    assert not by_op["aten::addmm"]["custom"]


def test_ops_the_device_refuses_are_unsupported_and_the_forward_continues(report):
    by_op = {e["op"]: e for e in report["ops"]}
    entry = by_op["porttest::devicefree"]
    assert entry["tier"] == "unsupported" and "has no kernel for this device" in entry["error"]
    assert report["unsupported"] == ["porttest::devicefree"]
    assert "aten::add.Tensor" in by_op  # the op after the refused one still ran


def test_a_model_bug_is_not_blamed_on_the_device():
    class Broken(torch.nn.Module):
        def forward(self, x):
            return x @ torch.ones(3, 3, device=x.device)  # wrong shape on every device

    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        operators.dependence(Broken(), {"x": torch.ones(2, 4)}, "neuron")


def test_a_device_without_counters_degrades_gracefully(monkeypatch):
    bare = types.SimpleNamespace(synchronize=lambda: None)  # a device module with none of the extras
    monkeypatch.setattr(torch, "neuron", bare, raising=True)
    probe = DeviceProbe("neuron")
    assert {"compiler_stats", "engine_stats", "lowering", "dispatch_stats", "Event"} <= set(probe.missing)
    assert probe.compiler_stats() is None and probe.engine_stats() is None
    with probe.timed() as t:
        pass
    assert t["ms"] is None
    monkeypatch.undo()
    model = torch.nn.Linear(4, 4)
    probe = DeviceProbe("cpu")  # torch.cpu has none of the device counters either
    result = operators.dependence(model, {"input": torch.ones(2, 4)}, "cpu", probe)
    assert {e["tier"] for e in result["ops"]} == {"unknown"}
    assert result["device_calls_by_tier"] == NOT_AVAILABLE and result["tiers_from"] == NOT_AVAILABLE
