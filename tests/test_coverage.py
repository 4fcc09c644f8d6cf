"""Coverage introspection: the core opset's tiers, and the guard that keeps native kernels off the host."""

import json

import pytest
import torch

from support import run_python
from device_impl import coverage, dispatch
from device_impl.dispatch.table import HostComputeError, _no_cpu_mode


def test_core_opset_is_enumerated_from_torch_tags():
    ops = coverage.core_overloads()
    assert len(ops) == len(set(ops)) > 150
    assert {"aten::add.Tensor", "aten::mm", "aten::convolution", "aten::_softmax"} <= set(ops)
    for op in ops[:20]:
        packet, _, overload = op[6:].partition(".")
        assert torch.Tag.core in getattr(getattr(torch.ops.aten, packet), overload or "default").tags


def test_json_report_classifies_every_core_overload():
    result = run_python("from device_impl.coverage import main; main(['--json'])")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["core_overloads"] == len(report["core"])
    assert set(e["tier"] for e in report["core"].values()) <= {"native", "fallback", "composite", "error"}
    assert report["core"]["aten::add.Tensor"]["tier"] == "native"
    assert report["core"]["aten::add.Tensor"]["source"] == "device_impl.kernels.elementwise.binary (via aten::add.out)"
    assert report["core"]["aten::sym_size.int"]["tier"] == "native"  # answered by TensorImpl metadata


def test_family_kernels_name_their_op_group_module_not_the_registry():
    from device_impl.dispatch import TABLE

    assert TABLE.lookup("aten::mm.out").source == "device_impl.kernels.matmul"
    assert TABLE.lookup("aten::fill_.Scalar").source == "device_impl.kernels.copy"
    assert TABLE.lookup("aten::isin.Tensor_Tensor_out").source == "device_impl.kernels.membership"
    assert not [e.op for e in TABLE.entries() if e.source == "device_impl.kernels.registry"]


def test_seen_overloads_are_reported_with_call_counts():
    dispatch.reset_stats()
    x = torch.randn(4, device="neuron")
    torch.exp(x)
    torch.lgamma(x)
    seen = coverage.report(include_seen=True)["seen"]
    assert seen["aten::exp.out"]["tier"] == "native" and seen["aten::exp.out"]["calls"]["native"] == 1
    assert seen["aten::lgamma.out"]["tier"] == "fallback"


def test_the_host_compute_guard_catches_a_kernel_that_uses_cpu_torch():
    with pytest.raises(HostComputeError, match="bad_kernel called aten.mul"):
        with _no_cpu_mode("bad_kernel"):
            torch.ones(3) * 2
    with _no_cpu_mode("good_kernel"):  # device metadata and allocation are fine
        torch.empty(3, device="neuron").view(3, 1)


def test_native_kernels_run_under_the_guard_in_tests():
    from device_impl.dispatch import table

    assert table.ASSERT_NO_CPU, "tests/conftest.py sets NEURONSIM_ASSERT_NO_CPU=1"
