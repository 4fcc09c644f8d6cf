"""Mutants (harness.mutate): planted over the device's kernel through torch.library and removed
again; caught by the op suite's cases that trigger them; excluded only by rule."""

from __future__ import annotations

import pytest
import torch

from harness import design, mutate
from harness.specs import SPECS


def _cases(*names):
    out = []
    for name in names:
        for d in design.cases(name):
            out.append(mutate.StoredCase(d.case, {"aten::mul.out", "aten::exp.out", "aten::neg.out"},
                                         d.cell.to_dict(), d.id))
    return out


def _facts(op, specs):
    ov = mutate.overload(op)
    return mutate.OpFacts(op, ov._schema, tuple(str(t).split(".")[-1] for t in ov.tags), specs)


def test_a_planted_mutant_replaces_the_kernel_and_is_removed():
    x = torch.tensor([1.0, float("nan"), -2.0], device="neuron")
    mc = mutate.CLASSES["nan_inf"]
    mutant = mc.make("aten::mul.out", "nan_inf", _facts("aten::mul.out", ("mul",)))
    with mutate.Planted(mutant):
        planted = torch.mul(x, x).cpu()
    assert planted.tolist() == [1.0, 0.0, 4.0] and mutant.triggered
    assert torch.isnan(torch.mul(x, x).cpu()[1]), "the device's own kernel must be back"


def test_the_designed_cases_catch_what_chance_missed():
    """The issue's misses: mul turning NaN into 0, neg losing the sign of zero."""
    cases = _cases("mul", "neg")
    for op, cls, spec in (("aten::mul.out", "nan_inf", "mul"), ("aten::neg.out", "zero_sign", "neg"),
                          ("aten::mul.out", "layout", "mul"), ("aten::mul.out", "tile_edge", "mul")):
        outcome = mutate.run_mutant(op, mutate.CLASSES[cls], _facts(op, (spec,)), cases, "eager")
        assert outcome.status == "caught", (op, cls, outcome.reason)
        assert outcome.killer.startswith(spec + "-")


def test_rules_exclude_what_cannot_be_caught():
    f = _facts("aten::mul.out", ("mul",))
    assert mutate.CLASSES["index_bounds"].rule(f) == "no index argument in its signature"
    assert mutate.CLASSES["inplace"].rule(f) is not None and mutate.CLASSES["out"].rule(f) is None
    ints = _facts("aten::bitwise_and.Tensor_out", ("bitwise_and",))
    assert "no NaN-able dtype" in mutate.CLASSES["nan_inf"].rule(ints)
    rand = _facts("aten::uniform_", ("rand",))
    assert "random op" in mutate.CLASSES["tile_edge"].rule(rand)


def test_an_equivalent_mutant_is_excluded_not_counted():
    """exp maps -0.0 and +0.0 to 1 and never returns -0.0: losing the sign of zero changes nothing."""
    cases = [c for c in _cases("exp") if c.cell["domain"] in ("signed_zero", "special")]
    outcome = mutate.run_mutant("aten::exp.out", mutate.CLASSES["zero_sign"], _facts("aten::exp.out", ("exp",)),
                                cases, "eager")
    assert outcome.status == "excluded" and "equivalent" in outcome.reason


def test_the_table_comes_from_the_device_surface_not_device_impl():
    ops = mutate.table("neuron")
    assert "aten::mul.out" in ops and all(torch._C._dispatch_has_kernel_for_dispatch_key(o, "PrivateUse1") for o in ops)
    assert "aten::mul.Tensor" not in ops  # served through PyTorch's composite kernel: no kernel of its own
