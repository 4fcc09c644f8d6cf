"""The conformance page's content: matrix, pass rates, OpInfo sweep, failures, error statistics,
core-opset coverage and the trend against the previous run — all computed from store rows."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from reports import data, junit, svg

MODE_ORDER = ("eager", "adaptive", "compiled")
FAILURE_LIMIT = 500  # failures listed with their reproducer; the rest are counted


@dataclass
class Cell:
    verdict: str            # the most severe verdict of the cell's cases
    tier: str | None        # the worst tier the cases reached (None: no device op recorded)
    counts: dict[str, int]  # cases per verdict

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def title(self) -> str:
        parts = [f"{n} {v}" for v, n in self.counts.items() if n]
        return ", ".join(parts) + (f"; tier {self.tier}" if self.tier else "; no device op recorded")


def rate(counts: dict[str, int]) -> float | None:
    """Pass rate: passes over cases that ran to a verdict (skips excluded; expected failures count as not passing)."""
    ran = sum(counts.get(v, 0) for v in ("pass", "fail", "xfail", "xpass"))
    return counts.get("pass", 0) / ran if ran else None


def _counts(verdicts: pd.Series) -> dict[str, int]:
    counted = verdicts.value_counts()
    return {v: int(counted.get(v, 0)) for v in data.VERDICTS}


def _worst_tier(tiers: pd.Series) -> str | None:
    present = [t for t in tiers if isinstance(t, str)]
    return max(present, key=data.TIER_SEVERITY.get) if present else None


def matrix(rows: pd.DataFrame) -> dict[str, Any]:
    """op × (dtype, mode) cells, ops grouped by family."""
    if rows.empty:
        return {"columns": [], "families": []}
    order = {m: i for i, m in enumerate(MODE_ORDER)}
    columns = sorted({(d, m) for d, m in zip(rows["dtype"], rows["mode"])}, key=lambda c: (c[0], order.get(c[1], 9), c[1]))
    families = []
    for family, fam_rows in rows.groupby("family", sort=True):
        ops = []
        for op, op_rows in fam_rows.groupby("op", sort=True):
            cells = {}
            for (dtype, mode), cell_rows in op_rows.groupby(["dtype", "mode"]):
                counts = _counts(cell_rows["verdict"])
                verdict = max((v for v, n in counts.items() if n), key=data.SEVERITY.get)
                cells[(dtype, mode)] = Cell(verdict, _worst_tier(cell_rows["tier"]), counts)
            ops.append({"op": op, "cells": [cells.get(c) for c in columns]})
        families.append({"family": family, "ops": ops})
    return {"columns": columns, "families": families}


def pass_rates(rows: pd.DataFrame) -> list[dict[str, Any]]:
    table = []
    for (family, mode), group in rows.groupby(["family", "mode"], sort=True):
        counts = _counts(group["verdict"])
        table.append({"family": family, "mode": mode, **counts, "total": len(group), "rate": rate(counts)})
    return table


def pass_rate_chart(table: list[dict[str, Any]]) -> svg.Chart | None:
    if not table:
        return None
    rows = sorted({r["family"] for r in table})
    series = sorted({r["mode"] for r in table})
    values = {(r["family"], r["mode"]): r["rate"] for r in table if r["rate"] is not None}
    return svg.hbar_chart("Pass rate by family and mode", rows, series, values, fmt=lambda v: f"{v:.0%}",
                          domain=(0.0, 1.0))


def failures(rows: pd.DataFrame) -> tuple[list[dict[str, Any]], int]:
    failed = rows[rows["verdict"].isin(["fail", "xpass"])]
    listed = []
    for _, row in failed.head(FAILURE_LIMIT).iterrows():
        listed.append({"source": row["source"], "op": row["op"], "family": row["family"], "dtype": row["dtype"],
                       "mode": row["mode"], "verdict": row["verdict"], "message": row.get("message") or "",
                       "expression": row.get("expression") or "", "reproducer": row.get("reproducer") or "",
                       "xfail_reason": row.get("xfail_reason") or "", "run_id": int(row["run_id"])})
    return listed, len(failed)


def _finite_max(series: pd.Series) -> float | None:
    values = pd.to_numeric(series, errors="coerce").dropna()
    values = values[values.apply(math.isfinite)]
    return float(values.max()) if len(values) else None


def error_stats(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """Max abs / rel error and ULP distance per op and dtype, over every compared case."""
    compared = rows.dropna(subset=["max_abs", "max_rel", "ulp"], how="all")
    table = []
    for (op, dtype), group in compared.groupby(["op", "dtype"], sort=True):
        table.append({"op": op, "dtype": dtype, "cases": len(group), "max_abs": _finite_max(group["max_abs"]),
                      "max_rel": _finite_max(group["max_rel"]), "ulp": _finite_max(group["ulp"])})
    return table


def opinfo(rows: pd.DataFrame) -> dict[str, Any] | None:
    if rows.empty:
        return None
    counts = _counts(rows["verdict"])
    per_op = []
    for op, group in rows.groupby("op", sort=True):
        op_counts = _counts(group["verdict"])
        per_op.append({"op": op, "samples": len(group), **op_counts, "rate": rate(op_counts),
                       "dtypes": ", ".join(sorted(set(group["dtype"])))})
    troubled = [r for r in per_op if r["fail"] or r["xpass"]]
    return {"ops": len(per_op), "samples": len(rows), "counts": counts, "rate": rate(counts),
            "troubled": troubled, "per_op": per_op}


def coverage(path: Path, rows: pd.DataFrame) -> dict[str, Any] | None:
    """Core ATen opset coverage from `python -m device_impl.coverage --json` (build/coverage.json),
    with the overloads the suite's cases actually reached."""
    report = data.load_json(path)
    if not isinstance(report, dict) or "core" not in report:
        return None
    reached: set[str] = set()
    for names in rows.get("reached", []):
        reached.update(names)
    entries = []
    for op, entry in sorted(report["core"].items()):
        entries.append({"op": op, "tier": entry.get("tier", "?"), "source": entry.get("source", ""),
                        "exercised": op in reached})
    by_tier: dict[str, int] = {}
    for entry in entries:
        by_tier[entry["tier"]] = by_tier.get(entry["tier"], 0) + 1
    exercised = sum(e["exercised"] for e in entries)
    return {"torch": report.get("torch", "?"), "total": len(entries), "by_tier": by_tier, "entries": entries,
            "exercised": exercised, "not_native": [e for e in entries if e["tier"] != "native"],
            "path": str(path)}


def _cell_verdicts(rows: pd.DataFrame) -> dict[tuple[str, str], str]:
    verdicts = {}
    for key, group in rows.groupby(["op", "dtype"]):
        verdicts[key] = max(group["verdict"], key=data.SEVERITY.get)
    return verdicts


def trend(current: pd.DataFrame, previous: pd.DataFrame, current_id: int, previous_id: int | None
          ) -> dict[str, Any]:
    """This run against the previous one of the same mode, on the (op, dtype) pairs both ran."""
    if previous_id is None or previous.empty:
        return {"current": current_id, "previous": None}
    now, before = _cell_verdicts(current), _cell_verdicts(previous)
    common = sorted(set(now) & set(before))
    changes = [{"op": op, "dtype": dtype, "before": before[(op, dtype)], "now": now[(op, dtype)]}
               for op, dtype in common if before[(op, dtype)] != now[(op, dtype)]]
    passing_now = sum(now[k] == "pass" for k in common)
    passing_before = sum(before[k] == "pass" for k in common)
    return {"current": current_id, "previous": previous_id, "common": len(common),
            "only_now": len(set(now) - set(before)), "only_before": len(set(before) - set(now)),
            "rate_now": passing_now / len(common) if common else None,
            "rate_before": passing_before / len(common) if common else None,
            "new_failures": [c for c in changes if c["now"] == "fail"],
            "fixed": [c for c in changes if c["before"] == "fail" and c["now"] != "fail"],
            "changes": changes}


def mutation(conn) -> dict[str, Any] | None:
    """The mutation score of the latest finished ``python -m harness mutate`` run: per class, how
    many mutants the op suite caught, how many survived (each with why) and how many a rule excludes.

    A kernel no stored case reached counts its mutants as survivors (a coverage gap). Where the op-suite run the
    mutants were judged against was cut short (a time budget), most kernels are unreached for that reason alone,
    and the score is not meaningful: ``meaningful`` False, with the unreached count and the cut run beside the
    score over the reached kernels only (``reached_score``)."""
    frame = data.mutants(conn)
    if frame.empty:
        return None
    reached = frame["reached"] if "reached" in frame else pd.Series([None] * len(frame), index=frame.index)
    unreached = frame[reached == 0]
    on_reached = frame[reached == 1]
    reached_caught = int((on_reached["status"] == "caught").sum())
    reached_judged = reached_caught + int((on_reached["status"] == "survived").sum())
    env = data._loads(frame["run_environment"].iloc[0] if "run_environment" in frame else None, {})
    source = env.get("mutate_source_run") if isinstance(env, dict) else None
    source_cut = data.cut_short(conn, int(source)) if str(source or "").isdigit() else None
    classes = []
    for cls, group in frame.groupby("class", sort=False):
        counts = {s: int((group["status"] == s).sum()) for s in ("caught", "survived", "excluded")}
        judged = counts["caught"] + counts["survived"]
        classes.append({"class": cls, **counts, "score": counts["caught"] / judged if judged else None})
    caught = int((frame["status"] == "caught").sum())
    judged = caught + int((frame["status"] == "survived").sum())
    survivors = frame[frame["status"] == "survived"][["op", "class", "mode", "reason", "cases_run"]]
    rules = frame[frame["status"] == "excluded"].groupby(["class", "reason"]).size().reset_index(name="mutants")
    return {"run": int(frame["run_id"].iloc[0]), "ops": int(frame["op"].nunique()), "mutants": len(frame),
            "caught": caught, "judged": judged, "score": caught / judged if judged else None,
            "seconds": float(frame["seconds"].sum()), "classes": classes,
            "survivors": survivors.to_dict("records"), "rules": rules.to_dict("records"),
            "modes": sorted(set(frame["mode"])),
            "source_run": int(source) if str(source or "").isdigit() else None, "source_cut": source_cut,
            "unreached_kernels": int(unreached["op"].nunique()), "unreached_mutants": len(unreached),
            "reached_caught": reached_caught, "reached_judged": reached_judged,
            "reached_score": reached_caught / reached_judged if reached_judged else None,
            "meaningful": source_cut is None}


CONTRACT_SOURCES = ("contract", "module")
# harness.dynamic's sequences (one function compiled with torch.compile's default dynamic=None, called at three
# sizes): every op-suite mode's run may hold some (``make test``'s eager run a sample), the compiled mode's run all
DYNAMIC_SOURCES = ("dynamic",)


def _latest_run(conn, sources: tuple[str, ...], most: bool = False) -> int | None:
    """The latest finished run holding results of ``sources``; with ``most``, of the finished runs holding any,
    the one holding the most (the compiled mode's full sweep over a later run's sample), the latest among equals."""
    marks = ",".join("?" * len(sources))
    found = data._table(conn, f"""
        SELECT res.run_id AS id, COUNT(*) AS n FROM results res JOIN runs r ON r.id = res.run_id
        WHERE r.finished IS NOT NULL AND res.source IN ({marks}) GROUP BY res.run_id
        ORDER BY {'n DESC, ' if most else ''}res.run_id DESC LIMIT 1""", tuple(sources))
    return None if found.empty else int(found["id"].iloc[0])


def contract(conn) -> dict[str, Any] | None:
    """The device-contract checks (harness.contract, harness.modules) of the latest finished run holding any, and
    harness.dynamic's sequences of the finished run holding the most: one row per (source, check, mode) with its
    verdict counts, and the failures (op, check, message)."""
    parts = []
    runs = []
    for sources, most in ((CONTRACT_SOURCES, False), (DYNAMIC_SOURCES, True)):
        run_id = _latest_run(conn, sources, most)
        if run_id is None:
            continue
        runs.append(run_id)
        frame = data.results(conn, [run_id])
        parts.append(frame[frame["source"].isin(sources)])
    if not parts:
        return None
    frame = pd.concat(parts)
    if "check_name" not in frame:
        return None
    rows = []
    for (source, check, mode), group in frame.groupby(["source", "check_name", "mode"], sort=True):
        counts = _counts(group["verdict"])
        rows.append({"source": source, "check": check, "mode": mode, **counts,
                     "ops": int(group["op"].nunique()), "rate": rate(counts)})
    failed = frame[frame["verdict"].isin(["fail", "xpass"])]
    listed = [{"op": r.op, "check": r.check_name, "dtype": r.dtype, "mode": r.mode, "message": r.message or ""}
              for r in failed.itertuples()][:FAILURE_LIMIT]
    return {"run": ", ".join(str(r) for r in dict.fromkeys(runs)), "rows": rows, "failures": listed,
            "failure_count": len(failed)}


def build(conn, coverage_path: Path, junit_dir: Path | None = None) -> dict[str, Any]:
    selection = data.select_runs(conn)
    frame = data.results(conn, selection.run_ids)
    spec = data.mode_rows(frame, selection.current, "spec")
    opinfo_rows = frame[(frame["run_id"] == selection.opinfo) & (frame["source"] == "opinfo")] \
        if selection.opinfo is not None else frame.iloc[0:0]
    rates = pass_rates(spec)
    listed, failure_count = failures(pd.concat([spec, opinfo_rows]))
    trends = {}
    for mode, run_id in selection.current.items():
        previous_id = selection.previous.get(mode)
        previous = data.mode_rows(data.results(conn, [previous_id]), {mode: previous_id}) if previous_id else None
        trends[mode] = trend(spec[spec["mode"] == mode], previous if previous is not None else spec.iloc[0:0],
                             run_id, previous_id)
    mode_totals = {mode: _counts(group["verdict"]) for mode, group in spec.groupby("mode")}
    cut = {mode: data.cut_short(conn, run_id) for mode, run_id in selection.current.items()}
    cut["OpInfo sweep"] = data.cut_short(conn, selection.opinfo) if selection.opinfo not in selection.current.values() \
        else None
    return {
        "selection": selection,
        "cut": {role: c for role, c in cut.items() if c is not None},
        "totals": _counts(spec["verdict"]) if not spec.empty else dict.fromkeys(data.VERDICTS, 0),
        "mode_totals": {m: {**c, "rate": rate(c)} for m, c in mode_totals.items()},
        "matrix": matrix(spec),
        "pass_rates": rates,
        "pass_rate_chart": pass_rate_chart(rates),
        "failures": listed,
        "failure_count": failure_count,
        "failure_limit": FAILURE_LIMIT,
        "error_stats": error_stats(spec),
        "opinfo": opinfo(opinfo_rows),
        "coverage": coverage(coverage_path, pd.concat([spec, opinfo_rows])),
        "trends": trends,
        "cases": len(spec),
        "pytest": junit.outcomes(junit_dir) if junit_dir is not None else {},
        "mutation": mutation(conn),
        "contract": contract(conn),
    }
