"""ICU event tables of the synthetic MIMIC-III (`pipeline.data.mimic.synth`), one builder per table.

INPUTEVENTS_CV and INPUTEVENTS_MV (one infusion model, two recordings), OUTPUTEVENTS,
DATETIMEEVENTS and PROCEDUREEVENTS_MV; CHARTEVENTS is in ``events_chart``.

The builders follow ``events_hosp``'s contract (its docstring): one chunk in, one table's columns out.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.data.mimic.synth.catalog_icu import DTEVENTS, INPUTS, OUTPUTS, PROCEDURES, SED_PROBS, VASO_PROBS
from pipeline.data.mimic.synth.chunk import (
    DAY,
    MIN,
    SYSTEMS,
    Chunk,
    clock_hour,
    col_cgid,
    event_time,
    icu_cells,
    key_cols,
    pick,
    poisson_events,
    store_time,
)
from pipeline.data.mimic.synth.csvgz import col_const, col_int, col_nulls, col_num, col_str, col_ts

# ---------------------------------------------------------------------------- INPUTEVENTS
_IN_KIND = np.array([x.kind for x in INPUTS])


def _input_events(rng, ch: Chunk, system: int, density: float):
    """Infusions of one system: hourly drip segments while a state is on, Poisson boluses.

    Returns (stay, adm, item, t0, t1, rate, amount, last) arrays; `last` marks a drip's final segment.
    """
    st, adm, h, a, b = icu_cells(ch, system)
    A, H = ch.sev.shape
    s = ch.sev[adm, h]
    vaso_rows = np.flatnonzero(_IN_KIND == "vaso")
    primary = vaso_rows[pick(rng, list(zip(vaso_rows, VASO_PROBS)), A)]  # (A,)
    sed_rows = np.flatnonzero(_IN_KIND == "sed")
    sed_on = rng.random((A, len(sed_rows))) < np.array(SED_PROBS)  # (A, sedatives)
    keep = rng.random(len(h)) < min(1.0, 0.95 * density)
    masks = [(ch.vaso[adm, h] & keep, primary[adm]),
             (ch.vaso2[adm, h] & keep, np.full(len(h), np.flatnonzero(_IN_KIND == "vaso2")[0]))]
    masks += [(ch.vent[adm, h] & sed_on[adm, j] & keep, np.full(len(h), r)) for j, r in enumerate(sed_rows)]
    d_cell = np.concatenate([np.flatnonzero(m) for m, _ in masks])
    d_item = np.concatenate([it[m] for m, it in masks])
    base = np.array([x.rate for x in INPUTS])
    d_rate = base[d_item] * np.where(_IN_KIND[d_item] == "sed", rng.lognormal(0, 0.3, len(d_cell)),
                                     np.exp(0.5 * (s[d_cell] - 1.5)) * rng.lognormal(0, 0.15, len(d_cell)))
    key = (adm[d_cell] * H + h[d_cell]) * len(INPUTS) + d_item
    d_last = ~np.isin(key + len(INPUTS), key)
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
    per_kg = np.array([x.per_kg for x in INPUTS])[d_item]  # rate in mcg/kg/min: amount in mg
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
    link = rng.integers(1, 12_000_000, (len(ch.pat), len(INPUTS)))[adm, item]
    ru = [x.rateuom[0] for x in INPUTS]
    au = [x.amountuom for x in INPUTS]
    cols = key_cols(ch, adm, st)
    cols.update(
        CHARTTIME=col_ts(ct), ITEMID=col_int(np.array([x.cv for x in INPUTS])[item]),
        AMOUNT=col_num(np.round(amount, 4)), AMOUNTUOM=col_str(item, au), RATE=col_num(np.round(rate, 4)),
        RATEUOM=col_str(item, ru), STORETIME=col_ts(store_time(rng, ct)), CGID=col_cgid(rng, n),
        ORDERID=col_int(rng.integers(1, 12_000_000, n)), LINKORDERID=col_int(link), STOPPED=col_nulls(n),
        NEWBOTTLE=col_nulls(n), ORIGINALAMOUNT=col_nulls(n), ORIGINALAMOUNTUOM=col_str(item, au),
        ORIGINALROUTE=col_str(item, [x.route for x in INPUTS]), ORIGINALRATE=col_num(np.round(rate, 4)),
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
    link = rng.integers(1, 12_000_000, (len(ch.pat), len(INPUTS)))[adm, item]
    drip = np.isin(_IN_KIND[item], ("vaso", "vaso2", "sed"))
    ru = [x.rateuom[1] for x in INPUTS]
    cols = key_cols(ch, adm, st)
    cols.update(
        STARTTIME=col_ts(event_time(ch, adm, t0)), ENDTIME=col_ts(t_end),
        ITEMID=col_int(np.array([x.mv for x in INPUTS])[item]),
        AMOUNT=col_num(np.round(amount, 6)), AMOUNTUOM=col_str(item, [x.amountuom for x in INPUTS]),
        RATE=col_num(np.round(rate, 6)),
        RATEUOM=col_str(item, [u if u else "mL/hour" for u in ru], _IN_KIND[item] == "insulin"),
        STORETIME=col_ts(store), CGID=col_cgid(rng, n), ORDERID=col_int(rng.integers(1, 12_000_000, n)),
        LINKORDERID=col_int(link), ORDERCATEGORYNAME=col_str(item, [x.category[0] for x in INPUTS]),
        SECONDARYORDERCATEGORYNAME=col_str(drip.astype(int), ["Additive (Crystalloid)", "02-Fluids (Crystalloids)"],
                                        _IN_KIND[item] == "insulin"),
        ORDERCOMPONENTTYPEDESCRIPTION=col_str(item, [x.category[1] for x in INPUTS]),
        ORDERCATEGORYDESCRIPTION=col_str(item, [x.category[2] for x in INPUTS]),
        PATIENTWEIGHT=col_num(np.round(ch.weight[adm], 1)),
        TOTALAMOUNT=col_num(np.where(drip, 250.0, np.round(amount, 1))),
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
    rates = np.array([o[2] for o in OUTPUTS])
    cell, j = poisson_events(rng, ((b - a) * density)[:, None] * rates[None, :])
    cells = np.concatenate([urine, cell])
    kind = np.concatenate([np.zeros(len(urine), np.int64), j])
    t = np.concatenate([clock_hour(ch, adm[urine], h[urine], a[urine], b[urine]),
                        a[cell] + rng.random(len(cell)) * (b - a)[cell]])
    med = np.array([o[3] for o in OUTPUTS])[kind]
    value = np.round(med * np.exp(np.where(kind == 0, -0.35 * s[cells], 0.0) + 0.45 * rng.standard_normal(len(kind))))
    sys_ = ch.system[adm[cells]]
    itemid = np.where(sys_ == 0, np.array([o[0] for o in OUTPUTS])[kind], np.array([o[1] for o in OUTPUTS])[kind])
    ct = event_time(ch, adm[cells], t)
    n = len(kind)
    cols = key_cols(ch, adm[cells], st[cells])
    cols.update(CHARTTIME=col_ts(ct), ITEMID=col_int(itemid), VALUE=col_num(value),
                VALUEUOM=col_str(sys_, ("ml", "mL")),
                STORETIME=col_ts(store_time(rng, ct)), CGID=col_cgid(rng, n), STOPPED=col_nulls(n),
                NEWBOTTLE=col_nulls(n), ISERROR=col_nulls(n))
    return cols


def datetimeevents(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """DATETIMEEVENTS: line insertion dates and dressing changes, VALUE a datetime at or before CHARTTIME."""
    parts = []
    insert_iv = ch.in_h - rng.uniform(0, 24, len(ch.in_h))  # (S,) peripheral line placed before the ICU
    for system, name in enumerate(SYSTEMS):
        items = DTEVENTS[name]
        st, adm, h, a, b = icu_cells(ch, system)
        need = np.array([x[2] == "art" for x in items])
        lam = (((b - a) * density)[:, None] * np.array([x[1] for x in items])
               * np.where(need, ch.art[adm, h][:, None], 1.0))
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
    cols.update(ITEMID=col_int(itemid), CHARTTIME=col_ts(ct), STORETIME=col_ts(store_time(rng, ct)),
                CGID=col_cgid(rng, n),
                VALUE=col_ts(vt).cast(pa.string()),
                VALUEUOM=col_str((~date_only).astype(int), ("Date", "Date and Time")),
                WARNING=col_int(np.zeros(n), cv), ERROR=col_int(np.zeros(n), cv), RESULTSTATUS=col_nulls(n),
                STOPPED=col_str(np.zeros(n), ["NotStopd"], ~cv))
    return cols


# ---------------------------------------------------------------------------- PROCEDUREEVENTS_MV
def procedureevents_mv(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """PROCEDUREEVENTS_MV of MetaVision stays: ventilation, arterial and peripheral lines (one row
    per episode, VALUE = minutes, recorded at the end), X-rays and cultures (Poisson, severity-driven)."""
    A, H = ch.sev.shape
    mv_adm = ch.system == 1
    names = tuple(PROCEDURES)
    rows = []  # (kind, adm, stay, t0, t1); kind indexes PROCEDURES
    for kind, on in (("vent", ch.vent_on), ("art", ch.art_on)):
        adm = np.flatnonzero(mv_adm & (on >= 0))
        st = ch.stay_at[adm, on[adm]]
        lo = np.maximum(on[adm], ch.in_h[st])  # clipped (not scaled) by OUTTIME, which may lie after T
        t0 = np.maximum(np.minimum(lo + rng.uniform(0, 0.9, len(adm)), ch.out_h[st] - 1 / 60), lo)
        stop = ch.vent_off[adm].astype(float) if kind == "vent" else np.full(len(adm), np.inf)
        t1 = np.maximum(np.minimum(stop, ch.out_h[st]), t0 + 1 / 60)
        rows.append((np.full(len(adm), names.index(kind)), adm, st, t0, np.minimum(t1, ch.end_h[adm])))
    st_mv = np.flatnonzero(mv_adm[ch.stay_adm])
    t0 = np.maximum(np.minimum(ch.in_h[st_mv] + rng.uniform(0, 2, len(st_mv)), ch.out_h[st_mv] - 1 / 60),
                    ch.in_h[st_mv])
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
    spec = [PROCEDURES[x] for x in names]
    start, end = event_time(ch, adm, t0), event_time(ch, adm, t1)
    end = np.maximum(end, start + MIN)
    n = len(k)
    order = rng.integers(1, 10_000_000, n)
    cols = key_cols(ch, adm, st)
    cols.update(
        STARTTIME=col_ts(start), ENDTIME=col_ts(end), ITEMID=col_int(np.array([x[0] for x in spec])[k]),
        VALUE=col_num(np.where(episode, (end - start) / MIN, 1.0)),
        VALUEUOM=col_str(episode.astype(int), ("None", "min")),
        LOCATION=col_str(k, [x[3] for x in spec]), LOCATIONCATEGORY=col_str(k, [x[4] for x in spec]),
        STORETIME=col_ts(end + rng.integers(0, 31, n) * MIN), CGID=col_cgid(rng, n), ORDERID=col_int(order),
        LINKORDERID=col_int(order), ORDERCATEGORYNAME=col_str(k, [x[1] for x in spec]),
        SECONDARYORDERCATEGORYNAME=col_nulls(n), ORDERCATEGORYDESCRIPTION=col_str(k, [x[2] for x in spec]),
        ISOPENBAG=col_int(episode), CONTINUEINNEXTDEPT=col_int(np.zeros(n)),
        CANCELREASON=col_int(np.zeros(n)), STATUSDESCRIPTION=col_const("FinishedRunning", n),
        COMMENTS_EDITEDBY=col_nulls(n), COMMENTS_CANCELEDBY=col_nulls(n), COMMENTS_DATE=col_nulls(n),
    )
    return cols
