"""The Jinja environment of the reports: autoescaped templates, number filters, SVG helpers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from reports import svg

TEMPLATES = Path(__file__).parent / "templates"


def seconds(value: Any) -> str:
    """1.2 s, 3.4 ms, 5.6 µs, 7 ns: three significant digits in the unit that suits."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(value) >= scale or unit == "ns":
            return f"{value / scale:.3g} {unit}"
    return str(value)


def percent(value: Any, digits: int = 1) -> str:
    return "—" if value is None else f"{value * 100:.{digits}f}%"


def number(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def size(value: Any) -> str:
    if value is None:
        return "—"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{int(value)} B"


def ratio(value: Any) -> str:
    return "—" if value is None else f"{value:.3g}×"


def environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(("html", "svg")),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(seconds=seconds, percent=percent, number=number, size=size, ratio=ratio,
                       points=svg.polyline_points)
    env.globals.update(verdict_colors=svg.VERDICT_COLORS, palette=svg.PALETTE)
    return env


def write(env: Environment, template: str, path: Path, **context: Any) -> Path:
    path.write_text(env.get_template(template).render(**context), encoding="utf-8")
    return path
