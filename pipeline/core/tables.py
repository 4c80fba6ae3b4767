"""Summaries over seeds and Markdown tables, written once for every report, study and benchmark page.

``mean_sd``: the mean and the sample standard deviation (ddof = 1) of the finite values given; the spread of
a single value is undefined, so it is NaN (never 0: a 0 would claim a certainty no second seed measured).
``cell`` shows ``mean ± sd``, the mean alone where the sd is undefined, ``n/a`` where there is no value.
``markdown_table`` is the one Markdown table writer. The arithmetic is numpy's (``mean``, ``std``: pairwise
summation), so a table computed here equals one computed from the same numbers with numpy to the last bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def mean_sd(values: Iterable) -> tuple[float, float, int]:
    """(mean, sd, n) of the finite values among ``values`` (None and NaN left out): sd with ddof = 1, NaN for
    one value; (NaN, NaN, 0) for none."""
    import numpy as np

    v = [float(x) for x in values if x is not None and math.isfinite(float(x))]
    if not v:
        return math.nan, math.nan, 0
    arr = np.asarray(v, dtype=np.float64)
    return float(arr.mean()), float(arr.std(ddof=1)) if len(v) > 1 else math.nan, len(v)


def stat(values: Iterable) -> dict:
    """``{"mean", "sd", "n"}`` of ``mean_sd`` (what JSON summaries store)."""
    mean, sd, n = mean_sd(values)
    return {"mean": mean, "sd": sd, "n": n}


def cell(mean: float, sd: float = math.nan, digits: int = 4) -> str:
    """``mean ± sd`` to ``digits`` places; the mean alone when the sd is undefined (one seed); ``n/a`` without
    a mean."""
    if mean is None or not math.isfinite(mean):
        return "n/a"
    if sd is None or not math.isfinite(sd):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table: a header row, its rule, one line per row (cells as given)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])
