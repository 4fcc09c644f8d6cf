"""The results store: SQLite at build/results.sqlite, one row per case, one row per run.

Reports read only this file; nothing here imports the device.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterable

from harness.env import ROOT

DEFAULT_PATH = Path(os.environ.get("NEURONSIM_RESULTS", ROOT / "build" / "results.sqlite"))

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    started TEXT NOT NULL,
    finished TEXT,
    kind TEXT NOT NULL,            -- opsuite, cli, opinfo, compat
    profile TEXT,
    torch TEXT, torch_mlir TEXT, python TEXT, neuronsim TEXT, git_sha TEXT, machine TEXT, device TEXT,
    environment TEXT,              -- full JSON
    tests_collected INTEGER,       -- tests the session selected to run (an xdist worker: the whole session's)
    tests_run INTEGER,             -- tests this process ran to the end (fewer than collected: the run was cut)
    stopped TEXT                   -- why it ended before its last test: interrupted (a time budget's SIGINT), ...
);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id),
    source TEXT NOT NULL,          -- spec or opinfo
    op TEXT NOT NULL,              -- spec name or OpInfo name
    family TEXT,
    overloads TEXT,                -- aten overloads the case reached on the device, JSON {op: {tier: n}}
    called TEXT,                   -- aten overloads the expression called above the backend, JSON list
    dtypes TEXT, shapes TEXT, layouts TEXT, domains TEXT,
    mode TEXT NOT NULL,
    verdict TEXT NOT NULL,         -- pass, fail, skip, xfail, xpass
    message TEXT,
    criterion TEXT,
    max_abs REAL, max_rel REAL, ulp INTEGER,
    cpu_ms REAL, device_ms REAL,
    fallback_ops TEXT,
    expression TEXT,
    reproducer TEXT,
    xfail_reason TEXT,
    case_json TEXT,
    cells TEXT,                    -- the case's coordinates, JSON {dtype, domain, layout, size, edge, error, design}
    check_name TEXT,               -- the device-contract check (source contract/module: out_device, variants, ...)
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS compat (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tag TEXT NOT NULL,             -- the compat session (python -m harness compat --tag)
    created TEXT NOT NULL,
    payload TEXT NOT NULL          -- JSON: targets and the diff of each consecutive pair (harness.compat.diff)
);
CREATE TABLE IF NOT EXISTS mutants (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id INTEGER NOT NULL REFERENCES runs(id),   -- a run of kind 'mutate' (python -m harness mutate)
    op TEXT NOT NULL,              -- the table overload whose kernel the mutant replaced
    class TEXT NOT NULL,           -- the mutant class (harness.mutate.CLASSES)
    mode TEXT NOT NULL,
    status TEXT NOT NULL,          -- caught, survived, excluded
    reason TEXT,                   -- why it survived, or the rule that excludes it
    killer TEXT,                   -- the case that caught it (a designed case's id, or drawn:<spec>)
    kind TEXT,                     -- how that case failed (harness.compare.failure_kind)
    cases_run INTEGER, triggered INTEGER, seconds REAL,
    created TEXT NOT NULL,
    reached INTEGER                -- 1: some stored case reached the kernel; 0: none did (a coverage gap)
);
CREATE INDEX IF NOT EXISTS results_run ON results(run_id);
CREATE INDEX IF NOT EXISTS results_op ON results(op, mode, verdict);
"""


# columns added after the first schema, per table, in order
_ADDED_COLUMNS = {"results": {"called": "TEXT", "cells": "TEXT", "check_name": "TEXT"},
                  "runs": {"tests_collected": "INTEGER", "tests_run": "INTEGER", "stopped": "TEXT"},
                  "mutants": {"reached": "INTEGER"}}


RESULT_COLUMNS = frozenset({
    "source", "op", "family", "overloads", "called", "dtypes", "shapes", "layouts", "domains", "mode", "verdict",
    "message", "criterion", "max_abs", "max_rel", "ulp", "cpu_ms", "device_ms", "fallback_ops", "expression",
    "reproducer", "xfail_reason", "case_json", "cells", "check_name", "created"})


CELL_KEYS = ("dtype", "domain", "layout", "size", "edge", "error")


def _cells(result) -> str | None:
    """The coordinates a spec case really had (harness.design.cells_of), with its design id."""
    case = result.case
    if case.source != "spec":
        return None
    from harness.design import cells_of  # the op specs (torch) only when a spec case is stored

    return json.dumps({**cells_of(case).to_dict(), "design": getattr(result, "design_id", "") or None})


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


class Store:
    def __init__(self, path: Path | str = DEFAULT_PATH):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=60)
        self.db.executescript(SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Add columns that stores written by an older harness lack (SQLite keeps old rows as NULL)."""
        for table, added in _ADDED_COLUMNS.items():
            have = {row[1] for row in self.db.execute(f"PRAGMA table_info({table})")}
            for column, kind in added.items():
                if column not in have:
                    self.db.execute(f'ALTER TABLE {table} ADD COLUMN "{column}" {kind}')
        self.db.commit()

    def start_run(self, kind: str, environment: dict[str, str], profile: str | None = None) -> int:
        cur = self.db.execute(
            "INSERT INTO runs (started, kind, profile, torch, torch_mlir, python, neuronsim, git_sha, machine, device, "
            "environment) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (_now(), kind, profile, environment.get("torch"), environment.get("torch_mlir"), environment.get("python"),
             environment.get("neuronsim"), environment.get("git_sha"), environment.get("machine"),
             environment.get("device"), json.dumps(environment)))
        self.db.commit()
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, stopped: str | None = None) -> None:
        """Mark the run finished; ``stopped``: why it ended before its last test (None: it ran to the end)."""
        self.db.execute("UPDATE runs SET finished = ?, stopped = ? WHERE id = ?", (_now(), stopped, run_id))
        self.db.commit()

    def set_progress(self, run_id: int, tests_run: int, tests_collected: int | None = None) -> None:
        """How many of the run's tests ran to the end (and, once known, how many it selected): a run a time budget
        cut keeps ``tests_run < tests_collected``, which the reports show beside its figures. Committed at once: an
        UPDATE left open until the next test's results held the store's write lock through that test, and the other
        pytest-xdist workers writing the same store then waited past the connection's timeout ("database is
        locked" ended a compiled op-suite run as an INTERNALERROR)."""
        if tests_collected is None:
            self.db.execute("UPDATE runs SET tests_run = ? WHERE id = ?", (tests_run, run_id))
        else:
            self.db.execute("UPDATE runs SET tests_run = ?, tests_collected = ? WHERE id = ?",
                            (tests_run, tests_collected, run_id))
        self.db.commit()

    def add(self, run_id: int, result, family: str = "") -> None:
        case = result.case
        comparison = result.comparison
        self.db.execute(
            "INSERT INTO results (run_id, source, op, family, overloads, called, dtypes, shapes, layouts, domains, mode, "
            "verdict, message, criterion, max_abs, max_rel, ulp, cpu_ms, device_ms, fallback_ops, expression, "
            "reproducer, xfail_reason, case_json, cells, check_name, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, case.source, case.spec, family, json.dumps(result.device_ops), json.dumps(result.called),
             json.dumps([case.dtype] + [t.dtype for t in case.tensors]), json.dumps(case.shapes),
             json.dumps(case.layouts), json.dumps(case.domains), case.mode, result.verdict, result.message,
             comparison.criterion if comparison else None, comparison.max_abs if comparison else None,
             comparison.max_rel if comparison else None, comparison.ulp if comparison else None,
             result.cpu_ms, result.device_ms, json.dumps(result.fallback_ops), result.expression,
             result.reproducer or None, result.xfail_reason or None, case.to_json(), _cells(result),
             getattr(result, "check", "") or None, _now()))

    def cells(self, op: str, run_id: int | None = None, mode: str | None = None) -> list[dict[str, Any]]:
        """Which dtype x domain x layout x size cells of op spec ``op`` ran (latest op-suite run by
        default): one dict per distinct cell, with how many cases ran it and their verdicts."""
        run_id = run_id or self.latest_run_with(op)
        if run_id is None:
            return []
        sql = "SELECT cells, verdict, mode FROM results WHERE run_id = ? AND op = ? AND cells IS NOT NULL"
        params: list[Any] = [run_id, op]
        if mode:
            sql += " AND mode = ?"
            params.append(mode)
        table: dict[tuple, dict[str, Any]] = {}
        for row in self.query(sql, params):
            cell = json.loads(row["cells"])
            key = tuple(cell.get(k) for k in CELL_KEYS) + (row["mode"],)
            entry = table.setdefault(key, {**{k: cell.get(k) for k in CELL_KEYS}, "mode": row["mode"],
                                           "cases": 0, "designed": 0, "verdicts": {}})
            entry["cases"] += 1
            entry["designed"] += bool(cell.get("design"))
            entry["verdicts"][row["verdict"]] = entry["verdicts"].get(row["verdict"], 0) + 1
        return [table[k] for k in sorted(table, key=lambda k: tuple(str(v) for v in k))]

    def latest_run_with(self, op: str) -> int | None:
        rows = self.db.execute("SELECT MAX(run_id) FROM results WHERE op = ? AND cells IS NOT NULL", (op,)).fetchall()
        return rows[0][0] if rows and rows[0][0] is not None else None

    def add_row(self, run_id: int, **fields: Any) -> None:
        """A result row from plain fields (unit-test outcomes of a compat run, merged shards);
        ``source``, ``op``, ``mode`` and ``verdict`` are required, every other column is optional."""
        unknown = set(fields) - RESULT_COLUMNS
        if unknown:
            raise ValueError(f"unknown result column(s) {sorted(unknown)}")
        fields.setdefault("created", _now())
        columns = ["run_id", *fields]
        quoted = ", ".join(f'"{c}"' for c in columns)
        self.db.execute(f"INSERT INTO results ({quoted}) VALUES ({', '.join('?' * len(columns))})",
                        (run_id, *fields.values()))

    def add_mutant(self, run_id: int, mode: str, op: str, cls: str, status: str, reason: str = "", killer: str = "",
                   kind: str = "", cases_run: int = 0, triggered: int = 0, seconds: float = 0.0,
                   reached: bool | None = None) -> None:
        """``reached``: whether some stored case reached the kernel (None: not said)."""
        self.db.execute("INSERT INTO mutants (run_id, op, class, mode, status, reason, killer, kind, cases_run, "
                        "triggered, seconds, created, reached) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (run_id, op, cls, mode, status, reason or None, killer or None, kind or None, cases_run,
                         triggered, seconds, _now(), None if reached is None else int(reached)))

    def record_compat(self, tag: str, payload: dict[str, Any]) -> None:
        self.db.execute("INSERT INTO compat (tag, created, payload) VALUES (?, ?, ?)",
                        (tag, _now(), json.dumps(payload)))
        self.db.commit()

    def commit(self) -> None:
        self.db.commit()

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[sqlite3.Row]:
        self.db.row_factory = sqlite3.Row
        try:
            return list(self.db.execute(sql, tuple(params)))
        finally:
            self.db.row_factory = None

    def latest_run(self, kind: str | None = None) -> int | None:
        sql = "SELECT id FROM runs" + (" WHERE kind = ?" if kind else "") + " ORDER BY id DESC LIMIT 1"
        rows = self.db.execute(sql, (kind,) if kind else ()).fetchall()
        return rows[0][0] if rows else None

    def close(self) -> None:
        self.db.commit()
        self.db.close()
