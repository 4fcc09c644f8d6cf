"""Expected failures as data (opsuite/xfails.toml): op, dtype, mode -> category and reason.

Like array-api-tests' xfails file and PyTorch's MPS lists: each entry is a
known difference, written down with why. At the end of a session the
harness reports entries that matched nothing (stale) and entries whose
cases passed (fixed: remove the entry).
"""

from __future__ import annotations

import re
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
    domain: str | None = None  # matches cases with a tensor drawn from this value domain
    message: str | None = None  # regex: only failures whose message matches are expected
    link: str = ""
    matched: int = 0
    passed: int = 0

    def matches(self, case: Case) -> bool:
        return (self.op == case.spec and (self.dtype is None or self.dtype == case.dtype)
                and (self.mode is None or self.mode == case.mode)
                and (self.domain is None or self.domain in case.domains))

    def explains(self, message: str) -> bool:
        return self.message is None or re.search(self.message, message) is not None


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
                                 raw.get("domain"), raw.get("message"), raw.get("link", "")))
        return cls(entries)

    def match(self, case: Case, failed: bool, message: str = "") -> Entry | None:
        """The entry expecting this case to fail: a failure it explains (xfail), or a pass of a case an
        entry without a message filter covers (xpass). Entries with a message filter do not claim passes."""
        for entry in self.entries:
            if not entry.matches(case):
                continue
            if failed and entry.explains(message):
                entry.matched += 1
                return entry
            if not failed and entry.message is None:
                entry.matched += 1
                entry.passed += 1
                return entry
        return None

    def stale(self) -> list[Entry]:
        return [e for e in self.entries if e.matched == 0]
