"""The outcome monitor: the refer rule's promise watched as outcomes arrive, with an anytime-valid alarm.

Arrays in, plain state out (numpy and scipy; no torch). ``sequence``: the confidence sequence of a rate from its
counts (a mixture of constant bets; Waudby-Smith & Ramdas 2023, Howard et al. 2021), its lower and upper bounds.
``monitor``: ``start`` a ``MonitorState`` for a promise (alpha, delta), ``update`` it with a batch of outcomes and
the admissions' flags (batches give what one pass gives), its ``report`` and sentence: the kept miss rate and
the flagged sensitivity with their bounds, and the admission index at which the promise was first broken with the
run's confidence.
"""

from pipeline.core.lazy import lazy

_HOMES = {
    **dict.fromkeys(("log_wealth", "lower_bound", "prior_b", "upper_bound"), "sequence"),
    **dict.fromkeys(("RATIO", "SENSITIVITY_B", "MonitorState", "start", "update"), "monitor"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
