"""Expected failures as data (opsuite/xfails.toml): op, dtype, mode -> category and reason.

Like array-api-tests' xfails file and PyTorch's MPS lists: each entry is a
known difference, written down with why. At the end of a session the
harness reports entries that matched nothing (stale) and entries whose
cases passed (fixed: remove the entry).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from harness.cases import Case
from harness.env import ROOT

DEFAULT_PATH = ROOT / "opsuite" / "xfails.toml"
CATEGORIES = ("numerics", "unsupported", "semantics", "upstream")


@dataclass
class Entry:
    op: str
    reason: str
    category: str
    dtype: str | None = None
    mode: str | None = None
    link: str = ""
    matched: int = 0
    passed: int = 0

    def matches(self, case: Case) -> bool:
        return (self.op == case.spec and (self.dtype is None or self.dtype == case.dtype)
                and (self.mode is None or self.mode == case.mode))


@dataclass
class XFails:
    entries: list[Entry] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path = DEFAULT_PATH) -> "XFails":
        if not path.exists():
            return cls()
        data = tomllib.loads(path.read_text())
        entries = []
        for raw in data.get("xfail", []):
            if raw.get("category") not in CATEGORIES:
                raise ValueError(f"{path}: xfail for {raw.get('op')!r} has category {raw.get('category')!r}; "
                                 f"use one of {CATEGORIES}")
            if not raw.get("reason"):
                raise ValueError(f"{path}: xfail for {raw.get('op')!r} needs a reason")
            entries.append(Entry(raw["op"], raw["reason"], raw["category"], raw.get("dtype"), raw.get("mode"),
                                 raw.get("link", "")))
        return cls(entries)

    def match(self, case: Case) -> Entry | None:
        for entry in self.entries:
            if entry.matches(case):
                entry.matched += 1
                return entry
        return None

    def record_pass(self, entry: Entry) -> None:
        entry.passed += 1

    def stale(self) -> list[Entry]:
        return [e for e in self.entries if e.matched == 0]
