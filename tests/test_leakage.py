"""Clinical honesty: no feature uses information recorded at or after the prediction time.

The demo is copied with every event at or after the prediction time (or stored at or after
it) moved, changed and duplicated; the features must stay byte-identical. A positive control
moves events before the prediction time and must change them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.data.mimic.extraction import extract

FEATURES = ["train.parquet", "val.parquet", "test.parquet", "vocab.json"]
HOURS = 24


def _pred_times(demo: Path) -> pd.DataFrame:
    adm = _read(demo / "ADMISSIONS.csv.gz", ["admittime"])[["subject_id", "hadm_id", "admittime"]]
    adm["pred"] = adm["admittime"] + pd.Timedelta(hours=HOURS)
    return adm


def _read(path: Path, times: list[str]) -> pd.DataFrame:
    """All columns as the exact strings of the file; `times` parsed as datetimes."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for col in times:
        frame[col] = pd.to_datetime(frame[col].replace("", None))
    return frame


def _write(frame: pd.DataFrame, path: Path) -> None:
    for col in frame.columns:
        if pd.api.types.is_datetime64_any_dtype(frame[col]):
            frame[col] = frame[col].dt.strftime("%Y-%m-%d %H:%M:%S").fillna("")
    frame.to_csv(path, index=False)


def _num(col: pd.Series) -> pd.Series:
    return pd.to_numeric(col.replace("", None))


def _perturbed_copy(demo: Path, dst: Path, after: bool) -> None:
    """Copy the demo; perturb CHARTEVENTS/LABEVENTS rows after (or, as control, before) T."""
    shutil.copytree(demo, dst)
    rng = np.random.default_rng(0)
    adm = _pred_times(demo)
    chart = _read(demo / "CHARTEVENTS.csv.gz", ["charttime", "storetime"])
    chart = chart.merge(adm[["hadm_id", "pred"]], on="hadm_id", how="left")
    late = (chart["charttime"] >= chart["pred"]) | (chart["storetime"] >= chart["pred"])
    sel = late if after else (~late & chart["pred"].notna())
    n = int(sel.sum())
    assert n > 1000
    if after:
        # move later (never earlier than T), change values, duplicate some rows
        chart.loc[sel, "charttime"] = chart.loc[sel, "charttime"] + pd.to_timedelta(rng.integers(0, 48, n), unit="h")
        recorded = np.maximum(chart.loc[sel, "charttime"], chart.loc[sel, "pred"])  # still at/after T
        chart.loc[sel, "storetime"] = recorded + pd.Timedelta(minutes=5)
        chart.loc[sel, "valuenum"] = (_num(chart.loc[sel, "valuenum"]) * 3 + 7).astype(str).replace("nan", "")
        chart.loc[sel, "value"] = "CHANGED"
        extra = chart[sel].head(5000).copy()
        extra["row_id"] = (_num(extra["row_id"]) + 10**8).astype(str)
        chart = pd.concat([chart, extra])
    else:
        chart.loc[sel, "charttime"] = chart.loc[sel, "charttime"] - pd.Timedelta(hours=3)
    _write(chart.drop(columns=["pred"]), dst / "CHARTEVENTS.csv.gz")

    labs = _read(demo / "LABEVENTS.csv.gz", ["charttime"])
    last_pred = adm.groupby("subject_id")["pred"].max().rename("last_pred")
    labs = labs.merge(last_pred, on="subject_id", how="left")
    lsel = labs["charttime"] >= labs["last_pred"]  # after T of every admission of the patient
    if after:
        assert lsel.sum() > 100
        labs.loc[lsel, "valuenum"] = (-_num(labs.loc[lsel, "valuenum"])).astype(str).replace("nan", "")
        labs.loc[lsel, "itemid"] = "50800"
    _write(labs.drop(columns=["last_pred"]), dst / "LABEVENTS.csv.gz")


@pytest.mark.parametrize("after", [True, False], ids=["after-T-changes-nothing", "before-T-control-changes"])
def test_events_after_prediction_time_change_nothing(demo_dir, demo_features, tmp_path, after):
    _perturbed_copy(demo_dir, tmp_path / "src", after)
    res = extract(tmp_path / "src", tmp_path / "out")
    same = [(demo_features.out_dir / f).read_bytes() == (res.out_dir / f).read_bytes() for f in FEATURES]
    if after:
        assert all(same), dict(zip(FEATURES, same))
    else:
        assert not all(same)
