"""Building blocks of the synthetic MIMIC-III (`pipeline.synth`).

Column lists of the v1.4 tables, vectorized helpers (hour cells, Poisson events, rounding),
arrow column builders, the deterministic gzip CSV writer, the simulated chunk (`Chunk`) and
the builders of the non-event tables (PATIENTS, ADMISSIONS, ICUSTAYS, truth, dictionaries).

One concern over ~400 lines: the table layouts and the writers that honour them.
"""

from __future__ import annotations

import gzip
import io
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from pipeline.errors import ConfigError
from pipeline.synth import catalog as cat

MIN, HOUR, DAY = 60, 3600, 86400
YEAR = 31556952  # seconds in a 365.2425-day year

# ---------------------------------------------------------------------------- table columns
def _cols(s: str) -> tuple[str, ...]:
    return tuple(s.split())


COLUMNS: dict[str, tuple[str, ...]] = {
    "PATIENTS": _cols("ROW_ID SUBJECT_ID GENDER DOB DOD DOD_HOSP DOD_SSN EXPIRE_FLAG"),
    "ADMISSIONS": _cols(
        "ROW_ID SUBJECT_ID HADM_ID ADMITTIME DISCHTIME DEATHTIME ADMISSION_TYPE ADMISSION_LOCATION "
        "DISCHARGE_LOCATION INSURANCE LANGUAGE RELIGION MARITAL_STATUS ETHNICITY EDREGTIME EDOUTTIME "
        "DIAGNOSIS HOSPITAL_EXPIRE_FLAG HAS_CHARTEVENTS_DATA"),
    "ICUSTAYS": _cols(
        "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID DBSOURCE FIRST_CAREUNIT LAST_CAREUNIT FIRST_WARDID "
        "LAST_WARDID INTIME OUTTIME LOS"),
    "CHARTEVENTS": _cols(
        "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID ITEMID CHARTTIME STORETIME CGID VALUE VALUENUM VALUEUOM "
        "WARNING ERROR RESULTSTATUS STOPPED"),
    "LABEVENTS": _cols("ROW_ID SUBJECT_ID HADM_ID ITEMID CHARTTIME VALUE VALUENUM VALUEUOM FLAG"),
    "INPUTEVENTS_CV": _cols(
        "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID CHARTTIME ITEMID AMOUNT AMOUNTUOM RATE RATEUOM STORETIME "
        "CGID ORDERID LINKORDERID STOPPED NEWBOTTLE ORIGINALAMOUNT ORIGINALAMOUNTUOM ORIGINALROUTE "
        "ORIGINALRATE ORIGINALRATEUOM ORIGINALSITE"),
    "INPUTEVENTS_MV": _cols(
        "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID STARTTIME ENDTIME ITEMID AMOUNT AMOUNTUOM RATE RATEUOM "
        "STORETIME CGID ORDERID LINKORDERID ORDERCATEGORYNAME SECONDARYORDERCATEGORYNAME "
        "ORDERCOMPONENTTYPEDESCRIPTION ORDERCATEGORYDESCRIPTION PATIENTWEIGHT TOTALAMOUNT "
        "TOTALAMOUNTUOM ISOPENBAG CONTINUEINNEXTDEPT CANCELREASON STATUSDESCRIPTION "
        "COMMENTS_EDITEDBY COMMENTS_CANCELEDBY COMMENTS_DATE ORIGINALAMOUNT ORIGINALRATE"),
    "OUTPUTEVENTS": _cols(
        "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID CHARTTIME ITEMID VALUE VALUEUOM STORETIME CGID STOPPED "
        "NEWBOTTLE ISERROR"),
    "PRESCRIPTIONS": _cols(
        "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID STARTDATE ENDDATE DRUG_TYPE DRUG DRUG_NAME_POE "
        "DRUG_NAME_GENERIC FORMULARY_DRUG_CD GSN NDC PROD_STRENGTH DOSE_VAL_RX DOSE_UNIT_RX "
        "FORM_VAL_DISP FORM_UNIT_DISP ROUTE"),
    "PROCEDUREEVENTS_MV": _cols(
        "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID STARTTIME ENDTIME ITEMID VALUE VALUEUOM LOCATION "
        "LOCATIONCATEGORY STORETIME CGID ORDERID LINKORDERID ORDERCATEGORYNAME "
        "SECONDARYORDERCATEGORYNAME ORDERCATEGORYDESCRIPTION ISOPENBAG CONTINUEINNEXTDEPT "
        "CANCELREASON STATUSDESCRIPTION COMMENTS_EDITEDBY COMMENTS_CANCELEDBY COMMENTS_DATE"),
    "MICROBIOLOGYEVENTS": _cols(
        "ROW_ID SUBJECT_ID HADM_ID CHARTDATE CHARTTIME SPEC_ITEMID SPEC_TYPE_DESC ORG_ITEMID ORG_NAME "
        "ISOLATE_NUM AB_ITEMID AB_NAME DILUTION_TEXT DILUTION_COMPARISON DILUTION_VALUE INTERPRETATION"),
    "DATETIMEEVENTS": _cols(
        "ROW_ID SUBJECT_ID HADM_ID ICUSTAY_ID ITEMID CHARTTIME STORETIME CGID VALUE VALUEUOM WARNING "
        "ERROR RESULTSTATUS STOPPED"),
    "DIAGNOSES_ICD": _cols("ROW_ID SUBJECT_ID HADM_ID SEQ_NUM ICD9_CODE"),
    "D_ITEMS": _cols("ROW_ID ITEMID LABEL ABBREVIATION DBSOURCE LINKSTO CATEGORY UNITNAME PARAM_TYPE CONCEPTID"),
    "D_LABITEMS": _cols("ROW_ID ITEMID LABEL FLUID CATEGORY LOINC_CODE"),
}
TRUTH_COLUMNS = ("HADM_ID", "TRUE_RISK")


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


# ---------------------------------------------------------------------------- arrow columns
def col_ts(sec, null=None) -> pa.Array:
    """Epoch seconds -> timestamp column (written as YYYY-MM-DD HH:MM:SS)."""
    return pa.array(np.asarray(sec, np.int64), pa.int64(), mask=null).cast(pa.timestamp("s"))


def col_int(x, null=None) -> pa.Array:
    return pa.array(np.asarray(x, np.int64), pa.int64(), mask=null)


def col_num(x, null=None) -> pa.Array:
    x = np.asarray(x, np.float64)
    return pa.array(x, pa.float64(), mask=np.isnan(x) if null is None else (null | np.isnan(x)))


def col_str(codes, values, null=None) -> pa.Array:
    """values[codes] as a string column; empty strings and `null` rows are NULL."""
    codes = np.asarray(codes, np.int32)
    empty = np.array([v == "" for v in values], bool)[codes] if len(values) else np.ones(len(codes), bool)
    mask = empty if null is None else (empty | null)
    dictionary = pa.array([str(v) for v in values], pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=mask), dictionary).cast(pa.string())


def col_const(value, n: int) -> pa.Array:
    return col_str(np.zeros(n, np.int32), [value])


def col_nulls(n: int) -> pa.Array:
    return pa.nulls(n, pa.string())


def col_numstr(x) -> pa.Array:
    """Numbers as their shortest decimal string (VALUE columns)."""
    return pa.array(np.asarray(x, np.float64) + 0.0, pa.float64()).cast(pa.string())


# ---------------------------------------------------------------------------- output
def gzip_member(data: bytes, level: int) -> bytes:
    """``data`` as one deterministic gzip member (no name, time 0); a file is a run of them (RFC 1952)."""
    return gzip.compress(data, compresslevel=level, mtime=0)


def csv_member(columns: tuple[str, ...], cols: dict[str, pa.Array], first_row_id: int, level: int,
               name: str = "") -> tuple[bytes, int]:
    """(gzip member of the CSV rows, rows) of one table's rows; ROW_ID numbered from ``first_row_id`` when the
    table has one and ``cols`` lacks it. Any process gives the same bytes (``synth --workers``)."""
    n = len(next(iter(cols.values())))
    if n == 0:
        return b"", 0
    if "ROW_ID" in columns and "ROW_ID" not in cols:
        cols = {"ROW_ID": col_int(np.arange(first_row_id, first_row_id + n)), **cols}
    if set(cols) != set(columns):
        raise RuntimeError(f"{name}: columns {sorted(set(cols) ^ set(columns))} mismatch")
    table = pa.table([cols[c] for c in columns], names=list(columns))
    buf = io.BytesIO()
    pa_csv.write_csv(table, buf, pa_csv.WriteOptions(include_header=False, quoting_style="needed", batch_size=1 << 16))
    return gzip_member(buf.getvalue(), level), n


class CsvGzWriter:
    """One table as a deterministic gzip CSV, one gzip member per write (the header, then each chunk's rows),
    renamed into place on close."""

    def __init__(self, path: Path, columns: tuple[str, ...], level: int):
        self.path, self.columns, self.rows, self.level = path, columns, 0, level
        self.tmp = path.with_name(f".{path.name}.tmp")
        self._raw = open(self.tmp, "wb")
        self._raw.write(gzip_member((",".join(f'"{c}"' for c in columns) + "\n").encode(), level))

    def write(self, cols: dict[str, pa.Array]) -> None:
        """Append rows; ROW_ID is numbered here when the table has one and `cols` lacks it."""
        self.write_member(*csv_member(self.columns, cols, self.rows + 1, self.level, self.path.name))

    def write_member(self, member: bytes, n: int) -> None:
        """Append ``n`` rows encoded by ``csv_member`` (numbered from this file's ``rows + 1``)."""
        self._raw.write(member)
        self.rows += n

    def close(self) -> None:
        self._raw.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._raw.close()
        self.tmp.unlink(missing_ok=True)


class IdPool:
    """Unique random ids from [lo, hi), handed out in a fixed order."""

    def __init__(self, rng: np.random.Generator, lo: int, hi: int, name: str):
        self._ids, self._next, self._name = lo + rng.permutation(hi - lo), 0, name

    def take(self, n: int) -> np.ndarray:
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
LOCATIONS = tuple(sorted({v for pairs in cat.ADM_LOCATIONS.values() for v, _ in pairs}))  # Chunk.aloc
UNITS = tuple(sorted({v for pairs in cat.CAREUNITS.values() for v, _ in pairs}))  # Chunk.unit
REASONS = tuple(r for t in ADMISSION_TYPES for r in cat.REASONS[t])  # (DIAGNOSIS, ICD9) by Chunk.reason
_WARD = {"CCU": 7, "CSRU": 15, "MICU": 52, "NICU": 56, "SICU": 57, "TSICU": 14}


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


# ---------------------------------------------------------------------------- PATIENTS, ADMISSIONS, ICUSTAYS
def patients(rng, ch: Chunk) -> dict[str, pa.Array]:
    """PATIENTS: DOB (shifted; 300 years back for ages over 89), dates of death in and out of hospital."""
    P = len(ch.subject_id)
    dod_hosp = np.full(P, -1, np.int64)
    dead = np.flatnonzero(ch.died)
    dod_hosp[ch.pat[dead]] = (ch.admit[dead] + np.round(ch.end_h[dead] * 60).astype(np.int64) * MIN) // DAY * DAY
    ssn = np.where(dod_hosp >= 0, np.where(rng.random(P) < 0.7, dod_hosp, -1), ch.dod_ssn)
    dod = np.where(dod_hosp >= 0, dod_hosp, ssn)
    return {"SUBJECT_ID": col_int(ch.subject_id), "GENDER": col_str(ch.male.astype(int), ("F", "M")), "DOB": col_ts(ch.dob),
            "DOD": col_ts(dod, dod < 0), "DOD_HOSP": col_ts(dod_hosp, dod_hosp < 0), "DOD_SSN": col_ts(ssn, ssn < 0),
            "EXPIRE_FLAG": col_int(dod >= 0)}


def admissions(rng, ch: Chunk) -> dict[str, pa.Array]:
    """ADMISSIONS: times, categories, demographics, the free-text DIAGNOSIS and outcome flags."""
    A = len(ch.pat)
    disch = ch.admit + np.round(ch.end_h * 60).astype(np.int64) * MIN
    no_ed = np.isnan(ch.edreg_h)
    edreg = ch.admit + np.round(np.nan_to_num(ch.edreg_h) * 60).astype(np.int64) * MIN
    edout = np.minimum(ch.admit + rng.integers(0, 90, A) * MIN, disch)
    newborn, child = ch.kind == NEWBORN, ch.kind != ADULT
    dl = len(cat.DISCHARGE_LOCATIONS)
    dloc = np.where(ch.died, dl, np.where(newborn, 0, pick(rng, cat.DISCHARGE_LOCATIONS, A)))
    ins = np.where(ch.age >= 65, pick(rng, cat.INSURANCE_65, A), len(cat.INSURANCE_65) + pick(rng, cat.INSURANCE, A))
    lang_null = rng.random(A) < np.where(ch.system == 0, 0.7, 0.1)
    marital = pick(rng, cat.MARITAL, A)
    return {
        **key_cols(ch, np.arange(A)), "ADMITTIME": col_ts(ch.admit), "DISCHTIME": col_ts(disch),
        "DEATHTIME": col_ts(disch, ~ch.died), "ADMISSION_TYPE": col_str(ch.atype, ADMISSION_TYPES),
        "ADMISSION_LOCATION": col_str(ch.aloc, LOCATIONS),
        "DISCHARGE_LOCATION": col_str(dloc, [v for v, _ in cat.DISCHARGE_LOCATIONS] + ["DEAD/EXPIRED"]),
        "INSURANCE": col_str(ins, [v for v, _ in cat.INSURANCE_65 + cat.INSURANCE]),
        "LANGUAGE": col_str(pick(rng, cat.LANGUAGES, A), [v for v, _ in cat.LANGUAGES], lang_null | newborn),
        "RELIGION": col_str(pick(rng, cat.RELIGIONS, A), [v for v, _ in cat.RELIGIONS]),
        "MARITAL_STATUS": col_str(marital, [v for v, _ in cat.MARITAL], child),
        "ETHNICITY": col_str(pick(rng, cat.ETHNICITIES, A), [v for v, _ in cat.ETHNICITIES]),
        "EDREGTIME": col_ts(edreg, no_ed), "EDOUTTIME": col_ts(edout, no_ed),
        "DIAGNOSIS": col_str(ch.reason, [x[0] for x in REASONS]), "HOSPITAL_EXPIRE_FLAG": col_int(ch.died),
        "HAS_CHARTEVENTS_DATA": col_int(np.ones(A)),
    }


def icustays(rng, ch: Chunk) -> dict[str, pa.Array]:
    """ICUSTAYS: one row per stay; DBSOURCE tells the era."""
    adm = ch.stay_adm
    tin = ch.admit[adm] + np.round(ch.in_h * HOUR).astype(np.int64)
    tout = ch.admit[adm] + np.round(ch.out_h * HOUR).astype(np.int64)
    ward = np.array([_WARD[u] for u in UNITS])
    return {**key_cols(ch, adm, np.arange(len(adm))), "DBSOURCE": col_str(ch.system[adm], SYSTEMS),
            "FIRST_CAREUNIT": col_str(ch.unit, UNITS), "LAST_CAREUNIT": col_str(ch.last_unit, UNITS),
            "FIRST_WARDID": col_int(ward[ch.unit]), "LAST_WARDID": col_int(ward[ch.last_unit]),
            "INTIME": col_ts(tin), "OUTTIME": col_ts(tout), "LOS": col_num(np.round((tout - tin) / DAY, 4))}


def truth(ch: Chunk) -> dict[str, pa.Array]:
    """Truth rows: every admission alive in hospital at the prediction time."""
    keep = ~ch.early
    return {"HADM_ID": col_int(ch.hadm_id[keep]), "TRUE_RISK": col_num(ch.risk[keep])}


# ---------------------------------------------------------------------------- dictionaries
def _item_links() -> dict[int, str]:
    links = {}
    for c in cat.CHART:
        links.update({i: "chartevents" for i in (c.cv, c.mv) if i})
    for x in cat.INPUTS:
        links.update({x.cv: "inputevents_cv", x.mv: "inputevents_mv"})
    links.update({i: "outputevents" for o in cat.OUTPUTS for i in o[:2]})
    links.update({x[0]: "datetimeevents" for items in cat.DTEVENTS.values() for x in items})
    links.update({x[0]: "procedureevents_mv" for x in cat.PROCEDURES.values()})
    return links


ITEM_LINKS = _item_links()  # every ITEMID the generator can emit -> D_ITEMS.LINKSTO


def d_items() -> dict[str, pa.Array]:
    """D_ITEMS rows for every emitted ITEMID (MetaVision rows carry the metadata columns)."""
    ids = np.array(sorted(ITEM_LINKS), np.int64)
    meta = [cat.ITEM_META[i] for i in ids]
    col = lambda j: col_str(np.arange(len(ids)), [m[j] for m in meta])  # noqa: E731
    return {"ITEMID": col_int(ids), "LABEL": col(0), "ABBREVIATION": col(1),
            "DBSOURCE": col_str((ids >= 220000).astype(int), SYSTEMS),
            "LINKSTO": col_str(np.arange(len(ids)), [ITEM_LINKS[i] for i in ids]), "CATEGORY": col(2),
            "UNITNAME": col(3), "PARAM_TYPE": col(4), "CONCEPTID": col_nulls(len(ids))}


def d_labitems() -> dict[str, pa.Array]:
    """D_LABITEMS rows for every lab ITEMID."""
    labs = sorted(cat.LABS, key=lambda x: x.itemid)
    idx = np.arange(len(labs))
    return {"ITEMID": col_int([x.itemid for x in labs]), "LABEL": col_str(idx, [x.label for x in labs]),
            "FLUID": col_str(idx, [x.fluid for x in labs]), "CATEGORY": col_str(idx, [x.category for x in labs]),
            "LOINC_CODE": col_str(idx, [x.loinc for x in labs])}
