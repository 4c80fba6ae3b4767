"""The synthetic world written in MIMIC-IV's layout (`generate(..., layout="mimic-iv")`).

The generator simulates one world and builds MIMIC-III's tables from it (same random streams);
this module turns each of those tables into its MIMIC-IV counterpart, v2.2 columns, in `hosp/`
and `icu/` (lowercase file names and headers), so both layouts hold the same patients,
admissions, ICU stays and events. What MIMIC-IV records differently (docs/mimic-iv.md):

- no ROW_ID; ICUSTAY_ID is `stay_id`, CGID `caregiver_id`; labevents get `labevent_id`,
  microbiologyevents `microevent_id`, inputevents/procedureevents a unique `orderid`,
  prescriptions a unique `pharmacy_id` (numbered in file order, like ROW_ID);
- age: `anchor_year` = the (shifted) year of the first admission, `anchor_age` = the whole years
  of age then (91 when older than 89), `anchor_year_group` = the real 3-year window of that year
  (2008 - 2010, 2011 - 2013, ...); no DOB;
- MetaVision only: CareVue-era chart, input and output rows keep their times and values under the
  concept's MetaVision itemid (a CareVue-only concept keeps its CareVue itemid); CareVue infusions
  become inputevents rows with starttime = endtime = their CHARTTIME; rows with ERROR = 1 are not
  released (MIMIC-IV removed its audit rows);
- labevents have a `storetime`: the result is stored 5 minutes to 12 hours after the specimen
  (log-normal, median 45 min), never for a 'HOLD' value (no result);
- prescriptions have a real `starttime` (MIMIC-III: the start day only);
- admission types, locations and care units use MIMIC-IV's vocabulary; newborns (NEWBORN in
  MIMIC-III, which MIMIC-IV does not have) are emergency admissions aged 0.

The extra draws (lab store delays) come from a random stream of their own, so the MIMIC-III
tables of a seed stay byte-identical whether or not this layout is written.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipeline.data.mimic.synth.catalog_chart import CHART
from pipeline.data.mimic.synth.catalog_hosp import LABS
from pipeline.data.mimic.synth.catalog_icu import INPUTS, OUTPUTS
from pipeline.data.mimic.synth.chunk import MIN, Chunk
from pipeline.data.mimic.synth.csvgz import CsvGzWriter, col_int, col_nulls, col_num, col_str, col_ts


def _cols(s: str) -> tuple[str, ...]:
    return tuple(s.split())


# MIMIC-IV v2.2 tables written (module/name -> columns, as PhysioNet ships them)
COLUMNS_IV: dict[str, tuple[str, ...]] = {
    "hosp/patients": _cols("subject_id gender anchor_age anchor_year anchor_year_group dod"),
    "hosp/admissions": _cols(
        "subject_id hadm_id admittime dischtime deathtime admission_type admit_provider_id admission_location "
        "discharge_location insurance language marital_status race edregtime edouttime hospital_expire_flag"),
    "hosp/diagnoses_icd": _cols("subject_id hadm_id seq_num icd_code icd_version"),
    "hosp/labevents": _cols(
        "labevent_id subject_id hadm_id specimen_id itemid order_provider_id charttime storetime value valuenum "
        "valueuom ref_range_lower ref_range_upper flag priority comments"),
    "hosp/microbiologyevents": _cols(
        "microevent_id subject_id hadm_id micro_specimen_id order_provider_id chartdate charttime spec_itemid "
        "spec_type_desc test_seq storedate storetime test_itemid test_name org_itemid org_name isolate_num quantity "
        "ab_itemid ab_name dilution_text dilution_comparison dilution_value interpretation comments"),
    "hosp/prescriptions": _cols(
        "subject_id hadm_id pharmacy_id poe_id poe_seq order_provider_id starttime stoptime drug_type drug "
        "formulary_drug_cd gsn ndc prod_strength form_rx dose_val_rx dose_unit_rx form_val_disp form_unit_disp "
        "doses_per_24_hrs route"),
    "hosp/d_labitems": _cols("itemid label fluid category"),
    "icu/icustays": _cols("subject_id hadm_id stay_id first_careunit last_careunit intime outtime los"),
    "icu/chartevents": _cols(
        "subject_id hadm_id stay_id caregiver_id charttime storetime itemid value valuenum valueuom warning"),
    "icu/inputevents": _cols(
        "subject_id hadm_id stay_id caregiver_id starttime endtime storetime itemid amount amountuom rate rateuom "
        "orderid linkorderid ordercategoryname secondaryordercategoryname ordercomponenttypedescription "
        "ordercategorydescription patientweight totalamount totalamountuom isopenbag continueinnextdept "
        "statusdescription originalamount originalrate"),
    "icu/outputevents": _cols("subject_id hadm_id stay_id caregiver_id charttime storetime itemid value valueuom"),
    "icu/procedureevents": _cols(
        "subject_id hadm_id stay_id caregiver_id starttime endtime storetime itemid value valueuom location "
        "locationcategory orderid linkorderid ordercategoryname ordercategorydescription patientweight isopenbag "
        "continueinnextdept statusdescription originalamount originalrate"),
    "icu/datetimeevents": _cols(
        "subject_id hadm_id stay_id caregiver_id charttime storetime itemid value valueuom warning"),
    "icu/d_items": _cols(
        "itemid label abbreviation linksto category unitname param_type lownormalvalue highnormalvalue"),
}
# MIMIC-III table -> the MIMIC-IV table it is written to
TARGET = {"PATIENTS": "hosp/patients", "ADMISSIONS": "hosp/admissions", "DIAGNOSES_ICD": "hosp/diagnoses_icd",
          "LABEVENTS": "hosp/labevents", "MICROBIOLOGYEVENTS": "hosp/microbiologyevents",
          "PRESCRIPTIONS": "hosp/prescriptions", "D_LABITEMS": "hosp/d_labitems", "ICUSTAYS": "icu/icustays",
          "CHARTEVENTS": "icu/chartevents", "INPUTEVENTS_CV": "icu/inputevents", "INPUTEVENTS_MV": "icu/inputevents",
          "OUTPUTEVENTS": "icu/outputevents", "PROCEDUREEVENTS_MV": "icu/procedureevents",
          "DATETIMEEVENTS": "icu/datetimeevents", "D_ITEMS": "icu/d_items"}

ADMISSION_TYPES = {"EMERGENCY": "EW EMER.", "URGENT": "URGENT", "ELECTIVE": "ELECTIVE", "NEWBORN": "EW EMER."}
LOCATIONS = {"EMERGENCY ROOM ADMIT": "EMERGENCY ROOM", "TRANSFER FROM HOSP/EXTRAM": "TRANSFER FROM HOSPITAL",
             "CLINIC REFERRAL/PREMATURE": "CLINIC REFERRAL", "TRANSFER FROM SKILLED NUR":
             "TRANSFER FROM SKILLED NURSING FACILITY", "PHYS REFERRAL/NORMAL DELI": "PHYSICIAN REFERRAL"}
CAREUNITS = {"MICU": "Medical Intensive Care Unit (MICU)", "SICU": "Surgical Intensive Care Unit (SICU)",
             "CCU": "Coronary Care Unit (CCU)", "TSICU": "Trauma SICU (TSICU)",
             "CSRU": "Cardiac Vascular Intensive Care Unit (CVICU)", "NICU": "Neonatal Intensive Care Unit (NICU)"}
# CareVue itemid -> the concept's MetaVision itemid (chart, input, output)
TO_METAVISION = {**{c.cv: c.mv for c in CHART if c.cv and c.mv}, **{x.cv: x.mv for x in INPUTS},
                 **{o[0]: o[1] for o in OUTPUTS}}
LINKSTO = {"inputevents_cv": "inputevents", "inputevents_mv": "inputevents", "procedureevents_mv": "procedureevents"}
_INPUT_BY_MV = {x.mv: x for x in INPUTS}
_LAB_REF = {x.itemid: x.ref for x in LABS}


def anchor_year_group(year: np.ndarray) -> list[str]:
    """MIMIC-IV's 3-year windows, aligned as the release's (2008 - 2010, 2011 - 2013, ...)."""
    start = 2008 + 3 * np.floor_divide(np.asarray(year) - 2008, 3)
    return [f"{s} - {s + 2}" for s in start]


def _year(sec: np.ndarray) -> np.ndarray:
    return np.asarray(sec, "datetime64[s]").astype("datetime64[Y]").astype(np.int64) + 1970


def _mapped(arr: pa.Array, mapping: dict) -> pa.Array:
    """Values replaced through ``mapping`` (others kept), for a string or integer column."""
    values = arr.to_pylist()
    return pa.array([mapping.get(v, v) for v in values], arr.type)


# The ids MIMIC-IV numbers in file order (MIMIC-III's ROW_ID is gone): id -> the MIMIC-III tables whose rows
# take one each, in the order a chunk's tables are written. A chunk's first ids follow from the earlier
# chunks' row counts of those tables (``first_ids``), as its ROW_IDs do (``synth --workers``).
ID_TABLES: dict[str, tuple[str, ...]] = {
    "labevent_id": ("LABEVENTS",), "microevent_id": ("MICROBIOLOGYEVENTS",), "pharmacy_id": ("PRESCRIPTIONS",),
    "orderid": ("LABEVENTS", "INPUTEVENTS_CV", "INPUTEVENTS_MV", "PROCEDUREEVENTS_MV"),  # specimen_id: an order
}


def first_ids(rows_before: dict[str, int]) -> dict[str, int]:
    """Each id's first value in a chunk, from the MIMIC-III rows of the chunks before it (table -> rows)."""
    return {key: 1 + sum(rows_before.get(t, 0) for t in names) for key, names in ID_TABLES.items()}


class Mimic4Converter:
    """MIMIC-III rows of a chunk -> their MIMIC-IV table and columns (``convert``), numbering the ids from
    ``start`` (``first_ids``; default: the first chunk)."""

    def __init__(self, seed: int, start: dict[str, int] | None = None) -> None:
        self.seed = seed
        self._next = dict(start or first_ids({}))

    def _ids(self, key: str, n: int) -> pa.Array:
        start = self._next[key]
        self._next[key] += n
        return col_int(np.arange(start, start + n))

    def convert(self, name: str, c: dict[str, pa.Array], ch: Chunk | None = None,
                chunk_index: int = 0) -> tuple[str, dict[str, pa.Array]] | None:
        """(MIMIC-IV table, its columns) of the MIMIC-III table ``name``'s rows; None when there are none."""
        n = len(next(iter(c.values())))
        if n == 0:
            return None
        return TARGET[name], getattr(self, f"_{name.lower()}")(c, n, ch, chunk_index)

    # ------------------------------------------------------------------------ hosp
    def _patients(self, c, n, ch: Chunk, _ci):
        first = np.full(n, len(ch.pat), np.int64)
        np.minimum.at(first, ch.pat, np.arange(len(ch.pat)))  # each patient's first admission row
        age = ch.age[first]
        whole = np.floor(age).astype(np.int64)
        shifted_year = _year(ch.admit[first])
        return {"subject_id": c["SUBJECT_ID"], "gender": c["GENDER"],
                "anchor_age": col_int(np.where(whole > 89, 91, whole)), "anchor_year": col_int(shifted_year),
                "anchor_year_group": pa.array(anchor_year_group(_year(ch.admit[first] - ch.shift)), pa.string()),
                "dod": c["DOD"].cast(pa.date32())}

    def _admissions(self, c, n, _ch, _ci):
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "admittime": c["ADMITTIME"],
                "dischtime": c["DISCHTIME"], "deathtime": c["DEATHTIME"],
                "admission_type": _mapped(c["ADMISSION_TYPE"], ADMISSION_TYPES), "admit_provider_id": col_nulls(n),
                "admission_location": _mapped(c["ADMISSION_LOCATION"], LOCATIONS),
                "discharge_location": c["DISCHARGE_LOCATION"], "insurance": c["INSURANCE"], "language": c["LANGUAGE"],
                "marital_status": c["MARITAL_STATUS"], "race": c["ETHNICITY"], "edregtime": c["EDREGTIME"],
                "edouttime": c["EDOUTTIME"], "hospital_expire_flag": c["HOSPITAL_EXPIRE_FLAG"]}

    def _diagnoses_icd(self, c, n, _ch, _ci):
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "seq_num": c["SEQ_NUM"],
                "icd_code": c["ICD9_CODE"], "icd_version": col_int(np.full(n, 9))}

    def _labevents(self, c, n, _ch, ci):
        rng = np.random.default_rng([self.seed, ci, 1 << 16])  # the MIMIC-IV layout's own stream
        chart = c["CHARTTIME"].cast(pa.int64()).to_numpy(zero_copy_only=False)
        delay = np.clip(rng.lognormal(np.log(45.0), 0.8, n), 5.0, 720.0).astype(np.int64) * MIN
        hold = pc.fill_null(pc.equal(c["VALUE"], "HOLD"), False).to_numpy(zero_copy_only=False)
        itemid = c["ITEMID"].to_numpy(zero_copy_only=False)
        ref = np.array([_LAB_REF[int(i)] for i in itemid], float).reshape(-1, 2)
        return {"labevent_id": self._ids("labevent_id", n), "subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"],
                "specimen_id": self._ids("orderid", n), "itemid": c["ITEMID"], "order_provider_id": col_nulls(n),
                "charttime": c["CHARTTIME"], "storetime": col_ts(chart + delay, hold), "value": c["VALUE"],
                "valuenum": c["VALUENUM"], "valueuom": c["VALUEUOM"], "ref_range_lower": col_num(ref[:, 0]),
                "ref_range_upper": col_num(ref[:, 1]), "flag": c["FLAG"], "priority": col_nulls(n),
                "comments": col_nulls(n)}

    def _microbiologyevents(self, c, n, _ch, _ci):
        ids = self._ids("microevent_id", n)
        return {"microevent_id": ids, "subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "micro_specimen_id": ids,
                "order_provider_id": col_nulls(n), "chartdate": c["CHARTDATE"], "charttime": c["CHARTTIME"],
                "spec_itemid": c["SPEC_ITEMID"], "spec_type_desc": c["SPEC_TYPE_DESC"],
                "test_seq": col_int(np.ones(n)), "storedate": col_nulls(n), "storetime": col_nulls(n),
                "test_itemid": col_nulls(n), "test_name": col_nulls(n), "org_itemid": c["ORG_ITEMID"],
                "org_name": c["ORG_NAME"], "isolate_num": c["ISOLATE_NUM"], "quantity": col_nulls(n),
                "ab_itemid": c["AB_ITEMID"], "ab_name": c["AB_NAME"], "dilution_text": c["DILUTION_TEXT"],
                "dilution_comparison": c["DILUTION_COMPARISON"], "dilution_value": c["DILUTION_VALUE"],
                "interpretation": c["INTERPRETATION"], "comments": col_nulls(n)}

    def _prescriptions(self, c, n, _ch, _ci):  # STARTDATE holds the exact start (events.prescriptions exact=True)
        same = ("drug_type", "drug", "formulary_drug_cd", "gsn", "ndc", "prod_strength", "dose_val_rx", "dose_unit_rx",
                "form_val_disp", "form_unit_disp", "route")
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "pharmacy_id": self._ids("pharmacy_id", n),
                "poe_id": col_nulls(n), "poe_seq": col_nulls(n), "order_provider_id": col_nulls(n),
                "starttime": c["STARTDATE"], "stoptime": c["ENDDATE"], "form_rx": col_nulls(n),
                "doses_per_24_hrs": col_nulls(n), **{k: c[k.upper()] for k in same}}

    def _d_labitems(self, c, n, _ch, _ci):
        return {"itemid": c["ITEMID"], "label": c["LABEL"], "fluid": c["FLUID"], "category": c["CATEGORY"]}

    # ------------------------------------------------------------------------ icu
    def _icustays(self, c, n, _ch, _ci):
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "stay_id": c["ICUSTAY_ID"],
                "first_careunit": _mapped(c["FIRST_CAREUNIT"], CAREUNITS),
                "last_careunit": _mapped(c["LAST_CAREUNIT"], CAREUNITS), "intime": c["INTIME"],
                "outtime": c["OUTTIME"], "los": c["LOS"]}

    def _chartevents(self, c, n, _ch, _ci):
        keep = pc.invert(pc.fill_null(pc.equal(c["ERROR"].cast(pa.int64()), 1), False))  # audit rows: not released
        c = {k: pc.filter(v, keep) for k, v in c.items()}
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "stay_id": c["ICUSTAY_ID"],
                "caregiver_id": c["CGID"], "charttime": c["CHARTTIME"], "storetime": c["STORETIME"],
                "itemid": _mapped(c["ITEMID"], TO_METAVISION), "value": c["VALUE"], "valuenum": c["VALUENUM"],
                "valueuom": c["VALUEUOM"], "warning": c["WARNING"]}

    def _inputevents_cv(self, c, n, _ch, _ci):  # a charted CareVue amount: one point in time
        itemid = _mapped(c["ITEMID"], TO_METAVISION)
        spec = [_INPUT_BY_MV[int(i)] for i in itemid.to_numpy(zero_copy_only=False)]
        text = lambda f: pa.array([f(x) for x in spec], pa.string())  # noqa: E731
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "stay_id": c["ICUSTAY_ID"],
                "caregiver_id": c["CGID"], "starttime": c["CHARTTIME"], "endtime": c["CHARTTIME"],
                "storetime": c["STORETIME"], "itemid": itemid, "amount": c["AMOUNT"], "amountuom": c["AMOUNTUOM"],
                "rate": c["RATE"], "rateuom": text(lambda x: x.rateuom[1] or None), "orderid": self._ids("orderid", n),
                "linkorderid": c["LINKORDERID"], "ordercategoryname": text(lambda x: x.category[0]),
                "secondaryordercategoryname": col_nulls(n),
                "ordercomponenttypedescription": text(lambda x: x.category[1]),
                "ordercategorydescription": text(lambda x: x.category[2]), "patientweight": col_nulls(n),
                "totalamount": col_nulls(n), "totalamountuom": col_nulls(n), "isopenbag": col_int(np.zeros(n)),
                "continueinnextdept": col_int(np.zeros(n)),
                "statusdescription": col_str(np.zeros(n), ["FinishedRunning"]),
                "originalamount": c["AMOUNT"], "originalrate": c["RATE"]}

    def _inputevents_mv(self, c, n, _ch, _ci):
        same = ("starttime", "endtime", "storetime", "itemid", "amount", "amountuom", "rate", "rateuom", "linkorderid",
                "ordercategoryname", "secondaryordercategoryname", "ordercomponenttypedescription",
                "ordercategorydescription", "patientweight", "totalamount", "totalamountuom", "isopenbag",
                "continueinnextdept", "statusdescription", "originalamount", "originalrate")
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "stay_id": c["ICUSTAY_ID"],
                "caregiver_id": c["CGID"], "orderid": self._ids("orderid", n), **{k: c[k.upper()] for k in same}}

    def _outputevents(self, c, n, _ch, _ci):
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "stay_id": c["ICUSTAY_ID"],
                "caregiver_id": c["CGID"], "charttime": c["CHARTTIME"], "storetime": c["STORETIME"],
                "itemid": _mapped(c["ITEMID"], TO_METAVISION), "value": c["VALUE"], "valueuom": c["VALUEUOM"]}

    def _procedureevents_mv(self, c, n, _ch, _ci):
        same = ("starttime", "endtime", "storetime", "itemid", "value", "valueuom", "location", "locationcategory",
                "linkorderid", "ordercategoryname", "ordercategorydescription", "isopenbag", "continueinnextdept",
                "statusdescription")
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "stay_id": c["ICUSTAY_ID"],
                "caregiver_id": c["CGID"], "orderid": self._ids("orderid", n), "patientweight": col_nulls(n),
                "originalamount": col_nulls(n), "originalrate": col_nulls(n), **{k: c[k.upper()] for k in same}}

    def _datetimeevents(self, c, n, _ch, _ci):
        return {"subject_id": c["SUBJECT_ID"], "hadm_id": c["HADM_ID"], "stay_id": c["ICUSTAY_ID"],
                "caregiver_id": c["CGID"], "charttime": c["CHARTTIME"], "storetime": c["STORETIME"],
                "itemid": c["ITEMID"], "value": c["VALUE"], "valueuom": c["VALUEUOM"], "warning": c["WARNING"]}

    def _d_items(self, c, n, _ch, _ci):
        return {"itemid": c["ITEMID"], "label": c["LABEL"], "abbreviation": c["ABBREVIATION"],
                "linksto": _mapped(c["LINKSTO"], LINKSTO), "category": c["CATEGORY"], "unitname": c["UNITNAME"],
                "param_type": c["PARAM_TYPE"], "lownormalvalue": col_nulls(n), "highnormalvalue": col_nulls(n)}



class Mimic4Writer:
    """The MIMIC-IV tables of one output directory: ``write(iii_name, cols, chunk)`` converts and appends."""

    def __init__(self, out: Path, level: int, seed: int) -> None:
        self.out = Path(out)
        self.converter = Mimic4Converter(seed)
        self.writers: dict[str, CsvGzWriter] = {}
        for name, columns in COLUMNS_IV.items():
            path = self.out / f"{name}.csv.gz"
            path.parent.mkdir(parents=True, exist_ok=True)
            self.writers[name] = CsvGzWriter(path, columns, level)

    def write(self, name: str, c: dict[str, pa.Array], ch: Chunk | None = None, chunk_index: int = 0) -> None:
        converted = self.converter.convert(name, c, ch, chunk_index)
        if converted is not None:
            self.writers[converted[0]].write(converted[1])

    @property
    def rows(self) -> dict[str, int]:
        return {name.split("/")[1]: w.rows for name, w in self.writers.items()}

    def close(self) -> None:
        for w in self.writers.values():
            w.close()

    def abort(self) -> None:
        for w in self.writers.values():
            if w.tmp.exists():
                w.abort()


__all__ = ["COLUMNS_IV", "ID_TABLES", "Mimic4Converter", "Mimic4Writer", "anchor_year_group", "first_ids"]
