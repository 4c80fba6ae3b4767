"""The MIMIC-III v1.4 layouts of the synthetic MIMIC-III (`pipeline.data.mimic.synth`) and its non-event tables.

``COLUMNS`` (every table's v1.4 columns, in order) and ``TRUTH_COLUMNS``; the builders of
PATIENTS, ADMISSIONS, ICUSTAYS, the truth and the dictionaries (D_ITEMS, D_LABITEMS) from one
simulated chunk (``Chunk``). The event tables are built in ``events_chart``, ``events_icu`` and
``events_hosp``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pipeline.data.mimic.synth.catalog_chart import CHART
from pipeline.data.mimic.synth.catalog_hosp import (
    DISCHARGE_LOCATIONS,
    ETHNICITIES,
    INSURANCE,
    INSURANCE_65,
    LABS,
    LANGUAGES,
    MARITAL,
    RELIGIONS,
)
from pipeline.data.mimic.synth.catalog_icu import DTEVENTS, INPUTS, ITEM_META, OUTPUTS, PROCEDURES
from pipeline.data.mimic.synth.chunk import (
    ADMISSION_TYPES,
    ADULT,
    DAY,
    HOUR,
    LOCATIONS,
    MIN,
    NEWBORN,
    REASONS,
    SYSTEMS,
    UNITS,
    Chunk,
    key_cols,
    pick,
)
from pipeline.data.mimic.synth.csvgz import col_int, col_nulls, col_num, col_str, col_ts


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
# FIRST_WARDID / LAST_WARDID of each care unit
_WARD = {"CCU": 7, "CSRU": 15, "MICU": 52, "NICU": 56, "SICU": 57, "TSICU": 14}


# ---------------------------------------------------------------------------- PATIENTS, ADMISSIONS, ICUSTAYS
def patients(rng, ch: Chunk) -> dict[str, pa.Array]:
    """PATIENTS: DOB (shifted; 300 years back for ages over 89), dates of death in and out of hospital."""
    P = len(ch.subject_id)
    dod_hosp = np.full(P, -1, np.int64)
    dead = np.flatnonzero(ch.died)
    dod_hosp[ch.pat[dead]] = (ch.admit[dead] + np.round(ch.end_h[dead] * 60).astype(np.int64) * MIN) // DAY * DAY
    ssn = np.where(dod_hosp >= 0, np.where(rng.random(P) < 0.7, dod_hosp, -1), ch.dod_ssn)
    dod = np.where(dod_hosp >= 0, dod_hosp, ssn)
    return {"SUBJECT_ID": col_int(ch.subject_id), "GENDER": col_str(ch.male.astype(int), ("F", "M")),
            "DOB": col_ts(ch.dob),
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
    dl = len(DISCHARGE_LOCATIONS)
    dloc = np.where(ch.died, dl, np.where(newborn, 0, pick(rng, DISCHARGE_LOCATIONS, A)))
    ins = np.where(ch.age >= 65, pick(rng, INSURANCE_65, A), len(INSURANCE_65) + pick(rng, INSURANCE, A))
    lang_null = rng.random(A) < np.where(ch.system == 0, 0.7, 0.1)
    marital = pick(rng, MARITAL, A)
    return {
        **key_cols(ch, np.arange(A)), "ADMITTIME": col_ts(ch.admit), "DISCHTIME": col_ts(disch),
        "DEATHTIME": col_ts(disch, ~ch.died), "ADMISSION_TYPE": col_str(ch.atype, ADMISSION_TYPES),
        "ADMISSION_LOCATION": col_str(ch.aloc, LOCATIONS),
        "DISCHARGE_LOCATION": col_str(dloc, [v for v, _ in DISCHARGE_LOCATIONS] + ["DEAD/EXPIRED"]),
        "INSURANCE": col_str(ins, [v for v, _ in INSURANCE_65 + INSURANCE]),
        "LANGUAGE": col_str(pick(rng, LANGUAGES, A), [v for v, _ in LANGUAGES], lang_null | newborn),
        "RELIGION": col_str(pick(rng, RELIGIONS, A), [v for v, _ in RELIGIONS]),
        "MARITAL_STATUS": col_str(marital, [v for v, _ in MARITAL], child),
        "ETHNICITY": col_str(pick(rng, ETHNICITIES, A), [v for v, _ in ETHNICITIES]),
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
    for c in CHART:
        links.update({i: "chartevents" for i in (c.cv, c.mv) if i})
    for x in INPUTS:
        links.update({x.cv: "inputevents_cv", x.mv: "inputevents_mv"})
    links.update({i: "outputevents" for o in OUTPUTS for i in o[:2]})
    links.update({x[0]: "datetimeevents" for items in DTEVENTS.values() for x in items})
    links.update({x[0]: "procedureevents_mv" for x in PROCEDURES.values()})
    return links


ITEM_LINKS = _item_links()  # every ITEMID the generator can emit -> D_ITEMS.LINKSTO


def d_items() -> dict[str, pa.Array]:
    """D_ITEMS rows for every emitted ITEMID (MetaVision rows carry the metadata columns)."""
    ids = np.array(sorted(ITEM_LINKS), np.int64)
    meta = [ITEM_META[i] for i in ids]
    col = lambda j: col_str(np.arange(len(ids)), [m[j] for m in meta])  # noqa: E731
    return {"ITEMID": col_int(ids), "LABEL": col(0), "ABBREVIATION": col(1),
            "DBSOURCE": col_str((ids >= 220000).astype(int), SYSTEMS),
            "LINKSTO": col_str(np.arange(len(ids)), [ITEM_LINKS[i] for i in ids]), "CATEGORY": col(2),
            "UNITNAME": col(3), "PARAM_TYPE": col(4), "CONCEPTID": col_nulls(len(ids))}


def d_labitems() -> dict[str, pa.Array]:
    """D_LABITEMS rows for every lab ITEMID."""
    labs = sorted(LABS, key=lambda x: x.itemid)
    idx = np.arange(len(labs))
    return {"ITEMID": col_int([x.itemid for x in labs]), "LABEL": col_str(idx, [x.label for x in labs]),
            "FLUID": col_str(idx, [x.fluid for x in labs]), "CATEGORY": col_str(idx, [x.category for x in labs]),
            "LOINC_CODE": col_str(idx, [x.loinc for x in labs])}
