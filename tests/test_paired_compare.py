"""experiments/paired_compare.py: paired differences and their bootstrap intervals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments import paired_compare as pc
from pipeline.bayes import metrics as M


def _cohort(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    risk = 1 / (1 + np.exp(-rng.normal(-2.5, 1.5, n)))  # (N,)
    return (rng.random(n) < risk).astype(np.float32), risk


def _logit(p) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    return np.log(p / (1 - p))


def test_identical_models_differ_by_zero():
    y, risk = _cohort(300)
    x = _logit(risk)[None, None, :] + np.random.default_rng(1).normal(0, 0.3, (5, 2, 300))  # (S, K, N)
    r = pc.paired(y, [x], [x.copy()], n_bootstrap=200)
    for m in pc.PAIRED:
        assert r[f"{m}_diff"] == 0.0 and r[f"{m}_diff_ci"] == [0.0, 0.0]
    floor = M.ece_floor(y, M.predictive(x))
    assert r["ece_floor_a"] == r["ece_floor_b"] == floor.mean and r["ece_p_value_a"] == floor.p_value
    assert r["calibration_slope_a"] == r["calibration_slope_b"] == M.recalibration(y, M.predictive(x)).slope
    z = 0.5 * x  # flatter predictions on the B side: its own floor and slope
    r2 = pc.paired(y, [x], [z], n_bootstrap=50)
    assert r2["ece_floor_a"] == floor.mean and r2["ece_floor_b"] == M.ece_floor(y, M.predictive(z)).mean
    assert r2["calibration_slope_b"] == M.recalibration(y, M.predictive(z)).slope != r2["calibration_slope_a"]


@pytest.mark.slow
def test_difference_is_the_mixture_nll_difference_and_the_truth_wins():
    y, risk = _cohort(4000)
    truth = _logit(risk)[None, :]  # (1, N)
    draws = _logit(risk)[None, :] + np.random.default_rng(2).normal(0, 1.0, (8, 4000))  # (D, N) noisy draws
    r = pc.paired(y, [truth], [draws], n_bootstrap=300)
    p = 1 / (1 + np.exp(-draws))  # (D, N)
    mixture = -np.log(np.where(y == 1, p, 1 - p).mean(0)).mean()  # -log mean_d p_d(y), averaged
    direct = -np.log(np.where(y == 1, risk, 1 - risk)).mean()
    assert r["nll_b"] == pytest.approx(mixture, rel=1e-9)
    assert r["nll_diff"] == pytest.approx(direct - mixture, rel=1e-9)
    lo, hi = r["nll_diff_ci"]
    assert lo <= r["nll_diff"] <= hi < 0  # the true risk is better, and resolvably so at n = 4000
    assert r["nll_p_a_better"] == 1.0
    assert r["auc_pr_a"] == M.average_precision(y, risk) and r["auc_pr_b"] == M.average_precision(y, p.mean(0))
    assert r["auc_pr_diff"] > 0 and r["auc_pr_p_a_better"] > 0.95  # higher AUC-PR is better: the truth's


@pytest.mark.slow
def test_pooled_is_the_mean_of_the_pairs():
    y, risk = _cohort(500, seed=3)
    rng = np.random.default_rng(4)
    a = [_logit(risk)[None, :] + rng.normal(0, s, (4, 500)) for s in (0.2, 0.6)]
    b = [_logit(risk)[None, :] + rng.normal(0, s, (4, 500)) for s in (0.4, 0.8)]
    pooled = pc.paired(y, a, b, n_bootstrap=100)
    single = [pc.paired(y, [x], [z], n_bootstrap=100) for x, z in zip(a, b)]
    for m in pc.PAIRED:
        assert pooled[f"{m}_diff"] == pytest.approx(np.mean([s[f"{m}_diff"] for s in single]))
    with pytest.raises(ValueError, match="same number"):
        pc.paired(y, a, b[:1])


def test_kl_to_the_true_risk_is_compared_where_the_truth_is_given():
    y, risk = _cohort(600, seed=5)
    rng = np.random.default_rng(6)
    near = _logit(risk)[None, :] + rng.normal(0, 0.2, (4, 600))  # (D, N): close to the truth
    far = _logit(risk)[None, :] + rng.normal(0.5, 0.8, (4, 600))  # biased and noisy
    assert pc.KL not in pc.compared(pc.paired(y, [near], [far], n_bootstrap=50))  # no truth: not compared
    r = pc.paired(y, [near], [far], n_bootstrap=300, true_risk=risk)
    assert pc.compared(r) == pc.PAIRED + (pc.KL,)
    # independently of metrics.kl_to_truth: the Bernoulli KL written out, of the mixture's mean probability
    for x, side in ((near, "a"), (far, "b")):
        q = (1 / (1 + np.exp(-x))).mean(0)  # (N,)
        kl = risk * np.log(risk / q) + (1 - risk) * np.log((1 - risk) / (1 - q))
        assert r[f"kl_{side}"] == pytest.approx(kl.mean(), rel=1e-9)
    lo, hi = r["kl_diff_ci"]
    assert lo <= r["kl_diff"] <= hi < 0 and r["kl_p_a_better"] == 1.0  # lower KL is better: A's
    truth = _logit(risk)[None, :]  # (1, N): the truth itself has KL 0
    assert pc.paired(y, [truth], [far], n_bootstrap=20, true_risk=risk)["kl_a"] == pytest.approx(0.0, abs=1e-9)


def test_references_constant_and_truth():
    y = np.array([0, 0, 0, 1], dtype=np.float32)
    ref = pc.references(y, np.array([0.1, 0.2, 0.1, 0.5]), train_rate=0.25)
    assert ref["const_nll"] == pytest.approx(-(3 * np.log(0.75) + np.log(0.25)) / 4)
    assert ref["true_nll"] == pytest.approx(-(np.log(0.9) * 2 + np.log(0.8) + np.log(0.5)) / 4)
    assert pc.references(y, None, 0.25)["true_nll"] is None


def _run_dir(root: Path, run_id: str, info: dict, split: str) -> None:
    d = root / run_id
    d.mkdir(parents=True)
    (d / "model_info.json").write_text(json.dumps(info))
    (d / "manifest.json").write_text(json.dumps({"config": {"split": split}}))


@pytest.mark.usefixtures("tracking_store")
def test_find_runs_adds_the_laplace_run_directories_with_their_own_labels(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    _run_dir(tmp_path / "laplace", "b" * 32, {"model_kind": "laplace", "model_label": "laplace-random-2000",
                                              "model_config": None, "train_config": {"seed": "1"}}, "era")
    assert pc.find_runs(bench) == []  # a grid without runs, and a store without them
    both = {r["run_id"]: r for r in pc.find_runs(bench, [tmp_path / "laplace"])}
    assert both["b" * 32]["model"] == "laplace-random-2000" and both["b" * 32]["seed"] == 1  # its MAP run's seed
    assert both["b" * 32]["split_mode"] == "era" and both["b" * 32]["dir"] == tmp_path / "laplace" / ("b" * 32)


@pytest.mark.parametrize("a_seeds, b_seeds, paired_seeds", [
    ((0, 1, 2), (0,), [0, 1, 2]),  # one baseline run against every seed of A
    ((0,), (0, 1, 2), [0, 1, 2]),
    ((0, 1, 2), (1, 2, 3), [1, 2]),  # several runs each: seed with seed
])
def test_pair_seeds_pairs_a_single_run_with_every_seed(a_seeds, b_seeds, paired_seeds):
    ra = {s: {"run_id": f"a{s}"} for s in a_seeds}
    rb = {s: {"run_id": f"b{s}"} for s in b_seeds}
    pa, pb = pc.pair_seeds(ra, rb)
    assert sorted(set(pa) & set(pb)) == paired_seeds
    for s in paired_seeds:
        assert pa[s]["run_id"] == (f"a{s}" if len(a_seeds) > 1 else f"a{a_seeds[0]}")
        assert pb[s]["run_id"] == (f"b{s}" if len(b_seeds) > 1 else f"b{b_seeds[0]}")


def test_find_runs_labels_as_compare_does(monkeypatch, tmp_path):
    """Runs of one model whose settings differ keep apart (compare's labels), never merged by model name."""
    from pipeline.reports import compare
    from pipeline.workflows import grid

    def row(run_id: str, seed: int, hidden: str, start: int) -> dict:
        return {"run_id": run_id, "model": "rank1-gaussian", "split_mode": "random", "features": "features-random",
                "seed": seed, "start_time": start, "settings": {"model.lstm_hidden": hidden}}

    rows = [row("a", 0, "64", 1), row("b", 0, "256", 2), row("c", 1, "64", 3)]
    monkeypatch.setattr(grid, "grid_runs", lambda bench: ["a", "b", "c"])
    monkeypatch.setattr(compare, "collect", lambda run_ids: rows)
    found = {r["run_id"]: r["model"] for r in pc.find_runs(tmp_path)}
    assert found == {"a": "rank1-gaussian [model.lstm_hidden=64]", "b": "rank1-gaussian [model.lstm_hidden=256]",
                     "c": "rank1-gaussian [model.lstm_hidden=64]"}


def test_align_puts_b_in_a_order_and_refuses_other_admissions():
    keys_a, labels_a = np.array(["a", "b", "c"]), np.array([1.0, 0.0, 0.0])
    assert pc.align(keys_a, labels_a, keys_a, labels_a).tolist() == [0, 1, 2]
    order = pc.align(keys_a, labels_a, np.array(["c", "a", "b"]), np.array([0.0, 1.0, 0.0]))
    assert order.tolist() == [1, 2, 0]
    with pytest.raises(SystemExit, match="other admissions"):
        pc.align(keys_a, labels_a, np.array(["c", "a", "d"]), np.array([0.0, 1.0, 0.0]))
    with pytest.raises(SystemExit, match="other labels"):
        pc.align(keys_a, labels_a, np.array(["c", "a", "b"]), np.array([1.0, 1.0, 0.0]))
