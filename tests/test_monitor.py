"""The outcome monitor (bayes.monitor): the mixture wealth against numerical integration, the bounds against the
wealth, the alarm against a prefix-by-prefix recomputation, batches against one pass, the state's JSON round trip,
no alarm on at least 1 - delta of stationary streams that keep the promise, an alarm where the miss rate is 2 alpha."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.integrate import quad

from pipeline.bayes.monitor import MonitorState, log_wealth, lower_bound, prior_b, start, update, upper_bound


@pytest.mark.parametrize("ones,zeros,m,b", [(0, 0, 0.05, 18.0), (3, 40, 0.05, 18.0), (10, 100, 0.05, 18.0),
                                            (0, 50, 0.1, 1.0), (30, 200, 0.12, 5.0), (1, 0, 0.5, 2.0)])
def test_the_closed_form_wealth_is_the_mixture_integral_of_the_bets(ones, zeros, m, b):
    """K(m) = E_{c ~ Beta(1, b)} prod (1 - c + c X / m) (1 - c)^(1 - X): the bettors' wealth averaged by quadrature."""
    def integrand(c):
        return b * (1 - c) ** (b - 1) * (1 - c + c / m) ** ones * (1 - c) ** zeros

    assert np.exp(log_wealth(ones, zeros, m, b)) == pytest.approx(quad(integrand, 0, 1, limit=200)[0], rel=1e-7)


def test_the_wealth_of_a_sequence_is_the_product_of_its_bets():
    """For one fixed bet c the wealth is the product of the per-outcome factors; the mixture averages those products
    (checked by Monte Carlo over c ~ Beta(1, b))."""
    rng = np.random.default_rng(0)
    x = rng.random(60) < 0.12
    m, b = 0.05, prior_b(0.05)
    c = rng.beta(1.0, b, 200_000)
    wealth = np.prod(np.where(x[:, None], 1 - c + c / m, 1 - c), axis=0)
    assert np.exp(log_wealth(x.sum(), (~x).sum(), m, b)) == pytest.approx(wealth.mean(), rel=0.02)
    assert prior_b(0.05, 2.0) == pytest.approx(18.0)


def test_the_bounds_are_the_roots_of_the_wealth():
    delta, b = 0.1, 18.0
    lo = lower_bound(20, 150, delta, b)
    assert 0 < lo < 20 / 170 and log_wealth(20, 150, lo * 0.999, b) >= np.log(1 / delta) > log_wealth(20, 150,
                                                                                                    lo * 1.001, b)
    assert lower_bound(0, 500, delta, b) == 0.0
    hi = upper_bound(20, 150, delta, 1.0)
    assert 20 / 170 < hi < 1 and upper_bound(0, 500, delta, 1.0) < 0.02
    assert lower_bound(200, 1500, delta, b) > lo  # more data, tighter


def _stream(rng, n: int, miss: float, mortality: float = 0.1):
    """Outcomes in arrival order: deaths missed (kept, not flagged) with probability ``miss``; the other deaths half
    referred, half flagged; survivors anything."""
    y = rng.random(n) < mortality
    missed = rng.random(n) < miss
    high = ~missed & (rng.random(n) < 0.5)
    refer = ~missed & ~high
    return y.astype(int), refer, high


def test_stationary_streams_that_keep_the_promise_raise_no_alarm_in_at_least_1_minus_delta():
    """The worst stationary stream that keeps the promise: each death missed with probability exactly alpha."""
    rng = np.random.default_rng(1)
    alarms = sum(update(start(0.05, 0.1), *_stream(rng, 5000, 0.05)).alarm for _ in range(200))
    assert alarms / 200 <= 0.1, alarms


def test_a_stream_missing_2_alpha_of_deaths_raises_the_alarm_and_says_where():
    rng = np.random.default_rng(2)
    y, refer, high = _stream(rng, 20_000, 0.10)
    s = update(start(0.05, 0.1), y, refer, high)
    assert s.alarm and 0 < s.alarm_at <= 20_000 and s.alarm_misses / s.alarm_deaths > 0.05
    # the index: the first prefix whose counts reject alpha, recomputed prefix by prefix
    dead = np.flatnonzero(y)
    missed = (~refer & ~high)[dead]
    first = next(int(dead[i]) + 1 for i in range(dead.size)
                 if log_wealth(missed[: i + 1].sum(), i + 1 - missed[: i + 1].sum(), 0.05, s.b) >= np.log(10.0))
    assert s.alarm_at == first
    assert s.sentence().startswith(f"since admission {first:,} of this stream the model misses more than 5% of deaths "
                                   "on the kept admissions, with 90% confidence")
    lo, _ = s.miss_rate_bounds()
    assert lo > 0.05  # still broken at the end
    r = s.report()
    assert r["alarm"] and r["miss_rate_bounds"][0] == lo and r["confidence"] == pytest.approx(0.9)


def test_batches_give_what_one_pass_gives_and_the_state_round_trips_through_json():
    rng = np.random.default_rng(3)
    y, refer, high = _stream(rng, 30_000, 0.08)
    whole = update(start(0.05, 0.1), y, refer, high)
    s = start(0.05, 0.1)
    cuts = np.sort(rng.choice(np.arange(1, 30_000), size=40, replace=False))
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, 30_000]):
        s = MonitorState.from_dict(json.loads(json.dumps(s.to_dict())))  # as a file between calls
        s = update(s, y[a:b], refer[a:b], high[a:b])
    assert s == whole and whole.alarm
    assert update(whole, [], [], []) == whole
    before = start(0.05, 0.1)
    update(before, y[:10], refer[:10], high[:10])
    assert before == start(0.05, 0.1)  # the state given is not changed


def test_the_sensitivity_and_the_promise_kept_so_far():
    rng = np.random.default_rng(4)
    y, refer, high = _stream(rng, 4000, 0.01)
    s = update(start(0.05, 0.1), y, refer, high)
    assert not s.alarm and s.deaths == y.sum() and s.flagged == (high & (y == 1)).sum()
    lo, hi = s.sensitivity_bounds()
    assert lo < s.flagged / s.deaths < hi
    assert s.sentence().startswith(f"the promise holds so far: {s.misses:,} of {s.deaths:,} deaths among 4,000 "
                                   "admissions were kept and not flagged")


def test_bad_outcomes_are_refused_naming_the_row():
    s = start(0.05, 0.1)
    with pytest.raises(ValueError, match=r"labels\[2\] = 2"):
        update(s, [0, 1, 2], [0, 0, 0], [0, 0, 0])
    with pytest.raises(ValueError, match=r"refer: expected \(3,\) values"):
        update(s, [0, 1, 1], [0, 0], [0, 0, 0])
    with pytest.raises(ValueError, match="alpha must lie strictly between 0 and 1"):
        start(0.0, 0.1)
    with pytest.raises(ValueError, match="unknown field 'x'"):
        MonitorState.from_dict({**s.to_dict(), "x": 1})
