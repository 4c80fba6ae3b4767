"""A features row that contradicts itself, refused: the checks beside the features table's contract
(``core.contracts.FEATURES``, read by ``data.features``), written once for every reader of features the extraction
did not write: ``score`` (Parquet written by hand, chunk by chunk) and the pyfunc behind ``serve`` (a request).

No extraction writes such a row: its bags start at increasing hours, each holds at least one token, an admission
has at least as many events as its bags hold tokens (events are counted before a bag's tokens are deduplicated,
so more is normal) and none without a bag, and ``observed_hours`` lies within the prediction window. A row that
breaks one would be scored all the same, its risk moved by what cannot be (issue 36: a served row with its
``bag_hours`` reversed moved from 0.373 to 0.407).
"""

from __future__ import annotations

import numpy as np

from pipeline.data.features import FeatureError, FeatureSet

__all__ = ["check_rows"]


def check_rows(fs: FeatureSet, window_hours: float | None = None, row0: int = 0) -> None:
    """Raise ``FeatureError`` naming the column and the first row (plus ``row0``) of a row that contradicts
    itself, as no extraction writes one (Parquet written by hand, a served request): ``bag_hours`` not
    increasing, an empty bag, ``n_events`` fewer than the bags' tokens (events are counted before a bag's tokens
    are deduplicated, so more is normal) or above 0 without any bag (``no_events`` against the bags), and
    ``observed_hours`` beyond the prediction window ``window_hours`` (where known). No value is quoted."""
    n_bags = fs.n_bags
    owner = np.repeat(np.arange(len(fs)), n_bags)  # (M,) the row of each bag
    tokens_per_bag = np.diff(fs.token_offsets)
    checks = [
        ("bag_hours", np.flatnonzero((np.diff(fs.bag_hours.astype(np.float64)) <= 0) & (owner[1:] == owner[:-1])),
         "the bags' start hours must increase (a bag starts at or before the one before it)", owner[1:]),
        ("bags", np.flatnonzero(tokens_per_bag == 0), "an empty bag (every bag holds at least one token)", owner),
    ]
    tokens = np.diff(fs.token_offsets[fs.bag_offsets])  # (N,) tokens per admission
    events = fs.n_events.astype(np.int64)
    rows = np.arange(len(fs))
    checks += [
        ("n_events", np.flatnonzero(events < tokens), "fewer events than the bags hold tokens (each token of a bag "
                                                        "stands for at least one event)", rows),
        ("n_events", np.flatnonzero((events > 0) & (n_bags == 0)), "events but no bag (no_events: an admission "
                                                                     "without bags has 0 events)", rows),
    ]
    if window_hours is not None and fs.observed_hours is not None:
        beyond = np.flatnonzero(fs.observed_hours.astype(np.float64) > float(window_hours) + 1e-3)
        checks.append(("observed_hours", beyond, f"beyond the prediction window ({float(window_hours):g} hours "
                                                 "after admission)", rows))
    for column, bad, why, row_of in checks:
        if bad.size:
            count = len(np.unique(row_of[bad]))
            raise FeatureError(f"{fs.source}: column {column!r} row {int(row_of[bad[0]]) + row0}: {why} "
                               f"({count} such row{'s' if count > 1 else ''})")
