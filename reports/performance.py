"""The performance page's content: the latest pytest-benchmark run (modes side by side, ratios to CPU
eager, simulated device time, TensorE utilization, compile seconds) beside asv's history.

Inputs are files under build/: pytest-benchmark JSON (build/benchmarks/*.json, written by
``pytest benches --benchmark-only``) and asv's results (build/asv/results/<machine>/<commit>-*.json).
"""

from __future__ import annotations

import ast
import itertools
import math
import os
import time
from pathlib import Path
from typing import Any

from reports import data, svg

MODES = ("cpu-eager", "eager", "adaptive", "compiled")
BASELINE = "cpu-eager"
NEURON_MODES = MODES[1:]


def _geomean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def latest_pytest_benchmark(directory: Path) -> tuple[Path | None, dict | None]:
    """The newest pytest-benchmark JSON (by its own ``datetime``, then by name)."""
    best: tuple[str, str] | None = None
    chosen = None
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        doc = data.load_json(path)
        if not isinstance(doc, dict) or "benchmarks" not in doc:
            continue
        key = (str(doc.get("datetime", "")), path.name)
        if best is None or key > best:
            best, chosen = key, (path, doc)
    return chosen if chosen else (None, None)


def pytest_groups(doc: dict) -> list[dict[str, Any]]:
    """One row per case and dtype: per mode, best seconds, ratio to CPU eager and the device's counters."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for bench in doc.get("benchmarks", []):
        info = bench.get("extra_info", {})
        case, dtype, mode = info.get("case"), info.get("dtype"), info.get("mode")
        if not case or mode not in MODES:
            continue
        group = groups.setdefault((case, dtype), {"case": case, "dtype": dtype,
                                                 "description": info.get("description", ""), "modes": {}})
        stats = bench.get("stats", {})
        group["modes"][mode] = {"min": stats.get("min"), "median": stats.get("median"),
                                "rounds": stats.get("rounds"), **{k: v for k, v in info.items()
                                                                  if k not in ("case", "dtype", "mode", "description")}}
    rows = []
    for group in groups.values():
        base = group["modes"].get(BASELINE, {}).get("min")
        for mode, entry in group["modes"].items():
            if entry.get("ratio_vs_cpu_eager") is None and base and entry.get("min"):
                entry["ratio_vs_cpu_eager"] = entry["min"] / base
        rows.append(group)
    for failure in doc.get("neuronsim", {}).get("failed", []):
        group = groups.get((failure.get("case"), failure.get("dtype")))
        if group is None:
            group = groups[(failure.get("case"), failure.get("dtype"))] = {
                "case": failure.get("case"), "dtype": failure.get("dtype"), "description": "", "modes": {}}
            rows.append(group)
        group.setdefault("failed", {})[failure.get("mode")] = failure.get("error", "")
    for group in rows:
        group.setdefault("failed", {})
    return rows


def _label(group: dict[str, Any]) -> str:
    return f"{group['case']} {group['dtype']}"


def pytest_charts(groups: list[dict[str, Any]]) -> dict[str, svg.Chart]:
    labels = [_label(g) for g in groups]
    ratios = {(_label(g), m): e.get("ratio_vs_cpu_eager") for g in groups for m, e in g["modes"].items()
              if m != BASELINE and e.get("ratio_vs_cpu_eager")}
    device = {(_label(g), m): e.get("device_seconds") * 1e6 for g in groups for m, e in g["modes"].items()
              if e.get("device_seconds")}
    util = {(_label(g), m): e.get("tensore_utilization") for g in groups for m, e in g["modes"].items()
            if e.get("tensore_utilization") is not None}
    charts = {}
    if ratios:
        charts["ratio"] = svg.hbar_chart("Wall time per call ÷ CPU eager (log scale; dashed line = 1×)", labels,
                                         list(NEURON_MODES), ratios, fmt=lambda v: f"{v:.3g}×", log=True,
                                         reference=1.0)
    if device:
        charts["device"] = svg.hbar_chart("Simulated NeuronCore time per call, µs (log scale)", labels,
                                          list(NEURON_MODES), device, fmt=lambda v: f"{v:.3g}", log=True)
    if util:
        charts["utilization"] = svg.hbar_chart("TensorE utilization (busy time ÷ device time)", labels,
                                               list(NEURON_MODES), util, fmt=lambda v: f"{v:.0%}",
                                               domain=(0.0, 1.0))
    return charts


# --- asv ---------------------------------------------------------------------------------------

def _param_values(params: list[list[str]]) -> list[tuple]:
    decoded = [[_literal(p) for p in values] for values in params]
    return list(itertools.product(*decoded)) if decoded else [()]


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def asv_results(results_dir: Path) -> list[dict[str, Any]]:
    """Every asv result file (one per machine and commit), oldest first, flattened to rows."""
    runs = []
    for path in sorted(results_dir.glob("*/*.json")) if results_dir.is_dir() else []:
        if path.name == "machine.json":
            continue
        doc = data.load_json(path)
        if not isinstance(doc, dict) or "results" not in doc:
            continue
        columns = doc.get("result_columns", ["result", "params"])
        rows = []
        for name, values in doc["results"].items():
            entry = dict(zip(columns, values))
            result = entry.get("result")
            if not isinstance(result, list):
                continue
            for combo, value in zip(_param_values(entry.get("params") or []), result):
                if isinstance(value, (int, float)) and math.isfinite(value):
                    rows.append({"benchmark": name, "params": combo, "value": float(value)})
        runs.append({"commit": str(doc.get("commit_hash", ""))[:10], "date": doc.get("date") or 0,
                     "machine": path.parent.name, "rows": rows, "file": str(path)})
    runs.sort(key=lambda r: (r["date"], r["commit"]))
    return runs


def _date(ms: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ms / 1000)) if ms else "?"


def asv_time_table(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The time_ benchmarks of one asv run as (suite, case, dtype) rows with a column per mode."""
    table: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in run["rows"]:
        if ".time_" not in row["benchmark"] or len(row["params"]) != 3:
            continue
        case, mode, dtype = row["params"]
        suite = row["benchmark"].split(".")[0]
        entry = table.setdefault((suite, case, dtype), {"suite": suite, "case": case, "dtype": dtype, "seconds": {}})
        entry["seconds"][mode] = row["value"]
    rows = []
    for entry in table.values():
        base = entry["seconds"].get(BASELINE)
        entry["ratio"] = {m: v / base for m, v in entry["seconds"].items() if base and m != BASELINE}
        rows.append(entry)
    return sorted(rows, key=lambda r: (r["suite"], r["case"], r["dtype"]))


def asv_tracks(run: dict[str, Any]) -> list[dict[str, Any]]:
    """track_ and peakmem_ values of one asv run (device time, utilization, recompiles, compile seconds...)."""
    rows = []
    for row in run["rows"]:
        short = row["benchmark"].split(".")[-1]
        if short.startswith(("track_", "peakmem_")):
            rows.append({"benchmark": row["benchmark"], "metric": short, "params": " · ".join(map(str, row["params"])),
                         "value": row["value"]})
    return rows


def asv_history_chart(runs: list[dict[str, Any]]) -> svg.Chart | None:
    """Per commit, the geometric mean over cases of (mode time ÷ CPU eager time), one line per mode."""
    if not runs:
        return None
    labels, series = [], {m: [] for m in NEURON_MODES}
    for run in runs:
        labels.append(f"{run['commit'][:7]} {_date(run['date'])[5:]}")
        table = asv_time_table(run)
        for mode in NEURON_MODES:
            series[mode].append(_geomean([r["ratio"].get(mode) for r in table]))
    series = {m: v for m, v in series.items() if any(x is not None for x in v)}
    if not series:
        return None
    return svg.line_chart("asv history: geometric mean of time ÷ CPU eager per commit (log scale)", labels, series,
                          fmt=lambda v: f"{v:.3g}×")


def compile_rows(groups: list[dict[str, Any]], tracks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for group in groups:
        entry = group["modes"].get("compiled")
        if entry and entry.get("warmup_seconds") is not None:
            rows.append({"source": "pytest-benchmark (first call: trace + compile + run)", "what": _label(group),
                         "seconds": entry["warmup_seconds"]})
    for track in tracks:
        if "compile_seconds" in track["metric"]:
            rows.append({"source": f"asv {track['metric']}", "what": track["params"], "seconds": track["value"]})
    return rows


def build(benchmarks_dir: Path, asv_results_dir: Path, asv_html: Path, out_dir: Path) -> dict[str, Any]:
    path, doc = latest_pytest_benchmark(benchmarks_dir)
    groups = pytest_groups(doc) if doc else []
    neuronsim = (doc or {}).get("neuronsim", {})
    runs = asv_results(asv_results_dir)
    latest = runs[-1] if runs else None
    tracks = asv_tracks(latest) if latest else []
    asv_index = asv_html / "index.html"
    geomeans = {m: _geomean([g["modes"].get(m, {}).get("ratio_vs_cpu_eager") for g in groups]) for m in NEURON_MODES}
    return {
        "pytest_path": str(path) if path else None,
        "pytest_datetime": (doc or {}).get("datetime"),
        "pytest_commit": ((doc or {}).get("commit_info") or {}).get("id"),
        "groups": groups,
        "skipped": neuronsim.get("skipped", {}),
        "failed": neuronsim.get("failed", []),
        "charts": pytest_charts(groups),
        "geomeans": {m: v for m, v in geomeans.items() if v is not None},
        "modes": MODES,
        "asv_runs": [{"commit": r["commit"], "date": _date(r["date"]), "machine": r["machine"],
                      "values": len(r["rows"])} for r in runs],
        "asv_latest": latest and {"commit": latest["commit"], "date": _date(latest["date"]),
                                  "machine": latest["machine"]},
        "asv_table": asv_time_table(latest) if latest else [],
        "asv_tracks": tracks,
        "asv_history": asv_history_chart(runs),
        "asv_link": os.path.relpath(asv_index, out_dir) if asv_index.exists() else None,
        "asv_html": str(asv_html),
        "compile": compile_rows(groups, tracks),
    }
