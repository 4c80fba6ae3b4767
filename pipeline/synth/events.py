"""Event tables of the synthetic MIMIC-III (`pipeline.synth`), one builder per table.

Each builder turns one simulated chunk (`Chunk`) into the columns of one table, vectorized
with numpy (no Python loop per event). Events in hour cell [h, h+1) of an admission use the
severity s(h) and the states (arterial line, ventilation, pressors) at h, so nothing before
the prediction time depends on what comes after it.

One concern over ~400 lines: the nine event-table builders share one chunk layout and helpers;
splitting them would scatter one table format across files.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.synth import catalog as cat
from pipeline.synth.tables import (
    ADULT,
    DAY,
    MIN,
    NEWBORN,
    REASONS,
    SYSTEMS,
    Chunk,
    clock_hour,
    col_cgid,
    col_const,
    col_int,
    col_nulls,
    col_num,
    col_numstr,
    col_str,
    col_ts,
    event_time,
    hosp_cells,
    icu_cells,
    key_cols,
    pick,
    poisson_events,
    round_to,
    store_time,
)

# ---------------------------------------------------------------------------- CHARTEVENTS
# Mean and sd of severity over ICU hours (sets the text cut points so that `probs` hold at the
# population level); measured -0.03 and 1.55 over 2,000 simulated patients (seed 5).
S_POP = (-0.03, 1.55)


@dataclass(frozen=True)
class _ChartSys:
    """The chart catalog of one ICU system as arrays (K items)."""

    itemid: np.ndarray  # (K,) ITEMID
    concept: np.ndarray  # (K,) row in cat.CHART
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
    return {n: np.array([getattr(c, n) for c in cat.CHART], float) for n in names}


_CC = _concept_arrays()
_CHART_SYS: dict[int, _ChartSys] = {}


def chart_system(system: int) -> _ChartSys:
    """The chart catalog of one system (0 CareVue, 1 MetaVision), built once."""
    if system in _CHART_SYS:
        return _CHART_SYS[system]
    from statistics import NormalDist

    inv = NormalDist().inv_cdf
    rows = [(i, c) for i, c in enumerate(cat.CHART) if (c.cv, c.mv)[system]]
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
    re = rng.standard_normal((len(ch.pat), len(cat.CHART)))  # (A, concepts) per-admission offsets
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
    num = round_to(np.clip(_CC["mean"][ec] + _CC["sd"][ec] * z, _CC["lo"][ec], _CC["hi"][ec]), _CC["dec"][ec].astype(int))
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
        ITEMID=col_int(cs.itemid[k]), CHARTTIME=col_ts(ct), STORETIME=col_ts(store_time(rng, ct, same=0.15 if mv else 0.0)),
        CGID=col_cgid(rng, n),
        VALUE=pc.if_else(pa.array(isnum), col_numstr(num), col_str(sidx, cs.strings)),
        VALUENUM=col_num(np.where(isnum, num, cs.strnum[sidx])),
        VALUEUOM=col_str(cs.uom[k], cs.uoms, ~isnum),
        WARNING=flags((isnum & (np.abs(z) > 2.5)) | (rng.random(n) < 0.003)), ERROR=flags(err),
        RESULTSTATUS=col_nulls(n) if mv else col_str(np.zeros(n), ["Manual"], rng.random(n) > 0.003),
        STOPPED=col_nulls(n) if mv else col_str((rng.random(n) < 0.003).astype(int), ["NotStopd", "D/C'd"]),
    )
    return cols


# ---------------------------------------------------------------------------- LABEVENTS
def _lab_arrays() -> dict[str, np.ndarray]:
    names = ("itemid", "mean", "sd", "load", "dec", "log")
    out = {n: np.array([getattr(x, n) for x in cat.LABS]) for n in names}
    out["lo"] = np.array([x.ref[0] for x in cat.LABS], float)
    out["hi"] = np.array([x.ref[1] for x in cat.LABS], float)
    return out


_LA = _lab_arrays()
_PANEL_NAMES = tuple(cat.PANELS)
_PANEL_ITEMS = [np.array([i for i, x in enumerate(cat.LABS) if x.panel == p]) for p in _PANEL_NAMES]
_SPECIMEN = next(i for i, x in enumerate(cat.LABS) if x.itemid == 50800)


def labevents(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """LABEVENTS: panels drawn in hospital (Poisson, faster when severe or ventilated), in the
    ED before ADMITTIME, and as outpatient draws months before (no HADM_ID)."""
    A = len(ch.pat)
    re = rng.standard_normal((A, len(cat.LABS)))  # (A, labs) per-admission offsets
    adm, h, a, b = hosp_cells(ch)
    s = ch.sev[adm, h]
    rate = np.array([cat.PANELS[p][0] for p in _PANEL_NAMES])
    gamma = np.array([cat.PANELS[p][1] for p in _PANEL_NAMES])
    ventf = np.where(ch.vent[adm, h][:, None], np.array([cat.PANELS[p][2] for p in _PANEL_NAMES]), 1.0)
    cell, pan = poisson_events(rng, ((b - a) * density)[:, None] * rate * np.exp(np.outer(s, gamma)) * ventf)
    ev = [(adm[cell], a[cell] + rng.random(len(cell)) * (b - a)[cell], s[cell],
           (ch.art | ch.vent)[adm[cell], h[cell]], np.zeros(len(cell), bool), pan)]
    two = np.array([_PANEL_NAMES.index("chem"), _PANEL_NAMES.index("cbc")])
    ed = np.flatnonzero(~np.isnan(ch.edreg_h) & (rng.random(A) < min(1.0, density)))
    t_ed = ch.edreg_h[ed] * rng.uniform(0.1, 0.8, len(ed))  # between EDREGTIME and ADMITTIME
    ev.append((np.repeat(ed, 2), np.repeat(t_ed, 2), np.repeat(ch.sev[ed, 0], 2), np.zeros(2 * len(ed), bool),
               np.repeat(rng.random(len(ed)) < 0.15, 2), np.tile(two, len(ed))))
    n_op = rng.binomial(np.where(ch.kind == ADULT, rng.poisson(4.0, A), 0), min(1.0, density))
    op = np.repeat(np.arange(A), n_op)
    t_op = -rng.uniform(3, 180, len(op)) * 24  # outpatient draws 3-180 days before
    ev.append((np.repeat(op, 2), np.repeat(t_op, 2), np.repeat(-0.8 + 0.4 * ch.b[op], 2),
               np.zeros(2 * len(op), bool), np.ones(2 * len(op), bool), np.tile(two, len(op))))
    e_adm, e_t, e_s, e_art, e_nohadm, e_pan = (np.concatenate(x) for x in zip(*ev))
    # expand each panel draw into its items
    sizes = np.array([len(x) for x in _PANEL_ITEMS])
    flat = np.concatenate(_PANEL_ITEMS)
    starts = np.cumsum(sizes) - sizes
    rep = sizes[e_pan]
    evi = np.repeat(np.arange(len(e_pan)), rep)
    lab = flat[np.repeat(starts[e_pan], rep) + np.arange(rep.sum()) - np.repeat(np.cumsum(rep) - rep, rep)]
    keep = rng.random(len(lab)) > 0.03
    evi, lab = evi[keep], lab[keep]
    n, ea = len(lab), e_adm[evi]
    z = _LA["load"][lab] * e_s[evi] + 0.6 * re[ea, lab] + 0.7 * rng.standard_normal(n)
    raw = _LA["mean"][lab] + _LA["sd"][lab] * z
    dec = _LA["dec"][lab].astype(int)
    val = round_to(np.where(_LA["log"][lab], np.exp(np.minimum(raw, 12.0)), raw), dec)
    val = np.where(_LA["log"][lab], np.maximum(val, np.power(10.0, -dec)), val)
    spec = lab == _SPECIMEN
    txt = (rng.random(n) < 0.01) & ~spec
    is_text = spec | txt
    ven = ~e_art[evi] | (rng.random(n) < 0.1)
    strings = ("ART", "VEN") + cat.LAB_TEXT
    scode = np.where(spec, ven.astype(int), 2 + rng.integers(0, len(cat.LAB_TEXT), n))
    abnormal = ~is_text & ((val < _LA["lo"][lab]) | (val > _LA["hi"][lab]))
    flag = np.where(abnormal, 0, np.where(rng.random(n) < 0.002, 1, 2))
    uoms = tuple(x.uom for x in cat.LABS) + tuple(x.uom.upper() for x in cat.LABS)
    upper = (ch.system[ea] == 0) & (rng.random(n) < 0.3)
    cols = key_cols(ch, ea, hadm_null=e_nohadm[evi])
    cols.update(
        ITEMID=col_int(_LA["itemid"][lab]), CHARTTIME=col_ts(event_time(ch, ea, e_t[evi])),
        VALUE=pc.if_else(pa.array(is_text), col_str(scode, strings), col_numstr(val)),
        VALUENUM=col_num(np.where(is_text, np.nan, val)),
        VALUEUOM=col_str(lab + len(cat.LABS) * upper, uoms, spec), FLAG=col_str(flag, ("abnormal", "delta", "")),
    )
    return cols


# ---------------------------------------------------------------------------- INPUTEVENTS
_IN_KIND = np.array([x.kind for x in cat.INPUTS])


def _input_events(rng, ch: Chunk, system: int, density: float):
    """Infusions of one system: hourly drip segments while a state is on, Poisson boluses.

    Returns (stay, adm, item, t0, t1, rate, amount, last) arrays; `last` marks a drip's final segment.
    """
    st, adm, h, a, b = icu_cells(ch, system)
    A, H = ch.sev.shape
    s = ch.sev[adm, h]
    vaso_rows = np.flatnonzero(_IN_KIND == "vaso")
    primary = vaso_rows[pick(rng, list(zip(vaso_rows, cat.VASO_PROBS)), A)]  # (A,)
    sed_rows = np.flatnonzero(_IN_KIND == "sed")
    sed_on = rng.random((A, len(sed_rows))) < np.array(cat.SED_PROBS)  # (A, sedatives)
    keep = rng.random(len(h)) < min(1.0, 0.95 * density)
    masks = [(ch.vaso[adm, h] & keep, primary[adm]),
             (ch.vaso2[adm, h] & keep, np.full(len(h), np.flatnonzero(_IN_KIND == "vaso2")[0]))]
    masks += [(ch.vent[adm, h] & sed_on[adm, j] & keep, np.full(len(h), r)) for j, r in enumerate(sed_rows)]
    d_cell = np.concatenate([np.flatnonzero(m) for m, _ in masks])
    d_item = np.concatenate([it[m] for m, it in masks])
    base = np.array([x.rate for x in cat.INPUTS])
    d_rate = base[d_item] * np.where(_IN_KIND[d_item] == "sed", rng.lognormal(0, 0.3, len(d_cell)),
                                     np.exp(0.5 * (s[d_cell] - 1.5)) * rng.lognormal(0, 0.15, len(d_cell)))
    key = (adm[d_cell] * H + h[d_cell]) * len(cat.INPUTS) + d_item
    d_last = ~np.isin(key + len(cat.INPUTS), key)
    bol = np.flatnonzero(np.isin(_IN_KIND, ("fluid", "insulin")))
    gam = np.where(_IN_KIND[bol] == "insulin", 0.3, 0.1)
    cell, j = poisson_events(rng, ((b - a) * density)[:, None] * base[bol] * np.exp(np.outer(s, gam)))
    b_item = bol[j]
    t0 = a[cell] + rng.random(len(cell)) * (b - a)[cell]
    fluid = _IN_KIND[b_item] == "fluid"
    dur = np.where(fluid, rng.uniform(0.5, 4, len(cell)), 1 / 60)
    t1 = np.minimum(t0 + dur, ch.out_h[st[cell]])
    b_amount = np.where(fluid, np.round(rng.uniform(50, 500, len(cell)), -1), rng.integers(2, 11, len(cell)))
    b_rate = np.where(fluid, b_amount / np.maximum(t1 - t0, 1 / 60), np.nan)
    d_hours = (b - a)[d_cell]
    per_kg = np.array([x.per_kg for x in cat.INPUTS])[d_item]  # rate in mcg/kg/min: amount in mg
    d_amount = np.where(per_kg, d_rate * ch.weight[adm[d_cell]] * d_hours * 60 / 1000, d_rate * d_hours)
    cells = np.concatenate([d_cell, cell])
    return (st[cells], adm[cells], np.concatenate([d_item, b_item]), np.concatenate([a[d_cell], t0]),
            np.concatenate([b[d_cell], t1]), np.concatenate([d_rate, b_rate]), np.concatenate([d_amount, b_amount]),
            np.concatenate([d_last, np.ones(len(cell), bool)]))


def inputevents_cv(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """INPUTEVENTS_CV: CareVue infusions, one row per charted hour or bolus at CHARTTIME."""
    st, adm, item, t0, t1, rate, amount, _ = _input_events(rng, ch, 0, density)
    n = len(item)
    drip = np.isin(_IN_KIND[item], ("vaso", "vaso2", "sed"))
    ct = event_time(ch, adm, np.where(drip, clock_hour(ch, adm, np.floor(t0), t0, t1), t0))
    link = rng.integers(1, 12_000_000, (len(ch.pat), len(cat.INPUTS)))[adm, item]
    ru = [x.rateuom[0] for x in cat.INPUTS]
    au = [x.amountuom for x in cat.INPUTS]
    cols = key_cols(ch, adm, st)
    cols.update(
        CHARTTIME=col_ts(ct), ITEMID=col_int(np.array([x.cv for x in cat.INPUTS])[item]),
        AMOUNT=col_num(np.round(amount, 4)), AMOUNTUOM=col_str(item, au), RATE=col_num(np.round(rate, 4)),
        RATEUOM=col_str(item, ru), STORETIME=col_ts(store_time(rng, ct)), CGID=col_cgid(rng, n),
        ORDERID=col_int(rng.integers(1, 12_000_000, n)), LINKORDERID=col_int(link), STOPPED=col_nulls(n),
        NEWBOTTLE=col_nulls(n), ORIGINALAMOUNT=col_nulls(n), ORIGINALAMOUNTUOM=col_str(item, au),
        ORIGINALROUTE=col_str(item, [x.route for x in cat.INPUTS]), ORIGINALRATE=col_num(np.round(rate, 4)),
        ORIGINALRATEUOM=col_str(item, ru), ORIGINALSITE=col_nulls(n),
    )
    return cols


def inputevents_mv(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """INPUTEVENTS_MV: MetaVision infusions with STARTTIME/ENDTIME, recorded when they end."""
    st, adm, item, t0, t1, rate, amount, last = _input_events(rng, ch, 1, density)
    n = len(item)
    t_end = event_time(ch, adm, t1)
    store = t_end + rng.integers(0, 61, n) * MIN
    rewritten = rng.random(n) < 0.02
    status = np.where(rewritten, 2, np.where(last, 0, 1))
    link = rng.integers(1, 12_000_000, (len(ch.pat), len(cat.INPUTS)))[adm, item]
    drip = np.isin(_IN_KIND[item], ("vaso", "vaso2", "sed"))
    ru = [x.rateuom[1] for x in cat.INPUTS]
    cols = key_cols(ch, adm, st)
    cols.update(
        STARTTIME=col_ts(event_time(ch, adm, t0)), ENDTIME=col_ts(t_end), ITEMID=col_int(np.array([x.mv for x in cat.INPUTS])[item]),
        AMOUNT=col_num(np.round(amount, 6)), AMOUNTUOM=col_str(item, [x.amountuom for x in cat.INPUTS]),
        RATE=col_num(np.round(rate, 6)), RATEUOM=col_str(item, [u if u else "mL/hour" for u in ru], _IN_KIND[item] == "insulin"),
        STORETIME=col_ts(store), CGID=col_cgid(rng, n), ORDERID=col_int(rng.integers(1, 12_000_000, n)), LINKORDERID=col_int(link),
        ORDERCATEGORYNAME=col_str(item, [x.category[0] for x in cat.INPUTS]),
        SECONDARYORDERCATEGORYNAME=col_str(drip.astype(int), ["Additive (Crystalloid)", "02-Fluids (Crystalloids)"],
                                        _IN_KIND[item] == "insulin"),
        ORDERCOMPONENTTYPEDESCRIPTION=col_str(item, [x.category[1] for x in cat.INPUTS]),
        ORDERCATEGORYDESCRIPTION=col_str(item, [x.category[2] for x in cat.INPUTS]),
        PATIENTWEIGHT=col_num(np.round(ch.weight[adm], 1)), TOTALAMOUNT=col_num(np.where(drip, 250.0, np.round(amount, 1))),
        TOTALAMOUNTUOM=col_const("ml", n), ISOPENBAG=col_int(np.zeros(n)), CONTINUEINNEXTDEPT=col_int(np.zeros(n)),
        CANCELREASON=col_int(rewritten), STATUSDESCRIPTION=col_str(status, ("FinishedRunning", "Changed", "Rewritten")),
        COMMENTS_EDITEDBY=col_nulls(n), COMMENTS_CANCELEDBY=col_str(np.zeros(n), ["RN"], ~rewritten),
        COMMENTS_DATE=col_ts(store, ~rewritten), ORIGINALAMOUNT=col_num(np.round(amount, 6)),
        ORIGINALRATE=col_num(np.round(rate, 6)),
    )
    return cols


# ---------------------------------------------------------------------------- OUTPUTEVENTS, DATETIMEEVENTS
def outputevents(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """OUTPUTEVENTS: hourly urine (less when severe), occasional void and stool."""
    st, adm, h, a, b = icu_cells(ch)
    s = ch.sev[adm, h]
    urine = np.flatnonzero(rng.random(len(h)) < min(1.0, 0.8 * density))
    rates = np.array([o[2] for o in cat.OUTPUTS])
    cell, j = poisson_events(rng, ((b - a) * density)[:, None] * rates[None, :])
    cells = np.concatenate([urine, cell])
    kind = np.concatenate([np.zeros(len(urine), np.int64), j])
    t = np.concatenate([clock_hour(ch, adm[urine], h[urine], a[urine], b[urine]), a[cell] + rng.random(len(cell)) * (b - a)[cell]])
    med = np.array([o[3] for o in cat.OUTPUTS])[kind]
    value = np.round(med * np.exp(np.where(kind == 0, -0.35 * s[cells], 0.0) + 0.45 * rng.standard_normal(len(kind))))
    sys_ = ch.system[adm[cells]]
    itemid = np.where(sys_ == 0, np.array([o[0] for o in cat.OUTPUTS])[kind], np.array([o[1] for o in cat.OUTPUTS])[kind])
    ct = event_time(ch, adm[cells], t)
    n = len(kind)
    cols = key_cols(ch, adm[cells], st[cells])
    cols.update(CHARTTIME=col_ts(ct), ITEMID=col_int(itemid), VALUE=col_num(value), VALUEUOM=col_str(sys_, ("ml", "mL")),
                STORETIME=col_ts(store_time(rng, ct)), CGID=col_cgid(rng, n), STOPPED=col_nulls(n), NEWBOTTLE=col_nulls(n),
                ISERROR=col_nulls(n))
    return cols


def datetimeevents(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """DATETIMEEVENTS: line insertion dates and dressing changes, VALUE a datetime at or before CHARTTIME."""
    parts = []
    insert_iv = ch.in_h - rng.uniform(0, 24, len(ch.in_h))  # (S,) peripheral line placed before the ICU
    for system, name in enumerate(SYSTEMS):
        items = cat.DTEVENTS[name]
        st, adm, h, a, b = icu_cells(ch, system)
        need = np.array([x[2] == "art" for x in items])
        lam = ((b - a) * density)[:, None] * np.array([x[1] for x in items]) * np.where(need, ch.art[adm, h][:, None], 1.0)
        cell, j = poisson_events(rng, lam)
        t = a[cell] + rng.random(len(cell)) * (b - a)[cell]
        insert = np.where(need[j], ch.art_on[adm[cell]] + 0.5, insert_iv[st[cell]])
        recent = t - rng.uniform(0, 12, len(cell))
        is_recent = np.array([x[4] == "recent" for x in items])[j]
        vt = event_time(ch, adm[cell], np.minimum(np.where(is_recent, recent, insert), t))
        date_only = np.array([x[3] == "Date" for x in items])[j]
        vt = np.where(date_only, vt // DAY * DAY, vt)
        parts.append((st[cell], adm[cell], np.array([x[0] for x in items])[j], t, vt, date_only,
                      np.full(len(cell), system)))
    st, adm, itemid, t, vt, date_only, sys_ = (np.concatenate(x) for x in zip(*parts))
    n, cv = len(st), sys_ == 0
    ct = event_time(ch, adm, t)
    cols = key_cols(ch, adm, st)
    cols.update(ITEMID=col_int(itemid), CHARTTIME=col_ts(ct), STORETIME=col_ts(store_time(rng, ct)), CGID=col_cgid(rng, n),
                VALUE=col_ts(vt).cast(pa.string()), VALUEUOM=col_str((~date_only).astype(int), ("Date", "Date and Time")),
                WARNING=col_int(np.zeros(n), cv), ERROR=col_int(np.zeros(n), cv), RESULTSTATUS=col_nulls(n),
                STOPPED=col_str(np.zeros(n), ["NotStopd"], ~cv))
    return cols


# ---------------------------------------------------------------------------- PROCEDUREEVENTS_MV
def procedureevents_mv(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """PROCEDUREEVENTS_MV of MetaVision stays: ventilation, arterial and peripheral lines (one row
    per episode, VALUE = minutes, recorded at the end), X-rays and cultures (Poisson, severity-driven)."""
    A, H = ch.sev.shape
    mv_adm = ch.system == 1
    names = tuple(cat.PROCEDURES)
    rows = []  # (kind, adm, stay, t0, t1); kind indexes cat.PROCEDURES
    for kind, on in (("vent", ch.vent_on), ("art", ch.art_on)):
        adm = np.flatnonzero(mv_adm & (on >= 0))
        st = ch.stay_at[adm, on[adm]]
        lo = np.maximum(on[adm], ch.in_h[st])  # clipped (not scaled) by OUTTIME, which may lie after T
        t0 = np.maximum(np.minimum(lo + rng.uniform(0, 0.9, len(adm)), ch.out_h[st] - 1 / 60), lo)
        stop = ch.vent_off[adm].astype(float) if kind == "vent" else np.full(len(adm), np.inf)
        t1 = np.maximum(np.minimum(stop, ch.out_h[st]), t0 + 1 / 60)
        rows.append((np.full(len(adm), names.index(kind)), adm, st, t0, np.minimum(t1, ch.end_h[adm])))
    st_mv = np.flatnonzero(mv_adm[ch.stay_adm])
    t0 = np.maximum(np.minimum(ch.in_h[st_mv] + rng.uniform(0, 2, len(st_mv)), ch.out_h[st_mv] - 1 / 60), ch.in_h[st_mv])
    rows.append((np.full(len(st_mv), names.index("iv")), ch.stay_adm[st_mv], st_mv, t0, ch.out_h[st_mv]))
    st, adm, h, a, b = icu_cells(ch, 1)
    lam = ((b - a) * density)[:, None] * np.array([1 / 24, 1 / 48]) * np.exp(np.outer(ch.sev[adm, h], [0.5, 0.6]))
    cell, j = poisson_events(rng, lam)
    t0 = a[cell] + rng.random(len(cell)) * (b - a)[cell]
    rows.append((np.array([names.index("xray"), names.index("culture")])[j], adm[cell], st[cell], t0,
                 np.minimum(t0 + 1 / 60, ch.end_h[adm[cell]])))
    k, adm, st, t0, t1 = (np.concatenate(x) for x in zip(*rows))
    episode = np.isin(k, [names.index(x) for x in ("vent", "art", "iv")])
    keep = ~episode | (rng.random(len(k)) < min(1.0, density))
    k, adm, st, t0, t1, episode = k[keep], adm[keep], st[keep], t0[keep], t1[keep], episode[keep]
    spec = [cat.PROCEDURES[x] for x in names]
    start, end = event_time(ch, adm, t0), event_time(ch, adm, t1)
    end = np.maximum(end, start + MIN)
    n = len(k)
    order = rng.integers(1, 10_000_000, n)
    cols = key_cols(ch, adm, st)
    cols.update(
        STARTTIME=col_ts(start), ENDTIME=col_ts(end), ITEMID=col_int(np.array([x[0] for x in spec])[k]),
        VALUE=col_num(np.where(episode, (end - start) / MIN, 1.0)), VALUEUOM=col_str(episode.astype(int), ("None", "min")),
        LOCATION=col_str(k, [x[3] for x in spec]), LOCATIONCATEGORY=col_str(k, [x[4] for x in spec]),
        STORETIME=col_ts(end + rng.integers(0, 31, n) * MIN), CGID=col_cgid(rng, n), ORDERID=col_int(order),
        LINKORDERID=col_int(order), ORDERCATEGORYNAME=col_str(k, [x[1] for x in spec]),
        SECONDARYORDERCATEGORYNAME=col_nulls(n), ORDERCATEGORYDESCRIPTION=col_str(k, [x[2] for x in spec]),
        ISOPENBAG=col_int(episode), CONTINUEINNEXTDEPT=col_int(np.zeros(n)),
        CANCELREASON=col_int(np.zeros(n)), STATUSDESCRIPTION=col_const("FinishedRunning", n), COMMENTS_EDITEDBY=col_nulls(n),
        COMMENTS_CANCELEDBY=col_nulls(n), COMMENTS_DATE=col_nulls(n),
    )
    return cols


# ---------------------------------------------------------------------------- MICROBIOLOGYEVENTS
_DILUTIONS = np.array([0.25, 0.5, 1, 2, 4, 8, 16, 32, 64])
_COMPARISONS = ("<=", "=", ">=")
_DIL_TEXT = tuple(f"{c if c != '=' else ''}{v:g}" for c in _COMPARISONS for v in _DILUTIONS)


def microbiologyevents(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """MICROBIOLOGYEVENTS: specimens (more when severe); positives add an isolate row and
    3-6 susceptibility rows. CHARTTIME is empty for 5 % of specimens (CHARTDATE only)."""
    adm, h, a, b = hosp_cells(ch)
    cell, _ = poisson_events(rng, ((b - a) * density * 0.012 * np.exp(0.7 * ch.sev[adm, h]))[:, None])
    n_sp = len(cell)
    sp_adm, sp_s = adm[cell], ch.sev[adm[cell], h[cell]]
    sp_t = event_time(ch, sp_adm, a[cell] + rng.random(n_sp) * (b - a)[cell])
    spec = pick(rng, [(x, x[2]) for x in cat.SPECIMENS], n_sp)
    shift = np.array([x[3] for x in cat.SPECIMENS])[spec]
    positive = rng.random(n_sp) < 1 / (1 + np.exp(1.6 - 0.7 * sp_s - shift))
    org = rng.integers(0, len(cat.ORGANISMS), n_sp)
    n_ab = np.where(positive, rng.integers(3, 7, n_sp), 0)
    no_time = rng.random(n_sp) < 0.05
    rep = 1 + n_ab
    i = np.repeat(np.arange(n_sp), rep)
    pos_in = np.arange(rep.sum()) - np.repeat(np.cumsum(rep) - rep, rep)  # 0 = specimen/isolate row
    n = len(i)
    has_ab = pos_in > 0
    ab = (pos_in + rng.integers(0, len(cat.ANTIBIOTICS), n_sp)[i]) % len(cat.ANTIBIOTICS)
    comp = pick(rng, [(c, p) for c, p in zip(_COMPARISONS, (0.5, 0.35, 0.15))], n)
    dil = rng.integers(0, len(_DILUTIONS), n)
    interp = pick(rng, [("S", 0.75), ("R", 0.2), ("I", 0.05)], n)
    pos = positive[i]
    cols = key_cols(ch, sp_adm[i])
    cols.update(
        CHARTDATE=col_ts(sp_t[i] // DAY * DAY), CHARTTIME=col_ts(sp_t[i], no_time[i]),
        SPEC_ITEMID=col_int(np.array([x[0] for x in cat.SPECIMENS])[spec[i]]),
        SPEC_TYPE_DESC=col_str(spec[i], [x[1] for x in cat.SPECIMENS]),
        ORG_ITEMID=col_int(np.array([x[0] for x in cat.ORGANISMS])[org[i]], ~pos),
        ORG_NAME=col_str(org[i], [x[1] for x in cat.ORGANISMS], ~pos), ISOLATE_NUM=col_int(np.ones(n), ~pos),
        AB_ITEMID=col_int(np.array([x[0] for x in cat.ANTIBIOTICS])[ab], ~has_ab),
        AB_NAME=col_str(ab, [x[1] for x in cat.ANTIBIOTICS], ~has_ab),
        DILUTION_TEXT=col_str(comp * len(_DILUTIONS) + dil, _DIL_TEXT, ~has_ab),
        DILUTION_COMPARISON=col_str(comp, _COMPARISONS, ~has_ab), DILUTION_VALUE=col_num(_DILUTIONS[dil], ~has_ab),
        INTERPRETATION=col_str(interp, ("S", "R", "I"), ~has_ab),
    )
    return cols


# ---------------------------------------------------------------------------- PRESCRIPTIONS, DIAGNOSES_ICD
def prescriptions(rng, ch: Chunk, density: float, exact: bool = False) -> dict[str, pa.Array]:
    """PRESCRIPTIONS: orders (Poisson), drug odds shifted by severity; dates at midnight (``exact``:
    STARTDATE/ENDDATE keep the order's time, as MIMIC-IV's starttime/stoptime; same draws)."""
    adm, h, a, b = hosp_cells(ch)
    s = ch.sev[adm, h]
    cell, _ = poisson_events(rng, ((b - a) * density * 0.28 * np.exp(0.15 * s))[:, None])
    w = np.array([d[1] for d in cat.DRUGS])
    c = np.array([d[2] for d in cat.DRUGS])
    weights = w * np.exp(np.outer(s[cell], c))  # (orders, drugs)
    weights[:, -1] = 3.0 * ch.vaso[adm[cell], h[cell]]  # norepinephrine only while a pressor runs
    cum = np.cumsum(weights, 1)
    drug = (cum < rng.random(len(cell))[:, None] * cum[:, -1:]).sum(1)
    ea = adm[cell]
    t = event_time(ch, ea, a[cell] + rng.random(len(cell)) * (b - a)[cell])
    start = t if exact else t // DAY * DAY
    n = len(drug)
    cols = key_cols(ch, ea, ch.stay_at[ea, h[cell]])
    cols.update(STARTDATE=col_ts(start), ENDDATE=col_ts(start + rng.integers(1, 8, n) * DAY))
    names = ("DRUG_TYPE", "DRUG", "DRUG_NAME_POE", "DRUG_NAME_GENERIC", "FORMULARY_DRUG_CD", "GSN", "NDC",
             "PROD_STRENGTH", "DOSE_VAL_RX", "DOSE_UNIT_RX", "FORM_VAL_DISP", "FORM_UNIT_DISP", "ROUTE")
    for j, name in enumerate(names):
        cols[name] = col_str(drug, [d[0][j] for d in cat.DRUGS])
    return cols


def diagnoses_icd(rng, ch: Chunk) -> dict[str, pa.Array]:
    """DIAGNOSES_ICD, coded at discharge: the admission reason first, then acute codes driven by
    the whole stay (peak severity, ventilation, pressors), then chronic codes from the burden."""
    A, H = ch.sev.shape
    inside = np.arange(H)[None, :] < np.ceil(ch.end_h)[:, None]
    peak = np.where(inside, ch.sev, -np.inf).max(1)
    not_newborn = ch.kind != NEWBORN
    r = lambda: rng.random(A)  # noqa: E731
    acute = {"99592": (peak > 1.5) & (r() < 0.6), "78552": ch.vaso.any(1) & (r() < 0.7),
             "51881": ch.vent.any(1) & (r() < 0.8), "5849": (peak > 1.0) & (r() < 0.5),
             "2761": r() < 0.12, "5990": r() < 0.1, "42731": ch.af}
    chronic = {code: r() < 1 - np.exp(-0.4 * w * ch.comorb) for code, w in cat.ICD_CHRONIC}
    newborn = {"V053": r() < 0.9, "V290": r() < 0.5, "7742": r() < 0.3}
    codes = list(dict.fromkeys([x[1] for x in REASONS] + list(acute) + list(chronic) + list(newborn)))
    m = np.zeros((A, len(codes)), bool)  # (A, codes)
    for table, who in ((acute, not_newborn), (chronic, not_newborn), (newborn, ~not_newborn)):
        for code, on in table.items():
            m[:, codes.index(code)] |= on & who
    primary = np.array([codes.index(REASONS[x][1]) for x in ch.reason], np.int64)
    m[np.arange(A), primary] = True
    a, c = np.nonzero(m)
    order = np.lexsort((np.where(c == primary[a], -1, c), a))
    a, c = a[order], c[order]
    first = np.r_[True, a[1:] != a[:-1]]
    seq = np.arange(len(a)) - np.maximum.accumulate(np.where(first, np.arange(len(a)), 0)) + 1
    cols = key_cols(ch, a)
    cols.update(SEQ_NUM=col_int(seq), ICD9_CODE=col_str(c, codes))
    return cols
