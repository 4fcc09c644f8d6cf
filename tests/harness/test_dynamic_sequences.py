"""Meta tests of harness.dynamic: sequences of three sizes under torch.compile's default dynamic=None, the path
Dynamo took, and that a backend which mishandles the symbolic graph is caught."""

from __future__ import annotations

import ast
from typing import Any

import pytest
import torch

from harness import dynamic
from harness.cases import Case
from harness.specs import SPECS
from harness.values import TensorSpec as T
from harness.xfails import XFails


def _case(*shapes: tuple[int, ...]) -> Case:
    return Case("add", "float32", tuple(T(s, "float32") for s in shapes), {"s": None}, source=dynamic.SOURCE)


@pytest.mark.parametrize("shapes,fits", [
    ([[(2, 6)], [(2, 11)], [(2, 130)]], True),
    ([[(2, 6)], [(2, 6)], [(2, 130)]], False),  # call 2 repeats call 1: no recompile
    ([[(2, 6)], [(3, 6)], [(3, 11)]], False),  # dim 1 changes only at call 3: Dynamo would recompile there
    ([[(2, 6)], [(2, 1)], [(2, 11)]], False),  # a changing dim at 1: specialized by Dynamo
    ([[(6,), (6,)], [(11,), (11,)], [(13,), (17,)]], False),  # equal at call 2, not at 3: one duck-sized symbol
    ([[(6,), (7,)], [(11,), (11,)], [(13,), (13,)]], True),
    ([[(6,), (0,)], [(11,), (0,)], [(13,), (0,)]], False),  # an empty tensor: every call's result is empty
])
def test_a_sequence_takes_the_automatic_dynamic_path_only_where_dynamo_would(shapes, fits):
    assert dynamic._varying_dims_fit([_case(*call) for call in shapes]) is fits


@pytest.mark.parametrize("name,how", [("sin", "free axis"), ("mm", "seed search")])
def test_sequence_is_one_call_at_three_sizes(name, how):
    spec = SPECS[name]
    seq = dynamic.sequence(spec, "float32")
    assert not isinstance(seq, str), seq
    assert seq.how == how and len(seq.cases) == 3
    assert len({dynamic._signature(spec, c) for c in seq.cases}) == 1
    assert len({tuple(c.shapes) for c in seq.cases}) == 3
    assert seq == dynamic.sequence(spec, "float32")  # deterministic: the same draws every run


def test_a_transposed_sequence_makes_its_tensors_transposed_or_says_why_not():
    seq = dynamic.sequence(SPECS["sin"], "float32", layout="transposed")
    assert seq.layout == "transposed" and all(c.tensors[0].layout == "transposed" for c in seq.cases)
    # view_as_complex takes contiguous inputs only (its last dim must have stride 1)
    assert "no tensor takes the transposed layout" in dynamic.sequence(SPECS["view_as_complex"], "float32",
                                                                       layout="transposed")


def test_a_call_without_tensors_has_no_sequence():
    assert "no tensor inputs" in dynamic.sequence(SPECS["full"], "float32")


def test_each_call_matches_cpu_and_dynamo_reuses_the_symbolic_graph():
    results = dynamic.run_sequence(dynamic.sequence(SPECS["sin"], "float32"))
    assert [r.verdict for r in results] == ["pass"] * 3, [r.message for r in results]
    assert all(r.check == dynamic.CHECK and r.case.source == dynamic.SOURCE for r in results)
    assert dynamic._SYMBOLIC_PATH in results[0].message
    assert {"aten::sin", "aten::sin_backward"} & set(results[2].called)


def test_a_second_function_of_the_same_expression_starts_static_again():
    """Dynamo's automatic-dynamic state is per code location: each sequence's function has its own."""
    seq = dynamic.sequence(SPECS["add_out"], "float32")  # a graph break: its continuation is cached by code too
    for _ in range(2):
        results = dynamic.run_sequence(seq)
        assert [r.verdict for r in results] == ["pass"] * 3, [r.message for r in results]


def _stale_backend(inner):
    """A planted backend bug: a graph with symbolic sizes runs once, and every later call of it returns that
    first result (as a backend that specialized the symbolic graph at its first size and ignored the next)."""
    def backend(gm, example_inputs, **kwargs: Any):
        run = inner(gm, example_inputs, **kwargs)
        if not any(dynamic._symbolic(x) for x in example_inputs):
            return run
        first: list[Any] = []

        def stale(*args):
            if not first:
                first.append(run(*args))
            return first[0]
        return stale
    return backend


def test_a_backend_that_ignores_the_second_size_of_its_symbolic_graph_is_caught(monkeypatch):
    original = dynamic._Spy.__init__

    def planted(self, backend: str) -> None:
        original(self, backend)
        self.inner = _stale_backend(self.inner)

    monkeypatch.setattr(dynamic._Spy, "__init__", planted)
    results = dynamic.run_sequence(dynamic.sequence(SPECS["sin"], "float32"))
    assert [r.verdict for r in results] == ["pass", "pass", "fail"], [r.message for r in results]
    assert "call 3 of 3" in results[2].message
    tree = ast.parse(results[2].reproducer)  # the reproducer replays the earlier calls first
    assert {"earlier_inputs_0", "earlier_inputs_1"} <= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "MODE = 'dynamic'" in results[2].reproducer


def test_when_dynamo_takes_another_path_the_calls_are_judged_and_the_sequence_skipped():
    """group_norm: Dynamo specializes the channel count (a guard on num_groups), so call 2 compiles static."""
    seq = dynamic.sequence(SPECS["group_norm"], "float32")
    assert not isinstance(seq, str), seq
    results = dynamic.run_sequence(seq)
    assert [r.verdict for r in results] == ["skip"] * 3, [r.message for r in results]
    assert "static sizes only" in results[0].message


def test_dynamic_entries_and_the_specs_compiled_entries_apply():
    xfails = XFails.parse('''
[[xfail]]
op = "sin"
source = "dynamic"
category = "upstream"
reason = "planted"
message = "call 1"
''')
    case = dynamic.sequence(SPECS["sin"], "float32").cases[0]
    assert dynamic._xfail(xfails, case, True, "call 1 of 3").reason == "planted"
    compiled = XFails.parse('[[xfail]]\nop = "sin"\nmode = "compiled"\ncategory = "numerics"\nreason = "spec"\n')
    assert dynamic._xfail(compiled, case, True, "anything").reason == "spec"


def test_the_default_run_samples_and_the_compiled_mode_runs_every_spec():
    every = dynamic.specs_for("compiled")
    sample = dynamic.specs_for("eager")
    assert len(every) == len(SPECS) and 0 < len(sample) < len(every) / 3
    assert {s.name for s in sample} >= set(dynamic.ALWAYS)
    assert dynamic.specs_for("adaptive") == []
    assert dynamic.variants_for(SPECS["sin"], "compiled") == [("float32", "contiguous"), ("float32", "transposed")]
    assert dynamic.variants_for(SPECS["sin"], "eager") == [("float32", "contiguous")]


def test_symbolic_inputs_are_recognised():
    assert not dynamic._symbolic(torch.zeros(2, 3))
    assert not dynamic._symbolic(3)
