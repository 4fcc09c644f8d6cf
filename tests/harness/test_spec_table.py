"""Meta tests of the op spec table (harness.specs) and of harness.coverage, which says which overloads of
the device's lowering table the specs' cases reach (opsuite/test_table_coverage.py enforces it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from device_impl.dispatch import TABLE, Tier
from harness import coverage
from harness.pytest_plugin import Session, table_coverage
from harness.runner import Result, draw_case
from harness.cases import Case
from harness.specs import FAMILIES, SPECS
from harness.xfails import XFails

OPSUITE = Path(__file__).resolve().parents[2] / "opsuite"


def test_every_family_has_an_opsuite_file():
    for family in FAMILIES:
        assert (OPSUITE / f"test_{family}.py").exists(), family
    assert (OPSUITE / "test_opinfo.py").exists()


def test_every_criterion_override_says_why():
    for spec in SPECS.values():
        overridden = spec.tolerance or spec.ignore_zero_sign or spec.overflow_equal or spec.max_ulp
        assert not overridden or spec.tolerance_reason, f"{spec.name}: an override needs its reason"
        assert set(spec.tolerance) | set(spec.ignore_zero_sign) | set(spec.max_ulp) <= set(spec.dtypes) | \
            {"bfloat16", "float16", "float32"}, spec.name


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_spec_draws_a_case_whose_call_compiles(name):
    spec = SPECS[name]
    cases = []

    @settings(max_examples=3, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data):
        cases.append(draw_case(data, spec))

    draw()
    for case in cases:
        assert case.dtype in spec.dtypes
        expression = spec.render(case.params, [f"x{i}" for i in range(len(case.tensors))])
        compile(expression, name, "eval")
        assert Case.from_json(case.to_json()) == case


def test_core_overloads_are_torchs():
    core = coverage.core_overloads()
    assert len(core) >= 189 and "aten::add.Tensor" in core and "aten::convolution" in core


def test_table_ops_are_the_devices_table():
    table = coverage.table_ops("neuron")
    assert set(TABLE.ops(Tier.NATIVE)) <= set(table)
    for op in coverage.core_overloads():
        tier = TABLE.lookup(op).tier
        assert (op in table) == (tier in (Tier.NATIVE, Tier.DECOMPOSED)), op
    assert table["aten::add.Tensor"] == "native"  # served through add.out
    assert coverage.table_ops("cpu") == {}  # a device without a lowering table: nothing to cover


def test_coverage_counts_what_results_reached():
    table = {"aten::add.Tensor": "native", "aten::add.out": "native", "aten::mul.Tensor": "native"}
    results = [Result(Case("add", "float32", ()), "pass", called=["aten::add.Tensor"],
                      device_ops={"aten::add.out": {"native": 1}})]
    report = coverage.Coverage(table, coverage.reached(results), core=["aten::add.Tensor", "aten::mul.Tensor"])
    assert report.missing_core == ["aten::mul.Tensor"] and report.missing == ["aten::mul.Tensor"]
    assert report.line().startswith("device table coverage: 1 of 2 core overloads and 2 of 3 table overloads")


def test_table_coverage_is_judged_only_on_a_full_run(tmp_path):
    session = Session(None, 0, XFails(), "neuron")
    session.specs_run = set(list(SPECS)[:3])
    with pytest.raises(pytest.skip.Exception, match="did not run"):
        table_coverage(session)
    session.specs_run = set(SPECS)
    session.reached = set(coverage.core_overloads())
    assert table_coverage(session).missing_core == []
    session.reached.discard("aten::add.Tensor")
    assert table_coverage(session).missing_core == ["aten::add.Tensor"]


def test_index_put_without_accumulate_writes_each_row_once():
    """Which of two writes to one row lands is unspecified without accumulate (CPU's follows its thread count: the
    designed index_put-float32-signed_zero-contiguous-511 case, 6 indices into 3 rows, was 17 zero signs apart from
    CPU's under 4 threads), so index_put's draws name distinct rows there, designed and drawn alike; with
    accumulate, duplicates stay (their sum's order is a tolerance)."""
    from harness import design
    from harness.values import materialize

    spec = SPECS["index_put"]
    cases = [d.case for d in design.cases("index_put")]

    @settings(max_examples=40, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def draw(data):
        cases.append(draw_case(data, spec))

    draw()
    duplicates = 0
    for case in cases:
        x, index, _ = case.tensors
        if index.dtype != "int64" or not index.domain.startswith("index:"):
            continue  # the designed error inputs (out of range, float indices): CPU raises
        rows = (materialize(index, "cpu") % x.shape[0]).tolist()
        if not case.params["accumulate"]:
            assert len(set(rows)) == len(rows), (case, rows)
        duplicates += len(set(rows)) < len(rows)
    assert duplicates, "accumulate's cases still sum duplicate rows"
