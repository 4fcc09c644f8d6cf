"""Meta tests of harness.repro: the reproducer is a self-contained script that reruns the case's checks.
(tests/harness/test_reproducers.py runs stored reproducers of planted bugs in a fresh interpreter.)"""

from __future__ import annotations

import pytest

from harness import repro
from harness.cases import Case
from harness.runner import run_case
from harness.specs import SPECS
from harness.values import TensorSpec as T
from planted import plant

CASES = [
    Case("neg", "float32", (T((3, 4), "float32", "transposed", "special", 1),)),
    Case("add", "bfloat16", (T((2, 3), "bfloat16", "expanded", "signed_zero", 2), T((3,), "bfloat16", "offset"))),
    Case("sigmoid", "float32", (T((3, 2), "float32", "sliced", "normal", 3, True),)),
    Case("sum", "int32", (T((4, 5), "int32", "contiguous", "int_edges", 4),), {"dim": (0,), "keepdim": True}),
    Case("randn", "float32", (), {"shape": (3,), "dtype": "float32"}),
    Case("index_select", "float32", (T((5, 3), "float32"), T((2,), "int64", "contiguous", "index:40+", 1)),
         {"dim": 0}),
]


def run_reproducer(source: str) -> None:
    exec(compile(source, "reproducer", "exec"), {"__name__": "__main__"})  # noqa: S102


@pytest.mark.parametrize("case", CASES, ids=[c.spec for c in CASES])
def test_reproducer_of_a_passing_case_passes(case, capsys):
    result = run_case(case)
    assert result.verdict == "pass"
    source = repro.render(SPECS[case.spec], case, result.expression, result.comparison)
    assert "harness" not in "".join(line for line in source.splitlines() if line.startswith(("import", "from")))
    run_reproducer(source)
    assert "reproducer passed" in capsys.readouterr().out


def test_reproducer_rebuilds_layout_and_values():
    case = CASES[0]
    source = repro.render(SPECS["neg"], case, "torch.neg(x0)")
    namespace: dict = {}
    exec(compile(source.split("\ncpu_in = ")[0], "reproducer", "exec"), namespace)  # noqa: S102 - definitions only
    from harness.values import materialize
    import torch

    rebuilt, original = namespace["inputs"]("neuron")[0], materialize(case.tensors[0], "neuron")
    assert rebuilt.stride() == original.stride() and rebuilt.storage_offset() == original.storage_offset()
    assert torch.equal(rebuilt.cpu().nan_to_num(), original.cpu().nan_to_num())
    assert torch.equal(torch.isnan(rebuilt.cpu()), torch.isnan(original.cpu()))


def test_reproducer_records_the_spec_criteria():
    source = repro.render(SPECS["mul"], Case("mul", "bfloat16", ()), "torch.mul(x0, x1)")
    assert "MAX_ULP = 0" in source
    source = repro.render(SPECS["maximum"], Case("maximum", "float32", ()), "torch.maximum(x0, x1)")
    assert "ZERO_SIGN = False" in source
    case = Case("maximum", "float32", (T((4,), "float32", "contiguous", "signed_zero", 1),
                                       T((4,), "float32", "contiguous", "signed_zero", 2)))
    source = repro.render(SPECS["maximum"], case, "torch.maximum(x0, x1)")
    assert "return ~torch.as_tensor((x0 == 0) & (x1 == 0), dtype=torch.bool)" in source  # OpSpec.zero_ties
    source = repro.render(SPECS["exp"], Case("exp", "float32", ()), "torch.exp(x0)")
    assert "OVERFLOW_EQUAL = True" in source and "ZERO_SIGN = True" in source


def test_reproducer_fails_with_the_bug_in_this_process():
    case = Case("neg", "float32", (T((16,), "float32", "contiguous", "signed_zero", 6),))
    with plant("zero_sign"):
        result = run_case(case)
        assert result.verdict == "fail"
        with pytest.raises(AssertionError, match="wrong sign"):
            run_reproducer(result.reproducer)
