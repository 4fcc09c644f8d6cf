"""The compat diff (harness.compat.diff) on two small fixture result sets: newly failing and newly passing cases,
grouping by op and cause, environment regressions, API drift, and the exit status the nightly job relies on."""

from harness.compat import diff as d
from harness.compat.venvs import Target


def row(op, verdict, message="", mode="eager", dtypes='["float32"]', shapes="[[3]]", reproducer="", run_id=1):
    return {"source": "spec", "op": op, "mode": mode, "dtypes": dtypes, "shapes": shapes, "layouts": '["contiguous"]',
            "domains": '["normal"]', "expression": f"torch.{op}(x0)", "verdict": verdict, "message": message,
            "reproducer": reproducer, "run_id": run_id}


BASE = [row("add", "pass"), row("exp", "fail", "values differ at 3 positions"), row("sin", "pass"),
        row("cos", "xfail"), row("tan", "pass"), row("gone", "pass")]
NEW = [row("add", "fail", "values differ at 2 positions (max abs 0.5)", reproducer="import torch  # add"),
       row("exp", "pass"), row("sin", "pass"), row("cos", "xfail"),
       row("tan", "fail", "values differ at 7 positions (max abs 1.5)"),
       row("tan", "pass", shapes="[[5]]"), row("new_op", "fail", "boom"),
       row("cos", "fail", "boom", shapes="[[9]]")]


def test_newly_failing_and_newly_passing_cases():
    result = d.diff_results(BASE, NEW, "2.13.0", "2.14.1")
    # cos[9] was drawn only on 2.14.1 and fails where every cos case passed (xfail) on 2.13.0: newly failing;
    # new_op fails too, but 2.13.0 never ran it, so nothing says it broke
    assert sorted(c.op for c in result.newly_failing) == ["add", "cos", "tan"]
    assert next(c for c in result.newly_failing if c.op == "cos").before == d.NOT_DRAWN
    assert [c.op for c in result.newly_passing] == ["exp"]
    assert result.only_in_base == 1 and result.only_in_new == 3  # "gone"; tan[5], new_op and cos[9]
    assert result.counts["2.14.1"] == {"fail": 4, "pass": 3, "xfail": 1}
    add = next(c for c in result.newly_failing if c.op == "add")
    assert add.reproducer == "import torch  # add" and add.before == "pass" and add.after == "fail"
    assert result.regressed


def test_changes_group_by_op_and_normalised_cause():
    changes = [d.Change(("spec", "add", "eager", "f32"), "add", "pass", "fail", d.cause(m))
               for m in ("values differ at 2 positions", "values differ at 9 positions", "dtype float16 != float32")]
    groups = d.diff_results([], [], "a", "b").grouped(changes)
    assert list(groups) == ["add"]
    assert sorted(len(v) for v in groups["add"].values()) == [1, 2]


def test_a_case_fails_if_any_of_its_examples_fails():
    base = [row("mul", "pass"), row("mul", "pass")]
    new = [row("mul", "pass"), row("mul", "fail", "nan where CPU has 1.0")]
    assert [c.op for c in d.diff_results(base, new, "a", "b").newly_failing] == ["mul"]


def test_no_change_means_exit_zero():
    result = d.diff_results(BASE, BASE, "2.13.0", "2.13.0")
    d.diff_environment(result, {"install": "ok", "build": "ok", "import": "ok"},
                       {"install": "ok", "build": "ok", "import": "ok"})
    assert not result.newly_failing and not result.newly_passing and not result.regressed
    assert "no new failures" in d.summary_text(result)


def test_a_version_that_no_longer_builds_is_a_regression_not_test_failures():
    result = d.diff_results(BASE, [], "2.13.0", "2.14.1")
    d.diff_environment(result, {"install": "ok", "build": "ok", "import": "ok"},
                       {"install": "ok", "build": "the C++ core did not build: error: no member named 'X'"})
    assert result.newly_failing == [] and result.regressed
    assert result.newly_broken_steps == ["build: the C++ core did not build: error: no member named 'X'"]
    assert "NEWLY BROKEN build" in d.summary_text(result)


def test_api_drift_and_core_opset_changes():
    before = {"apis": {"torch.library.get_kernel": {"group": "dispatch", "why": "w", "value": "callable(op, key)"},
                       "torch._C._acc": {"group": "accelerator", "why": "w", "value": "module: a, b"}},
              "core_overloads": ["aten::add.Tensor", "aten::old"]}
    after = {"apis": {"torch.library.get_kernel": {"group": "dispatch", "why": "w", "value": "missing (AttributeError)"},
                      "torch._C._acc": {"group": "accelerator", "why": "w", "value": "module: a, b"}},
             "core_overloads": ["aten::add.Tensor", "aten::new"]}
    result = d.diff_results([], [], "a", "b")
    d.diff_apis(result, before, after)
    assert [c["api"] for c in result.api_changes] == ["torch.library.get_kernel"]
    assert result.core_overloads_added == ["aten::new"] and result.core_overloads_removed == ["aten::old"]
    payload = d.to_json(result)
    assert payload["api_changes"][0]["after"].startswith("missing")


def test_targets_parse_to_pip_arguments():
    assert Target.parse("2.14.1").pip_args == ("torch==2.14.1",)
    nightly = Target.parse("nightly")
    assert "--pre" in nightly.pip_args and nightly.pip_args[-1].startswith("https://download.pytorch.org/whl/nightly")
    try:
        Target.parse("not a version!")
    except ValueError as e:
        assert "--torch" in str(e)
    else:
        raise AssertionError("a bad --torch value must be refused")
