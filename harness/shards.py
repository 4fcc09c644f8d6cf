"""Splitting a sweep across machines and putting the pieces back together.

``--shard K/N`` (1-based) keeps the tests or OpInfo ops whose stable key hashes
to K among N, so N CI jobs run disjoint pieces of one sweep with no
coordination; the assignment depends only on the key (a pytest node id or an
OpInfo name), never on collection order, machine or Python's hash seed. Each
shard writes its own store; ``python -m harness merge`` copies their runs and
results into one store for the report and the compat diff.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Iterable, NamedTuple

from harness.store import RESULT_COLUMNS, Store


class Shard(NamedTuple):
    index: int  # 1-based
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        try:
            k, n = (int(part) for part in text.split("/"))
        except ValueError:
            raise ValueError(f"--shard {text!r}: expected K/N with integers, e.g. 2/4") from None
        if not (n >= 1 and 1 <= k <= n):
            raise ValueError(f"--shard {text!r}: need 1 <= K <= N")
        return cls(k, n)

    def owns(self, key: str) -> bool:
        digest = int.from_bytes(hashlib.sha1(key.encode()).digest()[:8], "big")
        return digest % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def select(keys: Iterable[str], shard: Shard | None) -> list[str]:
    return [k for k in keys if shard is None or shard.owns(k)]


_RUN_COLUMNS = ("started", "finished", "kind", "profile", "torch", "torch_mlir", "python", "neuronsim", "git_sha",
                "machine", "device", "environment", "tests_collected", "tests_run", "stopped")
_PROGRESS_COLUMNS = ("tests_collected", "tests_run", "stopped")  # how far each part got: not part of the join key


def _joined_key(run: tuple) -> tuple | None:
    """What makes shard runs parts of one sweep (``join``): a ``K/N`` shard, the same N, kind, profile, versions,
    commit, machine and device; None for a run that is no shard."""
    fields = dict(zip(_RUN_COLUMNS, run[1:]))
    try:
        env = json.loads(fields["environment"] or "{}")
    except ValueError:
        return None
    try:
        shard = Shard.parse(env.get("shard") or "")
    except ValueError:
        return None
    return (shard.count, *(fields[c] for c in _RUN_COLUMNS
                           if c not in ("started", "finished", "environment", *_PROGRESS_COLUMNS)))


def _joined_run(parts: list[tuple]) -> tuple:
    """One run row for the shard runs ``parts`` of one sweep: the first's fields, started at the earliest, finished at
    the latest (not finished while any part is not), its environment's shard "" and ``joined`` naming the parts."""
    fields = [dict(zip(_RUN_COLUMNS, run[1:])) for run in parts]
    row = dict(fields[0])
    row["started"] = min(f["started"] for f in fields)
    row["finished"] = None if any(f["finished"] is None for f in fields) else max(f["finished"] for f in fields)
    env = json.loads(row["environment"] or "{}")
    envs = [json.loads(f["environment"] or "{}") for f in fields]
    env["joined"] = sorted(e.get("shard", "") for e in envs)
    env["shard"] = ""
    row["environment"] = json.dumps(env)
    row.update(_joined_progress(fields, all(e.get("shard_by") == "xdist" for e in envs)))
    return tuple(row[c] for c in _RUN_COLUMNS)


def _joined_progress(fields: list[dict], xdist: bool) -> dict:
    """How far the joined sweep got: the tests its parts ran, summed; the tests it selected: ``--shard K/N`` parts
    each collected their own share (summed), xdist workers each the whole session (the largest count); unknown
    (None) where a part does not say; stopped: the parts' reasons."""
    runs, collected = [f["tests_run"] for f in fields], [f["tests_collected"] for f in fields]
    known = None not in runs and None not in collected
    stopped = sorted({f["stopped"] for f in fields if f["stopped"]})
    return {"tests_run": sum(runs) if known else None,
            "tests_collected": (max(collected) if xdist else sum(collected)) if known else None,
            "stopped": ", ".join(stopped) or None}


def _insert_run(out: Store, row: tuple) -> int:
    return out.db.execute(f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES "
                          f"({', '.join('?' * len(_RUN_COLUMNS))})", row).lastrowid


def merge(sources: Iterable[Path], target: Path, join: bool = False) -> dict[str, int]:
    """Copy every run (with its results) and compat record of ``sources`` into ``target``; returns counts.
    ``join``: the shard runs of one sweep (``--shard K/N`` of the same N, commit and kind, e.g. one op-suite mode
    split over the cores by ``make report``) become one run holding all their results, as the reports read one
    run per mode."""
    sources = list(sources)
    for source in sources:
        if Path(source).resolve() == Path(target).resolve():
            raise ValueError(f"cannot merge {source} into itself")
    out = Store(target)
    counts = {"stores": 0, "runs": 0, "results": 0}
    result_columns = sorted(RESULT_COLUMNS)
    joined: dict[tuple, int] = {}
    if join:
        parts: dict[tuple, list[tuple]] = {}
        for source in sources:
            Store(source).close()
            db = sqlite3.connect(source)
            for run in db.execute(f"SELECT id, {', '.join(_RUN_COLUMNS)} FROM runs ORDER BY id").fetchall():
                key = _joined_key(run)
                if key is not None:
                    parts.setdefault(key, []).append(run)
            db.close()
        for key, runs in parts.items():
            joined[key] = _insert_run(out, _joined_run(runs))
            counts["runs"] += 1
    for source in sources:
        Store(source).close()  # migrate an older store's schema before reading it
        db = sqlite3.connect(source)
        have = {row[1] for row in db.execute("PRAGMA table_info(results)")}
        for run in db.execute(f"SELECT id, {', '.join(_RUN_COLUMNS)} FROM runs ORDER BY id").fetchall():
            key = _joined_key(run) if join else None
            if key is not None:
                new_id = joined[key]
            else:
                new_id = _insert_run(out, run[1:])
                counts["runs"] += 1
            columns = [c for c in result_columns if c in have]
            rows = db.execute(f"SELECT {', '.join(columns)} FROM results WHERE run_id = ? ORDER BY id",
                              (run[0],)).fetchall()
            out.db.executemany(f"INSERT INTO results (run_id, {', '.join(columns)}) VALUES "
                               f"(?, {', '.join('?' * len(columns))})", [(new_id, *r) for r in rows])
            counts["results"] += len(rows)
        if db.execute("SELECT name FROM sqlite_master WHERE name = 'compat'").fetchone():
            out.db.executemany("INSERT INTO compat (tag, created, payload) VALUES (?, ?, ?)",
                               db.execute("SELECT tag, created, payload FROM compat ORDER BY id").fetchall())
        db.close()
        counts["stores"] += 1
    out.close()
    return counts
