"""The outcome monitor: is the refer rule's promise kept on the admissions scored since, as their outcomes arrive?

The promise (``referral.rule``, the miss rate): among the deaths, the share that were kept (not referred) *and* not
flagged high risk is at most alpha. Each arriving outcome of a scored admission carries its ``refer`` and
``high_risk`` flags as scored; a death is a *miss* when it was kept and not flagged; survivors do not enter the
rate. The monitor tracks, over the stream's deaths:

- the **kept miss rate** (misses / deaths) with an anytime-valid confidence sequence (``sequence``: a mixture of
  constant bets, Waudby-Smith & Ramdas 2023; its mixing prior tuned to detect a rate of ``ratio`` alpha), and
- the **flagged sensitivity** (deaths flagged high risk / deaths), with the same kind of sequence (context: the
  promise does not bound it).

**The alarm** is raised at the first outcome after which the miss rate's lower confidence bound exceeds alpha at
the run's confidence 1 - delta, i.e. the wealth against H0: "each death's chance of being a miss is at most alpha"
reaches 1 / delta; by Ville's inequality a stream that keeps the promise raises it with probability at most delta,
however long it is watched and whatever the dependence between admissions (the design of Podkopaev & Ramdas, ICLR
2022: a time-uniform bound on the deployed risk against a fixed tolerance). It is reported as the stream's
admission index (1-based, counting every outcome received) at which it was first raised, and stays raised.

**State** (``MonitorState``): the settings and integer counts, plain JSON (``to_dict`` / ``from_dict``); ``update``
returns the state after a batch of outcomes, so feeding a stream in batches gives exactly what one pass gives (the
wealth is a function of the integer counts, evaluated at every death of every batch). The caller keeps the file
(written atomically) and checks keys and duplicates; the monitor sees flags and outcomes only, no key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from pipeline.bayes.monitor.sequence import log_wealth, lower_bound, prior_b, upper_bound

RATIO = 2.0  # the mixing prior is tuned to detect a miss rate of RATIO x alpha
SENSITIVITY_B = 9.0  # the sensitivity's mixing prior, Beta(1, 9) (mean bet 0.1): any b is valid


def _percent(x: float) -> str:
    v = 100.0 * x
    return f"{v:.0f}%" if abs(v - round(v)) < 0.05 or v >= 10 else f"{v:.1f}%"


@dataclass
class MonitorState:
    """What the monitor knows after the outcomes it has seen (plain JSON)."""

    alpha: float  # the promise: the kept miss rate is at most alpha
    delta: float  # the run's 1 - confidence
    b: float  # the miss rate's mixing prior Beta(1, b) (``sequence.prior_b(alpha, RATIO)`` by default)
    admissions: int = 0  # outcomes received
    deaths: int = 0  # deaths among them
    misses: int = 0  # deaths kept and not flagged high risk
    flagged: int = 0  # deaths flagged high risk
    alarm_at: int | None = None  # the admission index (1-based) at which the alarm was first raised
    alarm_deaths: int | None = None  # deaths seen by then
    alarm_misses: int | None = None  # misses by then

    @property
    def alarm(self) -> bool:
        return self.alarm_at is not None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> MonitorState:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"monitor state: unknown field {unknown[0]!r}")
        return cls(**d)

    def miss_rate_bounds(self) -> tuple[float, float]:
        """The kept miss rate's (lower, upper) confidence bounds now, each at confidence 1 - delta."""
        f = self.deaths - self.misses
        return lower_bound(self.misses, f, self.delta, self.b), upper_bound(self.misses, f, self.delta, 1.0)

    def sensitivity_bounds(self) -> tuple[float, float]:
        """The flagged sensitivity's (lower, upper) confidence bounds now, each at confidence 1 - delta."""
        f = self.deaths - self.flagged
        return (lower_bound(self.flagged, f, self.delta, SENSITIVITY_B),
                upper_bound(self.flagged, f, self.delta, SENSITIVITY_B))

    def report(self, outcomes: str = "deaths") -> dict:
        """The state with its bounds and the sentence (JSON; ``outcomes``: the outcome's plural, in words)."""
        lo, hi = self.miss_rate_bounds()
        slo, shi = self.sensitivity_bounds()
        return {**self.to_dict(), "alarm": self.alarm, "miss_rate": self.misses / self.deaths if self.deaths else None,
                "miss_rate_bounds": [lo, hi], "sensitivity": self.flagged / self.deaths if self.deaths else None,
                "sensitivity_bounds": [slo, shi], "confidence": 1.0 - self.delta, "sentence": self.sentence(outcomes)}

    def sentence(self, outcomes: str = "deaths") -> str:
        """The state in one sentence (``outcomes``: the outcome's plural, "deaths" unless the task says otherwise)."""
        conf = _percent(1.0 - self.delta)
        if self.alarm:
            return (f"since admission {self.alarm_at:,} of this stream the model misses more than "
                    f"{_percent(self.alpha)} of {outcomes} on the kept admissions, with {conf} confidence "
                    f"({self.alarm_misses:,} of {self.alarm_deaths:,} {outcomes} missed by then)")
        lo, hi = self.miss_rate_bounds()
        return (f"the promise holds so far: {self.misses:,} of {self.deaths:,} {outcomes} among {self.admissions:,} "
                f"admissions were kept and not flagged (the miss rate lies in [{_percent(lo)}, {_percent(hi)}], "
                f"each bound with {conf} confidence; the promise: at most {_percent(self.alpha)})")


def start(alpha: float, delta: float, ratio: float = RATIO) -> MonitorState:
    """A monitor of the promise "kept miss rate <= alpha" at confidence 1 - delta, no outcome seen."""
    for name, v in (("alpha", alpha), ("delta", delta)):
        if not 0.0 < float(v) < 1.0:
            raise ValueError(f"{name} must lie strictly between 0 and 1, got {v!r}")
    return MonitorState(float(alpha), float(delta), prior_b(float(alpha), ratio))


def _flags(x, n: int | None, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1 or (n is not None and a.shape[0] != n):
        raise ValueError(f"{name}: expected ({n},) values, got shape {a.shape}")
    if a.dtype == bool:
        return a
    try:
        f = a.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: not 0/1 values ({a.dtype})") from None
    bad = np.flatnonzero((f != 0.0) & (f != 1.0))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}] = {a[bad[0]].item()!r}: must be 0 or 1 ({bad.size} bad rows)")
    return f == 1.0


def update(state: MonitorState, labels, refer, high_risk) -> MonitorState:
    """The state after a batch of outcomes in arrival order: ``labels`` (N,) 0/1 deaths, ``refer`` and ``high_risk``
    (N,) the admissions' flags as scored. ``state`` is not changed."""
    y = _flags(labels, None, "labels")
    n = y.shape[0]
    ref = _flags(refer, n, "refer")
    high = _flags(high_risk, n, "high_risk")
    out = dataclasses.replace(state)
    if n == 0:
        return out
    dead = np.flatnonzero(y)
    miss = ~ref[dead] & ~high[dead]
    misses = state.misses + np.cumsum(miss)  # after each death of the batch
    deaths = state.deaths + np.arange(1, dead.size + 1)
    if not state.alarm and dead.size:
        lw = log_wealth(misses, deaths - misses, state.alpha, state.b)
        hit = np.flatnonzero(lw >= np.log(1.0 / state.delta))
        if hit.size:
            i = int(hit[0])
            out.alarm_at = state.admissions + int(dead[i]) + 1
            out.alarm_deaths, out.alarm_misses = int(deaths[i]), int(misses[i])
    out.admissions = state.admissions + n
    out.deaths = state.deaths + int(dead.size)
    out.misses = state.misses + int(miss.sum())
    out.flagged = state.flagged + int(high[dead].sum())
    return out
