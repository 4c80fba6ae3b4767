"""Synthetic MIMIC-III v1.4 with a known true risk of in-hospital death.

`generate(out_dir, patients, seed)` writes the full-release layout: `TABLE.csv.gz` with the
v1.4 columns, UPPERCASE quoted headers, quoted strings, empty fields for NULLs, datetimes
`YYYY-MM-DD HH:MM:SS` shifted per patient into 2100-2210. The truth lies apart, in
`_truth/truth.csv.gz` (HADM_ID, TRUE_RISK) and `_truth/README.json`.

Generative model (h = hours from ADMITTIME, T = `prediction_hours`, k = floor(T); constants in `MODEL`):

1. Patients: adult age 18 + 82 Beta(2.8, 1.8); age >= 90 hidden by a DOB 300 years before the
   first admission (computed age ~300); newborns (NEWBORN, age 0) and 1-17 year olds;
   adults have 1-3 admissions (none after an in-hospital death); chronic burden
   c ~ Poisson(0.3 + 2.5 (age - 18) / 82). Real dates fall in 2001-2012 and are shifted per
   patient by 100-190 years: the era is visible only through the ICU system (CareVue
   before 2008-06-01 real time, MetaVision after: itemids, DBSOURCE, INPUTEVENTS_CV/_MV).
2. Latent severity s(h) = b + d min(h, 48)/24 + u(h) + r(h), sampled hourly. b: baseline from
   age, admission type/location, c and N(0, 0.75^2); d ~ N(0, 0.45^2): trend per day; u: OU
   process (time constant 6 h, sd 0.45); r = 0 up to T, then a linear ramp to +1.5 at death
   or -1.0 at discharge. Every event in the hour cell [h, h+1) uses s(h) and states decided
   from s up to h, so what happens before T depends only on the path up to T and on draws
   independent of the outcome.
3. Ends before T (the cohort excludes them): death w.p. sigmoid(-5.2 + 1.3 b), else discharge
   w.p. sigmoid(-3.3 - 0.8 b), at a uniform time in (2 h, T).
4. Death after T ~ Bernoulli(p), logit p = beta0 + beta_s s(k) + beta_d d + beta_age agez +
   beta_comorb cz (agez = (age - 65)/15 with age clipped to 18-95, cz = (c - 1.5)/1.2).
   TRUE_RISK = p, exact: everything generated up to T is (b, d, u up to k, age, c) plus noise
   independent of the outcome, the outcome is drawn from p, and what is generated later
   (death/discharge time, the ramp, events after T) depends on the outcome, never the reverse.
   Death comes T + LogNormal(ln 72 h, 1) after admission, discharge T + LogNormal(ln 110 h +
   0.25 s(k), 0.8), capped at `max_stay_days`.
5. Observations: numeric items z = load s(h) + re e + noise eps (e per admission and concept),
   value = mean + sd z (or exp of it); text items are thresholds on z; charting, lab, culture
   and X-ray rates scale with exp(gamma s(h)). Arterial line, ventilation and vasopressors start
   when s(h) crosses a per-admission threshold and stop with hysteresis. About half the chart
   rows are nuisance items (alarm limits, nursing text) that carry no signal.
6. ICU stays start within hours of admission (up to 36 h for some); with `icu_fraction` < 1 the
   other admissions stay on the ward (no ICU stay, events or ICU treatments). A stay begun before T - 1 h
   ends before T w.p. sigmoid(-1.5 - b), else after T (at death for 85 % of deaths); 10 % of
   long survivors return to the ICU after T. Times after T are shortened to fit the stay.

Records that are only known later, as in real MIMIC: STORETIME after CHARTTIME; procedures
and infusions recorded at their end (STORETIME >= ENDTIME, VALUE = duration); PRESCRIPTIONS
and MICROBIOLOGYEVENTS.CHARTDATE known to the day; culture results; DIAGNOSES_ICD (assigned
at discharge); DISCHTIME/DEATHTIME/OUTTIME/LOS. A reader must treat them accordingly.

One concern over ~400 lines: the generative model; its docstring is the specification.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline.core.configs import invalid
from pipeline.core.errors import ConfigError
from pipeline.data.mimic.synth.catalog_hosp import ADM_LOCATIONS
from pipeline.data.mimic.synth.catalog_hosp import REASONS as REASONS_BY_TYPE
from pipeline.data.mimic.synth.catalog_icu import CAREUNITS
from pipeline.data.mimic.synth.chunk import (
    ADMISSION_TYPES,
    ADULT,
    CHILD,
    DAY,
    HOUR,
    LOCATIONS,
    MIN,
    NEWBORN,
    UNITS,
    YEAR,
    Chunk,
    hour_cells,
    pick,
)
from pipeline.data.mimic.synth.limits import MAX_DENSITY

# Death model and latent dynamics (documented in the module docstring; copied to README.json).
MODEL = {
    "b0": -0.5, "b_age": 0.45, "b_comorb": 0.25, "b_sd": 0.75,  # baseline severity b
    "type": {"EMERGENCY": 0.35, "URGENT": 0.25, "ELECTIVE": -0.7, "NEWBORN": -1.5},
    "transfer": 0.3,  # added to b for TRANSFER FROM HOSP/EXTRAM
    "d_sd": 0.45, "trend_h": 48.0, "tau_h": 6.0, "u_sd": 0.45,  # trend per day (for trend_h hours),
        # OU time constant and sd
    "beta0": -3.15, "beta_s": 1.1, "beta_d": 0.7, "beta_age": 0.35, "beta_comorb": 0.15,
    "ramp_death": 1.5, "ramp_discharge": -1.0,  # severity change from T to death / discharge
    "early_death": (-5.2, 1.3), "early_discharge": (-3.3, -0.8),  # logit = a + c b
    "icu_leave": (-1.5, -1.0),  # logit (a + c b) of leaving the ICU before T when admitted to it before T - 1 h
    "death_median_h": 72.0, "stay_median_h": 110.0,  # after T (LogNormal, sd 1.0 / 0.8)
}


# SynthConfig settings that give the world MIMIC-IV's proportions (v2.2: 73,181 ICU stays in 431,231 admissions
# of 299,712 patients, 313,645,063 chart rows; no NEWBORN admissions or children; more readmissions):
# ``synth --proportions mimic-iv``; every other setting keeps its default.
MIMIC4_PROPORTIONS = {"icu_fraction": 0.17, "chart_rows_per_stay": 4286.0, "admissions_probs": (0.70, 0.16, 0.14),
                      "newborn_fraction": 0.0, "pediatric_fraction": 0.0}


@dataclass
class SynthConfig:
    """Options of `generate` (the defaults match MIMIC-III density; `density` thins for quick runs)."""

    prediction_hours: float = 24.0  # T: TRUE_RISK is P(in-hospital death after ADMITTIME + T)
    chart_rows_per_stay: float = 5400.0  # mean CHARTEVENTS rows per ICU stay at density 1
    density: float = 1.0  # multiplies every event rate (0.05 = quick runs); course and truth unchanged
    chunk_patients: int = 100  # patients per chunk (bounds memory; part of the random stream like the seed)
    newborn_fraction: float = 0.05  # patients admitted as NEWBORN (age 0)
    pediatric_fraction: float = 0.02  # patients aged 1-17 (excluded by the cohort)
    admissions_probs: tuple[float, float, float] = (0.78, 0.15, 0.07)  # adults with 1, 2, 3 admissions
    icu_fraction: float = 1.0  # admissions with an ICU stay (1.0: all, as MIMIC-III; MIMIC-IV: about 0.17)
    metavision_from: str = "2008-06-01"  # real (unshifted) date from which stays are charted in MetaVision
    max_stay_days: float = 60.0  # hospital stays are capped at this length
    gzip_level: int = 4  # gzip compression level of every file (4: ~2x faster than 6, ~6 % larger)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the first bad setting (``configs.invalid``: ``synth --density`` where the
        command line offers it)."""
        if not self.prediction_hours > 0:
            raise ConfigError(f"prediction_hours must be > 0, got {self.prediction_hours}")
        if not 0 < self.density <= MAX_DENSITY:
            raise invalid(self, f"density must be in (0, {MAX_DENSITY:g}], got {self.density}", "density")
        if self.chart_rows_per_stay < 0:
            raise ConfigError(f"chart_rows_per_stay must be >= 0, got {self.chart_rows_per_stay}")
        if self.chunk_patients < 1:
            raise ConfigError(f"chunk_patients must be >= 1, got {self.chunk_patients}")
        if (self.newborn_fraction < 0 or self.pediatric_fraction < 0
                or self.newborn_fraction + self.pediatric_fraction >= 1):
            raise ConfigError("newborn_fraction + pediatric_fraction must be in [0, 1)")
        if not 0 < self.icu_fraction <= 1:
            raise ConfigError(f"icu_fraction must be in (0, 1], got {self.icu_fraction}")
        if len(self.admissions_probs) != 3 or abs(sum(self.admissions_probs) - 1) > 1e-9:
            raise ConfigError(f"admissions_probs must be 3 probabilities summing to 1, got {self.admissions_probs}")
        if self.max_stay_days * 24 < self.prediction_hours + 2:
            raise ConfigError("max_stay_days must leave at least 2 h after the prediction time")


# ---------------------------------------------------------------------------- simulation
def _epoch(day: str) -> int:
    return int(np.datetime64(day, "s").astype(np.int64))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _course(rng, cfg: SynthConfig, kind: np.ndarray, age: np.ndarray, comorb: np.ndarray) -> dict[str, np.ndarray]:
    """One admission per row: type, baseline, severity path up to T, and how and when it ends."""
    n, T, M = len(kind), cfg.prediction_hours, MODEL
    at = {t: i for i, t in enumerate(ADMISSION_TYPES)}
    adult_type = np.array([at["EMERGENCY"], at["ELECTIVE"], at["URGENT"]])[
        pick(rng, (("EMERGENCY", 0.78), ("ELECTIVE", 0.15), ("URGENT", 0.07)), n)]
    child_type = np.where(rng.random(n) < 0.8, at["EMERGENCY"], at["URGENT"])
    atype = np.where(kind == NEWBORN, at["NEWBORN"], np.where(kind == CHILD, child_type, adult_type))
    aloc, reason = np.zeros(n, np.int64), np.zeros(n, np.int64)
    first_reason = 0
    for t, name in enumerate(ADMISSION_TYPES):
        m = atype == t
        pairs = ADM_LOCATIONS[name]
        aloc[m] = np.array([LOCATIONS.index(v) for v, _ in pairs])[pick(rng, pairs, int(m.sum()))]
        reason[m] = first_reason + rng.integers(0, len(REASONS_BY_TYPE[name]), int(m.sum()))
        first_reason += len(REASONS_BY_TYPE[name])
    agez = (np.clip(age, 18, 95) - 65) / 15
    cz = (comorb - 1.5) / 1.2
    type_eff = np.array([M["type"][t] for t in ADMISSION_TYPES])[atype]
    transfer = aloc == LOCATIONS.index("TRANSFER FROM HOSP/EXTRAM")
    b = (M["b0"] + M["b_age"] * agez + type_eff + M["transfer"] * transfer + M["b_comorb"] * cz
         + M["b_sd"] * rng.standard_normal(n))
    d = M["d_sd"] * rng.standard_normal(n)
    k = int(np.floor(T))
    a = np.exp(-1 / M["tau_h"])
    u = np.empty((n, k + 1))  # (n, k+1) OU deviation at hours 0..k
    u[:, 0] = M["u_sd"] * rng.standard_normal(n)
    for h in range(1, k + 1):
        u[:, h] = a * u[:, h - 1] + M["u_sd"] * np.sqrt(1 - a * a) * rng.standard_normal(n)
    s_T = b + d * min(k, M["trend_h"]) / 24 + u[:, k]
    early_death = rng.random(n) < _sigmoid(M["early_death"][0] + M["early_death"][1] * b)
    early = early_death | (rng.random(n) < _sigmoid(M["early_discharge"][0] + M["early_discharge"][1] * b))
    p = _sigmoid(M["beta0"] + M["beta_s"] * s_T + M["beta_d"] * d + M["beta_age"] * agez + M["beta_comorb"] * cz)
    late_death = ~early & (rng.random(n) < p)
    post = np.where(late_death, rng.lognormal(np.log(M["death_median_h"]), 1.0, n),
                    rng.lognormal(np.log(M["stay_median_h"]) + 0.25 * s_T, 0.8, n))
    end = np.where(early, rng.uniform(min(2.0, T / 2), T, n), T + np.clip(post, 1.0, cfg.max_stay_days * 24 - T))
    end = np.round(end * 60) / 60
    end = np.where(early, np.minimum(end, (np.ceil(T * 60) - 1) / 60), np.maximum(end, (np.floor(T * 60) + 1) / 60))
    weight = np.where(kind == NEWBORN, rng.normal(3.3, 0.5, n),
                      np.where(kind == CHILD, rng.uniform(12, 70, n), rng.normal(80, 18, n)))
    er = aloc == LOCATIONS.index("EMERGENCY ROOM ADMIT")
    return {
        "atype": atype, "aloc": aloc, "reason": reason, "b": b, "d": d, "u": u, "early": early,
        "died": early_death | late_death, "late": late_death, "end_h": end,
        "risk": np.where(early, np.nan, np.clip(p, 1e-12, 1 - 1e-12)),
        "dnr": (kind == ADULT) & (rng.random(n) < _sigmoid(-3.0 + 0.9 * agez + 0.3 * cz)),
        "af": rng.random(n) < _sigmoid(-3.4 + 0.8 * agez), "weight": np.clip(weight, 1.5, 250.0),
        "edreg_h": np.where(er, -np.round(rng.uniform(1, 8, n) * 60) / 60, np.nan), "agez": agez,
    }


def _episode(sev, allowed, on_thr, off_thr):
    """One episode per admission: on from the first allowed hour with sev > on_thr until the
    first later hour with sev < off_thr or not allowed. Returns (on (A, H), start, stop)."""
    A, H = sev.shape
    idx = np.arange(H)[None, :]
    cond_on = (sev > on_thr[:, None]) & allowed
    has = cond_on.any(1)
    start = cond_on.argmax(1)
    cond_off = ((sev < off_thr[:, None]) | ~allowed) & (idx > start[:, None])
    stop = np.where(cond_off.any(1), cond_off.argmax(1), H)
    on = has[:, None] & (idx >= start[:, None]) & (idx < stop[:, None])
    return on, np.where(has, start, -1), stop


def simulate(rng, cfg: SynthConfig, subject_id: np.ndarray, hadm_pool, icu_pool) -> Chunk:
    """Patients, admissions (courses and severity paths), ICU stays and treatment states."""
    P, T, M = len(subject_id), cfg.prediction_hours, MODEL
    r = rng.random(P)
    kind = np.where(r < cfg.newborn_fraction, NEWBORN,
                    np.where(r < cfg.newborn_fraction + cfg.pediatric_fraction, CHILD, ADULT))
    age0 = np.where(kind == ADULT, 18 + 82 * rng.beta(2.8, 1.8, P), np.where(kind == CHILD, rng.uniform(1, 18, P), 0.0))
    male = rng.random(P) < np.where(kind == ADULT, 0.56, 0.52)
    comorb = rng.poisson(np.where(kind == ADULT, 0.3 + 2.5 * (age0 - 18) / 82, 0.0))
    n_adm = np.where(kind == ADULT, 1 + (rng.random(P)[:, None] > np.cumsum(cfg.admissions_probs)[:2]).sum(1), 1)
    offset = rng.integers(100 * 365, 190 * 365, P) * DAY  # per-patient date shift (whole days)
    lo, hi = _epoch("2001-06-01"), _epoch("2012-06-01")
    first = lo + rng.integers(0, (hi - lo) // MIN, P) * MIN  # real first ADMITTIME
    parts, alive, t_real, last_end = [], np.ones(P, bool), first.copy(), first.copy()
    for j in range(3):
        sel = np.flatnonzero((n_adm > j) & alive)
        if not sel.size:
            break
        age = age0[sel] + np.where(kind[sel] == ADULT, (t_real[sel] - first[sel]) / YEAR, 0.0)
        c = _course(rng, cfg, kind[sel], age, comorb[sel])
        c.update(pat=sel, real=t_real[sel].copy(), kind=kind[sel], age=age, comorb=comorb[sel])
        parts.append(c)
        alive[sel] &= ~c["died"]
        last_end[sel] = t_real[sel] + np.round(c["end_h"] * 60).astype(np.int64) * MIN
        t_real[sel] = last_end[sel] + ((2 + rng.exponential(240, len(sel))) * DAY // MIN).astype(np.int64) * MIN
    c = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    A, end_h = len(c["pat"]), c["end_h"]
    H = int(np.ceil(end_h.max())) + 1
    k = c["u"].shape[1] - 1
    a = np.exp(-1 / M["tau_h"])
    u = np.empty((A, max(H, k + 1)))  # (A, H) OU deviation, continued after T
    u[:, :k + 1] = c["u"]
    for h in range(k + 1, H):
        u[:, h] = a * u[:, h - 1] + M["u_sd"] * np.sqrt(1 - a * a) * rng.standard_normal(A)
    hh = np.arange(H, dtype=float)
    delta = np.where(c["early"], 0.0, np.where(c["late"], M["ramp_death"], M["ramp_discharge"]))
    ramp = np.clip((hh[None, :] - T) / np.maximum(end_h - T, 1e-9)[:, None], 0, 1) * delta[:, None]
    sev = c["b"][:, None] + c["d"][:, None] * np.minimum(hh, M["trend_h"])[None, :] / 24 + u[:, :H] + ramp  # (A, H)
    # ICU stays. What is visible before T (start, a discharge from the ICU before T) is drawn from
    # pre-T information only; times after T may depend on the outcome (end_h).
    atype, died, early = c["atype"], c["died"], c["early"]
    r = rng.random(A)
    elective, newborn = atype == ADMISSION_TYPES.index("ELECTIVE"), atype == ADMISSION_TYPES.index("NEWBORN")
    in_h = np.select([elective, newborn, r < 0.85],
                     [rng.uniform(2, 8, A), rng.uniform(0.1, 1, A), rng.uniform(0.2, 5, A)], rng.uniform(5, 36, A))
    in_h = np.where(early, np.minimum(in_h, 0.5 * end_h),
                    np.where(in_h < T, in_h, T + np.minimum(in_h - T, 0.5 * (end_h - T))))
    in_h = np.floor(in_h * HOUR) / HOUR
    icu_death = died & (rng.random(A) < 0.85)
    frac = rng.uniform(0.3, 0.9, A)
    leave = (in_h < T - 1) & (rng.random(A) < _sigmoid(M["icu_leave"][0] + M["icu_leave"][1] * c["b"]))
    after = np.maximum(in_h, T)
    out_h = np.where(early, np.where(icu_death, end_h, in_h + (end_h - in_h) * frac),
                     np.where(leave, in_h + (T - in_h) * rng.uniform(0.3, 0.95, A),
                              np.where(icu_death, end_h, after + (end_h - after) * frac)))
    out_h = np.maximum(np.floor(out_h * HOUR) / HOUR, in_h + 1 / HOUR)
    base2 = np.maximum(out_h, T)  # a return to the ICU always starts after T
    two = ~died & ~early & (end_h - base2 > 48) & (rng.random(A) < 0.1)
    in2 = np.floor((base2 + (end_h - base2) * rng.uniform(0.2, 0.5, A)) * HOUR) / HOUR
    out2 = np.floor((in2 + (end_h - in2) * rng.uniform(0.3, 0.8, A)) * HOUR) / HOUR
    stay_adm = np.concatenate([np.arange(A), np.flatnonzero(two)])
    s_in, s_out = np.concatenate([in_h, in2[two]]), np.concatenate([out_h, out2[two]])
    if cfg.icu_fraction < 1:  # ward-only admissions: no stay, so no ICU events and no ventilation or pressors
        ward = rng.random(A) >= cfg.icu_fraction
        keep = ~ward[stay_adm]
        stay_adm, s_in, s_out = stay_adm[keep], s_in[keep], s_out[keep]
    order = np.lexsort((s_in, stay_adm))
    stay_adm, s_in, s_out = stay_adm[order], s_in[order], s_out[order]
    S = len(stay_adm)
    unit, last_unit = np.zeros(S, np.int64), np.zeros(S, np.int64)
    for t, name in enumerate(ADMISSION_TYPES):
        m = atype[stay_adm] == t
        pairs = CAREUNITS[name]
        codes = np.array([UNITS.index(v) for v, _ in pairs])
        unit[m] = codes[pick(rng, pairs, int(m.sum()))]
        last_unit[m] = np.where(rng.random(int(m.sum())) < 0.9, unit[m], codes[pick(rng, pairs, int(m.sum()))])
    stay_at = np.full((A, H), -1, np.int64)  # (A, H)
    row, h, _, _ = hour_cells(s_in, s_out)
    stay_at[stay_adm[row], h] = row
    icu = stay_at >= 0
    thr_v, thr_a, thr_p = (m + sd * rng.standard_normal(A) for m, sd in ((1.0, 0.4), (0.2, 0.6), (1.5, 0.4)))
    vent, vent_on, vent_off = _episode(sev, icu, thr_v, thr_v - 0.8)
    art, art_on, _ = _episode(sev, icu, thr_a, np.full(A, -np.inf))
    vaso, _, _ = _episode(sev, icu, thr_p, thr_p - 0.7)
    # patients: DOB 300 years before the first admission when older than 89 (as MIMIC-III does)
    first_shift = first + offset
    hidden = (kind == ADULT) & (age0 >= 90)
    dob = np.where(kind == NEWBORN, first_shift,
                   np.where(hidden, first_shift - 300 * YEAR, first_shift - (age0 * YEAR).astype(np.int64)))
    ssn = alive & (rng.random(P) < _sigmoid(-2.0 + 0.8 * (np.clip(age0, 18, 95) - 65) / 15)) & (kind == ADULT)
    dod_ssn = np.where(ssn, (last_end + offset + rng.integers(1, 1500, P) * DAY) // DAY * DAY, -1)
    return Chunk(
        T=T, subject_id=subject_id, male=male, dob=dob // DAY * DAY, dod_ssn=dod_ssn, shift=offset,
        pat=c["pat"], hadm_id=hadm_pool.take(A), admit=c["real"] + offset[c["pat"]], end_h=end_h, died=died,
        early=c["early"], risk=c["risk"], age=c["age"], kind=c["kind"], atype=atype, aloc=c["aloc"],
        reason=c["reason"], edreg_h=c["edreg_h"], system=(c["real"] >= _epoch(cfg.metavision_from)).astype(np.int64),
        b=c["b"], comorb=c["comorb"], dnr=c["dnr"], af=c["af"], weight=c["weight"], sev=sev, vent=vent, art=art,
        vaso=vaso, vaso2=vaso & (sev > thr_p[:, None] + 0.8), stay_at=stay_at, vent_on=vent_on, vent_off=vent_off,
        art_on=art_on, stay_adm=stay_adm, icustay_id=icu_pool.take(S), in_h=s_in, out_h=s_out, unit=unit,
        last_unit=last_unit,
    )
