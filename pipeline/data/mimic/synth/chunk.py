"""The simulated chunk of the synthetic MIMIC-III (`pipeline.data.mimic.synth`) and what every table builder shares.

``Chunk`` (one simulated chunk of patients, admissions and ICU stays) with the code tuples its
indices refer to; time units; vectorized helpers (weighted picks, rounding, hour cells, Poisson
events); event and store times, key columns and the hour cells of the ICU and hospital stays;
``IdPool`` (the unique random ids).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
import pyarrow as pa

from pipeline.core.errors import ConfigError
from pipeline.data.mimic.synth.catalog_hosp import ADM_LOCATIONS
from pipeline.data.mimic.synth.catalog_hosp import REASONS as REASONS_BY_TYPE
from pipeline.data.mimic.synth.catalog_icu import CAREUNITS
from pipeline.data.mimic.synth.csvgz import col_int

MIN, HOUR, DAY = 60, 3600, 86400
YEAR = 31556952  # seconds in a 365.2425-day year


# ---------------------------------------------------------------------------- small helpers
def pick(rng: np.random.Generator, pairs, n: int) -> np.ndarray:
    """Indices into `pairs` ((value, probability), ...) drawn n times."""
    p = np.array([q for _, q in pairs], float)
    return np.minimum(np.searchsorted(np.cumsum(p / p.sum()), rng.random(n), side="right"), len(p) - 1)


def round_to(x: np.ndarray, dec: np.ndarray) -> np.ndarray:
    """Round each x to its own number of decimals (negative: tens); -0.0 becomes 0.0."""
    up = np.power(10.0, np.maximum(dec, 0))
    down = np.power(10.0, np.maximum(-dec, 0))
    return np.where(dec >= 0, np.round(x * up) / up, np.round(x / down) * down) + 0.0


def hour_cells(lo: np.ndarray, hi: np.ndarray, split: float | None = None):
    """Hour cells [h, h+1) cut to each interval [lo, hi) (hours), and also cut at `split`.

    Returns (row, h, a, b): interval index, cell hour, and the cell's part [a, b) of the interval.
    """
    first = np.floor(lo).astype(np.int64)
    n = np.maximum(np.ceil(hi).astype(np.int64) - first, 0)
    row = np.repeat(np.arange(len(lo)), n)
    h = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n) + first[row]
    a, b = np.maximum(h, lo[row]), np.minimum(h + 1.0, hi[row])
    if split is not None:  # a cell straddling `split` becomes [a, split) and [split, b)
        cut = np.flatnonzero((a < split) & (split < b))
        first_part_end = b.copy()
        first_part_end[cut] = split
        row, h = np.concatenate([row, row[cut]]), np.concatenate([h, h[cut]])
        a, b = np.concatenate([a, np.full(len(cut), float(split))]), np.concatenate([first_part_end, b[cut]])
        order = np.lexsort((a, row))
        row, h, a, b = row[order], h[order], a[order], b[order]
    keep = b > a
    return row[keep], h[keep], a[keep], b[keep]


def poisson_events(rng, lam: np.ndarray):
    """Poisson counts for a (cells, kinds) rate matrix, expanded to one (cell, kind) pair per event."""
    cnt = rng.poisson(lam).ravel()
    nz = np.flatnonzero(cnt)
    reps = cnt[nz]
    return np.repeat(nz // lam.shape[1], reps), np.repeat(nz % lam.shape[1], reps)


class IdPool:
    """Unique random ids from [lo, hi), handed out in a fixed order; then, once those are spent, from the
    ``overflow`` range (lo, hi, its own random generator), drawn only when needed: a world small enough
    for [lo, hi) has the same ids whether or not an overflow range is given."""

    def __init__(self, rng: np.random.Generator, lo: int, hi: int, name: str,
                 overflow: tuple[int, int, np.random.Generator] | None = None):
        self._ids, self._next, self._name, self._overflow = lo + rng.permutation(hi - lo), 0, name, overflow

    def take(self, n: int) -> np.ndarray:
        if self._next + n > len(self._ids) and self._overflow is not None:
            lo, hi, rng = self._overflow
            self._ids, self._overflow = np.concatenate([self._ids, lo + rng.permutation(hi - lo)]), None
        if self._next + n > len(self._ids):
            raise ConfigError(f"{self._name} range exhausted: more than {len(self._ids)} ids needed; patients is too "
                              "large for it (use fewer)")
        out = self._ids[self._next:self._next + n]
        self._next += n
        return out


# ---------------------------------------------------------------------------- the simulated chunk
class IcuSystem(str, Enum):
    """ICU information system of a stay (ICUSTAYS.DBSOURCE)."""

    CAREVUE = "carevue"
    METAVISION = "metavision"


class AdmissionType(str, Enum):
    """ADMISSIONS.ADMISSION_TYPE."""

    EMERGENCY = "EMERGENCY"
    ELECTIVE = "ELECTIVE"
    URGENT = "URGENT"
    NEWBORN = "NEWBORN"


ADMISSION_TYPES = tuple(t.value for t in AdmissionType)  # index = Chunk.atype
SYSTEMS = tuple(s.value for s in IcuSystem)  # index = Chunk.system (0 CareVue, 1 MetaVision)
ADULT, NEWBORN, CHILD = 0, 1, 2  # Chunk.kind: adult, newborn (age 0), aged 1-17
LOCATIONS = tuple(sorted({v for pairs in ADM_LOCATIONS.values() for v, _ in pairs}))  # Chunk.aloc
UNITS = tuple(sorted({v for pairs in CAREUNITS.values() for v, _ in pairs}))  # Chunk.unit
REASONS = tuple(r for t in ADMISSION_TYPES for r in REASONS_BY_TYPE[t])  # (DIAGNOSIS, ICD9) by Chunk.reason


@dataclass
class Chunk:
    """One simulated chunk of patients: everything the table builders read."""

    T: float  # prediction time in hours from ADMITTIME (event cells are cut there)
    # patients (P rows)
    subject_id: np.ndarray  # (P,) SUBJECT_ID
    male: np.ndarray  # (P,) bool
    dob: np.ndarray  # (P,) DOB, shifted epoch seconds (midnight)
    dod_ssn: np.ndarray  # (P,) out-of-hospital death date, epoch seconds (-1: none)
    shift: np.ndarray  # (P,) the patient's date shift, seconds (shifted time - real time)
    # admissions (A rows)
    pat: np.ndarray  # (A,) patient row
    hadm_id: np.ndarray  # (A,) HADM_ID
    admit: np.ndarray  # (A,) ADMITTIME, shifted epoch seconds (whole minutes)
    end_h: np.ndarray  # (A,) hours from ADMITTIME to DISCHTIME (= DEATHTIME if died), whole minutes
    died: np.ndarray  # (A,) bool: in-hospital death
    early: np.ndarray  # (A,) bool: ended before the prediction time
    risk: np.ndarray  # (A,) TRUE_RISK (NaN when early)
    age: np.ndarray  # (A,) true age at admission in years
    kind: np.ndarray  # (A,) ADULT, NEWBORN or CHILD
    atype: np.ndarray  # (A,) index into ADMISSION_TYPES
    aloc: np.ndarray  # (A,) index into LOCATIONS
    reason: np.ndarray  # (A,) index into REASONS
    edreg_h: np.ndarray  # (A,) EDREGTIME in hours from ADMITTIME (NaN: not through the ED)
    system: np.ndarray  # (A,) index into SYSTEMS
    b: np.ndarray  # (A,) baseline severity
    comorb: np.ndarray  # (A,) chronic burden (count)
    dnr: np.ndarray  # (A,) bool: do-not-resuscitate code status
    af: np.ndarray  # (A,) bool: chronic atrial fibrillation
    weight: np.ndarray  # (A,) kg
    sev: np.ndarray  # (A, H) severity at the start of each hour
    vent: np.ndarray  # (A, H) bool: invasively ventilated during hour h
    art: np.ndarray  # (A, H) bool: arterial line in place
    vaso: np.ndarray  # (A, H) bool: primary pressor running
    vaso2: np.ndarray  # (A, H) bool: second pressor (vasopressin) running
    stay_at: np.ndarray  # (A, H) ICU stay row during hour h (-1: not in the ICU)
    vent_on: np.ndarray  # (A,) first ventilated hour (-1: never)
    vent_off: np.ndarray  # (A,) first hour after ventilation (H if never stopped)
    art_on: np.ndarray  # (A,) first hour with an arterial line (-1: never)
    # ICU stays (S rows)
    stay_adm: np.ndarray  # (S,) admission row
    icustay_id: np.ndarray  # (S,) ICUSTAY_ID
    in_h: np.ndarray  # (S,) INTIME in hours from ADMITTIME (whole seconds)
    out_h: np.ndarray  # (S,) OUTTIME in hours from ADMITTIME (whole seconds)
    unit: np.ndarray  # (S,) FIRST_CAREUNIT, index into UNITS
    last_unit: np.ndarray  # (S,) LAST_CAREUNIT, index into UNITS


def event_time(ch: Chunk, adm: np.ndarray, t_h: np.ndarray) -> np.ndarray:
    """Event time (hours from ADMITTIME) -> epoch seconds, floored to the minute."""
    return ch.admit[adm] + np.floor(np.asarray(t_h) * 60 + 1e-9).astype(np.int64) * MIN


def clock_hour(ch: Chunk, adm: np.ndarray, h: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The clock hour (hh:00) inside cell [h, h+1) of each admission, or a when it falls outside [a, b)."""
    t = h + (-(ch.admit[adm] % HOUR) / HOUR) % 1.0
    return np.where((t >= a) & (t < b), t, a)


def store_time(rng, t: np.ndarray, median_min: float = 25.0, same: float = 0.0) -> np.ndarray:
    """STORETIME: minutes to hours after t (a fraction `same` stored at t)."""
    delay = np.minimum(rng.lognormal(np.log(median_min), 0.9, len(t)), 720.0).astype(np.int64)
    return t + np.where(rng.random(len(t)) < same, 0, delay) * MIN


def col_cgid(rng, n: int) -> pa.Array:
    return col_int(rng.integers(14000, 21571, n))


def key_cols(ch: Chunk, adm, stay=None, hadm_null=None, stay_null=None) -> dict[str, pa.Array]:
    cols = {"SUBJECT_ID": col_int(ch.subject_id[ch.pat[adm]]), "HADM_ID": col_int(ch.hadm_id[adm], hadm_null)}
    if stay is not None:
        miss = stay < 0 if stay_null is None else (stay < 0) | stay_null
        cols["ICUSTAY_ID"] = col_int(ch.icustay_id[np.maximum(stay, 0)], miss)
    return cols


def icu_cells(ch: Chunk, system: int | None = None):
    """Hour cells of the ICU stays (of one system): (stay, adm, h, a, b)."""
    stays = np.arange(len(ch.stay_adm)) if system is None else np.flatnonzero(ch.system[ch.stay_adm] == system)
    row, h, a, b = hour_cells(ch.in_h[stays], ch.out_h[stays], ch.T)
    st = stays[row]
    return st, ch.stay_adm[st], h, a, b


def hosp_cells(ch: Chunk):
    """Hour cells of the hospital stays: (adm, h, a, b)."""
    return hour_cells(np.zeros(len(ch.pat)), ch.end_h, ch.T)
