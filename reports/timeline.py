"""The engine timeline of one program, drawn from its Chrome-trace JSON (benches/matmul_timeline.py).

Each (process, thread) of the trace is a lane: the kernel lane, then DMA, TensorE, VectorE,
ScalarE, GpSimdE, as the engine names them. Instructions closer together than half a pixel are
drawn as one shape (its tooltip says how many), so a long trace stays a small page.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reports import data, svg

WIDTH, LABEL, LANE_H = 1000, 110, 24


@dataclass
class Lane:
    name: str
    category: str
    events: list[tuple[float, float, str]]  # (start µs, duration µs, instruction)

    @property
    def busy(self) -> float:
        return sum(d for _, d, _ in self.events)


def lanes(trace: dict[str, Any]) -> list[Lane]:
    names: dict[tuple[Any, Any], str] = {}
    processes: dict[Any, str] = {}
    grouped: dict[tuple[Any, Any], Lane] = {}
    for event in trace.get("traceEvents", []):
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            names[(event.get("pid"), event.get("tid"))] = str(event.get("args", {}).get("name", ""))
        elif event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event.get("pid")] = str(event.get("args", {}).get("name", ""))
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X":
            continue
        key = (event.get("pid"), event.get("tid"))
        lane = grouped.setdefault(key, Lane("", str(event.get("cat", "")), []))
        lane.events.append((float(event.get("ts", 0.0)), float(event.get("dur", 0.0)), str(event.get("name", ""))))
    result = []
    for key in sorted(grouped, key=lambda k: (str(k[0]), k[1] if isinstance(k[1], int) else 0)):
        lane = grouped[key]
        thread = names.get(key, f"thread {key[1]}")
        process = processes.get(key[0], f"process {key[0]}")
        lane.name = f"{process} {thread}" if len(processes) > 1 else thread
        lane.events.sort()
        result.append(lane)
    return result


def chart(title: str, trace_lanes: list[Lane]) -> tuple[svg.Chart, float, float]:
    starts = [s for lane in trace_lanes for s, _, _ in lane.events]
    ends = [s + d for lane in trace_lanes for s, d, _ in lane.events]
    t0, t1 = (min(starts), max(ends)) if starts else (0.0, 1.0)
    span = (t1 - t0) or 1.0
    plot = WIDTH - LABEL - 10
    height = 30 + LANE_H * len(trace_lanes)
    result = svg.Chart(title, WIDTH, height, kind="timeline")
    px_per_us = plot / span
    for tick in range(6):
        x = LABEL + plot * tick / 5
        result.lines.append(svg.Line(x, 4, x, height - 18, "#e3e3e3"))
        anchor = {0: "start", 5: "end"}.get(tick, "middle")
        result.texts.append(svg.Text(x, height - 4, f"{span * tick / 5:.2f} µs", anchor, 10, "#555"))
    for i, lane in enumerate(trace_lanes):
        y = 6 + i * LANE_H
        result.texts.append(svg.Text(LABEL - 6, y + LANE_H / 2 + 3, lane.name, "end"))
        fill = svg.LANE_COLORS.get(lane.category, "#888")
        merged: list[list[Any]] = []  # [start, end, count, first name]
        for start, duration, name in lane.events:
            end = start + duration
            if merged and (start - merged[-1][1]) * px_per_us < 0.5 and (end - merged[-1][0]) * px_per_us < 3:
                merged[-1][1] = max(merged[-1][1], end)
                merged[-1][2] += 1
            else:
                merged.append([start, end, 1, name])
        for start, end, count, name in merged:
            label = name if count == 1 else f"{count} instructions from {name}"
            result.rects.append(svg.Rect(LABEL + (start - t0) * px_per_us, y + 2, max((end - start) * px_per_us, 0.8),
                                         LANE_H - 6, fill, f"{lane.name}: {label}, {start - t0:.3f}–{end - t0:.3f} µs"))
    return result, t0, t1


def build(trace_dir: Path, out_dir: Path, chosen: list[str] | None = None) -> dict[str, Any]:
    """Every trace under ``trace_dir`` (or the chosen names), drawn, and copied beside the page for download."""
    paths = sorted(trace_dir.glob("*.json")) if trace_dir.is_dir() else []
    if chosen:
        wanted = {Path(c).stem for c in chosen}
        paths = [p for p in paths if p.stem in wanted]
    programs = []
    (out_dir / "traces").mkdir(parents=True, exist_ok=True)
    for path in paths:
        trace = data.load_json(path)
        if not isinstance(trace, dict) or "traceEvents" not in trace:
            continue
        trace_lanes = lanes(trace)
        picture, t0, t1 = chart(path.stem, trace_lanes)
        span = t1 - t0
        shutil.copyfile(path, out_dir / "traces" / path.name)
        kernels = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
        programs.append({
            "name": path.stem, "file": f"traces/{path.name}", "chart": picture, "span_us": span,
            "kernels": [{"name": k.get("name"), "dur": k.get("dur"), **k.get("args", {})} for k in kernels],
            "lanes": [{"name": lane.name, "instructions": len(lane.events), "busy_us": lane.busy,
                       "utilization": lane.busy / span if span else 0.0} for lane in trace_lanes],
        })
    return {"programs": programs, "trace_dir": str(trace_dir)}
