"""Hospital event tables of the synthetic MIMIC-III (`pipeline.data.mimic.synth`), one builder per table.

LABEVENTS, MICROBIOLOGYEVENTS, PRESCRIPTIONS and DIAGNOSES_ICD: what is recorded for the whole
hospital stay (and, for labs, in the ED and as outpatient draws before it).

Each builder turns one simulated chunk (`Chunk`) into the columns of one table, vectorized
with numpy (no Python loop per event). Events in hour cell [h, h+1) of an admission use the
severity s(h) and the states (arterial line, ventilation, pressors) at h, so nothing before
the prediction time depends on what comes after it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.data.mimic.synth.catalog_hosp import (
    ANTIBIOTICS,
    DRUGS,
    ICD_CHRONIC,
    LAB_TEXT,
    LABS,
    ORGANISMS,
    PANELS,
    SPECIMENS,
)
from pipeline.data.mimic.synth.chunk import (
    ADULT,
    DAY,
    NEWBORN,
    REASONS,
    Chunk,
    event_time,
    hosp_cells,
    key_cols,
    pick,
    poisson_events,
    round_to,
)
from pipeline.data.mimic.synth.csvgz import col_int, col_num, col_numstr, col_str, col_ts


# ---------------------------------------------------------------------------- LABEVENTS
def _lab_arrays() -> dict[str, np.ndarray]:
    names = ("itemid", "mean", "sd", "load", "dec", "log")
    out = {n: np.array([getattr(x, n) for x in LABS]) for n in names}
    out["lo"] = np.array([x.ref[0] for x in LABS], float)
    out["hi"] = np.array([x.ref[1] for x in LABS], float)
    return out


_LA = _lab_arrays()
_PANEL_NAMES = tuple(PANELS)
_PANEL_ITEMS = [np.array([i for i, x in enumerate(LABS) if x.panel == p]) for p in _PANEL_NAMES]
_SPECIMEN = next(i for i, x in enumerate(LABS) if x.itemid == 50800)


def labevents(rng, ch: Chunk, density: float) -> dict[str, pa.Array]:
    """LABEVENTS: panels drawn in hospital (Poisson, faster when severe or ventilated), in the
    ED before ADMITTIME, and as outpatient draws months before (no HADM_ID)."""
    A = len(ch.pat)
    re = rng.standard_normal((A, len(LABS)))  # (A, labs) per-admission offsets
    adm, h, a, b = hosp_cells(ch)
    s = ch.sev[adm, h]
    rate = np.array([PANELS[p][0] for p in _PANEL_NAMES])
    gamma = np.array([PANELS[p][1] for p in _PANEL_NAMES])
    ventf = np.where(ch.vent[adm, h][:, None], np.array([PANELS[p][2] for p in _PANEL_NAMES]), 1.0)
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
    strings = ("ART", "VEN") + LAB_TEXT
    scode = np.where(spec, ven.astype(int), 2 + rng.integers(0, len(LAB_TEXT), n))
    abnormal = ~is_text & ((val < _LA["lo"][lab]) | (val > _LA["hi"][lab]))
    flag = np.where(abnormal, 0, np.where(rng.random(n) < 0.002, 1, 2))
    uoms = tuple(x.uom for x in LABS) + tuple(x.uom.upper() for x in LABS)
    upper = (ch.system[ea] == 0) & (rng.random(n) < 0.3)
    cols = key_cols(ch, ea, hadm_null=e_nohadm[evi])
    cols.update(
        ITEMID=col_int(_LA["itemid"][lab]), CHARTTIME=col_ts(event_time(ch, ea, e_t[evi])),
        VALUE=pc.if_else(pa.array(is_text), col_str(scode, strings), col_numstr(val)),
        VALUENUM=col_num(np.where(is_text, np.nan, val)),
        VALUEUOM=col_str(lab + len(LABS) * upper, uoms, spec), FLAG=col_str(flag, ("abnormal", "delta", "")),
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
    spec = pick(rng, [(x, x[2]) for x in SPECIMENS], n_sp)
    shift = np.array([x[3] for x in SPECIMENS])[spec]
    positive = rng.random(n_sp) < 1 / (1 + np.exp(1.6 - 0.7 * sp_s - shift))
    org = rng.integers(0, len(ORGANISMS), n_sp)
    n_ab = np.where(positive, rng.integers(3, 7, n_sp), 0)
    no_time = rng.random(n_sp) < 0.05
    rep = 1 + n_ab
    i = np.repeat(np.arange(n_sp), rep)
    pos_in = np.arange(rep.sum()) - np.repeat(np.cumsum(rep) - rep, rep)  # 0 = specimen/isolate row
    n = len(i)
    has_ab = pos_in > 0
    ab = (pos_in + rng.integers(0, len(ANTIBIOTICS), n_sp)[i]) % len(ANTIBIOTICS)
    comp = pick(rng, [(c, p) for c, p in zip(_COMPARISONS, (0.5, 0.35, 0.15))], n)
    dil = rng.integers(0, len(_DILUTIONS), n)
    interp = pick(rng, [("S", 0.75), ("R", 0.2), ("I", 0.05)], n)
    pos = positive[i]
    cols = key_cols(ch, sp_adm[i])
    cols.update(
        CHARTDATE=col_ts(sp_t[i] // DAY * DAY), CHARTTIME=col_ts(sp_t[i], no_time[i]),
        SPEC_ITEMID=col_int(np.array([x[0] for x in SPECIMENS])[spec[i]]),
        SPEC_TYPE_DESC=col_str(spec[i], [x[1] for x in SPECIMENS]),
        ORG_ITEMID=col_int(np.array([x[0] for x in ORGANISMS])[org[i]], ~pos),
        ORG_NAME=col_str(org[i], [x[1] for x in ORGANISMS], ~pos), ISOLATE_NUM=col_int(np.ones(n), ~pos),
        AB_ITEMID=col_int(np.array([x[0] for x in ANTIBIOTICS])[ab], ~has_ab),
        AB_NAME=col_str(ab, [x[1] for x in ANTIBIOTICS], ~has_ab),
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
    w = np.array([d[1] for d in DRUGS])
    c = np.array([d[2] for d in DRUGS])
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
        cols[name] = col_str(drug, [d[0][j] for d in DRUGS])
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
    chronic = {code: r() < 1 - np.exp(-0.4 * w * ch.comorb) for code, w in ICD_CHRONIC}
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
