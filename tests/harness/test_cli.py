"""Meta tests of the CLI: `python -m harness run` (progress bar, store, exit status) and `summary`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness import cli
from harness.cases import Case
from harness.runner import Result
from harness.store import Store
from harness.values import TensorSpec
from planted import plant

ROOT = Path(__file__).resolve().parents[2]


def test_run_shows_progress_and_stores_every_case(tmp_path, capsys):
    results = tmp_path / "r.sqlite"
    assert cli.main(["run", "--ops", "neg", "abs", "--results", str(results)]) == 0
    out, err = capsys.readouterr()
    frames = err.split("\r")  # the progress bar redraws one line
    assert frames[1].startswith("[" + "." * 30 + "] 0/2 ") and frames[-1].startswith("[" + "#" * 30 + "] 2/2 done")
    assert "8 pass" in out  # quick: 4 examples per spec
    store = Store(results)
    rows = store.query("SELECT op, verdict FROM results")
    assert sorted({r["op"] for r in rows}) == ["abs", "neg"] and len(rows) == 8
    assert store.query("SELECT kind, finished FROM runs")[0]["kind"] == "cli"
    store.close()


def test_run_fails_and_reports_a_planted_bug(tmp_path, capsys):
    results = tmp_path / "r.sqlite"
    with plant("inplace"):  # zero_ leaves its input as it was: every case fails, and shrinks fast
        status = cli.main(["run", "--ops", "zero_", "--results", str(results)])
    out, _ = capsys.readouterr()
    assert status == 1 and "FAIL zero_ [" in out and "input x0 after the call" in out
    store = Store(results)
    failed = store.query("SELECT reproducer FROM results WHERE verdict = 'fail'")
    assert len(failed) == 1 and "def call(device, x0):" in failed[0][0]
    store.close()


def test_run_refuses_unknown_ops(capsys):
    assert cli.main(["run", "--ops", "no_such_op"]) == 2
    assert cli.main(["run", "--families", "no_such_family"]) == 2


def _store_with(path: Path) -> int:
    store = Store(path)
    run_id = store.start_run("opsuite", {})
    rows = [("neg", "pointwise", "float32", "eager", "pass"), ("neg", "pointwise", "bfloat16", "eager", "fail"),
            ("sum", "reduction", "float32", "eager", "xfail"), ("sum", "reduction", "float32", "compiled", "skip"),
            ("mm", "matmul", "float16", "adaptive", "pass")]
    for op, family, dtype, mode, verdict in rows:
        case = Case(op, dtype, (TensorSpec((2,), dtype),), mode=mode)
        store.add(run_id, Result(case, verdict), family)
    store.finish_run(run_id)
    store.close()
    return run_id


def test_summary_counts_by_family_dtype_and_mode(tmp_path, capsys):
    results = tmp_path / "r.sqlite"
    run_id = _store_with(results)
    assert cli.main(["summary", "--results", str(results), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["run"] == run_id
    assert summary["total"] == {"pass": 2, "fail": 1, "xfail": 1, "skip": 1}
    assert summary["family"] == {"matmul": {"pass": 1}, "pointwise": {"pass": 1, "fail": 1},
                                 "reduction": {"xfail": 1, "skip": 1}}
    assert summary["dtype"]["float32"] == {"pass": 1, "xfail": 1, "skip": 1}
    assert summary["mode"] == {"adaptive": {"pass": 1}, "compiled": {"skip": 1}, "eager": {"pass": 1, "fail": 1,
                                                                                           "xfail": 1}}


def test_summary_table_through_python_m_harness(tmp_path):
    results = tmp_path / "r.sqlite"
    _store_with(results)
    run = subprocess.run([sys.executable, "-m", "harness", "summary", "--results", str(results)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].endswith("2 pass, 1 fail, 1 xfail, 0 xpass, 1 skip")
    header = next(line for line in lines if "pass" in line and "fail" in line and "xfail" in line and
                  not line.startswith("run"))
    assert header.split() == ["pass", "fail", "xfail", "xpass", "skip"]
    assert "  pointwise" in run.stdout and "  bfloat16" in run.stdout and "  compiled" in run.stdout
    pointwise = next(line for line in lines if line.strip().startswith("pointwise")).split()
    assert pointwise[1:] == ["1", "1", "0", "0", "0"]


def test_summary_of_an_empty_store(tmp_path, capsys):
    assert cli.main(["summary", "--results", str(tmp_path / "empty.sqlite")]) == 1
    assert "no runs" in capsys.readouterr().out
