"""The tables and columns the pipeline reads from each MIMIC release, with their types.

Column names are lowercase here (mimic-code's PostgreSQL build); CSV files may carry either
case and are matched case-insensitively. Only the columns listed are read. MIMIC-III's tables
sit in one directory (or schema ``mimiciii``); MIMIC-IV's in two modules, ``hosp`` and ``icu``
(directories ``hosp/`` and ``icu/``, schemas ``mimiciv_hosp`` and ``mimiciv_icu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Release(str, Enum):
    """A MIMIC release: which tables exist and which SQL maps them onto the staging shape."""

    mimic3 = "mimic-iii"  # MIMIC-III v1.4: one directory, ROW_ID on every table, DOB, CareVue + MetaVision
    mimic4 = "mimic-iv"  # MIMIC-IV v2.x: hosp/ and icu/ modules, anchor_age/anchor_year, MetaVision only
    meds = "meds"  # a MEDS dataset (pipeline.data.meds); a features manifest records it as "meds:<dataset_name>"

    @property
    def title(self) -> str:
        return {"mimic-iii": "MIMIC-III", "mimic-iv": "MIMIC-IV", "meds": "MEDS"}[self.value]


LEGACY = Release.mimic3  # the release of a features manifest that records none (written before releases were)


def release_of(manifest: dict | None) -> Release:
    """The release a features manifest (a features directory's, or a run's copy of it) records
    (``manifest["release"]``; ``LEGACY`` when it records none)."""
    value = (manifest or {}).get("release") or LEGACY
    if isinstance(value, str) and value.startswith(f"{Release.meds.value}:"):  # "meds:<dataset_name>"
        return Release.meds
    try:
        return Release(value)
    except ValueError:
        from pipeline.core.errors import PipelineError

        raise PipelineError(f"a features manifest records the unknown release {value!r} "
                            f"(one of {[r.value for r in Release]})") from None

INT = "BIGINT"
FLOAT = "DOUBLE"
TS = "TIMESTAMP"
TEXT = "VARCHAR"


# Columns only the MEDS export reads (its ED, ICU discharge, discharge location and death events; docs/meds.md):
# optional, NULL where a source lacks them, so that the extraction never depends on them.
EXPORT_ONLY = {"patients": ("dod",), "admissions": ("discharge_location", "edregtime", "edouttime"),
               "icustays": ("outtime", "first_careunit", "last_careunit")}


@dataclass(frozen=True)
class TableSpec:
    name: str  # lowercase table name (PostgreSQL: mimiciii.<name>; CSV: NAME.csv[.gz])
    columns: dict[str, str]  # column -> type the SQL sees
    required: bool  # a missing required table stops the run; a missing optional one warns
    optional_columns: tuple[str, ...] = ()  # may be absent (then NULL), e.g. flags
    module: str = ""  # MIMIC-IV module holding the table ("hosp" or "icu"); "" for MIMIC-III
    row_id: str | None = "row_id"  # column identifying a row (quarantine lists it); None: the release has none


TABLES: dict[str, TableSpec] = {
    t.name: t
    for t in [
        TableSpec(
            "patients",
            {"row_id": INT, "subject_id": INT, "gender": TEXT, "dob": TS, "dod": TS},
            required=True,
            optional_columns=EXPORT_ONLY["patients"],
        ),
        TableSpec(
            "admissions",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "admittime": TS,
                "dischtime": TS,
                "deathtime": TS,
                "admission_type": TEXT,
                "admission_location": TEXT,
                "hospital_expire_flag": INT,
                "discharge_location": TEXT,
                "edregtime": TS,
                "edouttime": TS,
            },
            required=True,
            optional_columns=EXPORT_ONLY["admissions"],
        ),
        TableSpec(
            "icustays",
            {"row_id": INT, "subject_id": INT, "hadm_id": INT, "icustay_id": INT, "dbsource": TEXT, "intime": TS,
             "outtime": TS, "first_careunit": TEXT, "last_careunit": TEXT},
            required=False,
            optional_columns=EXPORT_ONLY["icustays"],
        ),
        TableSpec(
            "chartevents",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "itemid": INT,
                "charttime": TS,
                "storetime": TS,
                "value": TEXT,
                "valuenum": FLOAT,
                "error": INT,
            },
            required=False,
            optional_columns=("storetime", "error"),
        ),
        TableSpec(
            "labevents",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "itemid": INT,
                "charttime": TS,
                "value": TEXT,
                "valuenum": FLOAT,
            },
            required=False,
        ),
        TableSpec(
            "inputevents_cv",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "itemid": INT,
                "charttime": TS,
                "storetime": TS,
                "amount": FLOAT,
            },
            required=False,
            optional_columns=("storetime",),
        ),
        TableSpec(
            "inputevents_mv",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "itemid": INT,
                "starttime": TS,
                "endtime": TS,
                "storetime": TS,
                "amount": FLOAT,
                "statusdescription": TEXT,
            },
            required=False,
            optional_columns=("storetime", "statusdescription"),
        ),
        TableSpec(
            "outputevents",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "itemid": INT,
                "charttime": TS,
                "storetime": TS,
                "value": FLOAT,
                "iserror": INT,
            },
            required=False,
            optional_columns=("storetime", "iserror"),
        ),
        TableSpec(
            "prescriptions",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "startdate": TS,
                "formulary_drug_cd": TEXT,
                "dose_val_rx": TEXT,
            },
            required=False,
        ),
        TableSpec(
            "procedureevents_mv",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "itemid": INT,
                "starttime": TS,
                "endtime": TS,
                "storetime": TS,
                "value": FLOAT,
                "statusdescription": TEXT,
            },
            required=False,
            optional_columns=("storetime", "statusdescription"),
        ),
        TableSpec(
            "microbiologyevents",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "chartdate": TS,
                "charttime": TS,
                "spec_itemid": INT,
            },
            required=False,
        ),
        TableSpec(
            "datetimeevents",
            {
                "row_id": INT,
                "subject_id": INT,
                "hadm_id": INT,
                "itemid": INT,
                "charttime": TS,
                "storetime": TS,
                "error": INT,
            },
            required=False,
            optional_columns=("storetime", "error"),
        ),
    ]
}

EVENT_TABLES = [
    "chartevents",
    "labevents",
    "inputevents_cv",
    "inputevents_mv",
    "outputevents",
    "prescriptions",
    "procedureevents_mv",
    "microbiologyevents",
    "datetimeevents",
]


def _iv(name: str, module: str, columns: dict[str, str], required: bool = False, row_id: str | None = None,
        optional_columns: tuple[str, ...] = ()) -> TableSpec:
    return TableSpec(name, columns, required, optional_columns, module, row_id)


# MIMIC-IV v2.x (mimic-code's mimic-iv/buildmimic/postgres/create.sql): no ROW_ID; labevents and
# microbiologyevents carry their own row ids. Audit rows (ERROR = 1) are not in the release.
TABLES_IV: dict[str, TableSpec] = {
    t.name: t
    for t in [
        _iv("patients", "hosp", {"subject_id": INT, "gender": TEXT, "anchor_age": INT, "anchor_year": INT,
                                 "anchor_year_group": TEXT, "dod": TS}, required=True,
            optional_columns=EXPORT_ONLY["patients"]),
        _iv("admissions", "hosp", {"subject_id": INT, "hadm_id": INT, "admittime": TS, "dischtime": TS,
                                   "deathtime": TS, "admission_type": TEXT, "admission_location": TEXT,
                                   "hospital_expire_flag": INT, "discharge_location": TEXT, "edregtime": TS,
                                   "edouttime": TS}, required=True, optional_columns=EXPORT_ONLY["admissions"]),
        _iv("icustays", "icu", {"subject_id": INT, "hadm_id": INT, "stay_id": INT, "intime": TS, "outtime": TS,
                                "first_careunit": TEXT, "last_careunit": TEXT},
            optional_columns=EXPORT_ONLY["icustays"]),
        _iv("chartevents", "icu", {"subject_id": INT, "hadm_id": INT, "itemid": INT, "charttime": TS,
                                   "storetime": TS, "value": TEXT, "valuenum": FLOAT}, optional_columns=("storetime",)),
        _iv("labevents", "hosp", {"labevent_id": INT, "subject_id": INT, "hadm_id": INT, "itemid": INT,
                                  "charttime": TS, "storetime": TS, "value": TEXT, "valuenum": FLOAT},
            row_id="labevent_id"),
        _iv("inputevents", "icu", {"subject_id": INT, "hadm_id": INT, "itemid": INT, "starttime": TS, "endtime": TS,
                                   "storetime": TS, "amount": FLOAT, "statusdescription": TEXT},
            optional_columns=("storetime", "statusdescription")),
        _iv("outputevents", "icu", {"subject_id": INT, "hadm_id": INT, "itemid": INT, "charttime": TS,
                                    "storetime": TS, "value": FLOAT}, optional_columns=("storetime",)),
        _iv("prescriptions", "hosp", {"subject_id": INT, "hadm_id": INT, "starttime": TS,
                                      "formulary_drug_cd": TEXT, "dose_val_rx": TEXT}),
        _iv("procedureevents", "icu", {"subject_id": INT, "hadm_id": INT, "itemid": INT, "starttime": TS,
                                       "endtime": TS, "storetime": TS, "value": FLOAT, "statusdescription": TEXT},
            optional_columns=("storetime", "statusdescription")),
        _iv("microbiologyevents", "hosp", {"microevent_id": INT, "subject_id": INT, "hadm_id": INT, "chartdate": TS,
                                           "charttime": TS, "spec_itemid": INT}, row_id="microevent_id"),
        _iv("datetimeevents", "icu", {"subject_id": INT, "hadm_id": INT, "itemid": INT, "charttime": TS,
                                      "storetime": TS}, optional_columns=("storetime",)),
    ]
}

EVENT_TABLES_IV = ["chartevents", "labevents", "inputevents", "outputevents", "prescriptions", "procedureevents",
                   "microbiologyevents", "datetimeevents"]
MODULES_IV = ("hosp", "icu")

# MIMIC-III tables that MIMIC-IV does not have (a sign of a MIMIC-III file in a MIMIC-IV folder).
MIMIC3_ONLY = frozenset({"inputevents_cv", "inputevents_mv", "procedureevents_mv", "noteevents", "cptevents",
                         "callout", "caregivers", "d_cpt"})


def tables_of(release: Release) -> dict[str, TableSpec]:
    """The tables the pipeline reads from ``release``."""
    return TABLES if Release(release) is Release.mimic3 else TABLES_IV


def event_tables_of(release: Release) -> list[str]:
    """The event tables of ``release``, largest first (the order their scans start in)."""
    return EVENT_TABLES if Release(release) is Release.mimic3 else EVENT_TABLES_IV
