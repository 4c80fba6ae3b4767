"""CHARTEVENTS of the synthetic MIMIC-III (`pipeline.data.mimic.synth`): the chart catalog as arrays, and the builder.

``chart_system`` turns the chart concepts (``catalog_chart``) of one ICU system into arrays once;
``chartevents`` turns one simulated chunk (`Chunk`) into the CHARTEVENTS columns of that system,
vectorized with numpy (no Python loop per event). Events in hour cell [h, h+1) of an admission
use the severity s(h) and the states (arterial line, ventilation) at h, so nothing before the
prediction time depends on what comes after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.data.mimic.synth.catalog_chart import CHART
from pipeline.data.mimic.synth.chunk import (
    Chunk,
    clock_hour,
    col_cgid,
    event_time,
    icu_cells,
    key_cols,
    poisson_events,
    round_to,
    store_time,
)
from pipeline.data.mimic.synth.csvgz import col_int, col_nulls, col_num, col_numstr, col_str, col_ts

# ---------------------------------------------------------------------------- CHARTEVENTS
# Mean and sd of severity over ICU hours (sets the text cut points so that `probs` hold at the
# population level); measured -0.03 and 1.55 over 2,000 simulated patients (seed 5).
S_POP = (-0.03, 1.55)


@dataclass(frozen=True)
class _ChartSys:
    """The chart catalog of one ICU system as arrays (K items)."""

    itemid: np.ndarray  # (K,) ITEMID
    concept: np.ndarray  # (K,) row in CHART
    rate: np.ndarray  # (K,) share of the chart rate
    gamma: np.ndarray  # (K,) log rate per unit of severity
    needs: np.ndarray  # (K,) 0 always, 1 ventilated, 2 arterial line
    isnum: np.ndarray  # (K,) bool
    hourly: np.ndarray  # (K,) bool
    cuts: np.ndarray  # (K, C) category cut points on z (+inf padded)
    ncat: np.ndarray  # (K,) number of categories
    stroff: np.ndarray  # (K,) offset of the item's categories in strings
    vent_cat: np.ndarray  # (K,) category forced while ventilated (-1 none)
    flag: np.ndarray  # (K,) 0 none, 1 af, 2 dnr (forces the last category)
    uom: np.ndarray  # (K,) index into uoms
    strings: tuple[str, ...]  # all category strings
    strnum: np.ndarray  # VALUENUM per string (NaN none)
    uoms: tuple[str, ...]  # VALUEUOM strings ("" = NULL)


def _concept_arrays() -> dict[str, np.ndarray]:
    names = ("load", "re", "noise", "mean", "sd", "dec", "lo", "hi")
    return {n: np.array([getattr(c, n) for c in CHART], float) for n in names}


_CC = _concept_arrays()
_CHART_SYS: dict[int, _ChartSys] = {}


def chart_system(system: int) -> _ChartSys:
    """The chart catalog of one system (0 CareVue, 1 MetaVision), built once."""
    if system in _CHART_SYS:
        return _CHART_SYS[system]
    from statistics import NormalDist

    inv = NormalDist().inv_cdf
    rows = [(i, c) for i, c in enumerate(CHART) if (c.cv, c.mv)[system]]
    strings, strnum, uoms, cuts, stroff = ["?"], [np.nan], [""], [], []
    for _, c in rows:
        cats = c.cats[system]
        nums = c.nums[system]
        stroff.append(len(strings))
        strings += list(cats)
        strnum += [float(v) for v in nums] if nums else [np.nan] * len(cats)
        if c.kind == "text":
            sd_z = float(np.sqrt((c.load * S_POP[1]) ** 2 + c.re ** 2 + c.noise ** 2))
            cum = np.clip(np.cumsum(c.probs)[:-1], 1e-6, 1 - 1e-6)
            cuts.append([c.load * S_POP[0] + sd_z * inv(q) for q in cum])
        else:
            cuts.append([])
        u = c.uom[system]
        if u not in uoms:
            uoms.append(u)
    width = max(1, max(len(x) for x in cuts))
    arr = lambda f, dt=float: np.array([f(i, c) for i, c in rows], dt)  # noqa: E731
    cs = _ChartSys(
        itemid=arr(lambda i, c: (c.cv, c.mv)[system], np.int64),
        concept=arr(lambda i, c: i, np.int64),
        rate=(w := arr(lambda i, c: c.w[system])) / w.sum(),
        gamma=arr(lambda i, c: c.gamma),
        needs=arr(lambda i, c: {"": 0, "vent": 1, "art": 2}[c.needs], np.int64),
        isnum=arr(lambda i, c: c.kind == "num", bool),
        hourly=arr(lambda i, c: c.hourly, bool),
        cuts=np.array([x + [np.inf] * (width - len(x)) for x in cuts], float),
        ncat=arr(lambda i, c: len(c.cats[system]), np.int64),
        stroff=np.array(stroff, np.int64),
        vent_cat=arr(lambda i, c: c.vent_cat, np.int64),
        flag=arr(lambda i, c: {"": 0, "af": 1, "dnr": 2}[c.flag], np.int64),
        uom=arr(lambda i, c: uoms.index(c.uom[system]), np.int64),
        strings=tuple(strings), strnum=np.array(strnum, float), uoms=tuple(uoms),
    )
    _CHART_SYS[system] = cs
    return cs


def chartevents(rng, ch: Chunk, system: int, density: float, rows_per_hour: float) -> dict[str, pa.Array]:
    """CHARTEVENTS of one system's ICU stays: Poisson per hour cell and item, values from z."""
    cs = chart_system(system)
    re = rng.standard_normal((len(ch.pat), len(CHART)))  # (A, concepts) per-admission offsets
    intensity = np.exp(0.3 * rng.standard_normal(len(ch.stay_adm)) - 0.045)  # (S,) charting habits
    st, adm, h, a, b = icu_cells(ch, system)
    s = ch.sev[adm, h]
    active = np.ones((len(h), len(cs.itemid)))  # (cells, K)
    active[:, cs.needs == 1] = ch.vent[adm, h][:, None]
    active[:, cs.needs == 2] = ch.art[adm, h][:, None]
    scale = (b - a) * intensity[st] * density * rows_per_hour  # (cells,)
    cell, k = poisson_events(rng, scale[:, None] * cs.rate[None, :] * np.exp(np.outer(s, cs.gamma)) * active)
    n = len(k)
    t = a[cell] + rng.random(n) * (b - a)[cell]
    t = np.where(cs.hourly[k] & (rng.random(n) < 0.7), clock_hour(ch, adm[cell], h[cell], a[cell], b[cell]), t)
    ea, ec, es = adm[cell], cs.concept[k], s[cell]
    z = _CC["load"][ec] * es + _CC["re"][ec] * re[ea, ec] + _CC["noise"][ec] * rng.standard_normal(n)
    num = round_to(np.clip(_CC["mean"][ec] + _CC["sd"][ec] * z, _CC["lo"][ec], _CC["hi"][ec]),
                   _CC["dec"][ec].astype(int))
    code = (z[:, None] > cs.cuts[k]).sum(1)
    code = np.where((cs.vent_cat[k] >= 0) & ch.vent[ea, h[cell]], cs.vent_cat[k], code)
    forced = np.where(cs.flag[k] == 1, ch.af[ea], np.where(cs.flag[k] == 2, ch.dnr[ea], False))
    isnum = cs.isnum[k]
    sidx = np.where(isnum, 0, cs.stroff[k] + np.where(forced, cs.ncat[k] - 1, code))
    mv = system == 1
    err = (rng.random(n) < 0.002) & mv
    num = np.where(err & isnum, np.round(num * rng.uniform(0, 10, n), 1), num)
    ct = event_time(ch, ea, t)
    cols = key_cols(ch, ea, st[cell], stay_null=rng.random(n) < 0.001)
    flags = lambda x: col_int(x, None) if mv else col_nulls(n)  # noqa: E731
    cols.update(
        ITEMID=col_int(cs.itemid[k]),
        CHARTTIME=col_ts(ct),
        STORETIME=col_ts(store_time(rng, ct, same=0.15 if mv else 0.0)),
        CGID=col_cgid(rng, n),
        VALUE=pc.if_else(pa.array(isnum), col_numstr(num), col_str(sidx, cs.strings)),
        VALUENUM=col_num(np.where(isnum, num, cs.strnum[sidx])),
        VALUEUOM=col_str(cs.uom[k], cs.uoms, ~isnum),
        WARNING=flags((isnum & (np.abs(z) > 2.5)) | (rng.random(n) < 0.003)),
        ERROR=flags(err),
        RESULTSTATUS=col_nulls(n) if mv else col_str(np.zeros(n), ["Manual"], rng.random(n) > 0.003),
        STOPPED=col_nulls(n) if mv else col_str((rng.random(n) < 0.003).astype(int), ["NotStopd", "D/C'd"]),
    )
    return cols
