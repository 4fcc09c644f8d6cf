"""What changed between two torch versions: verdicts per case, environment status, and API surface.

Pure functions over plain data (result rows as dicts, probe JSON), so the
diff can be tested on fixtures and rendered by any front end. A *case* is
identified by what was run, not by when: source, op, mode, dtypes, shapes,
layouts, domains and the expression. The quick Hypothesis profile is
derandomized, so both versions draw the same cases.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

CASE_FIELDS = ("source", "op", "mode", "dtypes", "shapes", "layouts", "domains", "expression")
FAILING = frozenset({"fail", "error", "xpass"})
PASSING = frozenset({"pass", "xfail"})
ENV_STEPS = ("install", "build", "import")


def case_key(row: Mapping[str, Any]) -> tuple:
    return tuple(row.get(f) or "" for f in CASE_FIELDS)


def cause(message: str | None) -> str:
    """The first line of a failure message with standalone numbers blanked, so equal causes group together."""
    first = (message or "").strip().splitlines()[0] if (message or "").strip() else "(no message)"
    first = re.sub(r"0x[0-9a-fA-F]+", "0x…", first)
    # numbers that stand alone (counts, values, positions), not digits inside names such as float16
    return re.sub(r"(?<![\w.])[-+]?\d+(\.\d+)?([eE][-+]?\d+)?(?![\w.])", "N", first)[:160]


@dataclass
class Change:
    key: tuple
    op: str
    before: str
    after: str
    cause: str
    reproducer: str = ""

    @property
    def label(self) -> str:
        source, op, mode, dtypes = self.key[:4]
        return f"{source}:{op} [{mode}] {dtypes}"


@dataclass
class VersionDiff:
    base: str
    new: str
    counts: dict[str, dict[str, int]]  # version -> verdict -> n
    newly_failing: list[Change] = field(default_factory=list)
    newly_passing: list[Change] = field(default_factory=list)
    only_in_base: int = 0
    only_in_new: int = 0
    environment: dict[str, dict[str, str]] = field(default_factory=dict)  # version -> step -> status
    newly_broken_steps: list[str] = field(default_factory=list)
    api_changes: list[dict[str, str]] = field(default_factory=list)
    core_overloads_added: list[str] = field(default_factory=list)
    core_overloads_removed: list[str] = field(default_factory=list)

    @property
    def regressed(self) -> bool:
        return bool(self.newly_failing or self.newly_broken_steps)

    def grouped(self, changes: Iterable[Change]) -> dict[str, dict[str, list[Change]]]:
        """op -> cause -> changes."""
        groups: dict[str, dict[str, list[Change]]] = defaultdict(lambda: defaultdict(list))
        for c in changes:
            groups[c.op][c.cause].append(c)
        return {op: dict(by_cause) for op, by_cause in sorted(groups.items())}


def _latest(rows: Iterable[Mapping[str, Any]]) -> dict[tuple, Mapping[str, Any]]:
    """Per case, the row of the latest run (rows sorted by run id, then row id)."""
    chosen: dict[tuple, Mapping[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (r.get("run_id", 0), r.get("id", 0))):
        chosen[case_key(row)] = row
    return chosen


def _collapse(rows: list[Mapping[str, Any]]) -> str:
    """One verdict for the examples of a case key: failing if any failed."""
    verdicts = {r["verdict"] for r in rows}
    for v in ("error", "fail", "xpass", "skip"):
        if v in verdicts and (v != "skip" or verdicts == {"skip"}):
            return v
    return "xfail" if "xfail" in verdicts else "pass"


def diff_results(base_rows: list[Mapping[str, Any]], new_rows: list[Mapping[str, Any]],
                 base: str, new: str) -> VersionDiff:
    def by_key(rows):
        grouped: dict[tuple, list] = defaultdict(list)
        for r in rows:
            grouped[case_key(r)].append(r)
        return grouped

    a, b = by_key(base_rows), by_key(new_rows)
    counts = {}
    for version, rows in ((base, base_rows), (new, new_rows)):
        tally: dict[str, int] = defaultdict(int)
        for r in rows:
            tally[r["verdict"]] += 1
        counts[version] = dict(tally)
    result = VersionDiff(base, new, counts)
    for key in sorted(set(a) & set(b)):
        before, after = _collapse(a[key]), _collapse(b[key])
        failing_after = next((r for r in b[key] if r["verdict"] in FAILING), None)
        failing_before = next((r for r in a[key] if r["verdict"] in FAILING), None)
        if before in PASSING and after in FAILING:
            result.newly_failing.append(Change(key, key[1], before, after, cause(failing_after.get("message")),
                                               failing_after.get("reproducer") or ""))
        elif before in FAILING and after in PASSING:
            result.newly_passing.append(Change(key, key[1], before, after, cause(failing_before.get("message"))))
    # A case drawn only on the new version (draws can differ between torch releases) that fails, of an
    # op, mode and dtype whose every case passed on the base version, is newly failing as well: for the
    # backend team that op broke. A failing case of an op the base never ran says nothing about a change.
    base_groups = {_group(k) for k in a}
    base_failing = {_group(k) for k in a if _collapse(a[k]) in FAILING}
    for key in sorted(set(b) - set(a)):
        failing_after = next((r for r in b[key] if r["verdict"] in FAILING), None)
        if failing_after is not None and _group(key) in base_groups and _group(key) not in base_failing:
            result.newly_failing.append(Change(key, key[1], NOT_DRAWN, _collapse(b[key]),
                                               cause(failing_after.get("message")),
                                               failing_after.get("reproducer") or ""))
    result.only_in_base = len(set(a) - set(b))
    result.only_in_new = len(set(b) - set(a))
    return result


NOT_DRAWN = "not drawn"  # a Change's ``before`` when the base version did not draw that case


def _group(key: tuple) -> tuple:
    """(source, op, mode, dtypes) of a case key."""
    return key[:4]


def diff_environment(diff: VersionDiff, base_env: Mapping[str, str], new_env: Mapping[str, str]) -> None:
    """Install/build/import status per version; a step that worked before and fails now regresses."""
    diff.environment = {diff.base: dict(base_env), diff.new: dict(new_env)}
    for step in ENV_STEPS:
        if base_env.get(step) == "ok" and new_env.get(step) not in (None, "ok"):
            diff.newly_broken_steps.append(f"{step}: {new_env.get(step)}")


def diff_apis(diff: VersionDiff, base_probe: Mapping[str, Any] | None, new_probe: Mapping[str, Any] | None) -> None:
    """APIs whose fingerprint changed, appeared or vanished, and the core opset's drift."""
    if not base_probe or not new_probe:
        return
    before, after = base_probe.get("apis", {}), new_probe.get("apis", {})
    for path in sorted(set(before) | set(after)):
        old = before.get(path, {}).get("value", "absent from probe")
        new = after.get(path, {}).get("value", "absent from probe")
        if old != new:
            info = after.get(path) or before.get(path)
            diff.api_changes.append({"api": path, "group": info.get("group", ""), "why": info.get("why", ""),
                                     "before": old, "after": new})
    old_core, new_core = set(base_probe.get("core_overloads", [])), set(new_probe.get("core_overloads", []))
    diff.core_overloads_added = sorted(new_core - old_core)
    diff.core_overloads_removed = sorted(old_core - new_core)


def summary_text(diff: VersionDiff, limit: int = 20) -> str:
    """The one-screen text of the diff (what the CLI prints and the nightly job logs)."""
    lines = [f"torch {diff.base} -> {diff.new}"]
    for version in (diff.base, diff.new):
        env = diff.environment.get(version, {})
        status = ", ".join(f"{k} {env[k]}" for k in ENV_STEPS if k in env) or "no environment status"
        c = diff.counts.get(version, {})
        tally = ", ".join(f"{v} {c[v]}" for v in sorted(c)) or "no results"
        lines.append(f"  {version}: {status}; {tally}")
    lines.append(f"  newly failing: {len(diff.newly_failing)}   newly passing: {len(diff.newly_passing)}   "
                 f"cases only in {diff.base}: {diff.only_in_base}, only in {diff.new}: {diff.only_in_new}")
    for step in diff.newly_broken_steps:
        lines.append(f"  NEWLY BROKEN {step}")
    for title, changes in (("newly failing", diff.newly_failing), ("newly passing", diff.newly_passing)):
        shown = 0
        for op, causes in diff.grouped(changes).items():
            for why, items in causes.items():
                if shown < limit:
                    lines.append(f"  {title}: {op} x{len(items)}: {why}")
                shown += 1
        if shown > limit:
            lines.append(f"  ... {shown - limit} more {title} groups")
    for change in diff.api_changes[:limit]:
        lines.append(f"  API {change['api']} ({change['group']}): {change['before'][:70]} -> {change['after'][:70]}")
    if diff.core_overloads_added or diff.core_overloads_removed:
        lines.append(f"  core ATen opset: +{len(diff.core_overloads_added)} -{len(diff.core_overloads_removed)} "
                     f"overloads")
    lines.append("  verdict: " + ("REGRESSED" if diff.regressed else "no new failures"))
    return "\n".join(lines)


def to_json(diff: VersionDiff) -> dict[str, Any]:
    def change(c: Change) -> dict[str, Any]:
        return {"case": list(c.key), "label": c.label, "op": c.op, "before": c.before, "after": c.after,
                "cause": c.cause, "reproducer": c.reproducer}

    return {"base": diff.base, "new": diff.new, "counts": diff.counts, "regressed": diff.regressed,
            "newly_failing": [change(c) for c in diff.newly_failing],
            "newly_passing": [change(c) for c in diff.newly_passing],
            "only_in_base": diff.only_in_base, "only_in_new": diff.only_in_new,
            "environment": diff.environment, "newly_broken_steps": diff.newly_broken_steps,
            "api_changes": diff.api_changes, "core_overloads_added": diff.core_overloads_added,
            "core_overloads_removed": diff.core_overloads_removed}
