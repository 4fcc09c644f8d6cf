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
                "machine", "device", "environment")


def merge(sources: Iterable[Path], target: Path) -> dict[str, int]:
    """Copy every run (with its results) and compat record of ``sources`` into ``target``; returns counts."""
    out = Store(target)
    counts = {"stores": 0, "runs": 0, "results": 0}
    result_columns = sorted(RESULT_COLUMNS)
    for source in sources:
        if Path(source).resolve() == Path(target).resolve():
            raise ValueError(f"cannot merge {source} into itself")
        Store(source).close()  # migrate an older store's schema before reading it
        db = sqlite3.connect(source)
        have = {row[1] for row in db.execute("PRAGMA table_info(results)")}
        for run in db.execute(f"SELECT id, {', '.join(_RUN_COLUMNS)} FROM runs ORDER BY id").fetchall():
            cur = out.db.execute(f"INSERT INTO runs ({', '.join(_RUN_COLUMNS)}) VALUES "
                                 f"({', '.join('?' * len(_RUN_COLUMNS))})", run[1:])
            new_id = cur.lastrowid
            columns = [c for c in result_columns if c in have]
            rows = db.execute(f"SELECT {', '.join(columns)} FROM results WHERE run_id = ? ORDER BY id",
                              (run[0],)).fetchall()
            out.db.executemany(f"INSERT INTO results (run_id, {', '.join(columns)}) VALUES "
                               f"(?, {', '.join('?' * len(columns))})", [(new_id, *r) for r in rows])
            counts["runs"] += 1
            counts["results"] += len(rows)
        if db.execute("SELECT name FROM sqlite_master WHERE name = 'compat'").fetchone():
            out.db.executemany("INSERT INTO compat (tag, created, payload) VALUES (?, ?, ?)",
                               db.execute("SELECT tag, created, payload FROM compat ORDER BY id").fetchall())
        db.close()
        counts["stores"] += 1
    out.close()
    return counts
