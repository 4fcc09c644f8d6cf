"""Meta tests of harness.contract and harness.modules: an exception class PyTorch does not raise is a
failure by itself (planted device kernels raising numpy's AxisError, ZeroDivisionError, a TypeError),
and the contract checks pass where the device keeps the contract and fail where it does not."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.testing._internal.opinfo.core import ErrorInput, SampleInput

from device_impl.dispatch import TABLE
from harness import contract, modules, opinfo


def op_named(name: str, variant: str = ""):
    return next(o for o in opinfo.op_db() if o.name == name and o.variant_test_name == variant)


def _axis_error(*args, **kwargs):
    return np.sum(np.zeros((2, 2)), axis=5)  # numpy raises numpy.exceptions.AxisError (an IndexError)


def _zero_division(*args, **kwargs):
    return 1 // 0


def _in_device_package(source: str, name: str):
    """A function compiled as if it were a file of the device's package (nothing is written there), so its
    frames in a traceback are the device's own Python."""
    import os

    namespace: dict = {}
    exec(compile(source, os.path.join(contract.device_package_dir("neuron"), "planted_kernel.py"), "exec"), namespace)
    return namespace[name]


# a Python TypeError from the device's own code
_type_error = _in_device_package("def kernel(*args, **kwargs):\n    return int(object())\n", "kernel")


OUT_OF_RANGE = ErrorInput(SampleInput(torch.randn(5, 3), args=(0, torch.tensor([9]))), error_type=IndexError,
                          error_regex="out of range")
INDEX_SELECT = SimpleNamespace(op=torch.index_select)


def test_the_real_kernel_keeps_error_class_and_message():
    result = contract.check_error_input(INDEX_SELECT, OUT_OF_RANGE, "neuron")
    assert result.ok and result.criterion == "error class and message", result


@pytest.mark.parametrize("planted,named", [(_axis_error, "AxisError"), (_zero_division, "ZeroDivisionError")])
def test_a_non_pytorch_exception_class_fails_the_error_input(planted, named):
    """AxisError derives from IndexError, the class CPU raises here: class parity alone would pass it."""
    with TABLE.overridden("aten::index_select", planted):
        result = contract.check_error_input(INDEX_SELECT, OUT_OF_RANGE, "neuron")
    assert not result.ok and result.criterion == "exception class", result
    assert named in result.message


def test_a_non_pytorch_exception_fails_every_check_and_reaches_the_store_as_fail(tmp_path):
    op = op_named("index_select")
    with TABLE.overridden("aten::index_select", _zero_division):
        results = contract.run_check(op, "variants", [torch.float32], "neuron", max_samples=1)
    assert results and all(r.verdict == "fail" for r in results), [(r.verdict, r.message) for r in results]
    assert "non-PyTorch exception class ZeroDivisionError" in results[0].message
    from harness.store import Store

    store = Store(tmp_path / "r.sqlite")
    run = store.start_run("opsuite", {})
    store.add(run, results[0], "contract")
    store.commit()
    row = store.query("SELECT source, check_name, verdict FROM results")[0]
    assert (row["source"], row["check_name"], row["verdict"]) == ("contract", "variants", "fail")


def test_a_type_error_from_inside_the_device_is_foreign_unless_cpu_raises_it_too():
    with TABLE.overridden("aten::index_select", _type_error):
        try:
            torch.index_select(torch.randn(3, device="neuron"), 0, torch.tensor([0], device="neuron"))
        except TypeError as e:
            error = e
    assert contract.foreign_exception(error, "neuron") is not None
    assert "device's Python" in contract.foreign_exception(error, "neuron")
    assert contract.foreign_exception(error, "neuron", cpu_error=TypeError("same class on CPU")) is None
    assert contract.foreign_exception(RuntimeError("x"), "neuron") is None


def test_modules_report_a_non_pytorch_exception_in_the_forward():
    info = next(i for i in modules.module_db() if i.name == "nn.ReLU")
    assert all(r.verdict == "pass" for r in modules.run_check(info, "train", [torch.float32], "neuron", 1))
    with TABLE.overridden("aten::relu", _axis_error):
        results = modules.run_check(info, "train", [torch.float32], "neuron", 1)
    assert results and results[0].verdict == "fail" and "AxisError" in results[0].message, results[0].message


def test_out_device_check_fails_a_device_that_writes_a_cpu_out():
    """A planted out= kernel that ignores where out lives: the check must see the missing RuntimeError."""
    op = op_named("index_select")
    sample = next(iter(op.sample_inputs("cpu", torch.float32)))

    def writes_anywhere(self, dim, index, *, out=None):
        if out is None:
            return torch.index_select(self, dim, index)
        out.copy_(torch.index_select(self.cpu(), dim, index.cpu()))
        return out

    assert contract.check_out_values(op, sample, "neuron").ok
    result = contract.check_out_device(SimpleNamespace(op=writes_anywhere, name="planted"), sample, "neuron")
    assert not result.ok and "did not raise" in result.message


def test_inplace_rules_see_self_broadcast_and_view_write_through():
    op = op_named("add")
    sample = SampleInput(torch.randn(4, 3), args=(torch.randn(4, 3),))
    assert contract.check_inplace_rules(op, sample, "neuron").ok

    def resizes_self(self, other):  # on the device, an in-place op that broadcasts self instead of refusing
        if self.device.type == "cpu":
            return self.add_(other)
        self.resize_(torch.broadcast_shapes(self.shape, other.shape)).copy_(self.new_zeros(()) + other)
        return self

    planted = SimpleNamespace(get_inplace=lambda: resizes_self)
    result = contract.check_inplace_rules(planted, sample, "neuron")
    assert not result.ok and "self's shape went from [4, 1]" in result.message, result.message
