"""The export's ``metadata/codes.parquet``: every code it wrote, described from MIMIC's dictionary tables.

Item codes take the item's LABEL from D_ITEMS (chart, input, output, procedure, datetime and MIMIC-III's
microbiology specimens) or D_LABITEMS (labs: LABEL, FLUID, CATEGORY), read beside the source: a CSV
directory's own files, a stage's source directory (when it is still there), or the PostgreSQL schemas. The
dictionaries are not part of the extraction's tables (``data.mimic.sources.tables``), so they are read here only; a
missing one leaves its codes' descriptions null (a warning says which). The structural codes (admission,
discharge, birth, death, gender, ICU stay) are described by what the export writes.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pyarrow as pa

log = logging.getLogger(__name__)

DICTIONARIES = {"d_items": ("itemid", "label"), "d_labitems": ("itemid", "label", "fluid", "category")}
ITEM_DICTIONARY = {"chart": "d_items", "input": "d_items", "output": "d_items", "proc": "d_items",
                   "dtevent": "d_items", "micro": "d_items", "lab": "d_labitems"}
FIXED = {  # code prefix -> description of the codes the export writes itself
    "HOSPITAL_ADMISSION//": "hospital admission (ADMITTIME): //ADMISSION_TYPE//ADMISSION_LOCATION",
    "HOSPITAL_DISCHARGE//DIED": "hospital discharge (DISCHTIME) of an admission that ended in death (DEATHTIME or "
                                "HOSPITAL_EXPIRE_FLAG)",
    "HOSPITAL_DISCHARGE//UNK": "hospital discharge (DISCHTIME) alive, without a DISCHARGE_LOCATION",
    "HOSPITAL_DISCHARGE//": "hospital discharge (DISCHTIME) alive: //DISCHARGE_LOCATION",
    "ED_REGISTRATION": "emergency department registration (EDREGTIME; one per subject and time)",
    "ED_OUT": "emergency department exit (EDOUTTIME; one per subject and time)",
    "ICU_ADMISSION//": "ICU stay start (INTIME): //FIRST_CAREUNIT (UNK: none)",
    "ICU_DISCHARGE//": "ICU stay end (OUTTIME): //LAST_CAREUNIT (UNK: none)",
    "MEDS_BIRTH": "birth (MIMIC-III: DOB, shifted for patients over 89; MIMIC-IV: 1 January of anchor_year - "
                  "anchor_age)",
    "MEDS_DEATH": "death: the subject's earliest in-hospital death (DEATHTIME, or DISCHTIME with "
                  "HOSPITAL_EXPIRE_FLAG), else its date of death (PATIENTS.DOD, midnight)",
    "GENDER//": "gender (static)",
    "PRESCRIPTION//": "prescription start (FORMULARY_DRUG_CD; the drug name is free text and not read)",
}


def read_dictionaries(src) -> dict[str, pd.DataFrame]:
    """The dictionary tables beside ``src`` (name -> frame of DICTIONARIES' columns); absent ones left out."""
    out: dict[str, pd.DataFrame] = {}
    try:
        files = _dictionary_files(src)
        for name, cols in DICTIONARIES.items():
            if src.kind == "postgres":
                frame = _postgres_table(src, name, cols)
            elif name in files:
                frame = _csv_table(files[name], cols)
            else:
                frame = None
            if frame is None:
                log.warning("dictionary table %s not found beside %s: its codes get no description", name.upper(),
                            src.description)
                continue
            out[name] = frame
    except Exception as exc:  # a dictionary is a nicety: never the reason an export fails
        log.warning("the dictionary tables could not be read (%s): codes get no description", exc)
    return out


def _dictionary_files(src) -> dict[str, Path]:
    from pipeline.data.mimic.sources.csvdir import detect_layout

    if src.kind == "csv":
        return detect_layout(src.directory)[1]
    if src.kind == "stage":
        source = Path(src.manifest.get("source", ""))
        return detect_layout(source)[1] if source.is_dir() else {}
    return {}


def _csv_table(path: Path, cols: tuple[str, ...]) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    frame.columns = [c.strip().lower() for c in frame.columns]
    return frame[[c for c in cols if c in frame.columns]]


def _postgres_table(src, name: str, cols: tuple[str, ...]) -> pd.DataFrame | None:
    schema = src.schemas.get("" if "" in src.schemas else ("hosp" if name == "d_labitems" else "icu"))
    try:
        rows = src.conn.execute(f"SELECT {', '.join(cols)} FROM {schema}.{name}").fetchall()
    except Exception:
        return None
    return pd.DataFrame(rows, columns=list(cols)).astype(str)


def _describe(row: pd.Series) -> str:
    parts = [row.get("label", "")] + [row.get(c, "") for c in ("fluid", "category")]
    return " | ".join(p for p in parts if isinstance(p, str) and p and p != "nan")  # a NULL: NaN (pandas 3)


def codes_table(items: pd.DataFrame, structural: list[str], dictionaries: dict[str, pd.DataFrame]) -> pa.Table:
    """codes.parquet (``meds.CodeMetadataSchema``): ``items`` (code, source, item) of the event tables, the
    ``structural`` codes; descriptions from ``dictionaries`` and ``FIXED``; no parent codes (none in MIMIC)."""
    described = {}
    for name, frame in dictionaries.items():
        if "itemid" in frame.columns:
            described[name] = {str(i).strip(): _describe(r) for i, (_, r) in zip(frame["itemid"], frame.iterrows())}
    rows = {}
    for code, source, item in items.itertuples(index=False):
        text = described.get(ITEM_DICTIONARY.get(source, ""), {}).get(str(item))
        rows[code] = text or rows.get(code)
    for code in structural:
        rows.setdefault(code, None)
    for code, text in rows.items():
        rows[code] = text or next((d for p, d in FIXED.items() if code.startswith(p)), None)
    codes = sorted(rows)
    return pa.table({"code": pa.array(codes, pa.string()),
                     "description": pa.array([rows[c] for c in codes], pa.string()),
                     "parent_codes": pa.array([None] * len(codes), pa.list_(pa.string()))})
