"""Events -> tokens -> time bags, on the local DuckDB connection.

A token is `source:item` (item only), `source:item:qB` (numeric value in per-item quantile
bin B of the training split), or `source:item:t:VALUE` (a frequent text value of a
categorical item). Bins, categorical items and the vocabulary are fitted on the training
split only and saved in `vocab.json`, so scoring reuses them without refitting.
Tokens seen in fewer than `min_patients` training patients collapse to one
out-of-vocabulary token per source (`source:<oov>`). Token id 0 is padding.

Bags: events in the last `hourly_hours` before the prediction time fall in hourly bags,
older history in daily bags. A bag's start is given in hours relative to ADMITTIME.

Value channel: beside each token of a bag, the mean over the bag's events of that token of
(value - center) / scale of its item, clipped to +-VALUE_CLIP (center: the median of the item's
cut points, scale: half their spread, both fitted on train with the bins); 0 for tokens without a
binned value and for out-of-vocabulary tokens. The quantile token says which bin; the channel
says where in it.

The SQL is in `sql/` (40-45, run on the local DuckDB); this module renders it and moves the
fitted vocabulary between Python and the local tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from pipeline.data.mimic.extraction import queries

PAD = "<pad>"
VALUE_CLIP = 5.0  # the value channel is clipped to [-VALUE_CLIP, VALUE_CLIP]
SOURCES = ["chart", "lab", "input", "output", "rx", "proc", "micro", "dtevent"]


@dataclass
class Vocab:
    tokens: list[str]  # id -> token; 0 = <pad>, 1..len(SOURCES) = per-source OOV
    context: list[str]  # id -> context token; 0 = <pad>
    bins: dict[str, list[float]]  # "source:item" -> ascending quantile cut points
    text_items: list[str] = field(default_factory=list)  # categorical "source:item" keys

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "context": self.context, "bins": self.bins, "text_items": self.text_items}

    @classmethod
    def from_json(cls, obj: dict) -> "Vocab":
        return cls(obj["tokens"], obj["context"], obj["bins"], obj.get("text_items", []))


def oov(source: str) -> str:
    return f"{source}:<oov>"


def fit(con, n_bins: int, min_patients: int, max_text_values: int, text_max_len: int,
        sources: list[str] | None = None) -> Vocab:
    """Fit bins, categorical text items and the token vocabulary on `events` WHERE split='train'
    (sql/40_fit_bins, 41_fit_text_items, 43_fit_vocabulary). ``sources``: the sources that get an
    out-of-vocabulary token (ids 1..len(sources); None: MIMIC's ``SOURCES``; a MEDS source's code groups)."""
    quantiles = ", ".join(f"{i / n_bins:.6f}" for i in range(1, n_bins))
    bins_rows = con.sql(queries.render(queries.FIT_BINS, quantiles=quantiles, min_patients=min_patients)).fetchall()
    bins = {k: sorted(set(float(c) for c in cuts)) for k, cuts in bins_rows}
    text_rows = con.sql(queries.render(queries.FIT_TEXT_ITEMS, text_max_len=text_max_len,
                                      max_text_values=max_text_values)).fetchall()
    vocab = Vocab([PAD] + [oov(s) for s in (SOURCES if sources is None else sources)], [PAD], bins,
                  [r[0] for r in text_rows])
    register(con, vocab)
    kept = con.sql(queries.render(queries.FIT_VOCABULARY, tokens=token_sql(text_max_len, "e.split = 'train'"),
                                 min_patients=min_patients)).fetchall()
    vocab.tokens += [t for (t,) in kept if t not in vocab.tokens]
    return vocab


def value_scale(cuts: list[float]) -> tuple[float, float]:
    """(center, scale) of an item's value channel from its ascending cut points: their median and
    half their spread; one cut point (or none) gives scale max(|center|, 1)."""
    if not cuts:
        return 0.0, 1.0
    center = float(np.median(cuts))
    spread = (cuts[-1] - cuts[0]) / 2.0
    return center, float(spread) if spread > 0 else max(abs(center), 1.0)


def bin_ranges(bins: dict[str, list[float]]) -> pa.Table:
    """The bins as ranges, one row per bin: (key, bin, lo, hi, center, scale) with lo <= value < hi;
    bin B of an item holds the values with B of its ascending cut points at or below them (-inf/+inf
    at the ends); center and scale (``value_scale``) are the item's, on each of its rows."""
    keys, index, lo, hi, center, scale = [], [], [], [], [], []
    for key, cuts in bins.items():
        edges = [-math.inf, *cuts, math.inf]
        c, s = value_scale(cuts)
        for b in range(len(cuts) + 1):
            keys.append(key)
            index.append(b)
            lo.append(edges[b])
            hi.append(edges[b + 1])
            center.append(c)
            scale.append(s)
    return pa.table({"key": pa.array(keys, pa.string()), "bin": pa.array(index, pa.int32()),
                     "lo": pa.array(lo, pa.float64()), "hi": pa.array(hi, pa.float64()),
                     "center": pa.array(center, pa.float64()), "scale": pa.array(scale, pa.float64())})


def register(con, vocab: Vocab) -> None:
    """Load the fitted bins (as ranges), categorical items and vocabulary as local tables."""
    items = pa.table({"key": pa.array(vocab.text_items, pa.string())})
    tokens = pa.table(
        {"token": pa.array(vocab.tokens, pa.string()), "tid": pa.array(range(len(vocab.tokens)), pa.int32())}
    )
    for name, table in (("bin_ranges_t", bin_ranges(vocab.bins)), ("text_items_t", items), ("vocab_t", tokens)):
        con.register(f"{name}_arrow", table)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {name}_arrow")
        con.unregister(f"{name}_arrow")


def token_sql(text_max_len: int, where: str = "TRUE") -> str:
    """SELECT of events with their token string (bins and categorical items registered): sql/42_tokens."""
    return queries.render(queries.TOKENS, text_max_len=text_max_len, event_filter=where, value_clip=VALUE_CLIP)


def tokenize(con, vocab: Vocab, text_max_len: int) -> None:
    """events -> tokenized(adm_idx, t_hours, tid, value): token ids, OOV per source, and the value channel
    (sql/44_tokenized). A view:
    the bags read it once, so the token ids are computed there and never stored."""
    sql = queries.render(queries.TOKENIZED, tokens=token_sql(text_max_len))
    con.execute(f"CREATE OR REPLACE TEMP VIEW tokenized AS {sql}")


def bag(con, prediction_hours: float, hourly_hours: float, values: bool = False) -> pa.Table:
    """tokenized -> one row per admission with events: adm_idx, bag_hours, bags, n_events, and with
    ``values`` bag_values.

    sql/45_bags gives one row per (admission, bag) in order; the rows of an admission are nested
    here into its lists (bag starts, token ids per bag, value channel per token), without copying
    the values. Without ``values`` its value columns are not selected, and DuckDB then computes none
    of the channel (the unused aggregates are pruned from the plan)."""
    edge = prediction_hours - hourly_hours  # hours after admission where hourly bags begin
    cols = "adm_idx, bag_start, tids, n" + (", vals" if values else "")
    rows = con.sql(f"SELECT {cols} FROM ({queries.render(queries.BAGS, edge=float(edge))})").to_arrow_table()
    adm = rows.column("adm_idx").to_numpy()
    first = np.flatnonzero(np.r_[True, adm[1:] != adm[:-1]]) if len(adm) else np.zeros(0, np.int64)
    offsets = pa.array(np.r_[first, len(adm)].astype(np.int32), pa.int32())
    n = rows.column("n").to_numpy()
    out = {
        "adm_idx": pa.array(adm[first], rows.schema.field("adm_idx").type),
        "bag_hours": pa.ListArray.from_arrays(offsets, rows.column("bag_start").combine_chunks()),
        "bags": pa.ListArray.from_arrays(offsets, rows.column("tids").combine_chunks()),
        "n_events": pa.array(np.add.reduceat(n, first) if len(n) else np.zeros(0, np.int64), pa.int32()),
    }
    if values:
        out["bag_values"] = pa.ListArray.from_arrays(offsets, rows.column("vals").combine_chunks())
    return pa.table(out)
