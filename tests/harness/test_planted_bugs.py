"""The harness finds planted bugs (issue 4, acceptance 2).

Each test plants one deliberately wrong neuron kernel (tests/harness/planted.py) and runs a case
through the opsuite's own path (``harness.pytest_plugin.check_case``: the runner, the op spec from
harness.specs, the comparator, the xfail list, the store). The case must pass with the real kernel,
so what fails is the bug, and fail with the bug planted, with a reproducer, stored. The cases are
fixed, not drawn, so each test is deterministic; ``test_opsuite_search_finds`` shows a Hypothesis
search of the spec (what ``pytest opsuite`` runs) finds a planted bug on its own.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from harness.cases import Case
from harness import runner
from harness.compare import failure_kind
from harness.pytest_plugin import Session, check_case, check_spec
from harness.specs import SPECS
from harness.store import Store
from harness.values import TensorSpec as T
from harness.xfails import XFails
from device_impl.dispatch import TABLE
from planted import PLANTS, plant
from planted import size1_strides as planted_size1

F32, BF16 = "float32", "bfloat16"

# One fixed case per planted bug, each aimed at it: what the bug needs (a 129-element tile, a
# broadcast operand, NaN inputs, signed zeros, an expanded input...) and nothing else.
CASES: dict[str, Case] = {
    "tile_edge": Case("exp", F32, (T((129,), F32, "contiguous", "normal", 11),)),
    "broadcast": Case("add", F32, (T((4, 5), F32, "contiguous", "normal", 1), T((4, 1), F32, "contiguous", "normal", 2))),
    "nan_dropped": Case("relu", F32, (T((8, 16), F32, "contiguous", "special", 3),)),
    "promotion": Case("floor_divide", "int32", (T((4, 5), "int32", "contiguous", "small_int", 4),
                                                T((4, 5), F32, "contiguous", "positive", 5))),
    "zero_sign": Case("neg", F32, (T((16,), F32, "contiguous", "signed_zero", 6),)),
    "inplace": Case("zero_", F32, (T((3, 5), F32, "contiguous", "normal", 7),)),
    "error_class": Case("index_select", F32, (T((5, 3), F32, "contiguous", "normal", 8),
                                              T((4,), "int64", "contiguous", "index:20+", 9)), {"dim": 0}),
    "gradient": Case("sigmoid", F32, (T((6, 7), F32, "contiguous", "normal", 10, True),)),
    "stride0": Case("sin", F32, (T((6, 9), F32, "expanded", "normal", 12),)),
    "bf16_rounding": Case("mul", BF16, (T((64,), BF16, "contiguous", "normal", 13),
                                        T((64,), BF16, "contiguous", "normal", 14))),
    "host_result": Case("nonzero", F32, (T((5, 6), F32, "contiguous", "signed_zero", 15),)),
    "keepdim": Case("logsumexp", F32, (T((4, 6), F32, "contiguous", "normal", 16),), {"dim": 1}),
    "layout": Case("relu", F32, (T((6, 9), F32, "transposed", "normal", 17),)),
}

# What the harness must report for each (harness.compare.failure_kind of the failure message).
KINDS = {
    "tile_edge": "output: values", "broadcast": "output: nan", "nan_dropped": "output: nan",
    "promotion": "output: dtype", "zero_sign": "output: zero sign", "inplace": "output: values",
    "error_class": "error parity", "gradient": "gradient: values", "stride0": "output: values",
    "bf16_rounding": "output: ulp", "host_result": "output: device", "keepdim": "output: shape",
    "layout": "output: strides",
}


@pytest.fixture(autouse=True)
def strides_checked(monkeypatch):
    """The layout check on (``--check-strides on``; off by default until every mode's run is clean), so the
    "layout" plant is judged as the other plants, and every clean case must have CPU's strides too."""
    monkeypatch.setattr(runner, "STRIDES", True)


@pytest.fixture
def session(tmp_path) -> Session:
    store = Store(tmp_path / "results.sqlite")
    run_id = store.start_run("planted", {"torch": "test"})
    yield Session(store, run_id, XFails(), "neuron")
    store.close()


def test_every_plant_has_a_case():
    assert len(PLANTS) >= 10
    assert set(CASES) == set(PLANTS) == set(KINDS)


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_harness_catches_planted_bug(name, session):
    case, entry = CASES[name], PLANTS[name]
    real = TABLE.kernel(entry.op)
    clean = check_case(session, case, "clean")  # the real kernel passes this very case
    assert clean.verdict == "pass", clean.message

    with plant(name):
        with pytest.raises(pytest.fail.Exception) as failed:
            check_case(session, case, "planted")
    assert TABLE.kernel(entry.op) is real, "the planted kernel must be removed after the block"

    stored = session.record("planted", "planted")
    assert len(stored) == 1
    result = stored[0]
    assert result.verdict == "fail"
    assert entry.op in result.device_ops, f"the case never reached the planted kernel {entry.op}"
    assert failure_kind(result.message) == KINDS[name], result.message
    report = str(failed.value)
    assert result.message in report and "--- reproducer ---" in report
    assert result.reproducer and result.reproducer in report
    compile(result.reproducer, "reproducer", "exec")  # a runnable script, not a summary
    row = session.store.query("SELECT verdict, message, reproducer, case_json FROM results WHERE run_id = ? "
                              "AND verdict = 'fail'", (session.run_id,))
    assert [(r["verdict"], r["message"], r["reproducer"]) for r in row] == [("fail", result.message,
                                                                             result.reproducer)]
    assert Case.from_json(row[0]["case_json"]) == case

    again = check_case(session, case, "restored")  # and nothing stays poisoned
    assert again.verdict == "pass", again.message


def test_inplace_plant_is_seen_as_an_unmodified_input(session):
    """PyTorch's autograd kernel of an in-place op returns ``self`` whatever the backend returned, so
    a kernel that writes a new tensor shows as ``self`` never changing: output and input both wrong."""
    with plant("inplace"), pytest.raises(pytest.fail.Exception):
        check_case(session, CASES["inplace"], "planted")
    result = session.record("planted", "planted")[0]
    assert "input x0 after the call" in result.message


def test_ulp_criterion_is_what_catches_truncation(session, monkeypatch):
    """The dtype tolerance alone (bfloat16 rtol 1.6e-2) admits truncation's one-ULP errors; the
    spec's max_ulp bound for a correctly rounded op is what catches it."""
    monkeypatch.setitem(SPECS, "mul", dataclasses.replace(SPECS["mul"], max_ulp={}))
    with plant("bf16_rounding"):
        assert check_case(session, CASES["bf16_rounding"], "no-ulp").verdict == "pass"


def test_only_significant_strides_are_compared(session):
    """A result whose strides differ from CPU's only in size-1 dims has CPU's layout (nothing addresses a second
    element there), so the layout check accepts it; the same kernel's contiguous result of a transposed operand
    (the "layout" plant) it does not."""
    case = Case("relu", F32, (T((6, 1, 9), F32, "contiguous", "normal", 18),))
    real = TABLE.kernel("aten::relu")
    with TABLE.overridden("aten::relu", lambda *a, **k: planted_size1(real(*a, **k))):
        result = check_case(session, case, "size-1 strides")
    assert result.verdict == "pass", result.message
    assert "aten::relu" in result.device_ops


def test_plant_is_removed_when_the_block_raises():
    entry = PLANTS["zero_sign"]
    real = TABLE.kernel(entry.op)
    with pytest.raises(KeyError):
        with plant("zero_sign"):
            assert TABLE.kernel(entry.op) is not real
            raise KeyError("inside")
    assert TABLE.kernel(entry.op) is real


def test_override_refuses_an_op_without_a_python_kernel():
    with pytest.raises(KeyError, match="no Python kernel"):
        with TABLE.overridden("aten::copy_", lambda *a, **k: None):  # a C++ core kernel
            pass


def test_opsuite_search_finds(session):
    """The opsuite's Hypothesis test body (``check_spec`` drawing from the spec) finds the planted
    broadcast bug by itself, shrinks it, and reports it with a reproducer; the same draws pass
    without the plant."""
    spec = SPECS["add"]

    @settings(max_examples=30, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink])
    @given(data=st.data())
    def opsuite_add(data):
        check_spec(session, spec, "eager", data, "search")

    with plant("broadcast"):
        with pytest.raises(pytest.fail.Exception) as failed:
            opsuite_add()
    assert "--- reproducer ---" in str(failed.value)
    found = session.record("search", "pointwise")
    failure = [r for r in found if r.verdict == "fail"]
    assert len(failure) == 1 and failure_kind(failure[0].message) == "output: nan"
    shapes = [tuple(t.shape) for t in failure[0].case.tensors]
    assert shapes[0] != shapes[1], f"the shrunk failure must still broadcast: {shapes}"
    assert json.loads(session.store.query("SELECT overloads FROM results WHERE verdict = 'fail'")[0][0])

    opsuite_add()  # the same derandomized draws, real kernel: no failure
