"""Synthetic MIMIC-III generator (pipeline/data/mimic/synth/): layout, determinism, truth, quirks."""

from __future__ import annotations

import csv
import gzip
import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.core.errors import ConfigError
from pipeline.data.mimic.synth import COLUMNS, SynthConfig, events_hosp, generate
from pipeline.data.mimic.synth.chunk import IdPool, hour_cells, round_to
from pipeline.data.mimic.synth.limits import MAX_PATIENTS

EVENT_TIMES = [  # (table, time column) that must not fall after DISCHTIME
    ("CHARTEVENTS", "CHARTTIME"), ("LABEVENTS", "CHARTTIME"), ("INPUTEVENTS_CV", "CHARTTIME"),
    ("INPUTEVENTS_MV", "STARTTIME"), ("INPUTEVENTS_MV", "ENDTIME"), ("OUTPUTEVENTS", "CHARTTIME"),
    ("DATETIMEEVENTS", "CHARTTIME"), ("PROCEDUREEVENTS_MV", "STARTTIME"), ("PROCEDUREEVENTS_MV", "ENDTIME"),
    ("MICROBIOLOGYEVENTS", "CHARTTIME"), ("MICROBIOLOGYEVENTS", "CHARTDATE"), ("PRESCRIPTIONS", "STARTDATE"),
    ("ICUSTAYS", "OUTTIME"),
]
ITEM_TABLES = ["CHARTEVENTS", "INPUTEVENTS_CV", "INPUTEVENTS_MV", "OUTPUTEVENTS", "PROCEDUREEVENTS_MV",
               "DATETIMEEVENTS"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """300 patients at density 0.05 (about 100k chart rows)."""
    out = tmp_path_factory.mktemp("synth")
    return generate(out, 300, seed=7, config=SynthConfig(density=0.05))


@lru_cache(maxsize=None)
def _read(path: str) -> pd.DataFrame:
    return pd.read_csv(path, low_memory=False, keep_default_na=False, na_values=[""])


def read(out: Path, table: str) -> pd.DataFrame:
    name = "_truth/truth" if table == "truth" else table
    return _read(str(Path(out) / f"{name}.csv.gz"))


def ts(s: pd.Series) -> pd.Series:
    return pd.to_datetime(s, format="%Y-%m-%d %H:%M:%S")


def header(path: Path) -> list[str]:
    with gzip.open(path, "rt", newline="") as fh:
        return next(csv.reader(fh))


# ---------------------------------------------------------------------------- layout
@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_header_is_the_column_list(run, table):
    assert header(run.out_dir / f"{table}.csv.gz") == list(COLUMNS[table])
    assert run.paths[table] == run.out_dir / f"{table}.csv.gz"


@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_columns_match_the_demo_uppercased(demo_dir, table):
    demo = demo_dir / f"{table}.csv.gz"
    assert demo.exists(), demo
    assert [c.upper() for c in header(demo)] == list(COLUMNS[table])


def test_quoting_and_datetime_format(run):
    with gzip.open(run.out_dir / "ADMISSIONS.csv.gz", "rt") as fh:
        head, line = fh.readline(), fh.readline()
    assert head.startswith('"ROW_ID","SUBJECT_ID","HADM_ID","ADMITTIME"')
    fields = next(csv.reader([line]))
    assert pd.Series(fields[3:5]).str.fullmatch(r"2[12]\d\d-\d\d-\d\d \d\d:\d\d:\d\d").all(), fields[3:5]
    assert '"EMERGENCY"' in line or '"ELECTIVE"' in line or '"URGENT"' in line or '"NEWBORN"' in line


def test_dates_shifted_into_2100_2210(run):
    years = ts(read(run.out_dir, "ADMISSIONS").ADMITTIME).dt.year
    assert years.between(2100, 2210).all(), (years.min(), years.max())
    chart = ts(read(run.out_dir, "CHARTEVENTS").CHARTTIME).dt.year
    assert chart.between(2100, 2210).all()


# ---------------------------------------------------------------------------- ids
@pytest.mark.parametrize("table", sorted(COLUMNS))
def test_row_ids_unique(run, table):
    df = read(run.out_dir, table)
    assert df.ROW_ID.is_unique and len(df) == run.rows[table] > 0


@pytest.mark.parametrize("table, column, lo, hi", [
    ("PATIENTS", "SUBJECT_ID", 10_000, 99_999), ("ADMISSIONS", "HADM_ID", 100_000, 199_999),
    ("ICUSTAYS", "ICUSTAY_ID", 200_000, 299_999)])
def test_ids_unique_and_in_range(run, table, column, lo, hi):
    ids = read(run.out_dir, table)[column]
    assert ids.is_unique and ids.between(lo, hi).all()


def test_foreign_keys(run):
    pats, adm, icu = (read(run.out_dir, t) for t in ("PATIENTS", "ADMISSIONS", "ICUSTAYS"))
    assert set(adm.SUBJECT_ID) == set(pats.SUBJECT_ID)
    assert set(icu.HADM_ID) == set(adm.HADM_ID)  # every admission has an ICU stay
    merged = icu.merge(adm[["HADM_ID", "SUBJECT_ID"]], on="HADM_ID", suffixes=("", "_a"))
    assert (merged.SUBJECT_ID == merged.SUBJECT_ID_a).all()
    chart = read(run.out_dir, "CHARTEVENTS").dropna(subset=["ICUSTAY_ID"])
    assert set(chart.ICUSTAY_ID) <= set(icu.ICUSTAY_ID)
    assert (adm.groupby("SUBJECT_ID").size().max()) in (2, 3)


# ---------------------------------------------------------------------------- truth
def test_truth_file(run):
    truth, adm = read(run.out_dir, "truth"), read(run.out_dir, "ADMISSIONS")
    assert list(truth.columns) == ["HADM_ID", "TRUE_RISK"]
    assert truth.HADM_ID.is_unique and set(truth.HADM_ID) <= set(adm.HADM_ID)
    assert ((truth.TRUE_RISK > 0) & (truth.TRUE_RISK < 1)).all()
    stay_h = (ts(adm.DISCHTIME) - ts(adm.ADMITTIME)).dt.total_seconds() / 3600
    assert set(truth.HADM_ID) == set(adm.HADM_ID[stay_h > 24])  # exactly the admissions in hospital at T
    readme = json.loads((run.out_dir / "_truth" / "README.json").read_text())
    assert readme["prediction_hours"] == 24.0 and readme["seed"] == 7 and readme["model"]["beta_s"] > 0
    assert run.paths["truth"] == run.out_dir / "_truth" / "truth.csv.gz"


def cohort(out: Path) -> pd.DataFrame:
    """Adult, non-newborn admissions in hospital and alive at T = 24 h, with TRUE_RISK."""
    adm, pats = read(out, "ADMISSIONS"), read(out, "PATIENTS")
    df = adm.merge(pats[["SUBJECT_ID", "DOB"]], on="SUBJECT_ID").merge(read(out, "truth"), on="HADM_ID")
    age = (ts(df.ADMITTIME) - ts(df.DOB)).dt.total_seconds() / (365.2425 * 86400)
    return df[(df.ADMISSION_TYPE != "NEWBORN") & (age >= 18)]


def test_base_rate_and_true_risk(run):
    from sklearn.metrics import roc_auc_score

    df = cohort(run.out_dir)
    y = df.HOSPITAL_EXPIRE_FLAG.to_numpy()
    assert len(df) >= 300 and len(df) == run.cohort_admissions
    assert 0.05 <= y.mean() <= 0.16 and run.base_rate == pytest.approx(y.mean())
    assert abs(df.TRUE_RISK.mean() - y.mean()) < 0.04  # TRUE_RISK is calibrated
    assert roc_auc_score(y, df.TRUE_RISK) > 0.75


def test_deaths_are_consistent(run):
    adm = read(run.out_dir, "ADMISSIONS")
    dead = adm.DEATHTIME.notna()
    assert (dead == (adm.HOSPITAL_EXPIRE_FLAG == 1)).all() and dead.sum() == run.deaths > 0
    assert (adm.DEATHTIME[dead] == adm.DISCHTIME[dead]).all()
    assert (adm.DISCHARGE_LOCATION[dead] == "DEAD/EXPIRED").all()
    pats = read(run.out_dir, "PATIENTS")
    assert set(adm.SUBJECT_ID[dead]) <= set(pats.SUBJECT_ID[pats.DOD_HOSP.notna()])
    # no admission after an in-hospital death
    last = adm.assign(t=ts(adm.ADMITTIME)).sort_values("t").groupby("SUBJECT_ID").tail(1)
    assert set(adm.HADM_ID[dead]) <= set(last.HADM_ID)


def test_cohort_exclusions_present(run):
    adm, pats = read(run.out_dir, "ADMISSIONS"), read(run.out_dir, "PATIENTS")
    df = adm.merge(pats[["SUBJECT_ID", "DOB"]], on="SUBJECT_ID")
    age = (ts(df.ADMITTIME) - ts(df.DOB)).dt.days / 365.2425
    stay_h = (ts(df.DISCHTIME) - ts(df.ADMITTIME)).dt.total_seconds() / 3600
    newborn = df.ADMISSION_TYPE == "NEWBORN"
    assert newborn.any() and (age[newborn] < 1).all()
    assert ((age >= 1) & (age < 18)).any()
    assert (df.DEATHTIME.notna() & (stay_h < 24)).any() and (df.DEATHTIME.isna() & (stay_h < 24)).any()
    assert ((age > 299) & (age < 311)).any() and not ((age > 100) & (age < 299)).any()


# ---------------------------------------------------------------------------- quirks
@pytest.mark.parametrize("table, condition", [
    pytest.param("CHARTEVENTS", lambda d: d.ERROR == 1, id="chart-error-rows"),
    pytest.param("CHARTEVENTS", lambda d: d.WARNING == 1, id="chart-warning-rows"),
    pytest.param("CHARTEVENTS", lambda d: d.VALUENUM.isna() & d.VALUE.notna(), id="chart-text-value"),
    pytest.param("CHARTEVENTS", lambda d: d.VALUE.isin(["Normal Sinus", "SR (Sinus Rhythm)"]), id="chart-rhythm"),
    pytest.param("CHARTEVENTS", lambda d: d.VALUEUOM.isin(["?F", "?C"]), id="chart-mangled-unit"),
    pytest.param("CHARTEVENTS", lambda d: d.ICUSTAY_ID.isna(), id="chart-no-icustay"),
    pytest.param("CHARTEVENTS", lambda d: ts(d.STORETIME) > ts(d.CHARTTIME), id="chart-stored-later"),
    pytest.param("LABEVENTS", lambda d: d.HADM_ID.isna(), id="lab-no-hadm"),
    pytest.param("LABEVENTS", lambda d: d.VALUENUM.isna() & d.VALUE.notna(), id="lab-text-value"),
    pytest.param("LABEVENTS", lambda d: d.FLAG == "abnormal", id="lab-abnormal"),
    pytest.param("MICROBIOLOGYEVENTS", lambda d: d.CHARTTIME.isna() & d.CHARTDATE.notna(), id="micro-date-only"),
    pytest.param("MICROBIOLOGYEVENTS", lambda d: d.ORG_ITEMID.notna() & d.AB_ITEMID.notna(), id="micro-susceptibility"),
    pytest.param("INPUTEVENTS_MV", lambda d: d.STATUSDESCRIPTION == "Rewritten", id="mv-rewritten"),
    pytest.param("PROCEDUREEVENTS_MV", lambda d: d.ITEMID == 225792, id="mv-ventilation"),
    pytest.param("PRESCRIPTIONS", lambda d: d.FORMULARY_DRUG_CD.notna() & d.DOSE_VAL_RX.notna(), id="rx-dose"),
])
def test_quirk_present(run, table, condition):
    assert condition(read(run.out_dir, table)).any()


def test_carevue_flags_empty_metavision_flags_set(run):
    chart, icu = read(run.out_dir, "CHARTEVENTS"), read(run.out_dir, "ICUSTAYS")
    df = chart.merge(icu[["ICUSTAY_ID", "DBSOURCE"]], on="ICUSTAY_ID")
    cv, mv = df[df.DBSOURCE == "carevue"], df[df.DBSOURCE == "metavision"]
    assert cv.ERROR.isna().all() and (cv.STOPPED.isin(["NotStopd", "D/C'd"])).all()
    assert mv.ERROR.isin([0, 1]).all() and 0 < mv.ERROR.mean() < 0.01


def test_prescription_dates_at_midnight(run):
    rx = read(run.out_dir, "PRESCRIPTIONS")
    assert rx.STARTDATE.str.endswith("00:00:00").all() and (ts(rx.ENDDATE) > ts(rx.STARTDATE)).all()


def test_numeric_value_matches_valuenum(run):
    chart = read(run.out_dir, "CHARTEVENTS")
    num = chart[chart.VALUENUM.notna()
                & ~chart.ITEMID.isin([184, 454, 723, 220739, 223900, 223901, 223753, 224641, 227368])]
    assert len(num) and (pd.to_numeric(num.VALUE) == num.VALUENUM).all()


def test_datetimeevents_value_not_after_charttime(run):
    dt = read(run.out_dir, "DATETIMEEVENTS")
    assert (ts(dt.VALUE) <= ts(dt.CHARTTIME)).all()


# ---------------------------------------------------------------------------- items and systems
@pytest.mark.parametrize("table", ITEM_TABLES)
def test_every_itemid_in_d_items(run, table):
    d = read(run.out_dir, "D_ITEMS")
    assert d.ITEMID.is_unique
    used = set(read(run.out_dir, table).ITEMID)
    links = dict(zip(d.ITEMID, d.LINKSTO))
    assert used and used <= set(links) and {links[i] for i in used} == {table.lower()}


def test_every_lab_itemid_in_d_labitems(run):
    d = read(run.out_dir, "D_LABITEMS")
    assert d.ITEMID.is_unique and set(read(run.out_dir, "LABEVENTS").ITEMID) <= set(d.ITEMID)


def test_both_icu_systems_with_their_itemids(run):
    icu = read(run.out_dir, "ICUSTAYS")
    assert set(icu.DBSOURCE) == {"carevue", "metavision"}
    system = dict(zip(icu.ICUSTAY_ID, icu.DBSOURCE))
    chart = read(run.out_dir, "CHARTEVENTS").dropna(subset=["ICUSTAY_ID"])
    db = chart.ICUSTAY_ID.map(system)
    assert (chart.ITEMID[db == "carevue"] < 220000).all() and (chart.ITEMID[db == "metavision"] >= 220000).all()
    for table, source in (("INPUTEVENTS_CV", "carevue"), ("INPUTEVENTS_MV", "metavision"),
                          ("PROCEDUREEVENTS_MV", "metavision")):
        assert (read(run.out_dir, table).ICUSTAY_ID.map(system) == source).all(), table
    # the era is not readable from the shifted year: both systems span overlapping years
    year = ts(icu.INTIME).dt.year
    lo, hi = (year[icu.DBSOURCE == s] for s in ("carevue", "metavision"))
    assert lo.min() < hi.median() < lo.max() and hi.min() < lo.median() < hi.max()


# ---------------------------------------------------------------------------- time bounds
@pytest.mark.parametrize("table, column", EVENT_TIMES)
def test_no_event_after_discharge(run, table, column):
    adm = read(run.out_dir, "ADMISSIONS")
    ev = read(run.out_dir, table).dropna(subset=["HADM_ID", column])
    disch = ev.HADM_ID.map(dict(zip(adm.HADM_ID, ts(adm.DISCHTIME))))
    assert len(ev) and (ts(ev[column]) <= disch).all()


def test_chart_events_inside_icu_stays(run):
    icu = read(run.out_dir, "ICUSTAYS")
    chart = read(run.out_dir, "CHARTEVENTS").dropna(subset=["ICUSTAY_ID"])
    t = ts(chart.CHARTTIME)
    lo = chart.ICUSTAY_ID.map(dict(zip(icu.ICUSTAY_ID, ts(icu.INTIME).dt.floor("min"))))
    hi = chart.ICUSTAY_ID.map(dict(zip(icu.ICUSTAY_ID, ts(icu.OUTTIME))))
    assert ((t >= lo) & (t <= hi)).all()


# ---------------------------------------------------------------------------- determinism, density
def files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_deterministic(tmp_path):
    cfg = SynthConfig(density=0.05, chunk_patients=15)
    a, b, c = (generate(tmp_path / x, 40, seed=s, config=cfg) for x, s in (("a", 3), ("b", 3), ("c", 4)))
    fa, fb = files(a.out_dir), files(b.out_dir)
    assert len(fa) == len(COLUMNS) + 2 and fa == fb
    assert files(c.out_dir)["CHARTEVENTS.csv.gz"] != fa["CHARTEVENTS.csv.gz"]
    assert not list(tmp_path.rglob("*.tmp"))


def test_two_workers_write_the_same_bytes_as_one(tmp_path):
    cfg = SynthConfig(density=0.05, chunk_patients=15)  # 6 chunks: each worker encodes several, out of step
    one = generate(tmp_path / "one", 80, seed=3, config=cfg)
    two = generate(tmp_path / "two", 80, seed=3, config=cfg, workers=2)
    assert files(one.out_dir) == files(two.out_dir) and one.rows == two.rows
    rows = read(two.out_dir, "CHARTEVENTS").ROW_ID
    assert list(rows) == list(range(1, len(rows) + 1))  # numbered across chunks as one process numbers them


def test_two_workers_write_the_same_bytes_as_one_in_mimic_iv_layout(tmp_path, monkeypatch):
    """MIMIC-IV's ids (labevent_id, orderid, pharmacy_id ...) numbered across chunks as one process numbers them,
    the chunks simulated two at a time (three batches)."""
    from pipeline.data.mimic.synth import generator

    monkeypatch.setattr(generator, "_BATCH", 1)
    cfg = SynthConfig(density=0.05, chunk_patients=15, icu_fraction=0.5)
    one = generate(tmp_path / "one", 80, seed=3, config=cfg, layout="mimic-iv")
    two = generate(tmp_path / "two", 80, seed=3, config=cfg, layout="mimic-iv", workers=2)
    assert files(one.out_dir) == files(two.out_dir) and one.rows == two.rows
    labs = pd.read_csv(two.out_dir / "hosp" / "labevents.csv.gz", usecols=["labevent_id"]).labevent_id
    assert list(labs) == list(range(1, len(labs) + 1))


def test_workers_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="--workers must be an integer >= 1"):
        generate(tmp_path / "a", 10, workers=0)


def test_an_id_pool_overflows_into_its_second_range_only_when_needed():
    first = IdPool(np.random.default_rng(0), 100, 110, "SUBJECT_ID").take(10)
    pool = IdPool(np.random.default_rng(0), 100, 110, "SUBJECT_ID", (1000, 1100, np.random.default_rng(1)))
    assert list(pool.take(10)) == list(first)  # a world that fits the first range: the same ids as without
    more = pool.take(50)
    assert set(more) <= set(range(1000, 1100)) and len(set(more)) == 50
    with pytest.raises(ConfigError, match="SUBJECT_ID range exhausted: more than 110 ids"):
        pool.take(51)


def test_a_world_beyond_the_first_id_ranges_takes_mimic_iv_style_ids(tmp_path, monkeypatch):
    """More patients than the 5-digit SUBJECT_IDs hold (MIMIC-IV's 299,712): the rest get 8-digit ids, every id
    unique; shrunk ranges stand in for the real ones."""
    from pipeline.data.mimic.synth import generator

    monkeypatch.setattr(generator, "ID_RANGES", {"SUBJECT_ID": ((10_000, 10_020), (10_000_000, 10_001_000)),
                                                 "HADM_ID": ((100_000, 100_030), (20_000_000, 20_001_000)),
                                                 "ICUSTAY_ID": ((200_000, 200_030), (30_000_000, 30_001_000))})
    out = generate(tmp_path / "w", 60, seed=2, config=SynthConfig(density=0.02)).out_dir
    subjects, adm = read(out, "PATIENTS").SUBJECT_ID, read(out, "ADMISSIONS")
    assert subjects.is_unique and (subjects < 10_020).sum() == 20 and (subjects >= 10_000_000).sum() == 40
    assert adm.HADM_ID.is_unique and (adm.HADM_ID >= 20_000_000).sum() == len(adm) - 30
    assert set(adm.SUBJECT_ID) <= set(subjects)


@pytest.mark.parametrize("table, lo, hi", [("CHARTEVENTS", 3.3, 4.8), ("LABEVENTS", 3.0, 4.8)])
@pytest.mark.slow
def test_density_scales_rows_not_the_course(tmp_path, table, lo, hi):
    thin = generate(tmp_path / "thin", 60, seed=5, config=SynthConfig(density=0.05))
    dense = generate(tmp_path / "dense", 60, seed=5, config=SynthConfig(density=0.2))
    assert lo < dense.rows[table] / thin.rows[table] < hi
    for same in ("ADMISSIONS.csv.gz", "ICUSTAYS.csv.gz", "_truth/truth.csv.gz"):
        assert (thin.out_dir / same).read_bytes() == (dense.out_dir / same).read_bytes()


def test_chart_rows_per_stay_follow_the_config(tmp_path):
    s = generate(tmp_path, 120, seed=9, config=SynthConfig(density=0.05, chart_rows_per_stay=2000))
    per_stay = s.rows["CHARTEVENTS"] / s.icustays / 0.05
    assert 1300 < per_stay < 2700


# ---------------------------------------------------------------------------- errors, atomicity
@pytest.mark.parametrize("kwargs, message", [
    (dict(patients=0), "patients"), (dict(patients=MAX_PATIENTS + 1), "patients"), (dict(patients=2.5), "patients"),
    (dict(seed=-1), "seed"), (dict(config=dict(density=0)), r"^density must be in \(0, 10\], got 0"),
    (dict(config=dict(density=20)), r"^density must be in \(0, 10\], got 20"),
    (dict(config=dict(chunk_patients=0)), "^chunk_patients"),
    (dict(config=dict(admissions_probs=(0.5, 0.5, 0.5))), "^admissions_probs"),
    (dict(layout="mimic-v"), "layout"),
])
def test_bad_arguments(tmp_path, kwargs, message):
    """Bad input is a PipelineError (the CLI prints it as one line), never a bare ValueError; a bad
    SynthConfig is refused when it is made (it validates itself)."""
    args = dict(out_dir=tmp_path, patients=10, seed=0) | kwargs
    with pytest.raises(ConfigError, match=message):
        if isinstance(args.get("config"), dict):
            args["config"] = SynthConfig(**args["config"])
        generate(**args)


def test_an_exhausted_id_range_names_patients():
    pool = IdPool(np.random.default_rng(0), 100, 103, "HADM_ID")
    pool.take(2)
    with pytest.raises(ConfigError, match=r"HADM_ID range exhausted: more than 3 ids needed; patients is too large"):
        pool.take(2)


@pytest.mark.parametrize("argv, option", [
    (["--patients", str(MAX_PATIENTS + 1)], "--patients"), (["--density", "20"], "--density"),
    (["--seed", "-1"], "--seed"), (["--patients", "0"], "--patients"),
])
@pytest.mark.slow
def test_the_cli_refuses_what_the_library_would(tmp_path, argv, option):
    """The CLI's limits are the library's: bad values stop before anything is written (exit 2)."""
    from typer.testing import CliRunner

    import cli

    res = CliRunner().invoke(cli.app, ["synth", "--out", str(tmp_path / "s"), *argv])
    assert res.exit_code == 2 and f"Invalid value for '{option}'" in res.output
    assert not (tmp_path / "s").exists()


def test_failure_leaves_no_partial_files(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(events_hosp, "prescriptions", boom)
    with pytest.raises(RuntimeError, match="boom"):
        generate(tmp_path, 10, seed=0, config=SynthConfig(density=0.02))
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_prediction_hours_recorded(tmp_path):
    s = generate(tmp_path, 30, seed=1, config=SynthConfig(density=0.02, prediction_hours=48))
    adm, truth = read(s.out_dir, "ADMISSIONS"), read(s.out_dir, "truth")
    stay_h = (ts(adm.DISCHTIME) - ts(adm.ADMITTIME)).dt.total_seconds() / 3600
    assert set(truth.HADM_ID) == set(adm.HADM_ID[stay_h > 48])
    assert json.loads((s.out_dir / "_truth" / "README.json").read_text())["prediction_hours"] == 48
    assert np.isfinite(s.base_rate)


# ---------------------------------------------------------------------------- helpers
@pytest.mark.parametrize("lo, hi, split, cells", [
    ([0.5], [3.2], None, [(0, 0.5, 1.0), (1, 1.0, 2.0), (2, 2.0, 3.0), (3, 3.0, 3.2)]),
    ([23.2], [26.0], 24.5, [(23, 23.2, 24.0), (24, 24.0, 24.5), (24, 24.5, 25.0), (25, 25.0, 26.0)]),
    ([23.2], [24.3], 24.0, [(23, 23.2, 24.0), (24, 24.0, 24.3)]),
    ([2.0], [2.0], None, []),
])
def test_hour_cells(lo, hi, split, cells):
    row, h, a, b = hour_cells(np.array(lo), np.array(hi), split)
    assert (row == 0).all() and list(zip(h.tolist(), a.tolist(), b.tolist())) == cells


@pytest.mark.parametrize("x, dec, expected", [
    ([98.64, 7.386, -0.4, 54.9], [1, 2, 0, -1], [98.6, 7.39, 0.0, 50.0]),
])
def test_round_to(x, dec, expected):
    out = round_to(np.array(x), np.array(dec))
    assert out.tolist() == expected and not np.signbit(out).any()
