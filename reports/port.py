"""The port-readiness page: build/reports/port.html from the JSON ``python -m harness port-check`` writes.

Reads only the JSON file (schema ``neuronsim.port/1``). Charts: device latency
against useful TensorE utilization per policy with the Pareto front drawn
through it, padded-token fraction per policy, the request-length histogram with
the recommended policy's buckets, and requests per signature for each policy
with few enough signatures to draw. A number the JSON marks as resting on
estimated signatures is shown with ``~``.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from jinja2 import Environment

from reports import render, svg

SCHEMA = "neuronsim.port/1"
MAX_SIGNATURE_BARS = 40


def load(path: Path) -> dict[str, Any] | None:
    """The report in ``path``, or None when there is none; a file of another kind is a clear error."""
    if not path.exists():
        return None
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a port-check report (schema {doc.get('schema')!r}, expected {SCHEMA!r}); "
                         f"write it with `python -m harness port-check`")
    return doc


def _log_axis(lo: float, hi: float) -> tuple[float, float]:
    lo, hi = max(lo, 1e-9), max(hi, 1e-9)
    return 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi) + (1e-9 if hi == lo else 0))


def pareto_chart(rows: list[dict[str, Any]], front: list[str]) -> svg.Chart | None:
    """Served p95 latency (log x) against useful TensorE utilization (y); the front as a line."""
    points = [(r["policy"], r["served_latency_ms"]["p95"], r["useful_util"], r.get("tensor_util")) for r in rows
              if r.get("available") and r.get("served_latency_ms") and r["served_latency_ms"].get("p95")
              and r.get("useful_util") is not None]
    if not points:
        return None
    width, height, left, right, top, bottom = 760, 320, 70, 160, 16, 44
    lo, hi = _log_axis(min(p[1] for p in points), max(p[1] for p in points))
    if hi <= lo:
        hi = lo * 10
    u_hi = max(max(p[3] or 0.0 for p in points), max(p[2] for p in points)) * 1.15 or 1.0
    chart = svg.Chart("Served p95 latency after warm-up (ms, log) vs useful TensorE utilization; "
                      "the line joins the Pareto front", width, height, kind="scatter")

    def x_of(v: float) -> float:
        frac = (math.log10(max(v, lo)) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        return left + (width - left - right) * frac

    def y_of(v: float) -> float:
        return top + (height - top - bottom) * (1 - v / u_hi)

    decade = lo
    while decade <= hi * 1.0001:
        x = x_of(decade)
        chart.lines.append(svg.Line(x, top, x, height - bottom, "#e3e3e3"))
        chart.texts.append(svg.Text(x, height - bottom + 14, f"{decade:g}", "middle", 10, "#555"))
        decade *= 10
    for i in range(5):
        value = u_hi * i / 4
        y = y_of(value)
        chart.lines.append(svg.Line(left, y, width - right, y, "#e3e3e3"))
        chart.texts.append(svg.Text(left - 4, y + 3, f"{value:.0%}", "end", 10, "#555"))
    chart.texts.append(svg.Text((left + width - right) / 2, height - 8, "served p95 latency (ms)", "middle", 11))
    chart.texts.append(svg.Text(8, top + 2, "useful util", "start", 10, "#555"))
    on_front = sorted((p for p in points if p[0] in front), key=lambda p: p[1])
    if len(on_front) > 1:
        chart.polylines.append(svg.Polyline([(x_of(p[1]), y_of(p[2])) for p in on_front], "#ff9900", "Pareto front"))
    for i, (name, latency, useful, raw) in enumerate(points):
        color = svg.color(name, i)
        x, y = x_of(latency), y_of(useful)
        if raw is not None:  # raw TensorE utilization: a small grey mark above the useful one
            chart.rects.append(svg.Rect(x - 2, y_of(raw) - 2, 4, 4, "#bbbbbb",
                                        f"{name}: TensorE utilization {raw:.1%} (padding included)"))
        size = 9 if name in front else 6
        chart.rects.append(svg.Rect(x - size / 2, y - size / 2, size, size, color,
                                    f"{name}: served p95 {latency:.4g} ms, useful utilization {useful:.1%}"
                                    + (" (Pareto-optimal)" if name in front else "")))
        chart.texts.append(svg.Text(x + 7, y + 4, name + (" *" if name in front else ""), "start", 10))
    chart.legend = [(p[0], svg.color(p[0], i)) for i, p in enumerate(points)] + [("TensorE incl. padding", "#bbbbbb")]
    return chart


def histogram_chart(histogram: list[dict[str, int]], buckets: list[int], policy: str | None) -> svg.Chart:
    """Request lengths as bars; dashed lines at the recommended policy's bucket lengths."""
    width, height, left, right, top, bottom = 760, 220, 50, 20, 12, 36
    lo, hi = histogram[0]["low"], histogram[-1]["high"] + 1
    peak = max(b["requests"] for b in histogram) or 1
    title = "Request lengths" + (f"; dashed: the buckets of {policy}" if policy and buckets else "")
    chart = svg.Chart(title, width, height, kind="histogram")
    span = (hi - lo) or 1

    def x_of(v: float) -> float:
        return left + (width - left - right) * (v - lo) / span

    for b in histogram:
        h = (height - top - bottom) * b["requests"] / peak
        x0, x1 = x_of(b["low"]), x_of(b["high"] + 1)
        chart.rects.append(svg.Rect(x0, height - bottom - h, max(x1 - x0 - 1, 1), h, "#1f77b4",
                                    f"seq_len {b['low']}–{b['high']}: {b['requests']} requests"))
    for i in range(5):
        v = lo + span * i / 4
        chart.texts.append(svg.Text(x_of(v), height - bottom + 14, f"{v:.0f}", "middle", 10, "#555"))
    chart.texts.append(svg.Text(left - 4, top + 8, str(peak), "end", 10, "#555"))
    for length in buckets:
        if lo <= length <= hi:
            x = x_of(length)
            chart.lines.append(svg.Line(x, top, x, height - bottom, "#d62728", "4 3", 1.2))
    chart.texts.append(svg.Text((left + width - right) / 2, height - 6, "seq_len", "middle", 11))
    return chart


def signature_chart(policy: dict[str, Any]) -> svg.Chart:
    rows = [f"{s['batch']}×{s['length']}" for s in policy["signatures"]]
    values = {(label, "requests"): float(s["requests"]) for label, s in zip(rows, policy["signatures"])}
    return svg.hbar_chart(f"{policy['policy']}: requests per signature (batch × padded length)", rows,
                          ["requests"], values, fmt=lambda v: f"{v:.0f}", label_width=120)


def padded_chart(rows: list[dict[str, Any]]) -> svg.Chart:
    names = [r["policy"] for r in rows]
    values = {(r["policy"], "padded tokens"): r["padded_fraction"] for r in rows}
    return svg.hbar_chart("Padded-token fraction per policy", names, ["padded tokens"], values,
                          fmt=lambda v: f"{v:.1%}", domain=(0.0, max(max(values.values(), default=0.0) * 1.1, 0.01)))


def context(doc: dict[str, Any]) -> dict[str, Any]:
    """What the template shows: the document plus its charts."""
    batch = doc["batch"]
    recommended = batch["recommendation"].get("policy")
    policies = {p["policy"]: p for p in doc["policies"]}
    buckets = sorted({s["length"] for s in policies[recommended]["signatures"]}) if recommended in policies else []
    charts = {"pareto": pareto_chart(batch["policies"], batch["pareto"]),
              "padded": padded_chart(batch["policies"]),
              "lengths": histogram_chart(doc["trace"]["histogram"], buckets, recommended),
              "signatures": [signature_chart(p) for p in doc["policies"]
                             if 1 < len(p["signatures"]) <= MAX_SIGNATURE_BARS]}
    shape_rows = {r["policy"]: r for r in doc["shape_stability"]["policies"]}
    return {"doc": doc, "charts": charts, "shape_rows": shape_rows, "recommended": recommended}


def write(env: Environment, json_path: Path, html_path: Path, **common: Any) -> dict[str, Any] | None:
    """Render ``html_path`` from ``json_path`` when it exists; returns what the index shows (or None)."""
    doc = load(json_path)
    if doc is None:
        return None
    render.write(env, "port.html", html_path, page="port.html", **context(doc), **common)
    rec = doc["batch"]["recommendation"]
    return {"model": doc["model"]["spec"], "trace": doc["trace"]["source"], "requests": doc["trace"]["requests"],
            "recommended": rec.get("policy"), "created": doc.get("created"), "href": html_path.name}


def render_file(json_path: Path, html_path: Path) -> Path:
    """Standalone rendering (what port-check calls right after writing the JSON)."""
    common = {"generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "store": "",
              "build": str(json_path.parent)}
    html_path.parent.mkdir(parents=True, exist_ok=True)
    write(render.environment(), json_path, html_path, **common)
    return html_path
