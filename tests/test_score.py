"""pipeline.serving.score: batch scoring of features and of a MIMIC source with the training
vocabulary, cohort files, chunked streaming, no-event admissions and clear input errors."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import privacy_scan as privacy
from helpers.demo import demo_with_admissions
from helpers.raw_ids import raw_ids_of
from helpers.runs import trained_run

from pipeline.data.features import FeatureError
from pipeline.data.mimic.extraction import extract
from pipeline.data.mimic.sources import SourceError
from pipeline.runs.load import load_run
from pipeline.serving import cohort
from pipeline.serving import score as sc
from pipeline.tasks.mortality.risk import RISK_COLUMNS

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("tracking_store")  # demo_run and trained_run track runs there


@pytest.fixture(scope="module")
def run_model(demo_run, tmp_path_factory):
    return load_run(demo_run, tmp_path_factory.mktemp("model"))


def _cfg(**kw) -> sc.ScoreConfig:
    return sc.ScoreConfig(**{"samples": 3, "batch_size": 8, "chunk_rows": 4096, "threads": 1, **kw})


def _hadm_ids(features_dir: Path, split: str) -> list[int]:
    keys = pd.read_parquet(features_dir / f"{split}.parquet", columns=["key"])
    link = pd.read_csv(features_dir / "_private" / "link.csv")
    return keys.merge(link, on="key")["hadm_id"].astype(int).tolist()


# ---------------------------------------------------------------------------- features in


def test_score_demo_features(demo_run, demo_features, demo_dir, tmp_path):
    src = demo_features.out_dir / "test.parquet"
    s = sc.score(f"runs:/{demo_run}/model", tmp_path / "scores.parquet", data=src, cfg=_cfg())
    out = pd.read_parquet(s.out)
    frame = pd.read_parquet(src, columns=["key", "n_events"])
    assert list(out.columns) == list(RISK_COLUMNS) and s.admissions == len(out) == len(frame)
    assert out["key"].tolist() == frame["key"].tolist()
    assert ((out["risk_mean"] > 0) & (out["risk_mean"] < 1)).all() and (out["risk_sd"] >= 0).all()
    assert (out["risk_p05"] <= out["risk_mean"] + 1e-12).all() and (out["risk_mean"] <= out["risk_p95"] + 1e-12).all()
    assert s.referred == int(out["refer"].sum()) and (s.samples, s.components) == (3, 3)
    assert not privacy.scan([s.out], raw_ids_of(demo_dir))
    assert not list(tmp_path.glob(".*.tmp"))  # atomic: no temporary file left


@pytest.mark.parametrize("name", ["x.csv", "scores.json", "today.PARQUET.gz"])
def test_an_out_that_is_not_parquet_is_refused_before_anything_runs(name, tmp_path):
    """`score --out x.csv` used to write Parquet into x.csv; now it says so (no model is even loaded)."""
    with pytest.raises(sc.ScoreError, match=rf"--out .*{re.escape(name)}: the scores are written as Parquet; name "
                                            r"the file \.parquet"):
        sc.score("0" * 32, tmp_path / name, data=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_out_directory_gets_the_scores_and_private_inside_it(demo_run, demo_features, tmp_path):
    """`--out today` (a directory, or a name without a suffix): today/scores.parquet and today/_private/,
    never a _private/ in the parent of --out."""
    s = sc.score(demo_run, tmp_path / "today", data=demo_features.out_dir, cfg=_cfg())
    assert s.out == tmp_path / "today" / "scores.parquet" and s.out.is_file()
    assert s.link_file == tmp_path / "today" / "_private" / "link.csv" and s.link_file.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["today"]
    assert sc.scores_path(tmp_path / "today") == s.out  # an existing directory too
    assert sc.scores_path(tmp_path / "a" / "b.Parquet") == tmp_path / "a" / "b.Parquet"


@pytest.mark.slow
def test_score_synthetic_features_directory(tmp_path_factory, tmp_path):
    from pipeline.data.mimic.extraction import extract
    from pipeline.data.mimic.synth import SynthConfig, generate

    root = tmp_path_factory.mktemp("synth_score")
    generate(root / "mimic", patients=300, seed=5, config=SynthConfig(density=0.05))
    res = extract(root / "mimic", root / "features")
    run_id = trained_run(tmp_path_factory, res.out_dir, kind="batchensemble", steps=10)
    s = sc.score(run_id, tmp_path / "s.parquet", data=res.out_dir, cfg=_cfg(samples=2))
    out = pd.read_parquet(s.out)
    assert [p.name for p in s.inputs] == ["train.parquet", "val.parquet", "test.parquet"]
    assert len(out) == res.manifest["cohort"]["admissions"] and out["key"].is_unique
    empty = pd.concat([pd.read_parquet(res.out_dir / f"{x}.parquet", columns=["key", "bags"]) for x in
                       ("train", "val", "test")])
    expected = empty.set_index("key")["bags"].map(len).eq(0)
    assert out.set_index("key")["no_events"].equals(expected.reindex(out["key"]).rename("no_events"))


def test_model_uri_forms_give_the_same_scores(demo_run, demo_features, tmp_path):
    """runs:/<id>/model, the bare run id and a downloaded model directory score alike."""
    import mlflow

    local = mlflow.artifacts.download_artifacts(f"runs:/{demo_run}/model", dst_path=str(tmp_path / "m"))
    src = demo_features.out_dir / "val.parquet"
    outs = [pd.read_parquet(sc.score(uri, tmp_path / f"{i}.parquet", data=src, cfg=_cfg()).out)
            for i, uri in enumerate((f"runs:/{demo_run}/model", demo_run, local))]
    pd.testing.assert_frame_equal(outs[0], outs[1])
    pd.testing.assert_frame_equal(outs[0], outs[2])

def test_a_model_directory_scores_raw_tables_like_the_run(demo_run, demo_features, demo_dir, tmp_path):
    """A downloaded (or registered) model carries its extraction settings: --source works with it too."""
    import mlflow

    local = Path(mlflow.artifacts.download_artifacts(f"runs:/{demo_run}/model", dst_path=str(tmp_path / "m")))
    saved = json.loads((local / "artifacts" / "extraction.json").read_text())
    assert saved["config"] == demo_features.manifest["config"] and set(saved) <= {"config", "feature_version"}
    ids = _hadm_ids(demo_features.out_dir, "val")
    (tmp_path / "cohort.txt").write_text("\n".join(map(str, ids)) + "\n")
    a = sc.score(demo_run, tmp_path / "a.parquet", source=str(demo_dir), cohort=tmp_path / "cohort.txt", cfg=_cfg())
    b = sc.score(str(local), tmp_path / "b.parquet", source=str(demo_dir), cohort=tmp_path / "cohort.txt", cfg=_cfg())
    pd.testing.assert_frame_equal(pd.read_parquet(a.out), pd.read_parquet(b.out))
    (local / "artifacts" / "extraction.json").unlink()  # a model logged before extraction.json existed
    with pytest.raises(sc.ScoreError, match="no features/manifest.json"):
        sc.score(str(local), tmp_path / "x.parquet", source=str(demo_dir), cfg=_cfg())


def test_chunked_streaming_keeps_rows_and_agrees_with_one_chunk(run_model, demo_features, tmp_path):
    """Chunks stream in row order. Each chunk is batched by length on its own, so its draws differ
    from one pass's: the risks agree up to Monte Carlo noise, and a rerun is identical."""
    src = demo_features.out_dir / "train.parquet"
    one = sc.score_files(run_model, [src], tmp_path / "one.parquet", _cfg(chunk_rows=4096))
    many = sc.score_files(run_model, [src], tmp_path / "many.parquet", _cfg(chunk_rows=16))
    again = sc.score_files(run_model, [src], tmp_path / "again.parquet", _cfg(chunk_rows=16))
    assert pq.ParquetFile(many.out).num_row_groups > 1
    a, b = pd.read_parquet(one.out), pd.read_parquet(many.out)
    pd.testing.assert_frame_equal(b, pd.read_parquet(again.out))
    pd.testing.assert_frame_equal(a[["key", "n_events", "no_events"]], b[["key", "n_events", "no_events"]])
    assert a["key"].tolist() == pq.read_table(src, columns=["key"]).column("key").to_pylist()
    # S·K draws per mean risk: two independent estimates differ with sd sqrt(2 / (S·K))·risk_sd
    se = np.sqrt(2.0 / (_cfg().samples * run_model.model.components)) * np.maximum(a["risk_sd"], b["risk_sd"])
    assert (np.abs(a["risk_mean"] - b["risk_mean"]) <= 0.5 * se + 1e-6).all()
    assert not np.array_equal(a["risk_mean"], b["risk_mean"])  # other batches, other draws
    other = sc.score_files(run_model, [src], tmp_path / "other.parquet", _cfg(seed=1))
    assert not np.allclose(pd.read_parquet(other.out)["risk_mean"], a["risk_mean"])


def test_admission_without_events_is_scored_and_flagged(run_model, demo_features, tmp_path):
    table = pq.read_table(demo_features.out_dir / "val.parquet").to_pandas().head(6)
    table.at[2, "bags"], table.at[2, "bag_hours"], table.at[2, "n_events"] = [], [], 0
    src = tmp_path / "census.parquet"
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), src)
    out = pd.read_parquet(sc.score_files(run_model, [src], tmp_path / "s.parquet", _cfg()).out)
    assert out["no_events"].tolist() == [False, False, True, False, False, False]
    assert np.isfinite(out.loc[2, ["risk_mean", "risk_sd", "mutual_info"]].astype(float)).all()
    assert 0 < out.loc[2, "risk_mean"] < 1 and out.loc[2, "n_events"] == 0


# ---------------------------------------------------------------------------- source in


def test_source_scoring_equals_features_scoring(demo_run, demo_features, demo_dir, tmp_path):
    ids = _hadm_ids(demo_features.out_dir, "test")
    (tmp_path / "cohort.txt").write_text("HADM_ID\n" + "\n".join(map(str, ids[::-1])) + "\n")
    a = sc.score(demo_run, tmp_path / "a.parquet", data=demo_features.out_dir / "test.parquet", cfg=_cfg())
    b = sc.score(demo_run, tmp_path / "b.parquet", source=str(demo_dir), cohort=tmp_path / "cohort.txt", cfg=_cfg())
    pd.testing.assert_frame_equal(pd.read_parquet(a.out), pd.read_parquet(b.out))
    assert not privacy.scan([b.out], raw_ids_of(demo_dir))


def test_source_scoring_with_a_sql_condition(demo_run, demo_features, demo_dir, tmp_path):
    (tmp_path / "cohort.sql").write_text("-- not used\nicu_system = 'metavision'\n  AND age >= 18\n".replace("--", "#"))
    s = sc.score(demo_run, tmp_path / "s.parquet", source=str(demo_dir), cohort=tmp_path / "cohort.sql", cfg=_cfg())
    expected = pd.concat([pd.read_parquet(demo_features.out_dir / f"{x}.parquet", columns=["key", "icu_system"])
                          for x in ("train", "val", "test")])
    keys = set(expected.loc[expected["icu_system"] == "metavision", "key"])
    assert set(pd.read_parquet(s.out)["key"]) == keys and len(keys) > 0


def test_census_scores_open_admissions_and_counts_ids_without_a_score(demo_run, demo_features, demo_dir, tmp_path):
    """Patients still in hospital have no DISCHTIME: scoring keeps them (training quarantines them);
    requested HADM_IDs that get no score are counted, never silently dropped."""
    ids = _hadm_ids(demo_features.out_dir, "test")

    def still_in_hospital(adm):
        adm.loc[adm["hadm_id"].astype(int) == ids[0], ["dischtime", "deathtime", "discharge_location"]] = ""

    src = demo_with_admissions(demo_dir, tmp_path / "src", still_in_hospital)
    (tmp_path / "census.txt").write_text("HADM_ID\n" + "\n".join(map(str, [*ids, 99999999])) + "\n")
    s = sc.score(demo_run, tmp_path / "s.parquet", source=str(src), cohort=tmp_path / "census.txt", cfg=_cfg())
    keys = set(pd.read_parquet(s.out)["key"])
    assert keys == set(pd.read_parquet(demo_features.out_dir / "test.parquet", columns=["key"])["key"])
    assert s.not_scored == 1 and s.admissions == len(ids)
    trained = extract(src, tmp_path / "feats")  # the same row cannot be labelled: quarantined, counted
    assert list(pd.read_parquet(trained.out_dir / "quarantine"
                                / "admissions.parquet")["reason"]) == ["missing DISCHTIME"]


def test_census_flags_admissions_still_before_their_prediction_time(demo_run, demo_features, demo_dir, tmp_path):
    """A patient admitted hours before the data ends has only those hours of the 24 h window: the
    score says so (observed_hours, before_prediction_time) instead of passing for a 24 h risk."""
    old_open, new_open = _hadm_ids(demo_features.out_dir, "test")[:2]
    times = pd.read_csv(demo_dir / "ADMISSIONS.csv.gz", usecols=["admittime", "dischtime"])
    newest = max(pd.to_datetime(times[c], errors="coerce").max() for c in ("admittime", "dischtime"))
    admit = newest + pd.Timedelta(days=10)  # the newest record: the data's default end

    def open_two(adm):
        adm.loc[adm["hadm_id"].astype(int) == old_open, ["dischtime", "deathtime", "discharge_location"]] = ""
        adm.loc[adm["hadm_id"].astype(int) == new_open, ["dischtime", "deathtime", "discharge_location"]] = ""
        adm.loc[adm["hadm_id"].astype(int) == new_open, "admittime"] = str(admit)

    src = demo_with_admissions(demo_dir, tmp_path / "src", open_two)
    (tmp_path / "census.txt").write_text(f"{old_open}\n{new_open}\n")
    keys = dict(zip(privacy_keys([old_open, new_open]), ("old", "new")))

    def scored(as_of):
        s = sc.score(demo_run, tmp_path / "s.parquet", source=str(src), cohort=tmp_path / "census.txt", cfg=_cfg(),
                     as_of=as_of)
        table = pd.read_parquet(s.out).set_index("key").rename(index=keys)
        return s, table

    s, table = scored(None)  # ends at the newest ADMITTIME: the new admission has 0 h of its window
    assert s.before_prediction_time == 1 and s.admissions == 2
    assert table.loc["new", "before_prediction_time"] and table.loc["new", "observed_hours"] == 0.0
    assert not table.loc["old", "before_prediction_time"] and table.loc["old", "observed_hours"] == 24.0
    assert np.isfinite(table["risk_mean"]).all()
    s, table = scored(str(admit + pd.Timedelta(hours=5, minutes=30)))
    assert table.loc["new", "observed_hours"] == 5.5 and table.loc["new", "before_prediction_time"]
    s, table = scored(str(admit + pd.Timedelta(hours=30)))
    assert s.before_prediction_time == 0 and table.loc["new", "observed_hours"] == 24.0
    with pytest.raises(SourceError, match="`as_of` is before the newest ADMITTIME or DISCHTIME in ADMISSIONS: the "
                                          "source holds records after it"):
        scored(str(admit - pd.Timedelta(hours=1)))
    with pytest.raises(sc.ScoreError, match="`as_of` must be a timestamp"):
        scored("yesterday")
    with pytest.raises(sc.ScoreError, match="`as_of` applies to a source"):
        sc.score(demo_run, tmp_path / "s.parquet", data=demo_features.out_dir / "test.parquet", as_of=str(admit))


def privacy_keys(ids: list[int]) -> list[str]:
    from pipeline.data.mimic import deid

    return deid.pseudonyms(deid.load_key(), ids)


def test_a_cohort_that_matches_nobody_says_so(demo_run, demo_dir, tmp_path):
    (tmp_path / "c.txt").write_text("99999998\n99999999\n")
    with pytest.raises(Exception, match="the cohort condition kept none of the [0-9]+ eligible"):
        sc.score(demo_run, tmp_path / "s.parquet", source=str(demo_dir), cohort=tmp_path / "c.txt", cfg=_cfg())


@pytest.mark.parametrize("text, expected", [
    ("hadm_id\n3\n1\n2\n", "hadm_id IN (1, 2, 3)"),
    ("7\n\n5\n", "hadm_id IN (5, 7)"),
    ("# census of today\nHADM_ID\n42\n", "hadm_id IN (42)"),
    ("icu_system = 'carevue'\nAND age > 60\n", "icu_system = 'carevue' AND age > 60"),
    ("\ufeff172454\n100001\n", "hadm_id IN (100001, 172454)"),  # a byte-order mark is not a header
    ('"HADM_ID",\r\n9\r\n8\r\n', "hadm_id IN (8, 9)"),  # a spreadsheet's CSV export
    ("age >\n18\n", "age > 18"),  # a condition whose second line is a number
    ("HADM_ID,SUBJECT_ID\n100001,5\n100002,6\n", "hadm_id IN (100001, 100002)"),  # a table export
    ("subject_id\thadm_id\n5\t100001\n", "hadm_id IN (100001)"),  # tab separated, id in column 2
    ('"100001"\n"100002"\n', "hadm_id IN (100001, 100002)"),  # quoted, no header
    ("100001 100002\n100003\n", "hadm_id IN (100001, 100002, 100003)"),  # space separated
    ("hadm_id IN (\n1,\n2,\n3,\n4\n)\n", "hadm_id IN ( 1, 2, 3, 4 )"),  # mostly numbers, still SQL
])
def test_read_cohort_file(tmp_path, text, expected):
    (tmp_path / "c.txt").write_text(text)
    assert cohort.read_cohort_file(tmp_path / "c.txt") == expected


@pytest.mark.parametrize("text, message", [
    ("", "empty cohort file"),
    ("hadm_id\n1\n2\n3x\n4\n", r"line 4 has no HADM_ID"),
    ("17245A\n172454\n100001\n", r"line 1 is not a HADM_ID"),  # a typo on line 1 is not a header
    ("HADM_ID\n", "no HADM_IDs .an empty census"),  # never "everyone"
    ("HADM_ID,SUBJECT_ID\n100001,5\n172454\n3x,7\n", "line 4 has no HADM_ID in column 1"),
    ("100001,5\n100002,6\n", "line 1 has several columns and the file has no header"),  # ambiguous
    ("# nobody today\nhadm_id\n\n", "no HADM_IDs"),
    ("age > 1; DROP TABLE x", "no ';'"),
])
def test_read_cohort_file_errors(tmp_path, text, message):
    (tmp_path / "c.txt").write_text(text)
    with pytest.raises(cohort.CohortError, match=message) as err:
        cohort.read_cohort_file(tmp_path / "c.txt")
    assert "172454" not in str(err.value) and "3x" not in str(err.value)  # file contents are never echoed


@pytest.mark.parametrize("text, kind", [
    ("age > 18 AND hadm_id IN (172454 100001)", "Parser Error"),  # DuckDB quotes the token at fault
    ("hadm_id = 'x172454'", "Conversion Error"),  # ... or the value it cannot convert
])
def test_a_bad_sql_condition_is_not_echoed(demo_run, demo_dir, tmp_path, text, kind):
    """The error names the kind of problem without the database's message (it quotes HADM_IDs)."""
    (tmp_path / "c.txt").write_text(text + "\n")
    with pytest.raises(sc.ScoreError, match=kind) as err:
        sc.score(demo_run, tmp_path / "s.parquet", source=str(demo_dir), cohort=tmp_path / "c.txt", cfg=_cfg())
    assert "172454" not in str(err.value) and "100001" not in str(err.value) and "c.txt" in str(err.value)


# ---------------------------------------------------------------------------- bad input


def _features(demo_features, n: int = 4) -> pd.DataFrame:
    return pq.read_table(demo_features.out_dir / "val.parquet").to_pandas().head(n)


def test_corrupt_parquet_names_the_file(run_model, demo_features, tmp_path):
    good = (demo_features.out_dir / "val.parquet").read_bytes()
    bad = tmp_path / "corrupt.parquet"
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(FeatureError, match=r"corrupt.parquet: not a readable Parquet file"):
        sc.score_files(run_model, [bad], tmp_path / "s.parquet", _cfg())
    assert not (tmp_path / "s.parquet").exists()


def test_corrupt_data_pages_name_the_file(run_model, demo_features, tmp_path):
    src = tmp_path / "pages.parquet"
    pq.write_table(pa.Table.from_pandas(_features(demo_features, 20), preserve_index=False), src, compression="none")
    raw = bytearray(src.read_bytes())
    mid = len(raw) // 3
    raw[mid : mid + 64] = b"\xff" * 64  # inside the column chunks, footer intact
    src.write_bytes(bytes(raw))
    with pytest.raises(sc.ScoreError, match=r"pages.parquet: cannot read the Parquet data"):
        sc.score_files(run_model, [src], tmp_path / "s.parquet", _cfg())
    assert not (tmp_path / "s.parquet").exists()


@pytest.mark.parametrize("change, message", [
    (lambda f: f.drop(columns=["bags"]), r"missing column\(s\) \['bags'\]"),
    (lambda f: f.assign(n_events=f["n_events"].astype(str)),
     r"column 'n_events' has type (large_)?string, expected int32"),
    (lambda f: f.assign(bags=f["bags"].map(str)),
     r"column 'bags' has type (large_)?string, expected list<list<int32>>"),
    (lambda f: f.assign(key=range(len(f))), r"column 'key' has type int64, expected string"),
])
def test_schema_mismatch_names_file_and_column(run_model, demo_features, tmp_path, change, message):
    src = tmp_path / "census.parquet"
    pq.write_table(pa.Table.from_pandas(change(_features(demo_features)), preserve_index=False), src)
    with pytest.raises(FeatureError, match=r"census.parquet: " + message):
        sc.score_files(run_model, [src], tmp_path / "s.parquet", _cfg())


def test_out_of_vocabulary_ids_name_the_row(run_model, demo_features, tmp_path):
    frame = _features(demo_features)
    frame.at[1, "bags"], frame.at[1, "bag_hours"] = [[1, 10**6]], [0.0]
    src = tmp_path / "census.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), src)
    with pytest.raises(FeatureError, match=r"census.parquet: column 'bags' row 1: id 1000000 outside the vocabulary"):
        sc.score_files(run_model, [src], tmp_path / "s.parquet", _cfg())


def test_features_of_another_extraction_are_refused(run_model, tmp_path):
    from helpers.features import write_features

    other = write_features(tmp_path / "other")
    with pytest.raises(sc.ScoreError, match=r"not the model's vocabulary"):
        sc.score_files(run_model, sc.feature_files(other), tmp_path / "s.parquet", _cfg())


def test_cli_score_errors_without_traceback(demo_run, demo_features, tmp_path):
    bad = tmp_path / "census.parquet"
    pq.write_table(pa.Table.from_pandas(_features(demo_features).drop(columns=["context"]), preserve_index=False), bad)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cli = [sys.executable, str(ROOT / "cli.py"), "score", "--model", f"runs:/{demo_run}/model", "--samples", "2",
           "--threads", "1"]
    proc = subprocess.run(cli + ["--data", str(bad), "--out", str(tmp_path / "s.parquet")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"error: {bad}: missing column(s) ['context']" in proc.stderr.replace("\n", ""), proc.stderr
    good = subprocess.run(cli + ["--data", str(demo_features.out_dir / "test.parquet"), "--out",
                                 str(tmp_path / "ok.parquet")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert good.returncode == 0, good.stderr[-2000:]
    assert "scores written to" in good.stdout and len(pd.read_parquet(tmp_path / "ok.parquet")) > 0
    # the run's policy, printed: the demo's calibration half is far too small for the default promise, and says so
    assert "  refer rule: refer every admission: promising that the model misses at most 5% of deaths with 90% " \
           "confidence needs at least 45 calibration deaths even with no error" in good.stdout, good.stdout
    assert "  decision threshold " in good.stdout
    assert ("  the refer flag: every admission, by the rule above (a certified rule would rank them: referred "
            "because") in good.stdout
    # asking for it at scoring time is an error naming the options, not a rule that refers everyone
    asked = subprocess.run(cli + ["--data", str(demo_features.out_dir / "test.parquet"), "--out",
                                  str(tmp_path / "no.parquet"), "--alpha", "0.05"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=300)
    assert asked.returncode == 2 and "Traceback" not in asked.stderr
    assert "error: --delta 0.1 at --alpha 0.05 needs at least 45 calibration deaths even with no error" in \
        asked.stderr.replace("\n", " "), asked.stderr
    assert not (tmp_path / "no.parquet").exists()


# ---------------------------------------------------------------------------- the data owner's files


@pytest.fixture(scope="module")
def whole_demo(demo_run, demo_dir, tmp_path_factory):
    """The whole demo source scored (no cohort file): (ScoreSummary, output directory)."""
    out = tmp_path_factory.mktemp("whole")
    return sc.score(demo_run, out / "scores.parquet", source=str(demo_dir), cfg=_cfg()), out


def test_a_census_of_the_models_own_training_admissions_is_said_in_sample(demo_run, demo_dir, demo_features,
                                                                          tmp_path):
    """Issue 46, item 5: the --data report warned that training admissions are in-sample, a --source report of the
    same admissions (the demo the model was trained on, extracted with the same key) said nothing."""
    s = sc.score(demo_run, tmp_path / "scores.parquet", source=str(demo_dir), cfg=_cfg(), report=tmp_path / "c.html",
                 link=False)
    train = set(pq.read_table(demo_features.out_dir / "train.parquet", columns=["key"])["key"].to_pylist())
    scored = pd.read_parquet(s.out)["key"]
    n_train = int(scored.isin(train).sum())
    assert 0 < n_train < len(scored)
    page = html.unescape((tmp_path / "c.html").read_text())
    assert (f"{n_train:,} of these admissions come from the features' train split, which the model was fitted on: "
            "their risks are in-sample") in page
    assert cohort.training_splits(None, scored) is None  # a model whose features are unknown: nothing said
    assert cohort.training_splits(demo_features.out_dir, ["not-a-key"]) is None  # no admission of its features


def _private(path: Path) -> pd.DataFrame:
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    return pd.read_csv(path)


def test_link_file_maps_every_score_to_its_hadm_id(whole_demo):
    from pipeline.data.mimic import deid

    s, out = whole_demo
    link = _private(out / "_private" / "link.csv")
    scores = pd.read_parquet(s.out)
    assert s.link_file == out / "_private" / "link.csv" and sorted(link["key"]) == sorted(scores["key"])
    assert link["key"].tolist() == deid.pseudonyms(deid.load_key(), link["hadm_id"])


def test_unscored_lists_every_admission_outside_the_cohort_with_its_reason(whole_demo, demo_features):
    s, out = whole_demo
    table = _private(out / "_private" / "unscored.csv")
    assert list(table.columns) == ["hadm_id", "reason"] and len(table) == s.not_scored > 0
    assert table["hadm_id"].is_monotonic_increasing and table["hadm_id"].is_unique
    accounting = demo_features.manifest["tables"]["admissions"]
    excluded = accounting["excluded_by"]  # the training extraction's counts of the same rows
    assert len(table) == sum(excluded.values()) + accounting["quarantined"]
    named = {"died before prediction time": "died before the prediction time",
             "discharged before prediction time": "discharged before the prediction time"}
    expected = {named.get(k, f"outside the cohort criteria: {k}"): v for k, v in excluded.items() if v}
    assert table["reason"].value_counts().to_dict() == expected
    assert s.not_scored_by == {"absent": 0, "quarantined": 0,
                               "outside the cohort criteria": sum(v for k, v in excluded.items() if k not in named),
                               "died or discharged before T": sum(v for k, v in excluded.items() if k in named)}


def test_an_id_list_census_gives_each_missing_id_its_reason(demo_run, demo_features, demo_dir, whole_demo, tmp_path):
    """A census of scored ids, excluded ids of each kind, a quarantined one and an id not in ADMISSIONS."""
    _, whole = whole_demo
    reasons = pd.read_csv(whole / "_private" / "unscored.csv").drop_duplicates("reason")
    scored = _hadm_ids(demo_features.out_dir, "test")
    broken = scored[-1]  # its ADMITTIME blanked: quarantined

    def blank_admittime(adm):
        adm.loc[adm["hadm_id"].astype(int) == broken, "admittime"] = ""

    src = demo_with_admissions(demo_dir, tmp_path / "src", blank_admittime)
    census = [*scored, *reasons["hadm_id"], 99999999]
    (tmp_path / "census.txt").write_text("\n".join(map(str, census)) + "\n")
    s = sc.score(demo_run, tmp_path / "out" / "s.parquet", source=str(src), cohort=tmp_path / "census.txt", cfg=_cfg())
    table = _private(tmp_path / "out" / "_private" / "unscored.csv").set_index("hadm_id")["reason"].to_dict()
    assert table == {**dict(zip(reasons["hadm_id"], reasons["reason"])), broken: "quarantined: missing ADMITTIME",
                     99999999: "absent: no such HADM_ID in ADMISSIONS"}
    assert s.not_scored == len(table) and s.admissions == len(scored) - 1
    assert s.not_scored_by["absent"] == 1 and s.not_scored_by["quarantined"] == 1


def test_a_condition_census_lists_the_excluded_admissions_it_selects(demo_run, demo_dir, whole_demo, tmp_path):
    _, whole = whole_demo
    everyone = pd.read_csv(whole / "_private" / "unscored.csv")
    (tmp_path / "c.sql").write_text("icu_system = 'metavision'\n")
    s = sc.score(demo_run, tmp_path / "s.parquet", source=str(demo_dir), cohort=tmp_path / "c.sql", cfg=_cfg())
    table = pd.read_csv(tmp_path / "_private" / "unscored.csv")
    assert 0 < len(table) < len(everyone) and set(table["hadm_id"]) <= set(everyone["hadm_id"])
    assert s.not_scored == len(table)


def test_no_link_writes_nothing_private(demo_run, demo_features, tmp_path):
    s = sc.score(demo_run, tmp_path / "s.parquet", data=demo_features.out_dir / "val.parquet", cfg=_cfg(), link=False)
    assert s.link_file is None and not (tmp_path / "_private").exists()
    s = sc.score(demo_run, tmp_path / "t.parquet", data=demo_features.out_dir / "val.parquet", cfg=_cfg())
    link = _private(tmp_path / "_private" / "link.csv")  # from the features' own link file
    assert sorted(link["key"]) == sorted(pd.read_parquet(s.out)["key"]) and s.not_scored_by is None


def test_scoring_into_the_features_directory_keeps_its_link_file(demo_run, demo_features, tmp_path):
    import shutil

    feats = tmp_path / "feats"
    shutil.copytree(demo_features.out_dir, feats)
    before = (feats / "_private" / "link.csv").read_text()
    sc.score(demo_run, feats / "val-scores.parquet", data=feats / "val.parquet", cfg=_cfg())
    assert (feats / "_private" / "link.csv").read_text() == before  # not shrunk to the val keys


def test_cli_prints_counts_per_reason_never_ids(demo_run, demo_features, demo_dir, whole_demo, tmp_path):
    _, whole = whole_demo
    ids = pd.read_csv(whole / "_private" / "unscored.csv")["hadm_id"].tolist()
    scored = _hadm_ids(demo_features.out_dir, "test")[:3]
    (tmp_path / "census.txt").write_text("\n".join(map(str, [*scored, *ids, 99999999])) + "\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(ROOT / "cli.py"), "score", "--model", demo_run, "--source",
                           str(demo_dir), "--cohort", str(tmp_path / "census.txt"), "--out",
                           str(tmp_path / "s.parquet"), "--samples", "2", "--threads", "1", "-v"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 0, text
    assert f"  not scored: {len(ids) + 1} (absent 1, quarantined 0, outside the cohort criteria " in proc.stdout
    assert f"unscored admissions (data owner only): {tmp_path / '_private' / 'unscored.csv'}" in proc.stdout
    assert not any(str(i) in text for i in [*scored, *ids, 99999999])  # verbose: the log lines too


@pytest.mark.parametrize("condition, named", [
    ("label = 1", "label"), ("age > 60 AND \"LABEL\" = 0", "label"), ("c.label IS NOT NULL", "label"),
    ("disch_epoch < pred_epoch + 3*86400", "disch_epoch"),  # known only at discharge: after T for a census
])
def test_a_census_condition_may_not_use_the_outcome(tmp_path, condition, named):
    (tmp_path / "c.sql").write_text(condition + "\n")
    with pytest.raises(cohort.CohortError, match=r"c.sql: the cohort condition uses the outcome column\(s\) "
                                                 rf"\['{named}'\], known only after the prediction time"):
        cohort.read_cohort_file(tmp_path / "c.sql")
    (tmp_path / "ok.sql").write_text("admission_type = 'label' /* label */\n")  # a string or a comment: no column
    assert cohort.read_cohort_file(tmp_path / "ok.sql") == "admission_type = 'label' /* label */"


@pytest.mark.parametrize("condition", [
    "hadm_id IN (SELECT hadm_id FROM admissions_classified WHERE COLUMNS('^lab') = 1)",
    "hadm_id IN (FROM cohort SELECT hadm_id)",  # DuckDB's FROM-first form
    "hadm_id IN (TABLE cohort)",
])
def test_a_census_condition_may_not_hold_a_subquery(tmp_path, condition):
    """A subquery could read another table (admissions_classified holds the label) whatever it names."""
    (tmp_path / "c.sql").write_text(condition + "\n")
    with pytest.raises(cohort.CohortError,
                       match=r"c.sql: the cohort condition holds a subquery \((SELECT|FROM|TABLE)\); "
                                                 r"it is one expression over the columns \['hadm_id'"):
        cohort.read_cohort_file(tmp_path / "c.sql")


def _classified(con) -> None:
    """A tiny admissions_classified: four eligible admissions (two deaths, one still open) and one excluded."""
    con.execute("""CREATE TABLE admissions_classified AS SELECT * FROM (VALUES
        (1, 10, 100, 0.0, 86400.0, 90000.0, -1e9, 70.0, 'M', 'EMERGENCY', 'ER', 'carevue', 'a', 1, NULL),
        (2, 11, 101, 0.0, 86400.0, 400000.0, -1e9, 60.0, 'F', 'EMERGENCY', 'ER', 'metavision', 'b', 1, NULL),
        (3, 12, 102, 0.0, 86400.0, 500000.0, -1e9, 50.0, 'F', 'ELECTIVE', 'ER', 'metavision', 'b', 0, NULL),
        (4, 13, 103, 0.0, 86400.0, NULL, -1e9, 40.0, 'M', 'URGENT', 'ER', 'carevue', 'a', 0, NULL),
        (5, 14, 104, 0.0, 86400.0, 3600.0, -1e9, 30.0, 'M', 'URGENT', 'ER', 'carevue', 'a', 0,
         'discharged before prediction time'))
        t(row_id, subject_id, hadm_id, admit_epoch, pred_epoch, disch_epoch, dob_epoch, age, gender,
          admission_type, admission_location, icu_system, era, label, exclusion)""")


def _cohort_sql(condition: str) -> str:
    from pipeline.core import contracts
    from pipeline.data.mimic.extraction import queries

    return queries.render(queries.COHORT, lookback_days=30.0, cohort_filter=condition,
                         census_columns=", ".join(contracts.COHORT_COLUMNS))


def test_every_cohort_column_is_a_census_column_or_an_outcome():
    import duckdb

    from pipeline.core import contracts

    con = duckdb.connect()
    _classified(con)
    rel = con.sql(_cohort_sql("TRUE"))
    assert sorted(rel.columns) == sorted([*contracts.COHORT_COLUMNS, *contracts.OUTCOME_COLUMNS])
    assert sorted(r[0] for r in rel.fetchall()) == [100, 101, 102, 103]  # hadm_id first
    chosen = con.sql(_cohort_sql("age >= 60 AND COLUMNS('^adm') IS NOT NULL")).fetchall()
    assert sorted(r[0] for r in chosen) == [100, 101]


@pytest.mark.parametrize("condition", [
    "COLUMNS('^lab') = 1",  # a column regex: no outcome in the projection it expands over
    "COLUMNS('^disch') IS NOT NULL",
    "label = 1", "disch_epoch < pred_epoch + 3*86400",  # what read_cohort refuses by name, refused here too
    "struct_extract(census, 'label') = 1",  # the row as a struct holds the census columns only
    "eligible.label = 1", "admissions_classified.label = 1",  # the inner and the base table are out of reach
])
def test_the_census_condition_sees_no_outcome(condition):
    """sql/02_cohort.sql applies the condition to the census columns only: every way to reach an
    outcome fails in the database (before, COLUMNS('^lab') = 1 chose exactly the deaths)."""
    import duckdb

    con = duckdb.connect()
    _classified(con)
    with pytest.raises(duckdb.Error):
        con.sql(_cohort_sql(condition)).fetchall()


def test_a_census_by_an_outcome_regex_is_refused(demo_run, demo_dir, tmp_path):
    """The reviewer's bypass on the demo (31 admissions, 31 deaths) now stops with one line."""
    (tmp_path / "c.sql").write_text("COLUMNS('^lab') = 1\n")
    with pytest.raises(sc.ScoreError, match=r"c.sql: the cohort condition could not be run \(Binder Error\)"):
        sc.score(demo_run, tmp_path / "s.parquet", source=str(demo_dir), cohort=tmp_path / "c.sql", cfg=_cfg())
    assert not (tmp_path / "s.parquet").exists()


def test_score_and_the_pyfunc_agree_by_default_beyond_one_batch(demo_run, demo_features, tmp_path):
    """One default batch size (contracts.DEFAULT_BATCH) for every scoring entry point: on more admissions
    than one batch holds, `score` and the pyfunc (same seed) give the same draws, so the same numbers."""
    import mlflow
    from pipeline.core.contracts import DEFAULT_BATCH

    parts = [pq.read_table(demo_features.out_dir / f"{s}.parquet").to_pandas() for s in ("train", "val", "test")]
    frame = pd.concat(parts, ignore_index=True)
    copies = []
    for i in range(-(-(DEFAULT_BATCH + 20) // len(frame))):  # enough copies for more than one batch
        copy = frame.copy()
        copy["key"] = [f"{i:x}{k[1:]}" for k in copy["key"]]  # distinct pseudonym-shaped keys
        copies.append(copy)
    census = pd.concat(copies, ignore_index=True)
    assert len(census) > DEFAULT_BATCH and census["key"].is_unique
    path = tmp_path / "census.parquet"
    census.to_parquet(path)
    s = sc.score(demo_run, tmp_path / "s.parquet", data=path, cfg=sc.ScoreConfig(samples=3, seed=5, threads=1))
    scored = pd.read_parquet(s.out)
    served = mlflow.pyfunc.load_model(f"runs:/{demo_run}/model").predict(census, params={"samples": 3, "seed": 5})
    assert scored["key"].tolist() == served["key"].tolist() == census["key"].tolist()
    np.testing.assert_allclose(scored["risk_mean"], served["risk_mean"], rtol=1e-6)
    np.testing.assert_allclose(scored["mutual_info"], served["mutual_info"], rtol=1e-5, atol=1e-9)
    # the policy's columns too: the calibrated risk, its interval, the decision and the refer flag
    assert scored["risk_calibrated"].notna().all()
    np.testing.assert_allclose(scored["risk_calibrated"], served["risk_calibrated"], rtol=1e-6)
    np.testing.assert_allclose(scored[["risk_va_low", "risk_va_high"]], served[["risk_va_low", "risk_va_high"]],
                               rtol=1e-6)
    assert scored["high_risk"].tolist() == served["high_risk"].tolist()
    assert scored["refer"].tolist() == served["refer"].tolist()


def test_every_scoring_entry_point_defaults_to_one_batch_size():
    import inspect

    from pipeline.core.contracts import DEFAULT_BATCH
    from pipeline.tasks.mortality import request, risk
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows import evaluate, grid

    assert (sc.ScoreConfig().batch_size == evaluate.EvalConfig().batch_size == TrainConfig().eval_batch_size
            == grid.GridConfig().eval_batch_size == DEFAULT_BATCH)
    for fn in (risk.score_features, evaluate.sample_logits):
        assert inspect.signature(fn).parameters["batch_size"].default == DEFAULT_BATCH, fn
    assert request.request_settings({}, {}).batch_size == DEFAULT_BATCH


# ---------------------------------------------------------------------------- the value channel


@pytest.mark.slow
def test_a_value_channel_model_scores_its_features_and_refuses_older_ones(tmp_path_factory, tmp_path):
    """A rank-1 model with the value channel (trained on random features with bag_values) scores them
    through ``score`` and the pyfunc's request reader; features without bag_values (feature versions
    1-2) are refused before anything is written, naming the file and the column."""
    import shutil

    from helpers.features import write_features

    from pipeline.tasks.mortality.request import RequestError, read_request
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows.train import train

    fdir = write_features(tmp_path_factory.mktemp("valued"), n_train=48, n_val=16, n_test=8)
    cfg = TrainConfig(max_steps=10, eval_every=5, eval_samples=2, score_samples=2, lr=1e-2, progress=False, threads=1,
                      model={"embedding_dim": 4, "lstm_hidden": 4, "dense_units": 4, "components": 2,
                             "value_channel": True})
    run_id = train(fdir, "rank1", cfg, out_dir=tmp_path / "ckpt", experiment="evaluate-tests").run_id
    s = sc.score(run_id, tmp_path / "s.parquet", data=fdir / "test.parquet", cfg=_cfg(samples=2))
    assert len(pd.read_parquet(s.out)) == 8
    old = tmp_path_factory.mktemp("v2")
    shutil.copy(fdir / "vocab.json", old / "vocab.json")
    pq.write_table(pq.read_table(fdir / "test.parquet").drop_columns(["bag_values"]), old / "test.parquet")
    with pytest.raises(FeatureError, match=r"test.parquet: column 'bag_values' is missing, and the model has a value"):
        sc.score(run_id, tmp_path / "old.parquet", data=old / "test.parquet", cfg=_cfg(samples=2))
    assert not (tmp_path / "old.parquet").exists()
    frame = pd.read_parquet(fdir / "test.parquet")
    sizes = {"tokens": 40, "context": 9}
    assert read_request(frame, sizes, None, needs_values=True).values is not None
    with pytest.raises(RequestError, match="missing column 'bag_values': this model has a value channel"):
        read_request(frame.drop(columns=["bag_values"]), sizes, None, needs_values=True)
    assert read_request(frame, sizes, None).values is None  # a model without one does not read the column


def _venn_abers_pair(scores, labels, s: float) -> tuple[float, float]:
    """(p0, p1) at score ``s`` by an independent implementation: scikit-learn's isotonic regression of ``labels`` on
    ``scores`` refitted with (s, 0) and with (s, 1) added, read at s (Vovk, Petej & Fedorova 2015)."""
    from sklearn.isotonic import IsotonicRegression

    out = []
    for label in (0.0, 1.0):
        x, y = np.append(scores, s), np.append(labels, label)
        out.append(float(IsotonicRegression(out_of_bounds="clip").fit(x, y).predict([s])[0]))
    return out[0], out[1]


def test_the_venn_abers_columns_keep_their_promise_on_every_row_of_a_census(whole_demo, run_model):
    """Issue 46, item 2: `risk_calibrated` lay outside "its Venn-Abers interval" in 1,321 of 2,165 rows of a census (the
    map chosen: none), while the docs said it was its interval. What the columns promise instead (docs/referral.md,
    docs/experiments/2026-12-06-venn-abers-promise.md), on every row of the whole demo scored as a census:
    risk_va_low <= risk_va_high, the Venn-Abers pair of `risk_mean` from the run's calibration half (checked against
    scikit-learn's isotonic regression refitted with the row as a non-event and as an event), which brackets the merged
    Venn-Abers probability; `risk_calibrated` is the chosen map's value and is not promised inside."""
    from pipeline.core.seeds import EVAL_STREAM, stream_seed
    from pipeline.data import features
    from pipeline.tasks.mortality import predict
    from pipeline.tasks.mortality.inputs import split_validation

    s, _ = whole_demo
    scores = pd.read_parquet(s.out)
    assert len(scores) > 50 and scores["risk_va_low"].notna().all()
    tc, info = run_model.train_config, run_model.info
    _, cal = split_validation(features.load_split(run_model.features_dir / "val.parquet"), tc["calibration_share"])
    raw = predict.feature_predictions(run_model.model, cal, info.score_samples, tc["eval_batch_size"], info.max_bags,
                                      info.max_tokens, predict.seeded_generator(stream_seed(tc["seed"], EVAL_STREAM)))
    table = info.policy["venn_abers"]
    np.testing.assert_array_equal(np.unique(raw.summary.mean), table["scores"])  # the calibration half, as trained
    lo, hi = scores["risk_va_low"].to_numpy(), scores["risk_va_high"].to_numpy()
    assert ((0 <= lo) & (lo <= hi) & (hi <= 1)).all()
    pairs = np.array([_venn_abers_pair(raw.summary.mean, cal.label, p) for p in scores["risk_mean"]])
    np.testing.assert_allclose(lo, pairs[:, 0], atol=1e-9)
    np.testing.assert_allclose(hi, pairs[:, 1], atol=1e-9)
    merged = hi / (1 - lo + hi)
    assert ((lo <= merged + 1e-12) & (merged <= hi + 1e-12)).all()
