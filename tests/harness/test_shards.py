"""Sharding a sweep (--shard K/N) and merging shard stores (python -m harness merge)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.shards import Shard, merge, select
from harness.store import Store

ROOT = Path(__file__).resolve().parents[2]


def test_shards_partition_the_keys_deterministically():
    keys = [f"opsuite/test_pointwise.py::test_pointwise[eager-op{i}]" for i in range(400)]
    shards = [Shard.parse(f"{k}/4") for k in range(1, 5)]
    parts = [select(keys, s) for s in shards]
    assert sorted(sum(parts, [])) == sorted(keys)  # every key in exactly one shard
    assert all(set(a).isdisjoint(b) for i, a in enumerate(parts) for b in parts[i + 1:])
    assert all(60 < len(p) < 140 for p in parts)  # roughly balanced
    assert parts[1] == select(keys, Shard(2, 4))  # the same assignment every time
    assert select(keys, None) == keys


@pytest.mark.parametrize("text", ["0/4", "5/4", "2", "a/b", "1/0"])
def test_bad_shards_are_refused(text):
    with pytest.raises(ValueError, match="--shard"):
        Shard.parse(text)


def _store(path: Path, op: str, verdicts: list[str], tag: str) -> None:
    store = Store(path)
    run = store.start_run("opsuite", {"torch": "2.13.0", "tag": tag})
    for v in verdicts:
        store.add_row(run, source="spec", op=op, mode="eager", verdict=v, message=f"{op} {v}")
    store.commit()
    store.finish_run(run)
    store.record_compat(tag, {"tag": tag})
    store.close()


def test_merge_copies_runs_results_and_compat_records(tmp_path):
    _store(tmp_path / "a.sqlite", "add", ["pass", "fail"], "s1")
    _store(tmp_path / "b.sqlite", "mul", ["pass"], "s2")
    out = tmp_path / "merged.sqlite"
    counts = merge([tmp_path / "a.sqlite", tmp_path / "b.sqlite"], out)
    assert counts == {"stores": 2, "runs": 2, "results": 3}
    store = Store(out)
    rows = store.query("SELECT r.op, r.verdict, u.environment FROM results r JOIN runs u ON r.run_id = u.id "
                       "ORDER BY r.id")
    assert [(r["op"], r["verdict"]) for r in rows] == [("add", "pass"), ("add", "fail"), ("mul", "pass")]
    assert '"tag": "s2"' in rows[2]["environment"]  # results stay with their own run
    assert [r["tag"] for r in store.query("SELECT tag FROM compat ORDER BY id")] == ["s1", "s2"]
    with pytest.raises(ValueError, match="itself"):
        merge([out], out)


def _shard_store(path: Path, shard: str, ops: list[str], mode: str = "compiled") -> None:
    store = Store(path)
    run = store.start_run("opsuite", {"torch": "2.13.0", "git_sha": "abc", "shard": shard})
    for op in ops:
        store.add_row(run, source="spec", op=op, mode=mode, verdict="pass", message="")
    store.commit()
    store.finish_run(run)
    store.close()


def test_merge_join_makes_one_run_of_a_sweeps_shards(tmp_path):
    """make report splits the compiled mode over the cores (--shard 1/2, 2/2); the reports read one run per mode, so
    the shards' runs are joined into one holding every result. A run that is no shard is copied as it was."""
    _shard_store(tmp_path / "c1.sqlite", "1/2", ["add", "mul"])
    _shard_store(tmp_path / "c2.sqlite", "2/2", ["exp"])
    _store(tmp_path / "e.sqlite", "neg", ["pass"], "eager")
    out = tmp_path / "joined.sqlite"
    counts = merge([tmp_path / "c1.sqlite", tmp_path / "c2.sqlite", tmp_path / "e.sqlite"], out, join=True)
    assert counts == {"stores": 3, "runs": 2, "results": 4}
    store = Store(out)
    runs = store.query("SELECT id, finished, environment FROM runs ORDER BY id")
    assert len(runs) == 2 and all(r["finished"] for r in runs)
    assert '"joined": ["1/2", "2/2"]' in runs[0]["environment"] and '"shard": ""' in runs[0]["environment"]
    ops = store.query("SELECT op FROM results WHERE run_id = ? ORDER BY id", (runs[0]["id"],))
    assert [r["op"] for r in ops] == ["add", "mul", "exp"]
    plain = merge([tmp_path / "c1.sqlite", tmp_path / "c2.sqlite"], tmp_path / "plain.sqlite")
    assert plain["runs"] == 2  # without join every shard stays its own run


def test_merge_command(tmp_path):
    _store(tmp_path / "a.sqlite", "add", ["pass"], "s1")
    out = tmp_path / "m.sqlite"
    done = subprocess.run([sys.executable, "-m", "harness", "merge", str(tmp_path / "a.sqlite"), "-o", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "1 runs, 1 results" in done.stdout
    missing = subprocess.run([sys.executable, "-m", "harness", "merge", str(tmp_path / "nope.sqlite")], cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "no such store" in missing.stderr


def test_opsuite_shard_option_deselects_other_shards(tmp_path):
    """Two shards of one op-suite file run disjoint tests whose union is the whole file."""
    def collected(shard: str | None) -> set[str]:
        args = [sys.executable, "-m", "pytest", "opsuite/test_matmul.py", "--collect-only", "-q", "-p",
                "no:cacheprovider", "--results", str(tmp_path / "r.sqlite")]
        if shard:
            args += ["--shard", shard]
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert done.returncode in (0, 5), done.stdout + done.stderr
        return {line for line in done.stdout.splitlines() if "::" in line}

    whole, first, second = collected(None), collected("1/2"), collected("2/2")
    assert whole and first | second == whole and not first & second


def test_an_xdist_worker_is_a_shard_of_its_sweep(monkeypatch):
    """make report runs the compiled mode in pytest-xdist workers (-n 2 --dist load); each worker's run is
    labelled as a shard K/N of the sweep, so merge --join makes the workers' runs one run of the mode."""
    from harness.pytest_plugin import _xdist_part

    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    assert _xdist_part() == ""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    assert _xdist_part() == "2/2" and Shard.parse(_xdist_part()) == Shard(2, 2)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "master")
    assert _xdist_part() == ""


def test_opsuite_xdist_workers_join_into_one_run(tmp_path):
    """Two workers fed from one queue write two runs into one store; joined, they are one run holding every
    test's results, as the unsplit run would."""
    store = tmp_path / "compiled.sqlite"
    args = [sys.executable, "-m", "pytest", "opsuite/test_pointwise.py", "-q", "-p", "no:cacheprovider",
            "-k", "test_pointwise and (-neg] or -abs] or -exp] or -sin])", "-n", "2", "--dist", "load", "--maxschedchunk", "4",
            "--results", str(store)]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    parts = Store(store).query("SELECT environment FROM runs ORDER BY id")
    assert sorted(json.loads(p["environment"])["shard"] for p in parts) == ["1/2", "2/2"]
    counts = merge([store], tmp_path / "joined.sqlite", join=True)
    assert counts["runs"] == 1 and counts["results"] >= 16  # four quick examples of each of the four specs
