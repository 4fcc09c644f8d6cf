"""Meta tests of harness.store: one row per case, the environment with every run, old stores migrated."""

from __future__ import annotations

import json
import sqlite3

from harness import env
from harness.cases import Case
from harness.runner import Result, run_case
from harness.store import Store
from harness.values import TensorSpec


def test_run_records_the_environment(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    environment = env.environment("neuron")
    run_id = store.start_run("opsuite", environment, "quick")
    row = store.query("SELECT * FROM runs WHERE id = ?", (run_id,))[0]
    for key in ("torch", "torch_mlir", "python", "git_sha", "device"):
        assert row[key] == environment[key] and row[key], key
    assert row["torch"].startswith("2.") and row["torch_mlir"] != "not installed"
    assert len(row["git_sha"].split("+")[0]) == 40
    assert json.loads(row["environment"]) == environment
    assert row["finished"] is None
    store.finish_run(run_id)
    assert store.query("SELECT finished FROM runs WHERE id = ?", (run_id,))[0][0]
    store.close()


def test_one_row_per_case_with_what_the_case_was(tmp_path):
    store = Store(tmp_path / "r.sqlite")
    run_id = store.start_run("opsuite", {"torch": "x"})
    cases = [Case("neg", "float32", (TensorSpec((3, 4), "float32", "transposed", "signed_zero", 1),)),
             Case("add", "int32", (TensorSpec((5,), "int32", "contiguous", "small_int", 2),
                                   TensorSpec((1,), "int32", "contiguous", "small_int", 3)))]
    results = [run_case(case) for case in cases]
    for result in results:
        store.add(run_id, result, "pointwise")
    store.commit()
    rows = store.query("SELECT * FROM results WHERE run_id = ? ORDER BY id", (run_id,))
    assert len(rows) == len(cases)
    for row, case, result in zip(rows, cases, results):
        assert row["op"] == case.spec and row["mode"] == "eager" and row["verdict"] == "pass"
        assert row["family"] == "pointwise" and row["source"] == "spec"
        assert json.loads(row["shapes"]) == [list(s) for s in case.shapes]
        assert json.loads(row["layouts"]) == case.layouts and json.loads(row["domains"]) == case.domains
        assert json.loads(row["dtypes"])[0] == case.dtype
        assert Case.from_json(row["case_json"]) == case
        assert json.loads(row["overloads"]) == result.device_ops and result.device_ops
        assert json.loads(row["called"]) == result.called and result.called
        assert row["cpu_ms"] > 0 and row["device_ms"] > 0 and row["expression"] == result.expression
    assert store.latest_run() == run_id
    store.close()


def test_store_of_an_older_harness_is_migrated(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE results (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id INTEGER NOT NULL, source TEXT NOT "
               "NULL, op TEXT NOT NULL, family TEXT, overloads TEXT, dtypes TEXT, shapes TEXT, layouts TEXT, "
               "domains TEXT, mode TEXT NOT NULL, verdict TEXT NOT NULL, message TEXT, criterion TEXT, max_abs REAL, "
               "max_rel REAL, ulp INTEGER, cpu_ms REAL, device_ms REAL, fallback_ops TEXT, expression TEXT, "
               "reproducer TEXT, xfail_reason TEXT, case_json TEXT, created TEXT NOT NULL)")
    db.commit()
    db.close()
    store = Store(path)
    run_id = store.start_run("cli", {})
    store.add(run_id, Result(Case("neg", "float32", ()), "pass", called=["aten::neg"]), "pointwise")
    store.commit()
    assert json.loads(store.query("SELECT called FROM results")[0][0]) == ["aten::neg"]
    store.close()
