"""pipeline.reports.compare: mean ± sd over seeds per model and split mode, the true-risk row,
Markdown/CSV tables, collecting evaluated runs from MLflow, and a tiny benchmark grid."""

from __future__ import annotations

import csv
import io as _io
import math
import uuid
from pathlib import Path

import numpy as np
import pytest

from pipeline.bayes import metrics as M
from pipeline.core import fileio
from pipeline.reports import compare as cp
from pipeline.tasks.mortality import variants
from pipeline.workflows import grid

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("tracking_store")


def _row(model, mode, seed, base, truth=0.30):
    """A collected row whose metrics are ``base`` + small seed offsets."""
    r = {"run_id": f"{model}-{mode}-{seed}", "model": model, "split_mode": mode, "seed": seed}
    for i, split in enumerate(cp.SPLITS):
        for j, m in enumerate(cp.TABLE_METRICS):
            r[f"{split}_{m}"] = base + 0.01 * seed + 0.1 * i + j
            r[f"{split}_true_{m}"] = truth + 0.1 * i + j
            r[f"{split}_{m}_gap"] = r[f"{split}_{m}"] - r[f"{split}_true_{m}"]
        r[f"{split}_ece_floor"], r[f"{split}_true_ece_floor"] = 0.03 + 0.001 * seed, 0.02
    return r


ROWS = ([_row("rank1-cauchy", "random", s, 0.4) for s in (0, 1, 2)]
        + [_row("deterministic", "random", s, 0.5) for s in (0, 1)]
        + [_row("rank1-gaussian", "era", 0, 0.6, truth=0.35)])


def test_summarize_means_sds_and_order():
    summary = cp.summarize(ROWS)
    labels = [(r["split_mode"], r["model"]) for r in summary]
    assert labels == [("era", "rank1-gaussian"), ("era", cp.TRUE_RISK), ("random", "deterministic"),
                      ("random", "rank1-cauchy"), ("random", cp.TRUE_RISK)]
    r1 = summary[3]
    vals = [ROWS[s]["test_nll"] for s in range(3)]
    assert r1["seeds"] == 3 and r1["test_nll_mean"] == pytest.approx(np.mean(vals))
    assert r1["test_nll_sd"] == pytest.approx(np.std(vals, ddof=1))
    assert r1["test_nll_gap_mean"] == pytest.approx(np.mean([ROWS[s]["test_nll_gap"] for s in range(3)]))
    single = summary[0]
    assert single["seeds"] == 1 and math.isnan(single["val_ece_sd"])
    truth = summary[4]
    assert truth["test_nll_mean"] == pytest.approx(0.30 + 0.1) and truth["test_nll_gap_mean"] == 0.0
    assert summary[1]["val_auc_pr_mean"] == pytest.approx(0.35 + 1)
    assert r1["test_ece_floor_mean"] == pytest.approx(0.031) and truth["test_ece_floor_mean"] == pytest.approx(0.02)


def test_runs_with_other_settings_are_other_variants_and_a_repeated_seed_counts_once():
    rows = []
    for i, (hidden, seed, base) in enumerate([(64, 0, 0.40), (64, 1, 0.42), (256, 0, 0.30), (64, 1, 0.44)]):
        r = _row("rank1-gaussian", "random", seed, base)
        rows.append({**r, "run_id": f"r{i}", "start_time": i,
                     "settings": {"model.lstm_hidden": str(hidden), "train.max_steps": "1500"}})
    rows[0]["settings"]["model.prior_mean"] = "None"  # a setting older runs do not record is its default
    rows[0]["settings"]["model.prior_stddev"] = "0.1"  # (the default, written as a float)
    summary = [r for r in cp.summarize(rows) if r["model"] != cp.TRUE_RISK]
    assert [(r["model"], r["seeds"]) for r in summary] == [
        ("rank1-gaussian [model.lstm_hidden=256]", 1), ("rank1-gaussian [model.lstm_hidden=64]", 2)]
    assert summary[1]["test_nll_mean"] == pytest.approx(np.mean([rows[0]["test_nll"], rows[3]["test_nll"]]))


def test_a_new_setting_off_its_default_is_another_variant_even_beside_older_runs():
    rows = []
    for i, (seed, extra) in enumerate([(0, {}), (1, {}), (0, {"model.prior_mean": "0.5"})]):
        r = _row("rank1-gaussian", "random", seed, 0.4)
        rows.append({**r, "run_id": f"r{i}", "start_time": i, "settings": {"model.lstm_hidden": "64", **extra}})
    summary = [(r["model"], r["seeds"]) for r in cp.summarize(rows) if r["model"] != cp.TRUE_RISK]
    assert summary == [("rank1-gaussian [model.prior_mean=0.5]", 1), ("rank1-gaussian [model.prior_mean=None]", 2)]


def test_a_run_from_before_the_calibration_half_is_another_variant_than_one_with_it():
    """A run that does not record calibration_share predates it: it chose its checkpoint on the whole validation
    split (the former default 0), not on half of it, so it is not pooled with runs of the new default."""
    rows = []
    for i, (seed, extra) in enumerate([(0, {}), (0, {"train.calibration_share": "0.5"}),
                                       (1, {"train.calibration_share": "0.5"})]):
        r = _row("rank1-gaussian", "random", seed, 0.4)
        rows.append({**r, "run_id": f"r{i}", "start_time": i, "settings": {"model.lstm_hidden": "64", **extra}})
    summary = [(r["model"], r["seeds"]) for r in cp.summarize(rows) if r["model"] != cp.TRUE_RISK]
    assert sorted(summary) == [("rank1-gaussian [train.calibration_share=0.5]", 2),
                               ("rank1-gaussian [train.calibration_share=0]", 1)]


def test_runs_without_a_recorded_seed_are_never_merged():
    rows = [{**_row("deterministic", "random", -1, 0.4 + i / 10), "run_id": f"r{i}", "start_time": i} for i in range(2)]
    (summary, _truth) = cp.summarize(rows)
    assert summary["seeds"] == 2


def test_settings_leave_out_seed_logistics_and_the_features_and_keep_eval_samples():
    """The features are a run's section (its feature set, by content), not a setting of its variant: a folder's
    name recorded by older runs must not split one feature set's runs into variants."""
    params = {"train.seed": "3", "train.threads": "1", "model.lstm_hidden": "64", "train.lr": "0.0003",
              "features": "features-era", "n_train": "1170"}
    got = cp.settings_of(params, {"val": {"samples": 25}, "test": {"samples": 1}})
    assert got == {"model.lstm_hidden": "64", "train.lr": "0.0003", "eval.val.samples": "25", "eval.test.samples": "1"}


def test_summary_without_truth_has_no_reference_row():
    rows = [{k: (None if "true" in k or k.endswith("_gap") else v) for k, v in _row("deterministic", "random", 0,
                                                                                    0.5).items()}]
    summary = cp.summarize(rows)
    assert [r["model"] for r in summary] == ["deterministic"] and math.isnan(summary[0]["test_nll_gap_mean"])


def test_markdown_and_csv_tables(tmp_path):
    summary = cp.summarize(ROWS)
    md = cp.to_markdown(summary)
    lines = md.splitlines()
    assert lines[0].startswith("| split | model | seeds | val nll | val auc-pr | val ece | test nll")
    rank1 = next(ln for ln in lines if "rank1-cauchy" in ln)
    assert f"{np.mean([ROWS[s]['val_nll'] for s in range(3)]):.4f} ± " in rank1
    assert "| era | rank1-gaussian | 1 | 0.6000 |" in md  # one seed: the value alone
    md_path, csv_path = cp.write_tables(summary, tmp_path / "out")
    assert md_path.read_text() == md and not list((tmp_path / "out").glob(".*.tmp"))
    table = list(csv.DictReader(_io.StringIO(csv_path.read_text())))
    assert len(table) == len(summary) and table[3]["model"] == "rank1-cauchy"
    assert float(table[3]["test_ece_mean"]) == pytest.approx(summary[3]["test_ece_mean"], rel=1e-5)
    assert table[0]["val_nll_sd"] == ""  # n/a written as an empty cell
    assert "| test nll-gap | test ece-floor |" in lines[0]
    assert float(table[3]["test_ece_floor_mean"]) == pytest.approx(0.031)


def test_ece_floor_is_na_when_some_runs_predate_it():
    rows = [dict(r) for r in ROWS]
    rows[0].pop("test_ece_floor")  # an older evaluation of rank1-cauchy seed 0
    r1 = next(r for r in cp.summarize(rows) if r["model"] == "rank1-cauchy")
    assert math.isnan(r1["test_ece_floor_mean"]) and r1["seeds"] == 3 and math.isfinite(r1["test_ece_mean"])


@pytest.mark.parametrize("kind, prior, label", [("rank1", "cauchy", "rank1-cauchy"), ("rank1", None, "rank1-gaussian"),
                                                ("deep-ensemble", "gaussian", "deep-ensemble")])
def test_model_label(kind, prior, label):
    assert variants.model_label(kind, prior) == label


@pytest.mark.parametrize("kind, config, label", [
    ("rank1", {"prior": "gaussian", "factor_init": "None", "prior_stddev": "0.1"}, "rank1-gaussian"),
    ("rank1", {"prior": "gaussian", "factor_init": "random_sign", "prior_stddev": "1.0"}, "rank1-signs"),
    ("rank1", {"prior": "gaussian", "factor_init": "random_sign", "prior_stddev": 1}, "rank1-signs"),
    ("rank1", {"prior": "gaussian", "factor_init": "random_sign", "prior_stddev": "0.1"}, "rank1-gaussian"),
    ("rank1", {"prior": "cauchy"}, "rank1-cauchy"),
    ("rank1", {"prior": "gaussian", "factor_init": "random_sign", "prior_signs": "True", "prior_stddev": "0.1"},
     "rank1-symmetric"),
    ("rank1", {"prior": "gaussian", "factor_init": "random_sign", "prior_signs": "True", "prior_stddev": "1.0"},
     "rank1-gaussian"),  # neither variant: falls back to the prior's label (compare then splits by settings)
    ("rank1", {"prior": "gaussian", "prior_signs": "True"}, "rank1-gaussian"),
    ("rank1", {"prior": "gaussian"}, "rank1-gaussian"),  # an old run: settings it lacks are defaults
    ("batchensemble", {"prior": "gaussian", "factor_init": "random_sign"}, "batchensemble"),
])
def test_variant_label_is_the_most_specific_matching_variant(kind, config, label):
    assert variants.variant_label(kind, config) == label


# ---------------------------------------------------------------------------- collecting from MLflow


def _fake_run(client, exp_id, tmp_path, kind, prior, seed, mode, nll, splits=cp.SPLITS):
    run = client.create_run(exp_id)
    rid = run.info.run_id
    client.log_param(rid, "train.seed", str(seed))
    for split in splits:
        d = tmp_path / rid / split
        fileio.write_json(d / "metrics.json", {"model_kind": kind, "prior": prior, "split_mode": mode, "nll": nll,
                                           "auc_pr": 0.5, "ece": 0.1, "true_risk": {"nll": 0.2, "auc_pr": 0.6,
                                                                                    "ece": 0.01, "ece_floor": 0.02},
                                           "ece_floor": 0.04,
                                           "nll_gap": nll - 0.2, "auc_pr_gap": -0.1, "ece_gap": 0.09})
        client.log_artifact(rid, str(d / "metrics.json"), f"eval/{split}")
    client.set_terminated(rid)
    return rid


@pytest.mark.slow
def test_collect_reads_evaluated_runs_of_an_experiment(tmp_path):
    from mlflow.tracking import MlflowClient

    from pipeline.runs.store import experiment_id, tracking_uri

    name = f"compare-test-{uuid.uuid4().hex[:8]}"
    client = MlflowClient(tracking_uri())
    exp = experiment_id(name)
    ids = [_fake_run(client, exp, tmp_path, "rank1", "cauchy", s, "era", 0.3 + 0.1 * s) for s in (0, 1)]
    _fake_run(client, exp, tmp_path, "deterministic", "gaussian", 0, "era", 0.5, splits=())  # not evaluated
    rows = cp.collect(experiment=name)
    assert sorted(r["run_id"] for r in rows) == sorted(ids)
    assert {(r["model"], r["split_mode"]) for r in rows} == {("rank1-cauchy", "era")}
    assert sorted(r["test_nll"] for r in rows) == pytest.approx([0.3, 0.4])
    assert rows[0]["test_true_nll"] == 0.2
    assert (rows[0]["test_ece_floor"], rows[0]["test_true_ece_floor"]) == (0.04, 0.02)
    summary, files = cp.compare(run_ids=ids, out_dir=tmp_path / "tables")
    assert summary[0]["test_nll_mean"] == pytest.approx(0.35) and [f.name for f in files] == ["compare.md",
                                                                                              "compare.csv"]
    with pytest.raises(cp.CompareError, match="not found"):
        cp.collect(experiment=f"{name}-missing")
    with pytest.raises(cp.CompareError, match="run 0+ not found"):
        cp.collect(run_ids=["0" * 32])


def test_cli_benchmark_models_reads_space_separated_lists(monkeypatch):
    from typer.testing import CliRunner

    import cli

    seen = {}

    def fake_grid(synth, out, cfg):
        seen["cfg"] = cfg
        raise grid.GridError("stopped by the test")

    monkeypatch.setattr(grid, "run_grid", fake_grid)
    res = CliRunner().invoke(cli.app, ["benchmark-models", "--synth", "s", "--out", "o", "--seeds", "0", "1", "2",
                                       "--models", "rank1-cauchy", "deterministic", "--splits", "era", "--jobs", "2"])
    assert res.exit_code == 2 and "stopped by the test" in res.output
    cfg = seen["cfg"]
    assert (cfg.seeds, cfg.variants, cfg.split_modes, cfg.jobs) == ((0, 1, 2), ("rank1-cauchy", "deterministic"),
                                                                    ("era",), 2)
    assert cfg.train_overrides == {} and (cfg.max_steps, cfg.eval_every) == (1000, 250)
    # a preset's step budget applies unless --max-steps / --eval-every say otherwise
    CliRunner().invoke(cli.app, ["benchmark-models", "--synth", "s", "--out", "o", "--preset", "records-research"])
    assert (seen["cfg"].preset, seen["cfg"].max_steps, seen["cfg"].eval_every) == ("records-research", 10_000, 250)
    CliRunner().invoke(cli.app, ["benchmark-models", "--synth", "s", "--out", "o", "--preset", "paper",
                                 "--max-steps", "300", "--eval-every", "500"])
    assert (seen["cfg"].max_steps, seen["cfg"].eval_every) == (300, 300)
    CliRunner().invoke(cli.app, ["benchmark-models", "--synth", "s", "--out", "o", "--preset", "paper"])
    assert (seen["cfg"].max_steps, seen["cfg"].eval_every) == (20_000, 1_000)
    CliRunner().invoke(cli.app, ["benchmark-models", "--synth", "s", "--out", "o", "--batch-size", "256"])
    assert seen["cfg"].train_overrides == {"batch_size": 256}
    res = CliRunner().invoke(cli.app, ["benchmark-models", "--synth", "s", "--out", "o", "--seeds", "1", "bogus"])
    assert res.exit_code == 2 and "unexpected argument(s) ['bogus']" in res.output


# ---------------------------------------------------------------------------- the grid


@pytest.mark.slow
def test_tiny_grid_end_to_end(tmp_path, monkeypatch):
    """2 models x 2 seeds, tiny steps, on the era (distribution-shift) split: worker-process jobs, tables.

    (The random split runs the same code path; both modes are grouped in test_summarize_*.)
    """
    name = f"grid-test-{uuid.uuid4().hex[:8]}"
    cfg = grid.GridConfig(seeds=(0, 1), variants=("deterministic", "rank1-cauchy"), split_modes=("era",),
                        max_steps=6, eval_every=3,
                        samples=2, jobs=2, patients=400, density=0.05, experiment=name,
                        train_overrides={"score_samples": 2, "batch_size": 16},
                        model_overrides={"lstm_hidden": 8, "embedding_dim": 8, "dense_units": 8, "components": 2})
    result = grid.run_grid(tmp_path / "mimic", tmp_path / "out", cfg)
    assert len(result.run_ids) == 4 and len(set(result.run_ids)) == 4
    md = (tmp_path / "out" / "compare.md").read_text()
    for model in ("deterministic", "rank1-cauchy", cp.TRUE_RISK):
        assert f"| era | {model} |" in md, model
    assert not (tmp_path / "out" / "features-random").exists()
    rows = list(csv.DictReader(open(tmp_path / "out" / "compare.csv")))
    fitted = [r for r in rows if r["model"] != cp.TRUE_RISK]
    assert sorted(r["model"] for r in fitted) == ["deterministic", "rank1-cauchy"]
    runs = cp.collect(run_ids=result.run_ids)  # what MLflow recorded for the four runs
    for r in fitted:  # mean and sample sd (n - 1) over the two seeds, to the CSV's 6 significant digits
        nll = [x["test_nll"] for x in runs if x["model"] == r["model"]]
        assert r["seeds"] == "2" and len(nll) == 2
        assert float(r["test_nll_mean"]) == pytest.approx(np.mean(nll), rel=1e-5)
        assert float(r["test_nll_sd"]) == pytest.approx(np.std(nll, ddof=1), rel=1e-5, abs=1e-12)
    for r in rows:
        assert all(math.isfinite(float(r[f"{s}_{m}_mean"])) for s in cp.SPLITS for m in ("nll", "ece"))
    assert set(result.stage_s) == {"data", "train+evaluate", "compare"} and result.wall_s > 0
    assert (tmp_path / "mimic" / "ADMISSIONS.csv.gz").exists()  # generated once, cached for the next call

    # the experiments that read a grid (paired_compare, averaging_ceiling) find its runs and redraw its NLL
    from experiments import paired_compare
    from pipeline.data import features

    found = paired_compare.find_runs(tmp_path / "out")
    assert sorted(r["run_id"] for r in found) == sorted(result.run_ids)
    assert sorted((r["model"], r["split_mode"], r["seed"]) for r in found) == [
        ("deterministic", "era", 0), ("deterministic", "era", 1), ("rank1-cauchy", "era", 0),
        ("rank1-cauchy", "era", 1)]
    run = next(r for r in found if r["model"] == "rank1-cauchy")
    fs = features.load_split(tmp_path / "out" / "features-era" / "val.parquet")
    logits = paired_compare.run_logits(run, fs, "val", cfg.samples, cfg.eval_batch_size, tmp_path / "cache")
    assert M.mixture_nll(logits, fs.label) == pytest.approx(
        next(x["val_nll"] for x in runs if x["run_id"] == run["run_id"]), rel=1e-6)
    (tmp_path / "out" / grid.RUNS_FILE).unlink()  # a grid written before runs.json: its runs found by their features
    assert {r["run_id"] for r in paired_compare.find_runs(tmp_path / "out")} == set(result.run_ids)


def test_runs_on_other_feature_sets_are_never_pooled():
    """compare with no run ids reads the whole experiment: runs on other features (another extraction, other
    admissions) get their own section, headed by the feature set's release and source, and their own true-risk
    reference."""
    demo = {"features": "aaaa00000001", "features_label": "MIMIC-III from csv:/d (aaaa00000001)",
            "identified_by": "content"}
    synth = {"features": "bbbb00000002", "features_label": "MIMIC-IV from csv:/s (bbbb00000002)",
             "identified_by": "content"}
    rows = ([{**_row("deterministic", "random", s, 0.4), **demo} for s in (0, 1)]
            + [{**_row("deterministic", "random", s, 0.6, truth=0.5), **synth} for s in (0, 1)])
    summary = cp.summarize(rows)
    assert [(r["features"], r["model"], r["seeds"]) for r in summary] == [
        ("aaaa00000001", "deterministic", 2), ("aaaa00000001", cp.TRUE_RISK, 0),
        ("bbbb00000002", "deterministic", 2), ("bbbb00000002", cp.TRUE_RISK, 0)]
    assert summary[1]["test_nll_mean"] == pytest.approx(0.30 + 0.1)
    assert summary[3]["test_nll_mean"] == pytest.approx(0.6)
    assert summary[3]["features_label"] == synth["features_label"]
    md = cp.to_markdown(summary)
    lines = md.splitlines()
    first, second = lines.index(f"## Feature set: {demo['features_label']}"), lines.index(
        f"## Feature set: {synth['features_label']}")
    assert first < second and "not pooled" in md
    assert lines[first + 2].startswith("| split | model | seeds |")
    assert any(ln.startswith("| random | true risk |") for ln in lines[first:second])  # each set its own reference
    assert any(ln.startswith("| random | true risk |") for ln in lines[second:])
    table = list(csv.DictReader(_io.StringIO(cp.to_csv(summary))))
    assert [t["features"] for t in table] == ["aaaa00000001"] * 2 + ["bbbb00000002"] * 2
    assert table[2]["features_label"] == synth["features_label"]
    assert "not pooled" not in cp.to_markdown(cp.summarize(rows[:2]))  # one feature set: one section
