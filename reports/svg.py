"""Chart geometry for inline SVG: bars, lines and timeline lanes as plain shapes.

Python computes coordinates; the templates (templates/_svg.html) write the shapes, so every label
passes through Jinja's autoescaping. No JavaScript: a chart is readable as the page loads, and
each shape carries a <title> tooltip with its exact value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

PALETTE = {"cpu-eager": "#7f7f7f", "eager": "#1f77b4", "adaptive": "#2ca02c", "compiled": "#d62728"}
EXTRA = ("#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#ff7f0e")
VERDICT_COLORS = {"pass": "#2ca02c", "xfail": "#f2c14e", "xpass": "#ff7f0e", "fail": "#d62728", "skip": "#c7c7c7"}
LANE_COLORS = {"kernel": "#555555", "dma": "#8c564b", "tensor": "#d62728", "vector": "#1f77b4",
               "scalar": "#2ca02c", "gpsimd": "#9467bd"}


@dataclass
class Rect:
    x: float
    y: float
    w: float
    h: float
    fill: str
    title: str = ""


@dataclass
class Text:
    x: float
    y: float
    text: str
    anchor: str = "start"
    size: int = 11
    fill: str = "#222"


@dataclass
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    stroke: str = "#999"
    dash: str = ""
    width: float = 1.0


@dataclass
class Polyline:
    points: list[tuple[float, float]]
    stroke: str
    title: str = ""


@dataclass
class Chart:
    title: str
    width: int
    height: int
    rects: list[Rect] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    polylines: list[Polyline] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)
    kind: str = "chart"


def color(series: str, index: int) -> str:
    return PALETTE.get(series, EXTRA[index % len(EXTRA)])


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    step = (hi - lo) / 4 or 1.0
    return [lo + i * step for i in range(5)]


def hbar_chart(title: str, rows: list[str], series: list[str], values: dict[tuple[str, str], float],
               fmt: Callable[[float], str] = lambda v: f"{v:.3g}", log: bool = False,
               domain: tuple[float, float] | None = None, reference: float | None = None,
               label_width: int = 190, width: int = 760) -> Chart:
    """Horizontal grouped bars: one group per row, one bar per series; ``reference`` draws a dashed line (1x)."""
    bar_h, gap, top = 12, 8, 24
    present = [v for v in values.values() if v is not None and (v > 0 or not log)]
    if domain is None:
        lo = min(present, default=1.0)
        hi = max(present, default=1.0)
        if reference is not None:
            lo, hi = min(lo, reference), max(hi, reference)
        domain = (lo / 1.5, hi * 1.5) if log else (0.0, hi * 1.05 or 1.0)
    lo, hi = domain
    plot_w = width - label_width - 70

    def x_of(v: float) -> float:
        if log:
            v = max(v, lo)
            return label_width + plot_w * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))
        return label_width + plot_w * (v - lo) / ((hi - lo) or 1.0)

    group_h = bar_h * len(series) + gap
    height = top + group_h * len(rows) + 30
    chart = Chart(title, width, height, kind="hbar")
    for tick in _ticks(lo, hi, log):
        x = x_of(tick)
        chart.lines.append(Line(x, top - 4, x, height - 26, "#e3e3e3"))
        chart.texts.append(Text(x, height - 12, fmt(tick), "middle", 10, "#555"))
    for r, row in enumerate(rows):
        y0 = top + r * group_h
        chart.texts.append(Text(label_width - 6, y0 + group_h / 2, row, "end"))
        for s, name in enumerate(series):
            value = values.get((row, name))
            if value is None or (log and value <= 0):
                continue
            x1 = x_of(value)
            chart.rects.append(Rect(label_width, y0 + s * bar_h, max(x1 - label_width, 1.0), bar_h - 2,
                                    color(name, s), f"{row} · {name}: {fmt(value)}"))
            chart.texts.append(Text(x1 + 3, y0 + s * bar_h + bar_h - 3, fmt(value), size=9, fill="#444"))
    if reference is not None:
        x = x_of(reference)
        chart.lines.append(Line(x, top - 6, x, height - 26, "#333", "4 3", 1.2))
    chart.legend = [(name, color(name, s)) for s, name in enumerate(series)]
    return chart


def stacked_bars(title: str, rows: list[str], segments: dict[str, dict[str, int]], order: Iterable[str],
                 colors: dict[str, str], label_width: int = 190, width: int = 760) -> Chart:
    """One 100% bar per row, split by category (verdicts per family)."""
    order = list(order)
    bar_h, top = 16, 10
    plot_w = width - label_width - 20
    height = top + (bar_h + 6) * len(rows) + 10
    chart = Chart(title, width, height, kind="stacked")
    for r, row in enumerate(rows):
        counts = segments.get(row, {})
        total = sum(counts.get(k, 0) for k in order) or 1
        y = top + r * (bar_h + 6)
        chart.texts.append(Text(label_width - 6, y + bar_h - 4, row, "end"))
        x = float(label_width)
        for key in order:
            n = counts.get(key, 0)
            if not n:
                continue
            w = plot_w * n / total
            chart.rects.append(Rect(x, y, w, bar_h, colors.get(key, "#999"), f"{row}: {n} {key}"))
            x += w
    chart.legend = [(key, colors.get(key, "#999")) for key in order]
    return chart


def line_chart(title: str, x_labels: list[str], series: dict[str, list[float | None]],
               fmt: Callable[[float], str] = lambda v: f"{v:.3g}", log: bool = True, width: int = 760,
               height: int = 240) -> Chart:
    """One polyline per series over the x labels (asv history: one point per commit)."""
    left, right, top, bottom = 60, 20, 16, 40
    present = [v for vs in series.values() for v in vs if v is not None and v > 0]
    chart = Chart(title, width, height, kind="line")
    if not present or not x_labels:
        return chart
    lo, hi = min(present) / 1.3, max(present) * 1.3
    if not log:
        lo = 0.0

    def y_of(v: float) -> float:
        if log:
            frac = (math.log10(v) - math.log10(lo)) / ((math.log10(hi) - math.log10(lo)) or 1.0)
        else:
            frac = (v - lo) / ((hi - lo) or 1.0)
        return top + (height - top - bottom) * (1 - frac)

    def x_of(i: int) -> float:
        span = max(len(x_labels) - 1, 1)
        return left + (width - left - right) * (i / span if len(x_labels) > 1 else 0.5)

    for tick in _ticks(lo, hi, log):
        if lo <= tick <= hi:
            y = y_of(tick)
            chart.lines.append(Line(left, y, width - right, y, "#e3e3e3"))
            chart.texts.append(Text(left - 4, y + 3, fmt(tick), "end", 10, "#555"))
    for i, label in enumerate(x_labels):
        chart.texts.append(Text(x_of(i), height - bottom + 14, label, "middle", 10, "#555"))
    for s, (name, values) in enumerate(series.items()):
        points = [(x_of(i), y_of(v)) for i, v in enumerate(values) if v is not None and v > 0]
        stroke = color(name, s)
        if len(points) > 1:
            chart.polylines.append(Polyline(points, stroke, name))
        for (x, y), v in zip(points, [v for v in values if v is not None and v > 0]):
            chart.rects.append(Rect(x - 3, y - 3, 6, 6, stroke, f"{name}: {fmt(v)}"))
    chart.legend = [(name, color(name, s)) for s, name in enumerate(series)]
    return chart


def polyline_points(points: list[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
