"""pipeline.workflows.evaluate: mixture NLL against a loop, vectorised == sequential weight draws,
`cli.py evaluate` end to end on the demo (JSON keys, plots, MLflow metrics, privacy), the
true-risk reference on synthetic data, and clear errors.

Runs are tracked in the session's own store (``tracking_store``); ``demo_run`` and
``helpers.runs.trained_run`` give tiny trainings shared with the scoring and serving tests.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import privacy_scan as privacy
from helpers.features import N_CONTEXT, N_TOKENS, write_features
from helpers.raw_ids import raw_ids_of
from helpers.runs import TINY, trained_run

from pipeline.bayes import metrics
from pipeline.bayes.layers import embedding as emb_mod
from pipeline.bayes.layers import factors as factors_mod
from pipeline.bayes.layers import meanfield as mf_mod
from pipeline.core import errors
from pipeline.data import batches, features
from pipeline.engine import predict
from pipeline.runs import store
from pipeline.runs.load import load_run
from pipeline.tasks.mortality import MortalityConfig, build_model, truth
from pipeline.workflows import evaluate

ROOT = Path(__file__).resolve().parents[1]
JSON_KEYS = ("nll", "auc_pr", "auc_roc", "ece", "brier", "n", "positives", "samples", "components", "calibrated",
             "decision", "refer_rule", "selective", "augrc_by_ordering", "retention")

pytestmark = pytest.mark.usefixtures("tracking_store")


# ---------------------------------------------------------------------------- mixture NLL


def _loop_nll(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mixture NLL with explicit loops over admissions and draws (log-sum-exp by hand)."""
    s, k, n = logits.shape
    total = 0.0
    for i in range(n):
        lls = []
        for a in range(s):
            for b in range(k):
                x = float(logits[a, b, i])
                # log sigmoid(x) = -log(1 + e^-x), written stably for either sign
                lp = -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))
                ln = -math.log1p(math.exp(x)) if x <= 0 else -x - math.log1p(math.exp(-x))
                lls.append(lp if labels[i] == 1 else ln)
        m = max(lls)
        total += -(m + math.log(sum(math.exp(v - m) for v in lls)) - math.log(len(lls)))
    return total / n


@pytest.mark.parametrize("s, k, n, scale", [(1, 1, 30, 1.0), (5, 4, 40, 3.0), (25, 2, 12, 40.0), (3, 3, 9, 0.01)])
def test_mixture_nll_matches_loop(s, k, n, scale):
    rng = np.random.default_rng(s * 100 + k)
    logits = rng.normal(0.0, scale, size=(s, k, n)) + rng.normal(0.0, scale, size=(1, 1, n))
    labels = (rng.random(n) < 0.4).astype(float)
    labels[:2] = (0.0, 1.0)
    report = evaluate.report_of(logits, labels, n_bootstrap=0)
    assert report["nll"] == pytest.approx(_loop_nll(logits, labels), rel=1e-10, abs=1e-12)
    members = [_loop_nll(logits[:, j : j + 1, :], labels) for j in range(k)]
    assert report["member_nll"] == pytest.approx(members, rel=1e-10, abs=1e-12)
    assert (report["samples"], report["components"], report["n"]) == (s, k, n)
    assert report["referral"]["fractions"][0] == 0.0 and report["referral"]["nll"][0] == pytest.approx(report["nll"])


# ---------------------------------------------------------------------------- vectorised == sequential


class NoiseReplay:
    """Record the noise of one S-sample forward, then replay sample s in a 1-sample forward.

    Patches the three noise sources of the Bayesian layers (rank-1 factors, variational
    embeddings, mean-field weights), so both runs use exactly the same weight draws.
    """

    def __init__(self, monkeypatch) -> None:
        self.mode, self.sample, self.calls, self.records = "record", 0, 0, []
        real_noise, real_emb = factors_mod.standard_noise, emb_mod.EmbeddingBayes._noise
        real_w = mf_mod.GaussianWeight.sample
        replay = self

        def noise(kind, shape, like, generator=None):  # per-member factor noise (S, K, n)
            if replay.mode == "record":
                replay.records.append(real_noise(kind, shape, like, generator))
                return replay.records[-1]
            return replay._next()[replay.sample : replay.sample + 1]

        def weight(self, draws, generator=None):  # mean-field weights (S, *shape)
            if replay.mode == "record":
                out = real_w(self, draws, generator)
                replay.records.append(out)
                return out
            return replay._next()[replay.sample : replay.sample + 1]

        def emb(self, ids, samples, sampling, generator=None):  # (group = sample, token) -> noise row
            if replay.mode == "record":
                table, index = real_emb(self, ids, samples, sampling, generator)
                rows = torch.arange(ids.shape[0]).view(-1, *([1] * (ids.dim() - 1))).expand_as(ids)
                group = rows // (ids.shape[0] // samples)
                rec = {(int(g), int(t)): table[int(j)] for g, t, j in
                       zip(group[ids != 0], ids[ids != 0], index[ids != 0])}
                replay.records.append(rec)
                return table, index
            rec = replay._next()
            keys = torch.where(ids == 0, torch.zeros_like(ids), ids + 1)
            uniq, index = torch.unique(keys, return_inverse=True)
            table = torch.stack([torch.zeros(self.embedding_dim) if int(u) == 0 else rec[(replay.sample, int(u) - 1)]
                                 for u in uniq])
            if int(uniq[0]) == 0:
                return table, index
            return torch.cat([torch.zeros(1, self.embedding_dim), table]), index + 1

        monkeypatch.setattr(factors_mod, "standard_noise", noise)
        monkeypatch.setattr(emb_mod.EmbeddingBayes, "_noise", emb)
        monkeypatch.setattr(mf_mod.GaussianWeight, "sample", weight)

    def _next(self):
        out = self.records[self.calls]
        self.calls += 1
        return out

    def replay(self, sample: int) -> None:
        self.mode, self.sample, self.calls = "replay", sample, 0


@pytest.fixture(scope="module")
def small_val(tmp_path_factory):
    out = write_features(tmp_path_factory.mktemp("feats"), n_train=8, n_val=13, n_test=4)
    return features.load_split(out / "val.parquet")


@pytest.mark.parametrize("kind, prior", [("rank1", "gaussian"), ("rank1", "cauchy"), ("bayes-full", "gaussian"),
                                         ("bayes-emb", "gaussian")])
def test_vectorised_draws_equal_sequential_draws(small_val, monkeypatch, kind, prior):
    """S·K draws in one forward == the same draws applied one sample at a time."""
    torch.manual_seed(0)
    model = build_model(kind, MortalityConfig(N_TOKENS, N_CONTEXT, prior=prior, **TINY))
    s = 5
    batch = batches.collate(small_val, np.arange(len(small_val)))
    replay = NoiseReplay(monkeypatch)
    torch.manual_seed(123)
    together = predict.predict_logits(model, [batch], samples=s)  # (S, K, N), recorded
    assert replay.records, "no noise was drawn"
    one_by_one = []
    for a in range(s):
        replay.replay(a)
        one_by_one.append(predict.predict_logits(model, [batch], samples=1)[0])  # (K, N)
        assert replay.calls == len(replay.records)  # every recorded draw was used once
    np.testing.assert_allclose(together, np.stack(one_by_one), rtol=1e-5, atol=1e-6)
    assert np.ptp(together, axis=0).max() > 1e-4  # the samples really differ


def test_sample_logits_is_seeded_and_batched_over_draws(small_val):
    """sample_logits == one seeded forward of the whole batch; a different seed differs; RNG untouched."""
    torch.manual_seed(0)
    model = build_model("rank1", MortalityConfig(N_TOKENS, N_CONTEXT, **TINY))
    n = len(small_val)
    state = torch.get_rng_state()
    a = evaluate.sample_logits(model, small_val, samples=4, batch_size=n, seed=7)
    assert torch.equal(state, torch.get_rng_state())
    torch.manual_seed(7)
    direct = predict.predict_logits(model, [batches.collate(small_val, np.arange(n))], samples=4)
    np.testing.assert_array_equal(a, direct)
    assert a.shape == (4, 3, n)
    assert not np.allclose(a, evaluate.sample_logits(model, small_val, samples=4, batch_size=n, seed=8))


# ---------------------------------------------------------------------------- end to end on the demo


def test_cli_evaluate_demo_end_to_end(demo_run, demo_features, demo_dir, tmp_path):
    from mlflow.tracking import MlflowClient

    from pipeline.runs.store import tracking_uri

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "cli.py"), "evaluate", "--run", demo_run, "--split", "val", "--split", "test",
           "--samples", "6", "--bootstrap", "50", "--threads", "1", "--out", str(tmp_path / "eval")]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "auc_pr" in proc.stdout and "test: n=" in proc.stdout and "val: n=" in proc.stdout
    for split in ("val", "test"):  # where the plots are
        assert "plots: " + ", ".join(str(tmp_path / "eval" / split / png) for png in evaluate.PLOTS) in proc.stdout
    for split in ("val", "test"):
        report = json.loads((tmp_path / "eval" / split / "metrics.json").read_text())
        for key in JSON_KEYS:
            assert key in report, key
        n = demo_features.manifest["splits"][split]["admissions"]
        assert (report["n"], report["samples"], report["components"]) == (n, 6, TINY["components"])
        assert report["positives"] == demo_features.manifest["splits"][split]["positives"]
        assert len(report["nll_ci"]) == 2 and report["nll_ci"][0] <= report["nll"] <= report["nll_ci"][1]
        assert report["truth"] is False and "true_risk" not in report
        assert evaluate.format_table(report) + f"\nmetrics: {tmp_path / 'eval' / split / 'metrics.json'}" in proc.stdout
        for png in evaluate.PLOTS:
            assert (tmp_path / "eval" / split / png).read_bytes()[:4] == b"\x89PNG"
    run = MlflowClient(tracking_uri()).get_run(demo_run)
    test_report = json.loads((tmp_path / "eval" / "test" / "metrics.json").read_text())
    assert run.data.metrics["test_nll"] == pytest.approx(test_report["nll"])
    assert run.data.metrics["test_auc_pr"] == pytest.approx(test_report["auc_pr"])
    assert run.data.tags["eval_test_samples"] == "6" and run.data.tags["split_mode"] == "random"
    logged = {a.path for a in MlflowClient(tracking_uri()).list_artifacts(demo_run, "eval/test")}
    assert logged == {f"eval/test/{f}" for f in ("metrics.json", *evaluate.PLOTS)}
    # privacy: no raw identifier or date in the JSON, the file names or the printed table
    findings = privacy.scan([tmp_path / "eval"], raw_ids_of(demo_dir))
    assert not findings, [str(f) for f in findings]
    raw = raw_ids_of(demo_dir)
    for name in [p.name for p in (tmp_path / "eval").rglob("*")] + proc.stdout.split():
        assert privacy.check_string(name, raw) is None, name


def test_evaluate_run_returns_consistent_logits(demo_run, tmp_path):
    res = evaluate.evaluate_run(demo_run, "val", evaluate.EvalConfig(samples=3, n_bootstrap=0, log_to_run=False),
                          out_dir=tmp_path)
    assert res.logits.shape == (3, TINY["components"], res.report["n"])
    assert res.report["nll"] == pytest.approx(metrics.mixture_nll(res.logits, res.labels))
    assert res.report["auc_pr"] == pytest.approx(metrics.average_precision(res.labels, metrics.predictive(res.logits)))
    assert res.json_path == tmp_path / "metrics.json" and res.report["nll_ci"] == [None, None]


# ---------------------------------------------------------------------------- synthetic: true risk


@pytest.fixture(scope="module")
def small_synth(tmp_path_factory):
    from pipeline.data.mimic.extraction import extract
    from pipeline.data.mimic.synth import SynthConfig, generate

    root = tmp_path_factory.mktemp("synth")
    generate(root / "mimic", patients=500, seed=11, config=SynthConfig(density=0.05))
    return root, extract(root / "mimic", root / "features")


def test_true_risk_reference_found_automatically(small_synth, tmp_path_factory, tmp_path):
    root, res = small_synth
    run_id = trained_run(tmp_path_factory, res.out_dir, kind="deterministic")
    out = evaluate.evaluate_run(run_id, "test", evaluate.EvalConfig(samples=2, n_bootstrap=20, log_to_run=True),
                                out_dir=tmp_path)
    report = out.report
    frame = pd.read_parquet(res.out_dir / "test.parquet", columns=["key", "label"])
    truth = pd.read_csv(root / "mimic" / "_truth" / "truth.csv.gz").rename(columns=str.lower)
    joined = frame.merge(pd.read_csv(res.link_file), on="key").merge(truth, on="hadm_id")
    assert len(joined) == report["n"] and report["truth"] is True
    r, y = joined["true_risk"].to_numpy(), joined["label"].to_numpy()
    true_nll = float(-np.mean(np.where(y == 1, np.log(r), np.log1p(-r))))
    assert report["true_risk"]["nll"] == pytest.approx(true_nll, rel=1e-9)
    assert report["nll_gap"] == pytest.approx(report["nll"] - true_nll, rel=1e-9)
    assert report["true_risk"]["auc_pr"] == pytest.approx(metrics.average_precision(y, r))
    from mlflow.tracking import MlflowClient

    from pipeline.runs.store import tracking_uri

    logged = MlflowClient(tracking_uri()).get_run(run_id).data.metrics
    assert logged["test_true_nll"] == pytest.approx(true_nll) and "test_nll_gap" in logged
    # --json elsewhere: the run still gets eval/val/metrics.json, so `compare` sees the evaluation
    val = evaluate.evaluate_run(run_id, "val", evaluate.EvalConfig(samples=2, n_bootstrap=0, log_to_run=True),
                                out_dir=tmp_path,
                          json_path=tmp_path / "my-val.txt")
    from pipeline.reports.compare import collect

    (row,) = collect(run_ids=[run_id])
    assert row["val_nll"] == pytest.approx(val.report["nll"]) and row["test_nll"] == pytest.approx(report["nll"])
    assert "true risk" in evaluate.format_table(report)
    # uncertainty against the truth: a deterministic run's only uncertainty is its entropy, chosen at training
    vs = report["uncertainty_vs_truth"]
    error = metrics.kl_to_truth(r, metrics.predictive(out.logits))
    h = metrics.predictive_entropy(out.logits)
    assert vs["measures"]["entropy"]["spearman"] == pytest.approx(metrics.spearman(h, error), abs=1e-12)
    assert vs["measures"]["entropy"]["referral_gain"] == pytest.approx(metrics.referral_gain(error, h), abs=1e-12)
    assert vs["measures"]["mi"]["referral_gain"] == pytest.approx(0.0, abs=1e-12)  # MI = 0 everywhere: random
    assert report["refer_measure"] == "entropy" and report["referral"]["measure"] == "entropy"
    assert logged["test_referral_gain_entropy"] == pytest.approx(vs["measures"]["entropy"]["referral_gain"])
    assert row["test_referral_gain"] == row["test_referral_gain_entropy"] == pytest.approx(
        vs["measures"]["entropy"]["referral_gain"])
    assert "referral gain (Spearman)" in evaluate.format_table(report)
    # the run's policy on test: its JSON numbers are the library's on this split's calibrated risk and ordering
    from pipeline.bayes.referral.policy import Predictive
    from pipeline.tasks.mortality.risk import policy_of

    policy = policy_of(load_run(run_id).info)
    pred = Predictive(metrics.predictive(out.logits), draws=metrics.sigmoid(metrics.as_draws(out.logits)))
    cal = policy.calibrator.apply(pred.mean)
    u = policy.measures(pred, cal, policy.threshold.flag(cal))[policy.ordering.value]
    sel = report["selective"]
    assert sel["ordering"] == policy.ordering.value and sel["risk"] == "calibrated"
    assert sel["brier"]["augrc"] == pytest.approx(metrics.augrc(metrics.selective_loss(y, cal, "brier"), u))
    assert sel["brier"]["aurc"] == pytest.approx(metrics.aurc(metrics.selective_loss(y, cal, "brier"), u))
    zero_one = metrics.selective_loss(y, cal, "zero_one", policy.threshold.threshold)
    assert sel["zero_one"]["augrc"] == pytest.approx(metrics.augrc(zero_one, u))
    assert sel["zero_one"]["risk_at_0.9"] == pytest.approx(metrics.selective_risk(zero_one, u, 0.9))
    assert sel["brier"]["coverage_at_risk"] == pytest.approx(metrics.coverage_at_risk(
        metrics.selective_loss(y, cal, "brier"), u, 0.05))
    assert report["calibrated"]["nll"] == pytest.approx(float(-np.mean(np.where(y == 1, np.log(cal), np.log1p(-cal)))))
    ret = report["retention"]
    assert ret["fractions"][0] == 0.0 and ret["nll"][0] == pytest.approx(report["calibrated"]["nll"])
    kl = r * np.log(r / cal) + (1 - r) * np.log((1 - r) / (1 - cal))
    assert report["retention_truth"]["kl"][0] == pytest.approx(kl.mean())
    assert report["refer_rule"]["referral_rate"] == pytest.approx(float((u > policy.rule.overall.cut).mean()))
    assert row["test_augrc"] == pytest.approx(sel["brier"]["augrc"]) and row["test_ece_calibrated"] == pytest.approx(
        report["calibrated"]["ece"])
    table = evaluate.format_table(report)
    assert any(line.startswith("metric ") and " calibrated " in line for line in table.splitlines())
    assert "selective (brier loss, by " in table


# ---------------------------------------------------------------------------- errors


def test_features_from_another_vocabulary_are_refused(demo_run, tmp_path):
    other = write_features(tmp_path / "other")
    with pytest.raises(errors.PipelineError, match=r"vocab.json: differs from the vocabulary run"):
        evaluate.evaluate_run(demo_run, "test", evaluate.EvalConfig(samples=1, n_bootstrap=0, log_to_run=False),
                              data=other,
                        out_dir=tmp_path / "o")


@pytest.mark.parametrize("uri, message", [
    ("0123456789abcdef0123456789abcdef", "not found.* tracking store"),  # the store asked, or that there is none
    ("runs:/nothex/model", "'nothex' is not a run id"),
    ("/no/such/model", "neither a run id"),
])
@pytest.mark.slow
def test_unknown_runs_give_clear_errors(uri, message):
    with pytest.raises(errors.PipelineError, match=message):
        load_run(uri)


def test_truth_without_some_admissions_is_an_error(small_synth, tmp_path):
    root, res = small_synth
    keys = pd.read_parquet(res.out_dir / "test.parquet", columns=["key"])["key"]
    table = pd.read_csv(root / "mimic" / "_truth" / "truth.csv.gz")
    link = pd.read_csv(res.link_file)
    dropped = link.loc[link["key"] == keys.iloc[3], "hadm_id"].iloc[0]
    table[table["HADM_ID"] != dropped].to_csv(tmp_path / "truth.csv.gz", index=False)
    with pytest.raises(errors.PipelineError, match=r"no TRUE_RISK for 1 admission\(s\) \(first: features row 3\)"):
        truth.load_true_risk(tmp_path / "truth.csv.gz", res.link_file, keys)
    table.drop(columns=["TRUE_RISK"]).to_csv(tmp_path / "bad.csv.gz", index=False)
    with pytest.raises(errors.PipelineError, match=r"bad.csv.gz: missing column TRUE_RISK"):
        truth.load_true_risk(tmp_path / "bad.csv.gz", res.link_file, keys)


def test_cli_evaluate_reports_errors_without_traceback(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "cli.py"), "evaluate", "--run", "0" * 32, "--split", "test"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "error: run 000" in proc.stderr and "Traceback" not in proc.stderr


def test_referral_title_and_calibration_notes_read_naturally():
    from pipeline.reports import plots

    curve = metrics.referral_curve(np.zeros((2, 1, 4)), np.array([0, 1, 0, 1]))
    assert plots.referral_title(curve, "val") == ("Referring the most uncertain admissions (val), ranked by mutual "
                                                  "information")
    report = {"split": "test", "n": 40, "positives": 12, "samples": 2, "components": 1, "member_nll": [0.5],
              **{m: 0.5 for m in metrics.METRICS}, "calibration_slope": -0.4, "calibration_intercept": 0.1}
    line = next(ln for ln in evaluate.format_table(report).splitlines() if ln.startswith("calibration slope"))
    assert "(negative: higher predicted risks went with fewer deaths, the ranking is reversed)" in line
    assert "(> 0: risks too low, < 0: too high)" in line
    for slope, note in ((0.5, "< 1: risks spread too far"), (1.6, "> 1: risks too close"), (1.0, "near 1")):
        assert evaluate.slope_note(slope).startswith(note)


def _table_report(positives: int, **extra) -> dict:
    return {"split": "test", "n": 189, "positives": positives, "samples": 25, "components": 4, "member_nll": [0.5],
            **{m: 0.5 for m in metrics.METRICS}, **{f"{m}_ci": [0.4, 0.6] for m in metrics.METRICS},
            "calibration_slope": -28.0, "calibration_intercept": 3.0, **extra}


def test_a_split_with_fewer_than_10_deaths_has_its_intervals_and_slope_not_judged():
    """1 death: no 95% intervals or calibration slope of -28 presented as findings."""
    table = evaluate.format_table(_table_report(1))
    assert ("caution: 1 deaths in this split (fewer than 10): the 95% intervals, the ECE and the calibration "
            "slope cannot be judged") in table
    assert "[0.4000, 0.6000]" not in table and "not judged" in table.splitlines()[3]
    assert "-28" not in table and "calibration slope not judged (1 deaths; 10 or more needed)" in table
    enough = evaluate.format_table(_table_report(10))
    assert "caution" not in enough and "[0.4000, 0.6000]" in enough and "calibration slope -28.0000" in enough


@pytest.mark.parametrize("identical, shown", [(True, "draws=1 (a deterministic model: its 25 samples are one draw)"),
                                              (False, "draws=25x4")])
def test_identical_draws_are_counted_once(identical, shown):
    assert evaluate.format_table(_table_report(15, identical_draws=identical)).splitlines()[0].endswith(shown)


def test_the_run_not_found_error_points_at_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mlflow.db").write_bytes(b"")  # a store that exists (one that does not: the test below)
    text = str(store.run_not_found("0" * 32, LookupError("RESOURCE_DOES_NOT_EXIST: Run '000' not found\nmore")))
    assert text == (f"run {'0' * 32} not found in the tracking store sqlite:///{tmp_path / 'mlflow.db'} "
                    f"(MLFLOW_TRACKING_URI is unset, so the store is mlflow.db in the working directory {tmp_path}: "
                    "run the command from the directory the run was trained in, or set MLFLOW_TRACKING_URI to its "
                    "store): RESOURCE_DOES_NOT_EXIST: Run '000' not found")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    assert "is unset" not in str(store.run_not_found("0" * 32, LookupError("x")))


@pytest.mark.slow
def test_run_not_found_says_the_default_store_follows_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(errors.PipelineError) as err:  # no store here or above: none is made (issue 46, item 1)
        load_run("0" * 32)
    assert str(err.value) == (f"run {'0' * 32} not found: no tracking store: no mlflow.db in the working directory "
                              f"{tmp_path} or any folder above it (MLFLOW_TRACKING_URI is unset): run the command "
                              "inside the project where `train` made its mlflow.db, or set MLFLOW_TRACKING_URI to "
                              "that store")
    assert not (tmp_path / "mlflow.db").exists()
    store.client(create=True)  # a store that holds no such run
    with pytest.raises(errors.PipelineError) as err:
        load_run("0" * 32)
    text = str(err.value)
    assert f"not found in the tracking store sqlite:///{tmp_path / 'mlflow.db'}" in text
    assert (f"MLFLOW_TRACKING_URI is unset, so the store is mlflow.db in the working directory {tmp_path}: run the "
            "command from the directory the run was trained in, or set MLFLOW_TRACKING_URI") in text
    assert "\n" not in text
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(errors.PipelineError) as err:
        load_run("0" * 32)
    assert "other.db (MLFLOW_TRACKING_URI) does not exist" in str(err.value) and "is unset" not in str(err.value)
    assert not (tmp_path / "other.db").exists()
