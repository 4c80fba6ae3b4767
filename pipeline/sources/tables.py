"""The MIMIC-III tables and columns the pipeline reads, with their types.

Column names are lowercase here (mimic-code's PostgreSQL build); CSV files may carry either
case and are matched case-insensitively. Only the columns listed are read.
"""

from __future__ import annotations

from dataclasses import dataclass

INT = "BIGINT"
FLOAT = "DOUBLE"
TS = "TIMESTAMP"
TEXT = "VARCHAR"


@dataclass(frozen=True)
class TableSpec:
    name: str  # lowercase table name (PostgreSQL: mimiciii.<name>; CSV: NAME.csv[.gz])
    columns: dict[str, str]  # column -> type the SQL sees
    required: bool  # a missing required table stops the run; a missing optional one warns
    optional_columns: tuple[str, ...] = ()  # may be absent (then NULL), e.g. flags


TABLES: dict[str, TableSpec] = {
    t.name: t
    for t in [
        TableSpec(
            "patients",
            {"row_id": INT, "subject_id": INT, "gender": TEXT, "dob": TS},
            required=True,
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
            },
            required=True,
        ),
        TableSpec(
            "icustays",
            {"row_id": INT, "subject_id": INT, "hadm_id": INT, "icustay_id": INT, "dbsource": TEXT, "intime": TS},
            required=False,
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
