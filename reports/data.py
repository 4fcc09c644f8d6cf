"""Reading the results store (build/results.sqlite) into pandas, read-only, without the harness.

The store's schema belongs to harness/store.py; this module reads it with plain SQL and
tolerates columns it does not know yet (or that an older store lacks), so a report never needs
torch, device_impl or harness to run.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

VERDICTS = ("pass", "fail", "xfail", "xpass", "skip")
# Which verdict a cell of several cases shows: the most severe.
SEVERITY = {"fail": 4, "xpass": 3, "xfail": 2, "pass": 1, "skip": 0}
TIERS = ("native", "decomposed", "fallback")
TIER_SEVERITY = {"fallback": 3, "decomposed": 2, "native": 1}
SPEC_KINDS = ("opsuite", "cli")


def connect(path: Path) -> sqlite3.Connection:
    """A read-only connection; a missing store is an error that says how to make one."""
    if not path.exists():
        raise FileNotFoundError(f"no results store at {path}: run `pytest opsuite` (or `make report`) first, "
                                f"or pass --store PATH")
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)


def _table(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> pd.DataFrame:
    return pd.read_sql_query(sql, conn, params=params)


def runs(conn: sqlite3.Connection) -> pd.DataFrame:
    return _table(conn, "SELECT * FROM runs ORDER BY id")


def _loads(text: Any, default: Any) -> Any:
    if not isinstance(text, str) or not text:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


def case_tier(overloads: Any) -> str | None:
    """The tier a case reached: fallback if any overload fell back, else decomposed, else native."""
    reached = _loads(overloads, {})
    worst = None
    for counts in reached.values() if isinstance(reached, dict) else ():
        for tier in TIERS:
            if isinstance(counts, dict) and counts.get(tier, 0) and (
                    worst is None or TIER_SEVERITY[tier] > TIER_SEVERITY[worst]):
                worst = tier
    return worst


def results(conn: sqlite3.Connection, run_ids: list[int]) -> pd.DataFrame:
    """Rows of the given runs with derived columns: dtype (the case's own), tier, reached overloads."""
    if not run_ids:
        return pd.DataFrame(columns=["run_id", "source", "op", "family", "mode", "verdict", "dtype", "tier"])
    marks = ",".join("?" * len(run_ids))
    frame = _table(conn, f"SELECT * FROM results WHERE run_id IN ({marks}) ORDER BY id", tuple(run_ids))
    frame["dtype"] = [(_loads(d, []) or ["?"])[0] for d in frame["dtypes"]]
    frame["tier"] = [case_tier(o) for o in frame["overloads"]]
    frame["family"] = [f or s for f, s in zip(frame["family"].fillna(""), frame["source"])]
    reached = []
    for overloads, called in zip(frame["overloads"], frame.get("called", pd.Series([None] * len(frame)))):
        names = set(_loads(overloads, {}) or {})
        names.update(_loads(called, []) or [])
        reached.append(sorted(names))
    frame["reached"] = reached
    return frame


@dataclass
class Selection:
    """Which runs a report shows: per mode the latest finished op-suite run, and the one before it."""

    current: dict[str, int] = field(default_factory=dict)
    previous: dict[str, int] = field(default_factory=dict)
    opinfo: int | None = None
    opinfo_previous: int | None = None

    @property
    def run_ids(self) -> list[int]:
        ids = set(self.current.values())
        if self.opinfo is not None:
            ids.add(self.opinfo)
        return sorted(ids)


def select_runs(conn: sqlite3.Connection) -> Selection:
    """The latest finished run per mode (op suite and CLI runs), the one before it, and the latest finished
    run holding OpInfo results (``python -m harness opinfo``, or an op-suite run that swept OpInfo too)."""
    kinds = ",".join("?" * len(SPEC_KINDS))
    per_mode = _table(conn, f"""
        SELECT DISTINCT r.id AS run_id, res.mode AS mode
        FROM runs r JOIN results res ON res.run_id = r.id
        WHERE r.finished IS NOT NULL AND r.kind IN ({kinds}) AND res.source = 'spec'
        ORDER BY r.id DESC""", SPEC_KINDS)
    selection = Selection()
    for mode, group in per_mode.groupby("mode", sort=True):
        ids = list(group["run_id"])
        selection.current[mode] = int(ids[0])
        if len(ids) > 1:
            selection.previous[mode] = int(ids[1])
    opinfo = _table(conn, """
        SELECT r.id FROM runs r WHERE r.finished IS NOT NULL
        AND EXISTS (SELECT 1 FROM results res WHERE res.run_id = r.id AND res.source = 'opinfo')
        ORDER BY r.id DESC LIMIT 2""")
    ids = [int(i) for i in opinfo["id"]]
    selection.opinfo = ids[0] if ids else None
    selection.opinfo_previous = ids[1] if len(ids) > 1 else None
    return selection


def mode_rows(frame: pd.DataFrame, selection: dict[str, int], source: str = "spec") -> pd.DataFrame:
    """The rows of each mode's chosen run (a run may hold several modes; each mode takes its own run)."""
    if frame.empty:
        return frame
    keep = pd.Series(False, index=frame.index)
    for mode, run_id in selection.items():
        keep |= (frame["mode"] == mode) & (frame["run_id"] == run_id)
    return frame[keep & (frame["source"] == source)]


def mutants(conn: sqlite3.Connection) -> pd.DataFrame:
    """The mutants of the latest finished mutate run (empty when the store has none, or predates them)."""
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'mutants'").fetchone()
    if not has:
        return pd.DataFrame(columns=["run_id", "op", "class", "mode", "status", "reason", "seconds", "reached"])
    return _table(conn, """
        SELECT m.*, r.environment AS run_environment FROM mutants m JOIN runs r ON r.id = m.run_id
        WHERE m.run_id = (SELECT MAX(r2.id) FROM runs r2 WHERE r2.kind = 'mutate' AND r2.finished IS NOT NULL)
        ORDER BY m.id""")


def cut_short(conn: sqlite3.Connection, run_id: int | None) -> dict[str, Any] | None:
    """How run ``run_id`` was cut short, or None where it ran every test it selected (or is too old to say: a
    store from before runs recorded it). A cut run (``make report``'s time budget stops each mode) holds the
    cases of the tests it reached only: {"run", "tests_run", "tests_collected", "stopped"}."""
    if run_id is None:
        return None
    have = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    if not {"tests_run", "tests_collected", "stopped"} <= have:
        return None
    row = conn.execute("SELECT tests_run, tests_collected, stopped FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None or row[0] is None or row[1] is None or row[0] >= row[1]:
        return None
    return {"run": int(run_id), "tests_run": int(row[0]), "tests_collected": int(row[1]), "stopped": row[2] or ""}


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
