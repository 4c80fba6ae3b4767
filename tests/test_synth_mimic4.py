"""One synthetic world, two layouts: `synth --layout mimic-iv` writes the world of `synth` (MIMIC-III)
in MIMIC-IV's tables. Both extractions give the same cohort, labels, random split and events per
admission, except where MIMIC-IV records what is known when differently: labs count once stored
(storetime), prescriptions at their real start time; both checked against counts from the raw files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import cli
from pipeline.data.mimic.extraction import ExtractConfig, SplitMode, extract
from pipeline.data.mimic.synth import SynthConfig, generate

PATIENTS, SEED = 300, 11
WINDOW = pd.Timedelta(days=30)
T = pd.Timedelta(hours=24)


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    """(MIMIC-III directory, MIMIC-IV directory) of one world."""
    root = tmp_path_factory.mktemp("worlds")
    generate(root / "iii", PATIENTS, SEED, SynthConfig(density=0.05))
    generate(root / "iv", PATIENTS, SEED, SynthConfig(density=0.05), layout="mimic-iv")
    return root / "iii", root / "iv"


def _keep(src: Path, dst: Path, tables: set[str]) -> Path:
    """A copy of a source with only the admission tables and ``tables`` (lowercase names)."""
    base = {"patients", "admissions", "icustays"} | tables
    for path in src.rglob("*.csv.gz"):
        if path.name.split(".")[0].lower() in base and "_truth" not in path.parts:
            target = dst / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, target)
    return dst


def _frame(res) -> pd.DataFrame:
    feats = pd.concat([pd.read_parquet(res.out_dir / f"{s}.parquet").assign(split=s) for s in ("train", "val", "test")])
    return feats.merge(pd.read_csv(res.link_file), on="key").set_index("hadm_id").sort_index()


@pytest.fixture(scope="module")
def both(worlds, tmp_path_factory):
    iii, iv = worlds
    out = tmp_path_factory.mktemp("both")
    return extract(iii, out / "iii"), extract(iv, out / "iv")


def test_the_mimic4_layout_is_mimic4s(worlds):
    _, iv = worlds
    assert sorted(p.name for p in (iv / "hosp").iterdir())[:3] == ["admissions.csv.gz", "d_labitems.csv.gz",
                                                                   "diagnoses_icd.csv.gz"]
    pat = pd.read_csv(iv / "hosp" / "patients.csv.gz")
    assert list(pat.columns) == ["subject_id", "gender", "anchor_age", "anchor_year", "anchor_year_group", "dod"]
    assert pat["anchor_age"].max() == 91 and (pat["anchor_age"] <= 89).mean() > 0.8
    assert set(pat["anchor_year_group"]) <= {"1999 - 2001", "2002 - 2004", "2005 - 2007", "2008 - 2010", "2011 - 2013"}
    assert pd.read_csv(iv / "hosp" / "labevents.csv.gz", usecols=["labevent_id"])["labevent_id"].is_unique
    chart = pd.read_csv(iv / "icu" / "chartevents.csv.gz", nrows=2000)
    assert "row_id" not in chart.columns and (chart["itemid"] >= 220000).mean() > 0.5


def test_same_cohort_labels_and_random_split(both, worlds):
    a, b = both
    fa, fb = _frame(a), _frame(b)
    assert fa.index.tolist() == fb.index.tolist() and len(fa) > 200
    assert (fa["label"] == fb["label"]).all() and (fa["split"] == fb["split"]).all()
    assert a.manifest["cohort"]["admissions"] == b.manifest["cohort"]["admissions"]
    assert a.manifest["cohort"]["positives"] == b.manifest["cohort"]["positives"]
    # what differs: MIMIC-IV has no NEWBORN admission type (the world's newborns are aged 0 there),
    # ages are whole years from anchor_age, and every ICU stay is MetaVision
    ex3, ex4 = a.manifest["tables"]["admissions"]["excluded_by"], b.manifest["tables"]["admissions"]["excluded_by"]
    assert ex4["under 18"] == ex3["under 18"] + ex3["newborn"] and "newborn" not in ex4
    assert (np.abs(fa["age"] - fb["age"]) < 2.0).all()  # anchor_age + calendar years: within 2 years
    assert set(fb["icu_system"]) == {"metavision"} and set(fa["icu_system"]) == {"carevue", "metavision"}
    truth = pd.read_csv(worlds[0] / "_truth" / "truth.csv.gz")
    assert truth.equals(pd.read_csv(worlds[1] / "_truth" / "truth.csv.gz"))


def test_same_events_per_admission_where_both_record_them_alike(worlds, tmp_path):
    """Chart, input, output, procedure, microbiology and datetime events: the same count per admission
    (MIMIC-III's ERROR = 1 chart rows are quarantined there; MIMIC-IV does not release them)."""
    iii, iv = worlds
    tables = {"chartevents", "inputevents_cv", "inputevents_mv", "inputevents", "outputevents", "procedureevents_mv",
              "procedureevents", "microbiologyevents", "datetimeevents"}
    a = extract(_keep(iii, tmp_path / "iii", tables), tmp_path / "fa")
    b = extract(_keep(iv, tmp_path / "iv", tables), tmp_path / "fb")
    fa, fb = _frame(a), _frame(b)
    assert fa["n_events"].sum() > 5000 and (fa["n_events"] == fb["n_events"]).all()
    assert a.manifest["tables"]["chartevents"]["quarantine_reasons"] == {
        "ERROR flag set": a.manifest["tables"]["chartevents"]["quarantined"]}
    assert b.manifest["tables"]["chartevents"]["quarantined"] == 0
    assert a.manifest["tables"]["chartevents"]["used"] == b.manifest["tables"]["chartevents"]["used"]


def _cohort(iii: Path, res) -> pd.DataFrame:
    adm = pd.read_csv(iii / "ADMISSIONS.csv.gz", parse_dates=["ADMITTIME"])
    adm = adm[adm["HADM_ID"].isin(_frame(res).index)]
    return adm.assign(pred=adm["ADMITTIME"] + T)[["SUBJECT_ID", "HADM_ID", "pred"]]


def test_labs_differ_by_their_store_time_only(worlds, tmp_path):
    """Labs per admission, from the raw files: MIMIC-III counts every lab of the patient drawn in the
    window; MIMIC-IV only those also stored before T (never a lab without a store time)."""
    iii, iv = worlds
    a = extract(_keep(iii, tmp_path / "iii", {"labevents"}), tmp_path / "fa")
    b = extract(_keep(iv, tmp_path / "iv", {"labevents"}), tmp_path / "fb")
    labs = pd.read_csv(iv / "hosp" / "labevents.csv.gz", parse_dates=["charttime", "storetime"],
                       usecols=["subject_id", "charttime", "storetime"])
    pairs = _cohort(iii, a).merge(labs, left_on="SUBJECT_ID", right_on="subject_id")
    window = (pairs["charttime"] < pairs["pred"]) & (pairs["charttime"] >= pairs["pred"] - WINDOW)
    stored = pairs["storetime"].notna() & (pairs["storetime"] < pairs["pred"])
    expect3 = window.groupby(pairs["HADM_ID"]).sum()
    expect4 = (window & stored).groupby(pairs["HADM_ID"]).sum()
    fa, fb = _frame(a), _frame(b)
    assert (fa["n_events"] == expect3.reindex(fa.index, fill_value=0)).all()
    assert (fb["n_events"] == expect4.reindex(fb.index, fill_value=0)).all()
    assert (fb["n_events"] <= fa["n_events"]).all() and (fb["n_events"] < fa["n_events"]).sum() > 5


def test_prescriptions_differ_by_their_start_time_only(worlds, tmp_path):
    """MIMIC-III knows a prescription at the end of its start day; MIMIC-IV at its start time."""
    iii, iv = worlds
    a = extract(_keep(iii, tmp_path / "iii", {"prescriptions"}), tmp_path / "fa")
    b = extract(_keep(iv, tmp_path / "iv", {"prescriptions"}), tmp_path / "fb")
    cohort = _cohort(iii, a)
    counts = []
    for path, col, shift in ((iii / "PRESCRIPTIONS.csv.gz", "STARTDATE", pd.Timedelta(days=1)),
                             (iv / "hosp" / "prescriptions.csv.gz", "starttime", pd.Timedelta(0))):
        rx = pd.read_csv(path, parse_dates=[col])
        rx.columns = rx.columns.str.upper()
        rows = cohort.merge(rx, on="HADM_ID")
        known = rows[col.upper()] + shift
        inside = (known < rows["pred"]) & (known >= rows["pred"] - WINDOW)
        counts.append(inside.groupby(rows["HADM_ID"]).sum())
    fa, fb = _frame(a), _frame(b)
    assert (fa["n_events"] == counts[0].reindex(fa.index, fill_value=0)).all()
    assert (fb["n_events"] == counts[1].reindex(fb.index, fill_value=0)).all()
    assert (fb["n_events"] >= fa["n_events"]).all() and (fb["n_events"] > fa["n_events"]).sum() > 20


def test_era_split_uses_each_releases_own_era(worlds, tmp_path):
    iii, iv = worlds
    a = extract(iii, tmp_path / "a", ExtractConfig(split=SplitMode.era))
    b = extract(iv, tmp_path / "b", ExtractConfig(split=SplitMode.era))
    assert set(_frame(a).loc[lambda f: f["split"] == "test", "icu_system"]) == {"metavision"}
    groups = b.manifest["cohort"]["anchor_year_group"]
    assert set(groups[max(groups)]) == {"test"} and all("test" not in v for k, v in groups.items() if k != max(groups))


def test_cli_synth_layout(tmp_path):
    result = CliRunner().invoke(cli.app,
                                ["synth", "--out", str(tmp_path / "w"), "--patients", "20", "--density", "0.02",
                                          "--layout", "mimic-iv"])
    assert result.exit_code == 0, result.output
    assert "synthetic MIMIC-IV written" in result.output and (tmp_path / "w" / "icu" / "chartevents.csv.gz").exists()
    shutil.rmtree(tmp_path / "w")


def test_cli_synth_mimic4_proportions_in_parallel(tmp_path):
    """--proportions mimic-iv: no newborns or children, about 17% of admissions with an ICU stay; --workers 2
    writes the same bytes as one process."""
    args = ["synth", "--patients", "200", "--density", "0.02", "--layout", "mimic-iv", "--proportions", "mimic-iv"]
    for out, workers in (("one", "1"), ("two", "2")):
        result = CliRunner().invoke(cli.app, [*args, "--out", str(tmp_path / out), "--workers", workers])
        assert result.exit_code == 0, result.output
    for path in sorted((tmp_path / "one").rglob("*.csv.gz")):
        assert path.read_bytes() == (tmp_path / "two" / path.relative_to(tmp_path / "one")).read_bytes(), path
    adm = pd.read_csv(tmp_path / "one" / "hosp" / "admissions.csv.gz")
    stays = pd.read_csv(tmp_path / "one" / "icu" / "icustays.csv.gz")
    patients = pd.read_csv(tmp_path / "one" / "hosp" / "patients.csv.gz")
    assert patients.anchor_age.min() >= 18
    assert 0.08 < stays.hadm_id.nunique() / len(adm) < 0.30


@pytest.mark.slow
def test_compare_table_shows_the_mimic4_era_split_beside_the_random_split(tmp_path):
    """benchmark-models on a generated MIMIC-IV world: the era split (anchor_year_group) and the random
    split side by side in the compare table."""
    import uuid

    from pipeline.workflows import grid

    cfg = grid.GridConfig(seeds=(0,), variants=("deterministic",), split_modes=("random", "era"), max_steps=6,
                          eval_every=3, samples=2, jobs=2, patients=400, density=0.05, layout="mimic-iv",
                          experiment=f"grid-iv-{uuid.uuid4().hex[:8]}",
                          train_overrides={"score_samples": 2, "batch_size": 16},
                          model_overrides={"lstm_hidden": 8, "embedding_dim": 8, "dense_units": 8, "components": 2})
    result = grid.run_grid(tmp_path / "mimic", tmp_path / "out", cfg)
    assert len(result.run_ids) == 2 and (tmp_path / "mimic" / "hosp" / "admissions.csv.gz").exists()
    md = (tmp_path / "out" / "compare.md").read_text()
    # two feature sets (issue 36: a feature set is its content), each a section of its own, MIMIC-IV from the source
    assert md.count("## Feature set: MIMIC-IV from csv:") == 2
    assert "| random | deterministic | 1 |" in md and "| era | deterministic | 1 |" in md
    from pipeline.reports.compare import TRUE_RISK  # the true-risk reference holds on this layout too

    assert f"| random | {TRUE_RISK} |" in md and f"| era | {TRUE_RISK} |" in md
    import json

    era = json.loads((tmp_path / "out" / "features-era" / "manifest.json").read_text())
    assert era["release"] == "mimic-iv" and len(era["cohort"]["anchor_year_group"]) >= 2
