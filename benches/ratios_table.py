"""Ratios of each neuron mode to CPU eager within one benchmark group (one run), for pytest-benchmark's JSON.

A group is one case and dtype; its benchmarks are the modes. The ratio uses each side's best
(minimum) time per call, as the one-run ratio scripts do: the least disturbed sample on a shared
machine.
"""

from __future__ import annotations

from typing import Any

from benches.modes import BASELINE, MODES


def add_ratios(benchmarks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set ``extra_info["ratio_vs_cpu_eager"]`` on every benchmark whose group has a CPU eager baseline;
    return one summary row per group (case, dtype, best seconds and ratio per mode)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for bench in benchmarks:
        groups.setdefault(bench.get("group") or "", []).append(bench)
    rows = []
    for group, members in groups.items():
        by_mode = {b["extra_info"].get("mode"): b for b in members}
        base = by_mode.get(BASELINE)
        if base is None:
            continue
        base_min = base["stats"]["min"]
        row: dict[str, Any] = {"group": group, "case": base["extra_info"].get("case"),
                               "dtype": base["extra_info"].get("dtype"), "seconds": {}, "ratio": {}}
        for mode in MODES:
            bench = by_mode.get(mode)
            if bench is None:
                continue
            ratio = bench["stats"]["min"] / base_min if base_min else None
            bench["extra_info"]["ratio_vs_cpu_eager"] = ratio
            row["seconds"][mode] = bench["stats"]["min"]
            row["ratio"][mode] = ratio
        rows.append(row)
    return rows


def format_rows(rows: list[dict[str, Any]], skipped: dict[str, str]) -> list[str]:
    """The terminal table: one line per group, best time per mode and the ratio to CPU eager."""
    lines = [f"{'case':26s} {'dtype':5s} " + " ".join(f"{m:>20s}" for m in MODES)]
    for row in rows:
        cells = []
        for mode in MODES:
            if mode not in row["seconds"]:
                cells.append(f"{'skipped':>20s}")
            elif mode == BASELINE:
                cells.append(f"{row['seconds'][mode] * 1e3:17.3f} ms")
            else:
                cells.append(f"{row['seconds'][mode] * 1e3:10.3f} ms {row['ratio'][mode]:6.1f}x")
        lines.append(f"{row['case']:26s} {row['dtype']:5s} " + " ".join(cells))
    for mode, reason in sorted(skipped.items()):
        lines.append(f"{mode} skipped: {reason}")
    return lines
