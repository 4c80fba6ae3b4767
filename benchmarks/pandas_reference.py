"""A plain-pandas implementation of the cohort and event-window logic (read_csv + merges,
the way mimic3-benchmarks builds its cohorts), used only as the baseline of
`benchmarks/extract.py`. It counts the events each table contributes; it does not bag or
tokenize, so the ratio it gives is conservative (the DuckDB side does more work).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.data.mimic.sources.csvdir import find_tables

EVENTS = {
    # table: (time column, store-time column or None, value-time column or None, link key, error column)
    "chartevents": ("charttime", "storetime", None, "hadm_id", "error"),
    "labevents": ("charttime", None, None, "subject_id", None),
    "inputevents_cv": ("charttime", "storetime", None, "hadm_id", None),
    "inputevents_mv": ("starttime", "storetime", None, "hadm_id", None),
    "outputevents": ("charttime", "storetime", None, "hadm_id", "iserror"),
    "procedureevents_mv": ("starttime", "storetime", None, "hadm_id", None),
    "datetimeevents": ("charttime", "storetime", None, "hadm_id", "error"),
}


def _read(path: Path, cols: list[str], times: list[str]) -> pd.DataFrame:
    """Whole table, as mimic3-benchmarks' dataframe_from_csv reads it, then the columns used."""
    frame = pd.read_csv(path, low_memory=False)
    frame.columns = [c.lower() for c in frame.columns]
    frame = frame[[c for c in cols if c in frame.columns]]
    for t in times:
        if t in frame:
            # second resolution: ages near 300 years overflow nanoseconds
            frame[t] = pd.to_datetime(frame[t], errors="coerce").astype("datetime64[s]")
    return frame


def cohort(src: Path, prediction_hours: float = 24.0, lookback_days: float = 30.0) -> pd.DataFrame:
    files = find_tables(src)
    adm = _read(files["admissions"], ["subject_id", "hadm_id", "admittime", "dischtime", "deathtime", "admission_type",
                                      "hospital_expire_flag"], ["admittime", "dischtime", "deathtime"])
    pat = _read(files["patients"], ["subject_id", "dob"], ["dob"])
    df = adm.merge(pat, on="subject_id", how="inner")
    age = (df["admittime"] - df["dob"]).dt.total_seconds() / 31556952.0
    df["pred"] = df["admittime"] + pd.Timedelta(hours=prediction_hours)
    death = df["deathtime"].fillna(df["dischtime"].where(df["hospital_expire_flag"] == 1))
    keep = (
        (df["admission_type"] != "NEWBORN")
        & (age >= 18)
        & ~(death.notna() & (death <= df["pred"]))
        & (df["dischtime"] > df["pred"])
    )
    df = df[keep].copy()
    df["start"] = df["pred"] - pd.Timedelta(days=lookback_days)
    return df[["subject_id", "hadm_id", "dob", "pred", "start"]]


def events_used(src: Path, coh: pd.DataFrame) -> dict[str, int]:
    """Events before the prediction time, per table (the same rules as sql/)."""
    files = find_tables(src)
    used: dict[str, int] = {}
    for table, (tcol, scol, _vcol, key, errcol) in EVENTS.items():
        if table not in files:
            continue
        cols = ["subject_id", "hadm_id", tcol] + ([scol] if scol else []) + ([errcol] if errcol else [])
        if table.endswith("_mv"):
            cols.append("statusdescription")
        ev = _read(files[table], cols, [tcol] + ([scol] if scol else []))
        used[table] = in_window(ev, coh, table)
    return used


def in_window(ev: pd.DataFrame, coh: pd.DataFrame, table: str) -> int:
    """Events of `table` (times parsed) that fall in a cohort admission's window."""
    tcol, scol, _vcol, key, errcol = EVENTS[table]
    if errcol and errcol in ev:
        ev = ev[ev[errcol].fillna(0) != 1]
    if "statusdescription" in ev:
        ev = ev[ev["statusdescription"] != "Rewritten"]
    ev = ev.dropna(subset=[tcol, key])
    m = ev.merge(coh, on=key, how="inner", suffixes=("", "_c"))
    known = m[scol].fillna(m[tcol]) if scol and scol in m else m[tcol]
    ok = (m[tcol] < m["pred"]) & (m[tcol] >= m["start"]) & (known < m["pred"]) & (m[tcol] >= m["dob"])
    return int(np.count_nonzero(ok))


def run(src: Path) -> dict[str, int]:
    return events_used(src, cohort(src))
