"""experiments/promise_across_eras.py at toy size: the detectors, the promise's settings against the oracle, the
monitor's streams and the decision rule that docs/experiments/2026-12-06-promise-across-eras.md wrote down before
its first result."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import sparse

from experiments import promise_across_eras as pe
from experiments.referral_guarantee import Pool
from pipeline.bayes.referral import Predictive, ReferralConfig, fit_policy


def _admissions(rng, n: int, era: float):
    """True logit z; the model's raw risk a flatter noisy z, shifted by ``era``; token counts whose first columns
    move with the era."""
    z = rng.normal(-2.3 + 0.3 * era, 1.2, n)
    q = 1 / (1 + np.exp(-z))
    draws = 1 / (1 + np.exp(-(z / 1.4 + 0.4 * era + 0.3 * rng.normal(size=(8, n)))))
    x = rng.poisson(np.r_[np.full(5, 1.0 + era), np.full(25, 1.0)], size=(n, 30)).astype(float)
    return q, draws, sparse.csr_matrix(x)


def _era_pool(seed: int, era: float) -> pe.EraPool:
    rng = np.random.default_rng(seed)
    qv, dv, xv = _admissions(rng, 3000, 0.0)
    yv = (rng.random(3000) < qv).astype(float)
    cal = np.arange(3000) % 2 == 1
    sel = ~cal
    policy = fit_policy(Predictive(dv[:, sel].mean(0), draws=dv[:, sel]), yv[sel],
                        Predictive(dv[:, cal].mean(0), draws=dv[:, cal]), yv[cal], ReferralConfig(alpha=0.1), seed=0)
    qt, dt, xt = _admissions(rng, 4000, era)
    pred = Predictive(dt.mean(0), draws=dt)
    cols = policy.apply(pred)
    measures = policy.measures(pred, cols.risk_calibrated, cols.high_risk)
    pool = Pool("toy", np.arange(4000).astype(str), (rng.random(4000) < qt).astype(float), qt, cols.risk_calibrated,
                policy.threshold.threshold, measures, {}, True, policy.ordering.value, int(cal.sum()),
                int(yv[cal].sum()), {})
    return pe.EraPool(pool, pred.mean, policy, xv, cal, qv, xt)


@pytest.fixture(scope="module")
def eras():
    return {"era": {"rank1-gaussian": {0: _era_pool(0, 1.0)}}, "random": {"rank1-gaussian": {0: _era_pool(1, 0.0)}}}


def test_the_oracle_is_the_largest_kept_unflagged_share_within_alpha():
    rng = np.random.default_rng(2)
    q, r = rng.beta(1, 12, 2000), rng.beta(1, 12, 2000)
    k = pe.oracle_kept(q, r, 0.2, 0.05)
    order = np.argsort(np.where(r < 0.2, r, np.inf))
    n = int(round(k * 2000))
    assert q[order[:n]].sum() / q.sum() <= 0.05 < q[order[: n + 1]].sum() / q.sum()


def test_the_study_at_toy_size_and_its_decision(eras):
    results = pe.study(eras, sizes=(50, 400), labelled=(400,), draws=4, streams=6, seed=0)
    era, same = results["era"]["rank1-gaussian"]["0"], results["random"]["rank1-gaussian"]["0"]
    # the new era is seen by the features (and the outputs) at 400 admissions; every detector reports a share
    assert era["detectors"]["400"]["features by MMD"] == 1.0 and set(era["detectors"]["50"]) == set(pe.DETECTORS)
    p = era["promise"]
    assert set(p) >= {"as_is", "oracle", "recertified 400", "recertified 400 (threshold refitted)", "weighted"}
    assert 0.0 <= p["oracle"] <= 1.0 and len(p["recertified 400"]["miss"]) == 4 and len(p["weighted"]["miss"]) == 4
    assert all(0.0 <= v <= 1.0 for v in p["recertified 400"]["kept"])
    floor = era["floor"]  # the exact test's floor, from the truth: below the oracle, and not in the same-era runs
    assert 0.0 <= floor["expected"]["400"] <= p["oracle"] and "floor" not in same
    assert floor["needed"] is None or floor["needed"] > 400 or floor["expected"]["400"] >= p["oracle"] - pe.MARGIN
    m = same["monitor"]
    assert m["stationary"]["true_miss"] <= 0.1 < m["broken"]["true_miss"] <= 0.2 + 1e-9
    assert m["broken"]["alarms"] >= 5  # 2 alpha over 4,000 admissions: raised
    pe.print_detectors(results)
    pe.print_monitor(results)
    d = pe.decide(results, draws=4)
    assert d["detector"]["default"] in pe.DETECTORS and set(d["promise"]) >= {"as_is", "weighted"}
    assert d["recertify"]["flags kept"]["compared_at"] == 400
    assert d["promise"]["recertified 400"]["floor"] == pytest.approx(floor["expected"]["400"])
    assert d["promise"]["recertified 400 (threshold refitted)"].get("floor") is None
    assert d["floor"]["needed"] == [floor["needed"]]
    pe.print_decision(d)
    assert d["recertify_mode"] in ("flags kept", "threshold refitted", None)  # None: neither valid at 4 draws


def test_the_decision_rule_keeps_the_default_detector_unless_another_is_clearly_more_powerful():
    def cell(power: dict, null: dict) -> dict:
        return {"era": {"k": {"0": {"detectors": {"250": power, "500": power}}}},
                "random": {"k": {"0": {"detectors": {"250": null, "500": null}}}}}

    names = list(pe.DETECTORS)
    low = dict.fromkeys(names, 0.04)
    d = pe.decide(cell({**dict.fromkeys(names, 0.5), pe.DEFAULT_DETECTOR: 0.6}, low), draws=200)
    assert d["detector"]["keep"] and d["detector"]["default"] == pe.DEFAULT_DETECTOR
    d = pe.decide(cell({**dict.fromkeys(names, 0.5), "outputs only": 0.7}, low), draws=200)
    assert not d["detector"]["keep"] and d["detector"]["default"] == "outputs only"
    # a detector that false-alarms is never eligible, however powerful
    d = pe.decide(cell({**dict.fromkeys(names, 0.5), "outputs only": 0.9}, {**low, "outputs only": 0.12}), draws=200)
    assert "outputs only" not in d["detector"]["eligible"] and d["detector"]["keep"]


def test_the_decision_rule_on_recertification():
    def cell(miss: float, kept: float, n: int = 100) -> dict:
        return {"miss": [miss] * n, "kept": [kept] * n}

    promise = {"alpha": 0.05, "delta": 0.1, "oracle": 0.3, "as_is": cell(0.01, 0.05, 1),
               "recertified 250": cell(0.02, 0.2), "recertified 1000": cell(0.03, 0.27),
               "recertified 250 (threshold refitted)": cell(0.2, 0.3),  # breaks the promise: never valid
               "recertified 1000 (threshold refitted)": cell(0.02, 0.22), "weighted": cell(0.01, 0.1)}
    d = pe.decide({"era": {"k": {"0": {"promise": promise}}}}, draws=100)
    assert d["promise"]["recertified 250 (threshold refitted)"]["valid"] is False
    assert d["recertify"]["flags kept"]["smallest_k"] == 1000 and d["recertify_mode"] == "flags kept"
    # one draw within the margin of the oracle (0.3 - 0.05) and alpha: every draw at 1,000, none at 250
    assert d["promise"]["recertified 1000"]["near"] == 1.0 and d["promise"]["recertified 250"]["near"] == 0.0
    assert d["promise"]["recertified 250 (threshold refitted)"]["near"] == 0.0  # near the oracle, above alpha
    assert d["recertify"]["threshold refitted"]["smallest_k"] is None and d["weighted_recommended"]
    pe.print_decision(d)  # the report's lines print


def test_a_labelled_set_that_recertify_refuses_is_counted_and_referred_whole(eras):
    """12 labelled admissions at about 10% risk: the refitted threshold's half of 6 mostly holds no death, which
    recertify refuses; the study counts those draws (refused, referred all) and goes on."""
    p = pe.promise(eras["era"]["rank1-gaussian"][0], labelled=(12,), draws=8, seed=0)
    for name in ("recertified 12", "recertified 12 (threshold refitted)"):
        rec = p[name]
        assert len(rec["miss"]) == len(rec["kept"]) == 8 and rec["refused"] >= 1
        assert rec["refer_all"] >= rec["refused"]
    assert p["recertified 12 (threshold refitted)"]["refused"] >= p["recertified 12"]["refused"]
    d = pe.decide({"era": {"rank1-gaussian": {"0": {"promise": p}}}}, draws=8)
    assert d["promise"]["recertified 12"]["refused"] == p["recertified 12"]["refused"]


def test_a_study_cut_short_resumes_from_the_runs_it_saved(eras, tmp_path, capsys):
    ids = {("era", "rank1-gaussian", 0): "runA", ("random", "rank1-gaussian", 0): "runB"}
    saved = pe.saved_in(tmp_path, ids, (50,), (400,), 3, 4, 0)
    first = pe.study(eras, sizes=(50,), labelled=(400,), draws=3, streams=4, seed=0, saved=saved)
    assert sorted(p.name.split("-study-")[0] for p in tmp_path.glob("*.json")) == ["runA", "runB"]
    (tmp_path / next(p.name for p in tmp_path.glob("runB-*"))).unlink()  # cut before the second run was saved
    capsys.readouterr()
    again = pe.study(eras, sizes=(50,), labelled=(400,), draws=3, streams=4, seed=0, saved=saved)
    assert capsys.readouterr().out.splitlines() == ["era rank1-gaussian seed 0: read",
                                                    "random rank1-gaussian seed 0: done"]
    assert again == first  # the same numbers, read or recomputed
    (tmp_path / next(p.name for p in tmp_path.glob("runB-*"))).unlink()
    capsys.readouterr()
    interim = pe.study(eras, sizes=(50,), labelled=(400,), draws=3, streams=4, seed=0, saved=saved, saved_only=True)
    assert interim == {"era": first["era"]} and "random rank1-gaussian seed 0: not saved yet, left out" in \
        capsys.readouterr().out
    assert pe.saved_in(None, ids, (50,), (400,), 3, 4, 0) is None
    assert saved("era", "rank1-gaussian", 0) != pe.saved_in(tmp_path, ids, (50,), (400,), 4, 4, 0)(
        "era", "rank1-gaussian", 0)  # another number of draws is another file


def test_rule_3_on_the_monitor_pools_the_streams_and_needs_both_halves():
    def run(st, br, n=200):
        return {"monitor": {"stationary": {"alarms": st, "streams": n}, "broken": {"alarms": br, "streams": n}}}

    good = {"era": {"k": {"0": run(11, 200)}}, "random": {"k": {"0": run(12, 190)}}}
    d = pe.decide_monitor(good)
    assert d["pooled"]["false_alarms"] == 23 / 400 and d["pooled"]["caught"] == 390 / 400 and d["pooled"]["passes"]
    assert d["random"]["caught"] == 0.95 and d["era"]["passes"]
    slow = {"era": {"k": {"0": run(11, 200)}}, "random": {"k": {"0": run(12, 161), "1": run(10, 164)}}}
    d = pe.decide_monitor(slow)
    assert not d["random"]["passes"] and d["era"]["passes"] and not d["pooled"]["passes"]  # 525 / 600 < 0.9
    noisy = {"era": {"k": {"0": run(40, 200)}}}
    assert not pe.decide_monitor(noisy)["era"]["passes"]  # 20% false alarms
