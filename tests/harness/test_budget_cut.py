"""A run cut short (``make report`` stops each op-suite mode with SIGINT when its time budget runs out) says so in
the results store: how many tests it selected, how many it ran, and why it stopped, so the reports can say that
its figures cover only part of the suite (tests/reports/test_cut_runs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.shards import merge
from harness.store import Store

ROOT = Path(__file__).resolve().parents[2]
SELECTION = "test_pointwise and (-neg] or -abs] or -exp])"

# A stand-in for the budget's SIGINT, at a fixed point: after the second test, as pytest sees Ctrl-C
BUDGET = '''
import pytest

_finished = [0]


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid, location):
    _finished[0] += 1
    if _finished[0] == 2:
        raise KeyboardInterrupt
'''


def _opsuite(tmp_path: Path, store: Path, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "budget_cut.py").write_text(BUDGET)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, "-m", "pytest", "opsuite/test_pointwise.py", "-q", "-p", "no:cacheprovider",
            "-k", SELECTION, "--results", str(store), *extra]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)


def _progress(store: Path) -> list[tuple]:
    return [tuple(r) for r in Store(store).query("SELECT tests_collected, tests_run, stopped FROM runs ORDER BY id")]


def test_an_interrupted_run_records_tests_run_against_tests_collected(tmp_path):
    store = tmp_path / "r.sqlite"
    done = _opsuite(tmp_path, store, "-p", "budget_cut")
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]  # pytest's "interrupted"
    assert _progress(store) == [(3, 2, "interrupted")]


def test_a_whole_run_records_every_test_run(tmp_path):
    store = tmp_path / "r.sqlite"
    done = _opsuite(tmp_path, store)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert _progress(store) == [(3, 3, None)]


def test_joined_shards_add_up_their_progress(tmp_path):
    """--shard K/N parts each collected their own share (summed); xdist workers each collected the whole session
    (the largest count), and the tests they ran add up."""
    def part(path: Path, shard: str, collected: int, ran: int, stopped: str | None, xdist: bool) -> None:
        store = Store(path)
        env = {"torch": "2.13.0", "git_sha": "abc", "shard": shard, **({"shard_by": "xdist"} if xdist else {})}
        run = store.start_run("opsuite", env)
        store.add_row(run, source="spec", op="add", mode="compiled", verdict="pass")
        store.set_progress(run, ran, collected)
        store.finish_run(run, stopped)
        store.close()

    for xdist, expected in ((True, (100, 61, "interrupted")), (False, (150, 61, "interrupted"))):
        folder = tmp_path / ("xdist" if xdist else "shards")
        folder.mkdir()
        part(folder / "a.sqlite", "1/2", 100 if xdist else 50, 31, None, xdist)
        part(folder / "b.sqlite", "2/2", 100, 30, "interrupted", xdist)
        merge([folder / "a.sqlite", folder / "b.sqlite"], folder / "joined.sqlite", join=True)
        assert _progress(folder / "joined.sqlite") == [expected]


def test_a_progress_write_leaves_the_store_free_for_other_writers(tmp_path):
    """pytest-xdist's workers write one store: a progress write holding the write lock until the next test's results
    kept another worker waiting past its timeout ("database is locked", an INTERNALERROR that ended a compiled
    op-suite run). The write commits at once, so another connection writes straight after it."""
    import sqlite3

    path = tmp_path / "results.sqlite"
    worker = Store(path)
    run = worker.start_run("opsuite", {"torch": "2.13.0"})
    worker.set_progress(run, 1, 3)
    other = sqlite3.connect(path, timeout=0.05)
    other.execute("UPDATE runs SET stopped = 'seen' WHERE id = ?", (run,))
    other.commit()
    other.close()
    worker.close()
