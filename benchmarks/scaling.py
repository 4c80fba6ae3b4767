"""How a benchmark's time grows with its input, shared by the extraction benchmarks (``extract.py``,
``extract_mimic4.py``): the growth exponent (least-squares slope of log time on log size) and the
extrapolation of the largest measured scale to a full release with it (never below linear)."""

from __future__ import annotations

import math


def growth_exponent(sizes: list[float], times: list[float]) -> float:
    """Least-squares slope of log(times) on log(sizes) (1.0 with fewer than two points)."""
    if len(sizes) < 2:
        return 1.0
    xs, ys = [math.log(s) for s in sizes], [math.log(t) for t in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def extrapolate(time: float, size: float, full_size: float, exponent: float) -> float:
    """``time`` measured at ``size`` carried to ``full_size`` with ``exponent`` (at least 1: linear)."""
    return time * (full_size / size) ** max(exponent, 1.0)
