"""Expected failures as data (opsuite/xfails.toml): op, dtype, mode -> category and reason.

Like array-api-tests' xfails file and PyTorch's MPS lists: each entry is a
known difference, written down with why. An entry names an op spec of
harness.specs (``source = "spec"``, the default) or an OpInfo of PyTorch's
op_db (``source = "opinfo"``, by its full name, ``name.variant``). After a
run the harness reports entries that matched nothing although their op ran
(stale), entries naming no known op, and entries whose cases passed (fixed:
remove the entry).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from harness.cases import Case
from harness.env import ROOT

DEFAULT_PATH = ROOT / "opsuite" / "xfails.toml"
CATEGORIES = ("numerics", "unsupported", "semantics", "upstream")
SOURCES = ("spec", "opinfo", "contract", "module", "dynamic")  # dynamic: harness.dynamic's check
_KEYS = {"op", "reason", "category", "source", "dtype", "mode", "domain", "layout", "message", "link"}


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
    source: str = "spec"  # "spec" (harness.specs) or "opinfo" (op_db)
    layout: str | None = None  # matches cases with a tensor made in this layout on the device
    matched: int = 0
    passed: int = 0

    def applies(self, source: str, op: str, dtype: str, mode: str) -> bool:
        """The entry is about cases of this op, dtype and mode (whatever their values)."""
        return (self.op == op and self.source == source and (self.dtype is None or self.dtype == dtype)
                and (self.mode is None or self.mode == mode))

    def matches(self, case: Case) -> bool:
        return (self.applies(case.source, case.spec, case.dtype, case.mode)
                and (self.domain is None or self.domain in case.domains)
                and (self.layout is None or any(t.layout == self.layout for t in case.tensors)))

    def explains(self, message: str) -> bool:
        return self.message is None or re.search(self.message, message) is not None


@dataclass
class XFails:
    entries: list[Entry] = field(default_factory=list)
    seen: set[tuple[str, str, str, str]] = field(default_factory=set)  # (source, op, dtype, mode) looked up

    @classmethod
    def load(cls, path: Path = DEFAULT_PATH) -> "XFails":
        if not path.exists():
            return cls()
        return cls.parse(path.read_text(), str(path))

    @classmethod
    def parse(cls, text: str, where: str = "xfails.toml") -> "XFails":
        """Entries from TOML text; a malformed entry raises ValueError naming it and the fix."""
        data = tomllib.loads(text)
        entries = []
        for raw in data.get("xfail", []):
            name = raw.get("op")
            if not name:
                raise ValueError(f"{where}: an [[xfail]] entry has no op")
            unknown = set(raw) - _KEYS
            if unknown:
                raise ValueError(f"{where}: xfail for {name!r} has unknown key(s) {sorted(unknown)}; "
                                 f"use {sorted(_KEYS)}")
            if raw.get("category") not in CATEGORIES:
                raise ValueError(f"{where}: xfail for {name!r} has category {raw.get('category')!r}; "
                                 f"use one of {CATEGORIES}")
            if raw.get("source", "spec") not in SOURCES:
                raise ValueError(f"{where}: xfail for {name!r} has source {raw.get('source')!r}; use one of {SOURCES}")
            if not raw.get("reason"):
                raise ValueError(f"{where}: xfail for {name!r} needs a reason")
            if raw.get("message") is not None:
                try:
                    re.compile(raw["message"])
                except re.error as e:
                    raise ValueError(f"{where}: xfail for {name!r}: message is not a regular expression ({e})") \
                        from None
            entries.append(Entry(name, raw["reason"], raw["category"], raw.get("dtype"), raw.get("mode"),
                                 raw.get("domain"), raw.get("message"), raw.get("link", ""),
                                 raw.get("source", "spec"), layout=raw.get("layout")))
        return cls(entries)

    def match(self, case: Case, failed: bool, message: str = "") -> Entry | None:
        """The entry expecting this case to fail: a failure it explains (xfail), or a pass of a case an
        entry without a message filter covers (xpass). Entries with a message filter do not claim passes."""
        self.seen.add((case.source, case.spec, case.dtype, case.mode))
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

    def stale(self, source: str | None = None) -> list[Entry]:
        """Entries that matched no case although cases they apply to ran (their op, and their dtype
        and mode where they name one): a bfloat16 entry is not stale in a float32-only sweep."""
        return [e for e in self.entries if e.matched == 0 and (source is None or e.source == source)
                and any(e.applies(*seen) for seen in self.seen)]

    def unknown(self, ops: Iterable[str], source: str = "spec") -> list[Entry]:
        """Entries of ``source`` naming none of ``ops`` (a typo, or an op spec since renamed)."""
        known = set(ops)
        return [e for e in self.entries if e.source == source and e.op not in known]
