"""experiments/train_log_rates.py: stopping points and rates of a series of train calls, from its log."""

from __future__ import annotations

import pytest

from experiments import train_log_rates as tl

LOG = """Sun Dec  6 10:00:00 UTC 2026
== era rank1 0
train 4000/80000 (5%)  nll 0.30, loss 1.0  [100 s, about 1900 s left]
train 8000/80000 (10%)  nll 0.30, loss 1.0  [300 s, about 1800 s left]
Sun Dec  6 11:00:00 UTC 2026
== era rank1 0 --resume
train 12000/80000 (15%)  nll 0.30, loss 1.0  [50 s, about 1700 s left]
train 16000/80000 (20%)  nll 0.30, loss 1.0  [150 s, about 1600 s left]
early stopping: stopped at step 17000 of 80000
steps=17000 best_step=13000 best_val_nll=0.250000 uncertainty_measure=sd checkpoint=x/best.pt
run_id: 0123456789abcdef0123456789abcdef
Sun Dec  6 11:10:00 UTC 2026
== era deterministic 0
train 1000/20000 (5%)  nll 0.30, loss 1.0  [40 s, about 760 s left]
train 3000/20000 (15%)  nll 0.30, loss 1.0  [140 s, about 660 s left]
steps=4000 best_step=2000 best_val_nll=0.260000 uncertainty_measure=entropy checkpoint=y/best.pt
run_id: fedcba9876543210fedcba9876543210
Sun Dec  6 11:20:30 UTC 2026
== random deterministic 1
train 1000/20000 (5%)  nll 0.30, loss 1.0  [40 s, about 760 s left]
""".splitlines()


def test_a_resumed_run_sums_its_timed_segments_and_a_one_call_run_has_its_wall_time():
    rows = tl.parse(LOG)
    assert [r["run_id"][:4] for r in rows] == ["0123", "fedc"]  # the unfinished run is left out
    r1, det = rows
    assert (r1["segments"], r1["steps"], r1["best_step"], r1["best_val_nll"]) == (2, 17000, 13000, 0.25)
    assert r1["steps_timed"] == 4000 + 4000 and r1["seconds_timed"] == 200 + 100
    assert r1["steps_per_s"] == pytest.approx(8000 / 300)
    assert r1["admissions_per_s"] == pytest.approx(8000 / 300 * 16)  # rank-1: 16 distinct admissions a step
    assert r1["epochs"] == pytest.approx(17000 / (80000 / 40)) and r1["wall_minutes"] is None  # resumed: no wall
    assert det["admissions_per_s"] == pytest.approx(2000 / 100 * 64) and det["wall_minutes"] == pytest.approx(10.5)
    assert det["epochs"] == pytest.approx(8.0)
