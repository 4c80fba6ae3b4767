"""experiments/referral_orderings.py: the partitions, the paired coverage differences and the decision rule that
docs/experiments/2026-12-04-referral-orderings.md wrote down before its first result."""

from __future__ import annotations

import numpy as np
import pytest

from experiments import referral_orderings as ro
from experiments.referral_guarantee import Pool

R = 20  # partitions of the constructed coverages


def _cov(base: float, shift: dict[str, float], seed: int, noise: float = 0.002) -> dict:
    """One run's coverage record: every ordering at ``base`` + its ``shift``, per alpha, over R partitions."""
    rng = np.random.default_rng(seed)
    common = rng.normal(0, 0.02, R)  # the partition's own luck, shared by the orderings (what pairing removes)
    return {o: {a: {"coverage": base + shift.get(o, 0.0) + common + rng.normal(0, noise, R),
                    "true_miss": np.full(R, 0.03), "refer_all": np.zeros(R, bool)} for a in ("0.05", "0.1")}
            for o in ro.ORDERINGS}


def _grid(shift_posterior: dict[str, float], shift_point: dict[str, float]) -> dict:
    cov: dict = {}
    for split in ("random", "era"):
        for kind in ro.POSTERIOR_KINDS + ro.POINT_KINDS:
            shift = shift_posterior if kind in ro.POSTERIOR_KINDS else shift_point
            cov.setdefault(split, {})[kind] = {s: _cov(0.6, shift, 100 * s + len(kind)) for s in range(3)}
    return cov


def test_partitions_are_halves_fixed_by_the_seed():
    p = ro.partitions(101, 5, 3)
    assert p.shape == (5, 101) and (p.sum(axis=1) == 50).all()
    assert np.array_equal(p, ro.partitions(101, 5, 3)) and not np.array_equal(p, ro.partitions(101, 5, 4))


def test_equal_orderings_keep_the_defaults():
    d = ro.decide(_grid({}, {}), n_boot=200, seed=0)
    for family in ("posterior", "point"):
        assert d[family]["keep"] and d[family]["default"] == ro.DEFAULTS[family]
        v = d[family]["diffs"][ro.DEFAULTS[family]]["0.1"]
        assert abs(v["diff"]) < 0.002 and v["ci"][0] > -ro.MARGIN


def test_a_loss_beyond_the_margin_switches_to_the_best_eligible_ordering():
    # decision loses 3 pp, entropy gains 1 pp, sd gains 2 pp at 10% but loses 2 pp at 5% (not eligible)
    cov = _grid({"decision": -0.03, "entropy": 0.01, "sd": 0.0}, {"va_decision": -0.03})
    for split in cov.values():
        for kind in ro.POSTERIOR_KINDS:
            for c in split[kind].values():
                c["sd"]["0.1"]["coverage"] = c["risk"]["0.1"]["coverage"] + 0.02
                c["sd"]["0.05"]["coverage"] = c["risk"]["0.05"]["coverage"] - 0.02
    d = ro.decide(cov, n_boot=200, seed=0)
    post, point = d["posterior"], d["point"]
    assert not post["keep"] and post["best"] == "entropy" and post["default"] == "entropy"
    assert "sd" not in post["eligible"] and post["diffs"]["decision"]["0.1"]["diff"] == pytest.approx(-0.03, abs=2e-3)
    assert not point["keep"] and point["default"] in ("risk", "entropy", "va_width")


def test_a_small_loss_inside_the_margin_keeps_the_default():
    d = ro.decide(_grid({"decision": -0.004}, {}), n_boot=200, seed=0)
    assert d["posterior"]["keep"] and d["posterior"]["diffs"]["decision"]["0.05"]["diff"] < 0


def test_coverage_on_a_constructed_pool_holds_its_promise():
    """The risk itself as the measure of a nearly true-risk model: the rule's kept miss rate (from the truth) stays near
    or below alpha, point-model orderings are n/a, and the whole-split numbers are finite."""
    rng = np.random.default_rng(0)
    m = 1200
    q = 1.0 / (1.0 + np.exp(-rng.normal(-2.2, 1.2, m)))
    y = (rng.random(m) < q).astype(np.float64)
    r = np.clip(q * np.exp(rng.normal(0.0, 0.3, m)), 1e-4, 0.999)  # the model's risk: the truth, noisy
    measures = {o: (r if o == "risk" else rng.random(m)) for o in ro.ORDERINGS}
    pool = Pool("x", np.arange(m).astype(str), y, q, r, 0.15, measures, {}, False, "va_decision", 600, 60, {})
    assert ro.available(pool) == ["risk", "entropy", "va_decision", "va_width"]
    c = ro.coverage(pool, ro.partitions(m, 10, 0), alphas=(0.1,))
    assert set(c) == set(ro.available(pool))
    risk = c["risk"]["0.1"]
    assert (risk["coverage"] > 0.1).all() and risk["true_miss"].mean() < 0.1
    # kept and below the threshold: never more than the kept; by the risk every kept admission lies below it here
    for o in c:
        assert (c[o]["0.1"]["kept_low"] <= c[o]["0.1"]["coverage"] + 1e-12).all()
    assert np.allclose(risk["kept_low"], risk["coverage"])
    w = ro.whole_split(pool)
    assert w["risk"]["referral_gain"] > w["va_width"]["referral_gain"] and np.isfinite(w["risk"]["augrc_brier"])


def test_redraw_separates_the_one_realization_from_the_truth():
    """A test split whose one realization lost every death below the threshold: calibrated on its halves, the rule's
    realized kept miss rate is 0 while the true one is not; with outcomes redrawn from the truth the rule keeps its
    promise (share above alpha within delta, up to Monte Carlo error)."""
    rng = np.random.default_rng(1)
    m = 1600
    q = 1.0 / (1.0 + np.exp(-rng.normal(-2.2, 1.2, m)))
    r = np.clip(q * np.exp(rng.normal(0.0, 0.2, m)), 1e-4, 0.999)
    y = ((rng.random(m) < q) & (r >= 0.15)).astype(np.float64)  # the unlucky realization
    pool = Pool("x", np.arange(m).astype(str), y, q, r, 0.15, {"risk": r}, {}, False, "risk", 800, 80, {})
    res = ro.redraw(pool, ["risk"], ro.partitions(m, 5, 0), alphas=(0.1,), repeats=60, seed=0)["risk"]["0.1"]
    assert res["realized"] == 0.0 < res["true"]
    for name in ("redrawn", "iid"):
        g = res[name]
        assert g["repeats"] == 60 and 0.0 <= g["above"] <= ro.DELTA + 2 * max(g["se"], 0.04)
        assert 0.0 < g["referral"] < 1.0


@pytest.mark.parametrize("laplace_map", ["deterministic", "rank1-gaussian"])
def test_extras_fit_laplace_on_the_named_variant_and_gbm_per_split_and_seed(tmp_path, monkeypatch, laplace_map):
    """``extras``: Laplace on the ``--laplace-map`` variant's run and gbm for every (split, seed), none twice; a
    (split, seed) without that variant's run gets gbm alone."""
    from pipeline.core import fileio

    grid = [{"variant": v, "split_mode": m, "seed": s, "run_id": f"{v}-{m}-{s}"}
            for v in ("deterministic", "rank1-gaussian") for m in ("random", "era") for s in (0, 1)
            if (v, m, s) != (laplace_map, "era", 1)]
    fileio.write_json(tmp_path / "runs.json", grid)
    fileio.write_json(tmp_path / ro.EXTRA_FILE, [{"run_id": "x", "variant": "gbm", "split_mode": "random", "seed": 1}])
    calls = []
    monkeypatch.setattr(ro, "_child", lambda argv: calls.append(argv) or f"{len(calls):032x}")
    ro.extras(tmp_path, [0, 1], ["random", "era"], 3, laplace_map)
    recorded = [(r["variant"], r["split_mode"], r["seed"]) for r in fileio.read_json(tmp_path / ro.EXTRA_FILE)]
    assert recorded == [("gbm", "random", 1), ("laplace", "random", 0), ("gbm", "random", 0),
                        ("laplace", "random", 1), ("laplace", "era", 0), ("gbm", "era", 0), ("gbm", "era", 1)]
    assert [c[2] for c in calls if c[0] == "laplace"] == [f"{laplace_map}-random-0", f"{laplace_map}-random-1",
                                                          f"{laplace_map}-era-0"]
    assert calls[1] == ["train", "--data", str(tmp_path / "features-random"), "--model", "gbm", "--seed", "0",
                        "--threads", "3", "--no-progress"]
    ro.extras(tmp_path, [0, 1], ["random", "era"], 3, laplace_map)  # everything recorded: nothing runs again
    assert len(calls) == 6
