"""Every mode draws the same cases, so pass sets compare case by case (eager vs adaptive vs compiled)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _drawn(tmp_path: Path, mode: str) -> list[tuple]:
    store = tmp_path / f"{mode}.sqlite"
    done = subprocess.run([sys.executable, "-m", "pytest", "opsuite/test_pointwise.py", "-q", "-p", "no:cacheprovider",
                           "-k", "test_pointwise and (-exp] or -sigmoid])", "--neuron-mode", mode,
                           "--results", str(store)], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = sqlite3.connect(store).execute("SELECT op, case_json FROM results ORDER BY id").fetchall()
    return [(op, json.dumps({k: v for k, v in json.loads(case).items() if k != "mode"}, sort_keys=True))
            for op, case in rows]


def test_eager_and_adaptive_draw_identical_cases(tmp_path):
    eager, adaptive = _drawn(tmp_path, "eager"), _drawn(tmp_path, "adaptive")
    assert len(eager) >= 8  # four quick examples of each of the two specs
    assert eager == adaptive
