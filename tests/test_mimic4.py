"""MIMIC-IV beside MIMIC-III, on the real MIMIC-IV demo (v2.2, chartevents absent): layout detection,
the cohort checked against an independent computation from the raw tables, no use of anything stored
at or after the prediction time, the privacy scan, PostgreSQL parity with mimic-code's DDL, the era
split by anchor_year_group, bad input, and a model's release (training, evaluation, scoring)."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import privacy_scan as privacy
from helpers.raw_ids import raw_ids_of
from helpers.runs import trained_run
from typer.testing import CliRunner

import cli
from pipeline.core.errors import ConfigError
from pipeline.data.mimic.extraction import ExtractConfig, SplitMode, extract
from pipeline.data.mimic.sources import SourceError

ROOT = Path(__file__).resolve().parents[1]
FEATURES = ["train.parquet", "val.parquet", "test.parquet", "vocab.json"]
HOURS = 24.0

pytestmark = pytest.mark.usefixtures("tracking_store")  # the trained runs go to this session's store


def iv_demo_path() -> Path:
    env = os.environ.get("MIMIC4_DEMO_DIR")
    path = Path(env) if env else ROOT.parent / "shared" / "mimic-iv-demo"
    if not (path / "hosp" / "admissions.csv.gz").exists():
        pytest.fail(f"MIMIC-IV demo not found at {path} (set MIMIC4_DEMO_DIR)", pytrace=False)
    return path


@pytest.fixture(scope="module")
def iv_demo() -> Path:
    return iv_demo_path()


@pytest.fixture(scope="module")
def iv_features(iv_demo, tmp_path_factory):
    return extract(iv_demo, tmp_path_factory.mktemp("iv_features"))


def _read(path: Path, times: list[str] = ()) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for col in times:
        frame[col] = pd.to_datetime(frame[col].replace("", None))
    return frame


def _features(out: Path) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(out / f"{s}.parquet").assign(split=s) for s in ("train", "val", "test")])


def _linked(res) -> pd.DataFrame:
    """Features with the raw HADM_ID (the data owner's link file; the tests only)."""
    return _features(res.out_dir).merge(pd.read_csv(res.link_file), on="key")


# ---------------------------------------------------------------------------- layout and cohort


def test_layout_is_detected_and_the_release_recorded(iv_features, demo_features):
    assert iv_features.manifest["release"] == "mimic-iv" and demo_features.manifest["release"] == "mimic-iii"
    tables = iv_features.manifest["source"]["tables"]
    assert (tables["admissions"].endswith("hosp/admissions.csv.gz")
            and tables["icustays"].endswith("icu/icustays.csv.gz"))
    assert "chartevents" not in tables and "inputevents" in tables and "inputevents_mv" not in tables


def test_missing_chartevents_is_a_warning_naming_it(iv_demo, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    extract(iv_demo, tmp_path / "f")
    assert f"optional table CHARTEVENTS not found in {iv_demo / 'icu'}" in caplog.text


def _independent_cohort(demo: Path) -> pd.DataFrame:
    """The cohort criteria computed from the raw CSV files with pandas, not by the pipeline's SQL."""
    adm = _read(demo / "hosp" / "admissions.csv.gz", ["admittime", "dischtime", "deathtime"])
    pat = _read(demo / "hosp" / "patients.csv.gz")
    adm = adm.merge(pat[["subject_id", "anchor_age", "anchor_year"]], on="subject_id", how="left")
    age = adm["anchor_age"].astype(int) + adm["admittime"].dt.year - adm["anchor_year"].astype(int)
    adm["age"] = np.where((adm["anchor_age"].astype(int) > 89) | (age > 89), 91, age)
    adm["pred"] = adm["admittime"] + pd.Timedelta(hours=HOURS)
    flag = adm["hospital_expire_flag"] == "1"
    death = adm["deathtime"].where(adm["deathtime"].notna(), adm["dischtime"].where(flag))
    adm["died"] = death.notna()
    adm["why"] = np.select(
        [adm["age"] < 18, adm["died"] & (death <= adm["pred"]), adm["dischtime"] <= adm["pred"]],
        ["under 18", "died before prediction time", "discharged before prediction time"], default="")
    return adm


def test_demo_cohort_and_exclusions_match_an_independent_computation(iv_demo, iv_features):
    ref = _independent_cohort(iv_demo)
    m = iv_features.manifest
    acc = m["tables"]["admissions"]
    assert acc["rows_read"] == len(ref) == 275 and acc["quarantined"] == 0
    expected = {k: int(v) for k, v in ref.loc[ref["why"] != "", "why"].value_counts().items()}
    assert acc["excluded_by"] == expected
    cohort = ref[ref["why"] == ""]
    assert m["cohort"]["admissions"] == len(cohort) == acc["used"]
    assert m["cohort"]["positives"] == int(cohort["died"].sum())  # in-hospital deaths after T
    feats = _linked(iv_features)
    assert sorted(feats["hadm_id"].astype(str)) == sorted(cohort["hadm_id"])
    labels = feats.set_index(feats["hadm_id"].astype(str))["label"]
    assert (labels[cohort["hadm_id"]].to_numpy() == cohort["died"].astype(int).to_numpy()).all()
    ages = feats.set_index(feats["hadm_id"].astype(str))["age"]
    assert np.allclose(ages[cohort["hadm_id"]].to_numpy(), np.minimum(cohort["age"], 90).to_numpy())
    icu = set(_read(iv_demo / "icu" / "icustays.csv.gz")["hadm_id"])
    assert m["cohort"]["icu_system"] == {"metavision": int(cohort["hadm_id"].isin(icu).sum()),
                                         "none": int((~cohort["hadm_id"].isin(icu)).sum())}


def test_accounting_adds_up_and_labs_wait_for_their_store_time(iv_features, iv_demo):
    tables = iv_features.manifest["tables"]
    for name, acc in tables.items():
        assert acc["rows_read"] == acc["used"] + acc["quarantined"] + acc["outside_window"], name
    assert tables["labevents"]["rows_read"] == 107_727 and tables["inputevents"]["rows_read"] == 20_404
    assert tables["labevents"]["events_used"] >= tables["labevents"]["used"]  # a lab serves every admission in window


# ---------------------------------------------------------------------------- no information from at or after T


def _cohort_times(demo: Path) -> pd.DataFrame:
    ref = _independent_cohort(demo)
    return ref.loc[ref["why"] == "", ["subject_id", "hadm_id", "admittime", "pred"]]


def _never_used_labs(demo: Path) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    """Labs (all columns as strings) and two masks: rows no cohort admission may use (not stored
    before T for any admission whose 30-day window holds them), and among those, labs drawn before
    some admission's T but stored at or after it (what MIMIC-III would have counted)."""
    labs = _read(demo / "hosp" / "labevents.csv.gz", ["charttime", "storetime"])
    cohort = _cohort_times(demo)
    pairs = labs.reset_index().merge(cohort[["subject_id", "pred"]], on="subject_id")
    in_window = (pairs["charttime"] < pairs["pred"]) & (pairs["charttime"] >= pairs["pred"] - pd.Timedelta(days=30))
    stored = pairs["storetime"].notna() & (pairs["storetime"] < pairs["pred"])
    used = pairs.loc[in_window & stored, "index"].unique()
    late = pairs.loc[in_window & ~stored, "index"].unique()
    never = ~labs.index.isin(used)
    return labs, pd.Series(never, labs.index), pd.Series(labs.index.isin(late) & never, labs.index)


def test_labs_stored_at_or_after_T_change_nothing(iv_demo, iv_features, tmp_path):
    """Every lab no admission may use (drawn after T, or stored at or after it) is changed: other
    item, other value, later store time; the features stay byte-identical. Some of those were drawn
    before T (resulted after it): MIMIC-III, without a store time, would have counted them."""
    labs, never, late = _never_used_labs(iv_demo)
    assert late.sum() > 100 and never.sum() > 10_000
    copy = tmp_path / "demo"
    shutil.copytree(iv_demo, copy)
    changed = labs.copy()
    changed.loc[never, "itemid"] = "50800"
    changed.loc[never, "value"] = "CHANGED"
    changed.loc[never, "valuenum"] = "12345"
    changed.loc[never, "storetime"] = changed.loc[never, "storetime"] + pd.Timedelta(hours=3)
    for col in ("charttime", "storetime"):
        changed[col] = changed[col].dt.strftime("%Y-%m-%d %H:%M:%S").fillna("")
    changed.to_csv(copy / "hosp" / "labevents.csv.gz", index=False)
    res = extract(copy, tmp_path / "f")
    for name in FEATURES:
        assert (res.out_dir / name).read_bytes() == (iv_features.out_dir / name).read_bytes(), name
    # positive control: the same change to the labs that are used changes the features
    changed.loc[~never, "valuenum"] = "12345"
    changed.to_csv(copy / "hosp" / "labevents.csv.gz", index=False)
    control = extract(copy, tmp_path / "g")
    assert (control.out_dir / "vocab.json").read_bytes() != (iv_features.out_dir / "vocab.json").read_bytes()


def test_no_bag_at_or_after_the_prediction_time(iv_features):
    feats = _features(iv_features.out_dir)
    starts = np.concatenate([np.asarray(h, float) for h in feats["bag_hours"] if len(h)])
    assert len(starts) > 1000 and starts.max() + 1 <= HOURS  # hourly bags [h, h + 1) end by T


def test_privacy_scan_finds_no_raw_id_or_date(iv_demo, iv_features):
    ids = raw_ids_of(iv_demo)
    assert len(ids) > 100 + 275 + 140 - 5 and any(len(i) == 8 for i in ids)  # subject, hadm and stay ids
    findings = privacy.scan([iv_features.out_dir], ids)
    assert findings == [], "\n".join(map(str, findings[:20]))


# ---------------------------------------------------------------------------- PostgreSQL


@pytest.fixture(scope="module")
def iv_pg(pg_server, iv_demo):  # noqa: F811
    """The MIMIC-IV demo loaded with mimic-code's MIMIC-IV DDL (schemas mimiciv_hosp, mimiciv_icu)."""
    from pipeline.data.mimic.sources.pgload import load_mimic_csv

    dsn = pg_server.create_database("mimic4_demo")
    counts = load_mimic_csv(dsn, iv_demo)
    return dsn, counts


@pytest.mark.postgres
def test_postgres_parity_for_mimic4(iv_pg, iv_features, tmp_path):
    import psycopg

    dsn, counts = iv_pg
    assert counts["admissions"] == 275 and counts["labevents"] == 107_727 and "chartevents" not in counts
    with psycopg.connect(dsn) as conn:  # mimic-code's layout: two schemas, its primary keys
        keys = dict(conn.execute("SELECT table_schema || '.' || table_name, constraint_name FROM "
                                 "information_schema.table_constraints "
                                 "WHERE constraint_type = 'PRIMARY KEY'").fetchall())
    assert keys["mimiciv_hosp.labevents"] == "labevents_pk" and keys["mimiciv_icu.icustays"] == "icustays_pk"
    res = extract(dsn, tmp_path / "pg")  # the default schema finds MIMIC-IV's schemas
    assert (res.manifest["release"] == "mimic-iv"
            and "schema=mimiciv_hosp,mimiciv_icu" in res.manifest["source"]["location"])
    for name in FEATURES + ["quarantine/admissions.parquet", "quarantine/prescriptions.parquet"]:
        assert (res.out_dir / name).read_bytes() == (iv_features.out_dir / name).read_bytes(), name
    assert res.manifest["tables"] == iv_features.manifest["tables"]
    assert (res.manifest["cohort"] == iv_features.manifest["cohort"]
            and res.manifest["splits"] == iv_features.manifest["splits"])
    same = extract(dsn, tmp_path / "pg2", schema="mimiciv")  # the prefix, as --schema gives it
    assert (same.out_dir / "train.parquet").read_bytes() == (iv_features.out_dir / "train.parquet").read_bytes()


@pytest.mark.postgres
def test_postgres_schema_errors_name_the_schemas(iv_pg, tmp_path):
    dsn, _ = iv_pg
    with pytest.raises(SourceError, match="schema 'nope' has no MIMIC-III tables, and there are no MIMIC-IV schemas"):
        extract(dsn, tmp_path / "f", schema="nope")
    with pytest.raises(SourceError, match="mimiciv_hosp has MIMIC-IV tables but other_icu has none"):
        extract(dsn, tmp_path / "f", schema="mimiciv_hosp,other_icu")


# ---------------------------------------------------------------------------- era split


def test_era_split_tests_on_the_latest_anchor_year_group(iv_demo, tmp_path):
    res = extract(iv_demo, tmp_path / "era", ExtractConfig(split=SplitMode.era))
    feats = _linked(res)
    adm = _read(iv_demo / "hosp" / "admissions.csv.gz")[["subject_id", "hadm_id"]].astype(int)
    group = _read(iv_demo / "hosp" / "patients.csv.gz").astype({"subject_id": int})[["subject_id", "anchor_year_group"]]
    feats = feats.merge(adm, on="hadm_id").merge(group, on="subject_id")
    assert set(feats.loc[feats["split"] == "test", "anchor_year_group"]) == {"2014 - 2016"}
    assert set(feats.loc[feats["split"] != "test", "anchor_year_group"]) == {"2011 - 2013"}
    assert (feats["split"] != "test").sum() > 50 and set(feats["split"]) == {"train", "val", "test"}
    by_group = res.manifest["cohort"]["anchor_year_group"]
    assert set(by_group["2014 - 2016"]) == {"test"} and set(by_group["2011 - 2013"]) == {"train", "val"}
    assert res.manifest["config"]["split"] == "era"


def test_era_groups_are_a_parameter(iv_demo, tmp_path):
    res = extract(iv_demo, tmp_path / "rev",
                  ExtractConfig(split=SplitMode.era, era_groups=("2014 - 2016", "2011 - 2013")))
    by_group = res.manifest["cohort"]["anchor_year_group"]
    assert (set(by_group["2011 - 2013"]) == {"test"}
            and res.manifest["config"]["era_groups"] == ["2014 - 2016", "2011 - 2013"])
    with pytest.raises(ConfigError, match=r"era_groups \['2020 - 2022'\] are not anchor_year_groups"):
        extract(iv_demo, tmp_path / "bad",
                ExtractConfig(split=SplitMode.era, era_groups=("2011 - 2013", "2020 - 2022")))
    with pytest.raises(ConfigError, match="needs at least two anchor_year_groups"):
        extract(iv_demo, tmp_path / "one", ExtractConfig(split=SplitMode.era, era_groups=("2011 - 2013",)))


# ---------------------------------------------------------------------------- bad input


def _cli_error(source: Path, out: Path) -> str:
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(source), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1, result.output
    return result.output


def _small_iv(iv_demo: Path, dst: Path) -> Path:
    for module, names in (("hosp", ["patients", "admissions", "prescriptions"]), ("icu", ["icustays"])):
        (dst / module).mkdir(parents=True)
        for name in names:
            shutil.copy(iv_demo / module / f"{name}.csv.gz", dst / module / f"{name}.csv.gz")
    return dst


def test_hosp_without_icu_is_one_clear_line(iv_demo, tmp_path):
    src = _small_iv(iv_demo, tmp_path / "src")
    shutil.rmtree(src / "icu")
    assert "found hosp/ but no icu/: a MIMIC-IV source needs both modules" in _cli_error(src, tmp_path / "o")


@pytest.mark.parametrize("where", ["icu/INPUTEVENTS_MV.csv.gz", "ADMISSIONS.csv.gz", "hosp/patients.csv.gz"])
def test_a_mimic3_table_in_a_mimic4_folder_is_one_clear_line(iv_demo, demo_dir, tmp_path, where):
    src = _small_iv(iv_demo, tmp_path / "src")
    name = Path(where).name.split(".")[0].upper()
    shutil.copy(demo_dir / f"{name}.csv.gz", src / where)
    out = _cli_error(src, tmp_path / "o")
    assert str(src / where) in out and "MIMIC-III" in out and "MIMIC-IV" in out


def test_missing_anchor_year_is_one_clear_line_and_an_empty_one_quarantined(iv_demo, tmp_path):
    src = _small_iv(iv_demo, tmp_path / "src")
    pat = _read(iv_demo / "hosp" / "patients.csv.gz")
    pat.drop(columns=["anchor_year"]).to_csv(src / "hosp" / "patients.csv.gz", index=False)
    assert "patients.csv.gz: table PATIENTS has no column ANCHOR_YEAR (required)" in _cli_error(src, tmp_path / "o")
    first = pat["subject_id"].iloc[0]
    pat.loc[0, "anchor_year"] = ""
    pat.to_csv(src / "hosp" / "patients.csv.gz", index=False)
    res = extract(src, tmp_path / "q")
    n_adm = int((_read(iv_demo / "hosp" / "admissions.csv.gz")["subject_id"] == first).sum())
    assert res.manifest["tables"]["admissions"]["quarantined"] == n_adm > 0
    reasons = pd.read_parquet(res.out_dir / "quarantine" / "admissions.parquet")["reason"]
    assert set(reasons) == {"missing ANCHOR_YEAR"}


# ---------------------------------------------------------------------------- a model's release


@pytest.fixture(scope="module")
def iv_run(tmp_path_factory, iv_features):
    return trained_run(tmp_path_factory, iv_features.out_dir)


@pytest.fixture(scope="module")
def iii_run(tmp_path_factory, demo_features):
    return trained_run(tmp_path_factory, demo_features.out_dir)


def test_train_evaluate_score_on_the_mimic4_demo(iv_run, iv_features, iv_demo, tmp_path):
    import mlflow
    from pipeline.runs.load import load_run
    from pipeline.runs.store import client
    from pipeline.serving import score as sc
    from pipeline.workflows.evaluate import EvalConfig, evaluate_run

    assert client().get_run(iv_run).data.tags["release"] == "mimic-iv"
    assert load_run(iv_run, tmp_path / "m").manifest["release"] == "mimic-iv"
    local = Path(mlflow.artifacts.download_artifacts(f"runs:/{iv_run}/model", dst_path=str(tmp_path / "dir")))
    assert load_run(str(local)).manifest["release"] == "mimic-iv"  # a model directory records it too
    report = evaluate_run(iv_run, "test", EvalConfig(samples=2, n_bootstrap=10, threads=1, log_to_run=False),
                          out_dir=tmp_path / "eval").report
    assert report["n"] == iv_features.manifest["splits"]["test"]["admissions"] and 0 < report["nll"] < 5
    cfg = sc.ScoreConfig(samples=2, batch_size=16, threads=1)
    s = sc.score(iv_run, tmp_path / "features.parquet", data=iv_features.out_dir / "test.parquet", cfg=cfg)
    assert s.admissions == report["n"] and s.oov_share is None
    s = sc.score(iv_run, tmp_path / "census.parquet", source=str(iv_demo), cfg=cfg)
    assert s.admissions > 0 and s.oov_share is None
    assert not privacy.scan([tmp_path / "features.parquet", tmp_path / "census.parquet"], raw_ids_of(iv_demo))


def test_scoring_across_releases_is_refused_unless_asked(iii_run, iv_run, iv_features, iv_demo, demo_dir, tmp_path):
    from pipeline.serving import score as sc
    from pipeline.serving.release import CrossReleaseError

    cfg = sc.ScoreConfig(samples=2, batch_size=16, threads=1)
    with pytest.raises(CrossReleaseError, match="is MIMIC-IV but the model was trained on MIMIC-III: refused"):
        sc.score(iii_run, tmp_path / "a.parquet", data=iv_features.out_dir / "test.parquet", cfg=cfg)
    # asked to cross, another release's features still cannot be read (their own vocabulary): the way that works
    with pytest.raises(CrossReleaseError, match=r"score their MIMIC source instead, .*\(--source DIR --cross-release"):
        sc.score(iii_run, tmp_path / "a.parquet", data=iv_features.out_dir / "test.parquet", cfg=cfg,
                 cross_release=True)
    # one error for every way of crossing releases: a features file, a census source (a SourceError too)
    with pytest.raises(CrossReleaseError, match="the source is MIMIC-IV but MIMIC-III was expected") as info:
        sc.score(iii_run, tmp_path / "b.parquet", source=str(iv_demo), cfg=cfg)
    assert isinstance(info.value, SourceError) and (info.value.expected, info.value.found) == ("mimic-iii", "mimic-iv")
    with pytest.raises(CrossReleaseError, match="the source is MIMIC-III but MIMIC-IV was expected"):
        sc.score(iv_run, tmp_path / "c.parquet", source=str(demo_dir), cfg=cfg)
    assert not (tmp_path / "a.parquet").exists() and not (tmp_path / "b.parquet").exists()
    s = sc.score(iii_run, tmp_path / "d.parquet", source=str(iv_demo), cfg=cfg, cross_release=True)
    assert s.admissions > 0 and 0.0 < s.oov_share < 1.0  # lab and MetaVision itemids are shared; the rest is OOV
    from pipeline.data.mimic.extraction.tokens import (
        Vocab,  # the share recounted on a census extracted with the III vocabulary
    )
    from pipeline.runs.load import load_run

    vocab = load_run(iii_run, tmp_path / "m").vocab
    census = extract(iv_demo, tmp_path / "census", vocab=Vocab.from_json(vocab))
    ids = np.concatenate([np.concatenate(b) for b in pd.read_parquet(census.files["cohort"])["bags"] if len(b)])
    oov = {i for i, t in enumerate(vocab["tokens"]) if t.endswith(":<oov>")}
    assert s.oov_share == pytest.approx(np.isin(ids, list(oov)).mean(), rel=1e-12)
    result = CliRunner().invoke(cli.app, ["score", "--model", iii_run, "--out", str(tmp_path / "e.parquet"),
                                          "--source", str(iv_demo), "--samples", "2"])
    assert result.exit_code == 2 and "refused" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli.app, ["score", "--model", iii_run, "--out", str(tmp_path / "f.parquet"),
                                          "--source", str(iv_demo), "--samples", "2", "--cross-release"])
    assert result.exit_code == 0 and f"{s.oov_share:.1%} of the bag tokens are out of the model's vocabulary" \
        in result.output
