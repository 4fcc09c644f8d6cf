"""The layout check's second oracle: the case's call on meta tensors (harness.runner._MetaSide)."""

from __future__ import annotations

import torch

from harness import runner
from harness.cases import Case
from harness.specs import SPECS
from harness.values import TensorSpec


def _case(spec: str, tensors: list[TensorSpec], dtype: str = "float32") -> Case:
    return Case(spec, dtype, tuple(tensors), {}, "eager", "cpu")


def test_meta_side_lays_out_results_and_gradients_as_the_meta_kernels():
    """group_norm of a channels-last input: CPU's kernel keeps channels-last for the result and its gradient, the
    meta kernels (FakeTensor's answer) give a contiguous gradient; the meta side reports the latter."""
    spec = SPECS["group_norm"]
    tensors = [TensorSpec((1, 4, 3, 4), "float32", "channels_last", "normal", 3, True),
               TensorSpec((4,), "float32", "contiguous", "normal", 4, True),
               TensorSpec((4,), "float32", "contiguous", "normal", 5, True)]
    case = _case("group_norm", tensors)
    expression = spec.render({"groups": 2}, ["x0", "x1", "x2"])
    assert expression == "F.group_norm(x0, 2, x1, x2)"
    meta = runner._MetaSide(spec, case, expression, seed=7)
    out = meta.outputs()
    assert isinstance(out, torch.Tensor) and out.device.type == "meta" and tuple(out.shape) == (1, 4, 3, 4)
    grads = meta.gradients()
    assert grads is not None and grads[0].device.type == "meta"
    assert grads[0].is_contiguous()  # the meta backward's layout, where CPU's gradient is channels-last
    x = torch.randn(1, 3, 4, 4).permute(0, 3, 1, 2).requires_grad_()
    (g,) = torch.autograd.grad(torch.nn.functional.group_norm(x, 2), x, torch.ones(1, 4, 3, 4))
    assert not g.is_contiguous(), "CPU's gradient is channels-last: this case tells the two oracles apart"


def test_meta_side_is_none_where_the_call_does_not_run_on_meta():
    """A host read (``.item()``) has no meta answer: the check then has CPU's layout alone."""
    spec = SPECS["add"]
    case = _case("add", [TensorSpec((2, 3), "float32", "contiguous", "normal", 1, False)])
    meta = runner._MetaSide(spec, case, "x0 * x0.sum().item()", seed=1)
    assert meta.outputs() is None and meta.gradients() is None


def test_a_reproducer_accepts_the_meta_layout_as_the_runner_does(tmp_path, monkeypatch):
    """The reproducer script judges layouts as the runner: group_norm's channels-last gradient on the device is laid
    out as the meta kernels say (contiguous), not as CPU's kernel (channels-last); the runner passes the case with
    the check on, and so must its script, which fails if it knows CPU's layout alone (its ``meta_side`` removed)."""
    import subprocess
    import sys
    from pathlib import Path

    from harness import repro

    monkeypatch.setattr(runner, "STRIDES", True)
    spec = SPECS["group_norm"]
    tensors = (TensorSpec((1, 4, 3, 4), "float32", "channels_last", "normal", 3, True),
               TensorSpec((4,), "float32", "contiguous", "normal", 4, True),
               TensorSpec((4,), "float32", "contiguous", "normal", 5, True))
    case = Case("group_norm", "float32", tensors, {"groups": 2}, "eager", "neuron")
    result = runner.run_case(case)
    assert result.verdict == "pass", result.message
    script = repro.render(spec, case, spec.render(case.params, ["x0", "x1", "x2"]))
    assert "STRIDES = True" in script
    root = Path(__file__).resolve().parents[2]
    path = tmp_path / "repro.py"
    path.write_text(script)
    run = subprocess.run([sys.executable, str(path)], cwd=root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "reproducer passed" in run.stdout, run.stderr[-2000:]
    path.write_text(script.replace("alternative=meta_side()[0]", "alternative=None")
                    .replace('"gradient", meta_side()[1]', '"gradient", None'))
    run = subprocess.run([sys.executable, str(path)], cwd=root, capture_output=True, text=True, timeout=600)
    assert run.returncode != 0 and "gradient[0]: strides" in run.stderr, run.stdout[-500:] + run.stderr[-2000:]
