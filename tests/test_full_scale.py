"""benchmarks.full_scale's checked scan and report, experiments.early_stopping's simulation and rule."""

from __future__ import annotations

import pytest

from benchmarks.full_scale import CHAIN, checked_scan, render
from experiments.early_stopping import Candidate, decide, simulate


def test_checked_scan_counts_the_same_rows_through_csv_and_stage(demo_dir, tmp_path):
    from pipeline.data.mimic.sources.stage import stage_csv

    stage_csv(demo_dir, tmp_path / "stage")
    csv, staged = checked_scan(str(demo_dir)), checked_scan(str(tmp_path / "stage"))
    assert csv["tables"] == staged["tables"]
    assert csv["tables"]["admissions"]["rows"] == 129  # the demo's ADMISSIONS.csv data lines
    assert csv["rows"] == sum(t["rows"] for t in csv["tables"].values()) > 0


CURVE = [(250, 0.30), (500, 0.28), (750, 0.27), (1000, 0.275), (1250, 0.274), (1500, 0.26), (1750, 0.262),
         (2000, 0.263), (2250, 0.264), (2500, 0.265)]


@pytest.mark.parametrize(("cand", "kept", "nll", "steps"), [
    (Candidate(None, None, 2500), 1500, 0.26, 2500),  # no patience: the best of the whole curve
    (Candidate(None, None, 1000), 750, 0.27, 1000),  # the cap cuts the curve
    (Candidate(2, None, 2500), 750, 0.27, 1250),  # two validations without a better best after 750
    (Candidate(3, None, 2500), 1500, 0.26, 2250),  # one more: 1500 is found, then 3 without
    (Candidate(None, 4.0, 2500), 750, 0.27, 1000),  # 4 epochs of 250 steps
])
def test_simulate_stops_as_the_training_loop_does(cand, kept, nll, steps):
    res = simulate(CURVE, cand, steps_per_epoch=250.0, eval_every=250)
    assert (res["kept_step"], res["val_nll"], res["steps"]) == (kept, nll, steps)


@pytest.mark.parametrize(("cand", "kept", "nll", "steps"), [
    (Candidate(2, 10.0, None), 750, 0.27, 1250),  # no cap: the epoch budget alone
    (Candidate(2, 10.0, None, patience_epochs=0.75), 1500, 0.26, 2250),  # 0.75 epochs of 1000 steps: 3 validations
    (Candidate(2, 10.0, None, patience_epochs=0.25), 750, 0.27, 1250),  # less than 2 validations: 2
])
def test_patience_in_epochs_is_the_larger_of_the_two_as_the_training_config_says(cand, kept, nll, steps):
    from pipeline.tasks.mortality.train_config import TrainConfig

    res = simulate(CURVE, cand, steps_per_epoch=1000.0, eval_every=250)
    assert (res["kept_step"], res["val_nll"], res["steps"]) == (kept, nll, steps)
    cfg = TrainConfig(patience=cand.patience, patience_epochs=cand.patience_epochs, eval_every=250)
    assert cand.validations(1000.0, 250) == cfg.patience_validations(1000, 1)


def test_a_curve_that_ended_by_its_own_patience_simulates_any_candidate_that_stops_within_it():
    stopped = CURVE[:8]  # a run that stopped at 2000 (its own patience 2 after the best at 1500)
    assert simulate(stopped, Candidate(2, 10.0, None), 250.0, 250)["steps"] == 1250
    with pytest.raises(SystemExit, match="ends at step 2000"):  # patience 4 would run past the run's stop
        simulate(stopped, Candidate(4, 10.0, None), 250.0, 250)


def test_the_budget_rule_takes_the_fewest_full_scale_steps_among_the_eligible():
    from experiments import training_budget as tb

    def cell(**short):  # candidate -> (shortfall, steps)
        return {n: {"shortfall": v, "steps": s, "kept_steps": [], "n": 3} for n, (v, s) in short.items()}

    ok = dict(R=(0.004, 12_000.0), A=(0.0004, 30_000.0), B=(0.0001, 34_000.0), C=(0.0, 40_000.0))
    summary = {"8k": {"rank1-gaussian": cell(**ok), "deterministic": cell(**ok)},
               "full": {"rank1-gaussian": cell(**ok), "deterministic": cell(**ok)}}
    assert tb.decide(summary)["eligible"] == ["A", "B", "C"] and tb.decide(summary)["adopted"] == "A"
    summary["full"]["deterministic"]["A"]["shortfall"] = 0.002  # A cuts one model short at scale
    d = tb.decide(summary)
    assert d["eligible"] == ["B", "C"] and d["adopted"] == "B"
    summary["full"]["deterministic"]["B"]["shortfall"] = summary["full"]["deterministic"]["C"]["shortfall"] = 0.002
    assert tb.decide(summary) == {"eligible": [], "adopted": "A", "why": "none eligible"}  # A below R everywhere


def test_simulate_refuses_a_budget_past_the_curve():
    with pytest.raises(SystemExit, match="ends at step 2500"):
        simulate(CURVE, Candidate(None, None, 3000), steps_per_epoch=250.0, eval_every=250)


def _row(ref: float, **cands: tuple[float, float]) -> dict:
    return {"reference": {"val_nll": ref, "steps": 4000.0},
            **{n: {"val_nll": v, "steps": s} for n, (v, s) in cands.items()}}


def test_the_rule_needs_every_kind_within_the_margin_and_breaks_ties_by_steps(monkeypatch):
    from experiments import early_stopping

    monkeypatch.setattr(early_stopping, "ROUNDS", {1: [(1, None), (2, None), (3, None)]})
    names = [c.name for c in early_stopping.candidates(1)]
    # the first candidate is best for rank-1 but cuts the deterministic model short: not eligible
    summary = {"rank1-gaussian": _row(0.270, **{names[0]: (0.260, 9000.0), names[1]: (0.2652, 8000.0),
                                               names[2]: (0.2650, 9000.0)}),
               "deterministic": _row(0.270, **{names[0]: (0.280, 1000.0), names[1]: (0.2702, 3000.0),
                                              names[2]: (0.270, 4000.0)})}
    d = decide(summary, 1)
    assert d["eligible"] == names[1:] and d["tied"] == names[1:]
    assert d["adopted"] == names[1]  # within the margin of the best, and fewer steps
    summary["deterministic"][names[1]]["val_nll"] = summary["deterministic"][names[2]]["val_nll"] = 0.271
    assert decide(summary, 1) == {"eligible": [], "adopted": None}


def test_render_states_targets_only_at_full_scale():
    stage = {"wall_s": 10.0, "cpu_s": 9.0, "peak_rss_mb": 100.0, "load_average": 1.0}
    r = {"fraction": 0.5, "layout": "mimic-iii", "patients": 23260, "admissions": 100, "event_rows": 1000,
         "cpus": 2, "max_steps": None, "stages": {s: dict(stage) for s in CHAIN},
         "chain_wall_s": 50.0, "chain_cpu_s": 45.0}
    text = render(r)
    assert "not applicable below full scale" in text and " met" not in text
    text = render({**r, "fraction": 1.0})
    assert "(target 25 min: met)" in text and "(targets: 90 s, met; 3 GB, met)" in text
