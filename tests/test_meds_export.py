"""MEDS out (pipeline.data.meds.export, issue 37): both demos exported as MEDS, every file checked by `meds`'
validators, then extracted as a MEDS source with the shipped task config (no flag: chosen by dataset.json):
the same cohort, labels and splits as the direct extraction of the same demo. Where the window conventions
differ (docs/meds.md) the features do too: a MEDS label sees every event of its subject in the lookback
(the direct extraction links only labs by patient), the events at exactly T, and the admission, ICU and
birth events, so it has at least the direct extraction's events."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from helpers.paths import ROOT, demo_path
from helpers.privacy_scan import scan

from pipeline.data.meds.export import export_meds
from pipeline.data.meds.flow import extract_meds
from pipeline.data.meds.layout import MedsError
from pipeline.data.mimic import deid
from pipeline.data.mimic.extraction import extract


def _demo(release: str) -> Path:
    """The demos where the other tests find them (helpers.paths; MIMIC-IV: $MIMIC4_DEMO_DIR or shared/)."""
    if release == "mimic-iii":
        return demo_path()
    env = os.environ.get("MIMIC4_DEMO_DIR")
    return Path(env) if env else ROOT.parent / "shared" / "mimic-iv-demo"


DEMOS = ("mimic-iii", "mimic-iv", "synthetic")  # synthetic: conftest's synth_features world (MIMIC-III layout)
COHORT = {"mimic-iii": (117, 31), "mimic-iv": (245, None), "synthetic": (None, None)}  # the direct extraction's
# admissions and deaths, where known in advance

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=DEMOS)
def round_trip(request, tmp_path_factory):
    demo = (request.getfixturevalue("synth_features")[0] / "mimic" if request.param == "synthetic"
            else _demo(request.param))
    base = tmp_path_factory.mktemp(request.param)
    direct = extract(demo, base / "direct")
    exported = export_meds(demo, base / "meds")
    meds = extract_meds(base / "meds", base / "features")
    return request.param, demo, base, direct, exported, meds


def _admissions(demo: Path) -> pd.DataFrame:
    path = demo / "ADMISSIONS.csv.gz" if (demo / "ADMISSIONS.csv.gz").exists() else demo / "hosp" / "admissions.csv.gz"
    adm = pd.read_csv(path)
    adm.columns = [c.lower() for c in adm.columns]
    return adm


def test_every_exported_file_follows_meds(round_trip):
    from meds import CodeMetadataSchema, DataSchema, DatasetMetadataSchema, SubjectSplitSchema

    _, _, base, _, exported, _ = round_trip
    out = base / "meds"
    shards = sorted((out / "data").glob("*.parquet"))
    assert shards and exported.manifest["shards"] == len(shards)
    seen = set()
    for f in shards:
        table = pq.read_table(f)
        DataSchema.validate(table)
        frame = table.select(["subject_id", "time"]).to_pandas()
        assert frame["subject_id"].is_monotonic_increasing
        for _, g in frame.groupby("subject_id"):  # static rows first, then sorted by time
            t = g["time"]
            assert not t.isna().iloc[t.isna().sum():].any() and t.dropna().is_monotonic_increasing
        assert not seen & set(frame["subject_id"])
        seen |= set(frame["subject_id"])
    CodeMetadataSchema.validate(pq.read_table(out / "metadata" / "codes.parquet"))
    SubjectSplitSchema.validate(pq.read_table(out / "metadata" / "subject_splits.parquet"))
    import json

    DatasetMetadataSchema.validate(json.loads((out / "metadata" / "dataset.json").read_text()))
    codes = pq.read_table(out / "metadata" / "codes.parquet").to_pandas()
    assert set(codes["code"]) >= set(pq.read_table(shards[0], columns=["code"]).column("code").to_pylist())
    assert codes["description"].notna().mean() > 0.9  # from D_ITEMS / D_LABITEMS
    # the data owner's: nothing readable by others
    assert all(p.stat().st_mode & 0o077 == 0 for p in [out, *out.rglob("*")])
    # every table adds up: rows read = exported + quarantined
    for name, t in exported.manifest["tables"].items():
        assert t["rows_read"] == t["exported"] + t["quarantined"], name
        assert pq.read_table(out / "quarantine" / f"{name}.parquet").num_rows == t["quarantined"]


def test_export_then_extract_gives_the_direct_cohort_and_labels(round_trip):
    release, demo, base, direct, _, meds = round_trip
    link = deid.read_link_file(base / "direct" / "_private" / "link.csv")
    adm = _admissions(demo)[["hadm_id", "subject_id", "admittime"]]
    parts = [pq.read_table(base / "direct" / f"{s}.parquet", columns=["key", "label", "n_events"]).to_pandas()
             .assign(split=s) for s in ("train", "val", "test")]
    d = pd.concat(parts).merge(link, on="key").merge(adm, on="hadm_id")
    d["prediction_time"] = (pd.to_datetime(d["admittime"]) + pd.Timedelta(hours=24)).astype("datetime64[us]")
    mlink = pq.read_table(base / "features" / "_private" / "link.parquet").to_pandas()
    parts = [pq.read_table(base / "features" / f"{s}.parquet", columns=["key", "label", "n_events"]).to_pandas()
             .assign(split=s) for s in ("train", "val", "test")]
    m = pd.concat(parts).merge(mlink, on="key")
    n, deaths = COHORT[release]
    assert len(d) == (n or direct.manifest["cohort"]["admissions"]) > 0
    assert int(d["label"].sum()) == (deaths or direct.manifest["cohort"]["positives"])
    cols = ["subject_id", "prediction_time", "label", "split"]
    assert set(map(tuple, d[cols].itertuples(index=False))) == set(map(tuple, m[cols].itertuples(index=False)))
    exported_release = "mimic-iii" if release == "synthetic" else release
    assert meds.manifest["task"]["shipped"] and meds.manifest["release"] == f"meds:{exported_release.upper()}"
    joined = d.merge(m, on=["subject_id", "prediction_time"], suffixes=("_direct", "_meds"))
    assert (joined["n_events_meds"] >= joined["n_events_direct"]).all()
    # no raw id and no date in the MEDS features (the _private/ files are the data owner's)
    raw = set(adm["hadm_id"]) | set(adm["subject_id"])
    files = [base / "features" / f"{s}.parquet" for s in ("train", "val", "test")] + [base / "features" /
                                                                                       "manifest.json"]
    assert scan(files, raw) == []


def test_export_refuses_a_foreign_directory_and_replaces_its_own(tmp_path):
    demo = _demo("mimic-iii")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("not an export")
    with pytest.raises(MedsError, match="exists and is not an export of this project"):
        export_meds(demo, other)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]  # no temporary directory left behind


def test_an_export_from_a_stage_holds_the_csv_exports_rows(round_trip, tmp_path):
    """The stage's path (each event table straight from its scan into the shards' parts, quarantined rows read back
    from them) against the CSV directory's (each table materialized once): the same rows, accounting and codes."""
    from pipeline.data.mimic.sources.stage import stage_csv

    _, demo, base, _, exported, _ = round_trip
    stage_csv(demo, tmp_path / "stage")
    staged = export_meds(tmp_path / "stage", tmp_path / "meds")
    assert staged.manifest["tables"] == exported.manifest["tables"]
    assert (staged.manifest["rows"], staged.manifest["subjects"]) == (exported.manifest["rows"],
                                                                      exported.manifest["subjects"])
    for name in ("data/0.parquet", "metadata/codes.parquet", "metadata/subject_splits.parquet",
                 *(f"quarantine/{t}.parquet" for t in exported.manifest["tables"])):
        a, b = (pq.read_table(d / name).to_pandas() for d in (base / "meds", tmp_path / "meds"))
        pd.testing.assert_frame_equal(a, b, obj=name)


STRUCTURAL = ("HOSPITAL_ADMISSION", "HOSPITAL_DISCHARGE", "ICU_ADMISSION", "ICU_DISCHARGE", "ED_REGISTRATION",
              "ED_OUT", "MEDS_DEATH")
# MIMIC_IV_MEDS on the MIMIC-IV demo (issue 44): MEDS-Extract 0.7.1 run offline with mimic-iv-meds 0.2.0's event
# configs of hosp/admissions, hosp/patients and icu/icustays, events per code (the part before its first //)
COMMUNITY = {"HOSPITAL_ADMISSION": 275, "HOSPITAL_DISCHARGE": 275, "ICU_ADMISSION": 140, "ICU_DISCHARGE": 140,
             "ED_REGISTRATION": 181, "ED_OUT": 181, "MEDS_DEATH": 31}


def _table(demo: Path, name: str) -> pd.DataFrame:
    path = next(p for p in (demo / f"{name.upper()}.csv.gz", demo / "hosp" / f"{name}.csv.gz",
                            demo / "icu" / f"{name}.csv.gz") if p.exists())
    frame = pd.read_csv(path)
    frame.columns = [c.lower() for c in frame.columns]
    for col in ("intime", "outtime", "deathtime", "dod", "edregtime", "edouttime", "admittime", "dischtime"):
        if col in frame:
            frame[col] = pd.to_datetime(frame[col])
    return frame


def _by_hand(demo: Path) -> pd.DataFrame:
    """The structural events MIMIC_IV_MEDS's configs define, from the demo's CSV files by pandas (subject_id, time,
    code): its rows without a null time, ED events one per (subject, time), MEDS_DEATH at the earliest DEATHTIME else
    DOD; the project's HOSPITAL_DISCHARGE//DIED for an admission with a death (DEATHTIME or HOSPITAL_EXPIRE_FLAG)."""
    adm, pat, icu = (_table(demo, t) for t in ("admissions", "patients", "icustays"))
    died = adm["deathtime"].notna() | adm["hospital_expire_flag"].eq(1)
    where = adm["discharge_location"].fillna("UNK").where(~died, "DIED")
    death = adm.groupby("subject_id")["deathtime"].min().combine_first(pat.set_index("subject_id")["dod"])
    parts = [
        adm.assign(code="HOSPITAL_ADMISSION//" + adm["admission_type"].fillna("UNK") + "//"
                   + adm["admission_location"].fillna("UNK"), time=adm["admittime"]),
        adm.assign(code="HOSPITAL_DISCHARGE//" + where, time=adm["dischtime"]),
        adm.assign(code="ED_REGISTRATION", time=adm["edregtime"]).drop_duplicates(["subject_id", "edregtime"]),
        adm.assign(code="ED_OUT", time=adm["edouttime"]).drop_duplicates(["subject_id", "edouttime"]),
        death.rename("time").reset_index().assign(code="MEDS_DEATH"),
        icu.assign(code="ICU_ADMISSION//" + icu["first_careunit"].fillna("UNK"), time=icu["intime"]),
        icu.assign(code="ICU_DISCHARGE//" + icu["last_careunit"].fillna("UNK"), time=icu["outtime"]),
    ]
    rows = pd.concat([p[["subject_id", "time", "code"]] for p in parts]).dropna(subset=["time"])
    return rows.astype({"time": "datetime64[us]"}).sort_values(["subject_id", "time", "code"]).reset_index(drop=True)


def test_the_structural_events_are_mimic_iv_meds(round_trip):
    """ICU stays, deaths, ED visits, admissions and discharges: every event as MIMIC_IV_MEDS's configs define it
    (by hand from the CSV files); on the MIMIC-IV demo, the community ETL's counts per code."""
    release, demo, base, _, exported, _ = round_trip
    assert all(exported.manifest["tables"][t]["quarantined"] == 0 for t in ("admissions", "patients", "icustays"))
    data = pd.concat(pq.read_table(f, columns=["subject_id", "time", "code"]).to_pandas()
                     for f in sorted((base / "meds" / "data").glob("*.parquet")))
    data = data[data["code"].str.split("//").str[0].isin(STRUCTURAL)].astype({"time": "datetime64[us]"})
    pd.testing.assert_frame_equal(data.sort_values(["subject_id", "time", "code"]).reset_index(drop=True),
                                  _by_hand(demo))
    counts = data["code"].str.split("//").str[0].value_counts().to_dict()
    if release == "mimic-iv":
        assert counts == COMMUNITY
    # a death known by its date only is known at the end of that day (the extraction of a window ending that day
    # never uses it); an in-hospital death at its time
    deaths = pd.concat(pq.read_table(f, columns=["subject_id", "time", "code", "known_time"]).to_pandas()
                       for f in sorted((base / "meds" / "data").glob("*.parquet"))).query("code == 'MEDS_DEATH'")
    adm = _table(demo, "admissions")
    in_hospital = set(adm.loc[adm["deathtime"].notna() | adm["hospital_expire_flag"].eq(1), "subject_id"])
    by_date = deaths[~deaths["subject_id"].isin(in_hospital)]
    assert len(by_date) and (by_date["known_time"] == by_date["time"] + pd.Timedelta(days=1)).all()
    assert deaths.loc[deaths["subject_id"].isin(in_hospital), "known_time"].isna().all()


def _in_icu_by_hand(demo: Path) -> dict:
    """MEDS-DEV's in-ICU mortality (mortality/in_icu/first_24h) on the demo's CSV files by pandas: each ICU stay with
    no other ICU admission, ICU discharge or death in the 48 h after its start, and an ICU discharge or death after
    them; at 24 h after its start, labelled by whether the first of those is the death."""
    adm, pat, icu = (_table(demo, t) for t in ("admissions", "patients", "icustays"))
    death = adm.groupby("subject_id")["deathtime"].min().combine_first(pat.set_index("subject_id")["dod"])
    labels = {}
    for s, stays in icu.groupby("subject_id"):
        starts = list(stays["intime"])
        ends = list(stays["outtime"].dropna()) + ([death[s]] if pd.notna(death.get(s)) else [])
        for t in starts:
            gap = t + pd.Timedelta(hours=48)
            if any(t < x <= gap for x in starts + ends) or not any(x > gap for x in ends):
                continue
            end = min(x for x in ends if x > gap)
            labels[(int(s), pd.Timestamp(t + pd.Timedelta(hours=24)))] = bool(pd.notna(death.get(s))
                                                                            and gap < death[s] <= end)
    return labels


def test_meds_devs_in_icu_mortality_on_the_export(round_trip, tmp_path):
    """MEDS-DEV's task by name on the export: the stays, prediction times and labels by hand; on the MIMIC-IV demo the
    community ETL's 74 stays and 9 deaths (issue 44)."""
    release, demo, base, _, _, _ = round_trip
    if release != "mimic-iv":
        pytest.skip("MEDS-DEV's predicates are MIMIC-IV's (the MIMIC-III export takes them with --predicates)")
    extract_meds(base / "meds", tmp_path / "icu", task="meds-dev:mortality/in_icu/first_24h")
    used = pq.read_table(tmp_path / "icu" / "_private" / "labels" / "labels.parquet").to_pandas()
    got = {(int(s), pd.Timestamp(t)): bool(y) for s, t, y in zip(used["subject_id"], used["prediction_time"],
                                                                  used["boolean_value"])}
    assert got == _in_icu_by_hand(demo)
    assert (len(got), sum(got.values())) == (74, 9)


@pytest.mark.postgres
def test_an_export_from_postgresql_holds_the_csv_exports_events(pg_demo, tmp_path):
    """The MIMIC-III demo loaded into PostgreSQL (its staging and the export's SQL run in the server, through the
    dialect): the same events as the CSV directory's export, the structural ones (ICU discharges, ED visits, dates of
    death, discharge locations) included."""
    csv = export_meds(_demo("mimic-iii"), tmp_path / "csv")
    pg = export_meds(pg_demo.dsn, tmp_path / "pg", schema=pg_demo.schema)
    assert (pg.manifest["rows"], pg.manifest["subjects"]) == (csv.manifest["rows"], csv.manifest["subjects"])
    columns = ["subject_id", "time", "code", "numeric_value", "text_value", "hadm_id"]
    a, b = (pq.read_table(d / "data" / "0.parquet", columns=columns).to_pandas() for d in (tmp_path / "csv",
                                                                                           tmp_path / "pg"))
    pd.testing.assert_frame_equal(a, b)
