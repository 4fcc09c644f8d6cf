"""Estimates for signatures that were not run: piecewise-linear in token count between measured ones.

Policy ``none`` on real traffic has hundreds of distinct lengths; compiling and
running each would take longer than the answer is worth. The replay runs a
sample (``signatures.sample``: evenly spaced in tokens, the smallest and largest
included) and estimates compile seconds, device latency and TensorE busy time of
the others by linear interpolation in batch x length between the nearest
measured signatures on either side. Every estimated number is marked so in the
JSON (``"estimated": true``) and the summary (``~``). ``leave_one_out`` measures
how good the interpolation is on the points that were measured.
"""

from __future__ import annotations

import bisect
import math
from typing import Sequence


def interpolate(points: Sequence[tuple[float, float]], x: float) -> float:
    """y at x on the polyline through ``points`` (sorted by x; ends extend flat, never extrapolate)."""
    if not points:
        raise ValueError("nothing measured to interpolate from")
    xs = [p[0] for p in points]
    i = bisect.bisect_left(xs, x)
    if i < len(xs) and xs[i] == x:
        return points[i][1]
    if i == 0:
        return points[0][1]
    if i == len(points):
        return points[-1][1]
    (x0, y0), (x1, y1) = points[i - 1], points[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def curve(samples: dict[float, list[float]]) -> list[tuple[float, float]]:
    """Sorted (x, mean y) points from x -> measured values (several signatures can share a token count)."""
    return sorted((x, sum(ys) / len(ys)) for x, ys in samples.items() if ys)


def leave_one_out(points: Sequence[tuple[float, float]]) -> dict[str, float | int | None]:
    """Relative error of interpolating each interior measured point from the others (median and max)."""
    errors = []
    for i in range(1, len(points) - 1):
        x, y = points[i]
        if y == 0:
            continue
        guess = interpolate(list(points[:i]) + list(points[i + 1:]), x)
        errors.append(abs(guess - y) / abs(y))
    if not errors:
        return {"points": 0, "median_rel_error": None, "max_rel_error": None}
    errors.sort()
    mid = len(errors) // 2
    median = errors[mid] if len(errors) % 2 else (errors[mid - 1] + errors[mid]) / 2
    return {"points": len(errors), "median_rel_error": median, "max_rel_error": errors[-1]}


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]): a latency some request actually had."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]
