"""Events -> tokens -> time bags, on the local DuckDB connection.

A token is `source:item` (item only), `source:item:qB` (numeric value in per-item quantile
bin B of the training split), or `source:item:t:VALUE` (a frequent text value of a
categorical item). Bins, categorical items and the vocabulary are fitted on the training
split only and saved in `vocab.json`, so scoring reuses them without refitting.
Tokens seen in fewer than `min_patients` training patients collapse to one
out-of-vocabulary token per source (`source:<oov>`). Token id 0 is padding.

Bags: events in the last `hourly_hours` before the prediction time fall in hourly bags,
older history in daily bags. A bag's start is given in hours relative to ADMITTIME.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

PAD = "<pad>"
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


def text_expr(col: str, max_len: int) -> str:
    """Normalized text value: trimmed, truncated, ':' free (keeps tokens parseable)."""
    return f"replace(substr(trim({col}), 1, {max_len}), ':', ';')"


def fit(con, n_bins: int, min_patients: int, max_text_values: int, text_max_len: int) -> Vocab:
    """Fit bins, categorical text items and the token vocabulary on `events` WHERE split='train'."""
    qs = ", ".join(f"{i / n_bins:.6f}" for i in range(1, n_bins))
    bins_rows = con.sql(
        f"""
        SELECT source || ':' || item AS key, quantile_cont(valuenum, [{qs}]) AS cuts
        FROM events WHERE split = 'train' AND valuenum IS NOT NULL
        GROUP BY ALL HAVING count(DISTINCT subject_key) >= {min_patients}
        ORDER BY key
        """
    ).fetchall()
    bins = {k: sorted(set(float(c) for c in cuts)) for k, cuts in bins_rows}
    text_rows = con.sql(
        f"""
        SELECT source || ':' || item AS key FROM events
        WHERE split = 'train' AND valuenum IS NULL AND valuetext IS NOT NULL
        GROUP BY ALL HAVING count(DISTINCT {text_expr('valuetext', text_max_len)}) <= {max_text_values}
        ORDER BY key
        """
    ).fetchall()
    vocab = Vocab([PAD] + [oov(s) for s in SOURCES], [PAD], bins, [r[0] for r in text_rows])
    register(con, vocab)
    kept = con.sql(
        f"""
        SELECT token FROM ({token_sql(text_max_len, "e.split = 'train'")})
        GROUP BY token HAVING count(DISTINCT subject_key) >= {min_patients} ORDER BY token
        """
    ).fetchall()
    vocab.tokens += [t for (t,) in kept if t not in vocab.tokens]
    return vocab


def register(con, vocab: Vocab) -> None:
    """Load the fitted bins, categorical items and vocabulary as local tables."""
    bins = pa.table(
        {
            "key": pa.array(list(vocab.bins), pa.string()),
            "cuts": pa.array([list(c) for c in vocab.bins.values()], pa.list_(pa.float64())),
        }
    )
    items = pa.table({"key": pa.array(vocab.text_items, pa.string())})
    tokens = pa.table({"token": pa.array(vocab.tokens, pa.string()), "tid": pa.array(range(len(vocab.tokens)), pa.int32())})
    for name, table in (("bins_t", bins), ("text_items_t", items), ("vocab_t", tokens)):
        con.register(f"{name}_arrow", table)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {name}_arrow")
        con.unregister(f"{name}_arrow")


def token_sql(text_max_len: int, where: str = "TRUE") -> str:
    """SELECT of events with their token string (bins and categorical items registered)."""
    bin_expr = "len(list_filter(b.cuts, lambda c: c <= e.valuenum))"
    return f"""
        SELECT e.adm_idx, e.split, e.subject_key, e.t_hours, e.source,
               CASE
                 WHEN e.valuenum IS NOT NULL AND b.key IS NOT NULL
                   THEN e.source || ':' || e.item || ':q' || CAST({bin_expr} AS VARCHAR)
                 WHEN e.valuenum IS NULL AND e.valuetext IS NOT NULL AND ti.key IS NOT NULL
                   THEN e.source || ':' || e.item || ':t:' || {text_expr('e.valuetext', text_max_len)}
                 ELSE e.source || ':' || e.item
               END AS token
        FROM events e
        LEFT JOIN bins_t b ON b.key = e.source || ':' || e.item
        LEFT JOIN text_items_t ti ON ti.key = e.source || ':' || e.item
        WHERE {where}
    """


def tokenize(con, vocab: Vocab, text_max_len: int) -> None:
    """events -> tokenized(adm_idx, t_hours, tid): token ids, OOV per source."""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE tokenized AS
        SELECT t.adm_idx, t.t_hours, COALESCE(v.tid, o.tid) AS tid
        FROM ({token_sql(text_max_len)}) t
        LEFT JOIN vocab_t v ON v.token = t.token
        LEFT JOIN vocab_t o ON o.token = t.source || ':<oov>'
        """
    )


def bag(con, prediction_hours: float, hourly_hours: float) -> pa.Table:
    """tokenized -> one row per admission: adm_idx, bag_hours, bags, n_events."""
    edge = prediction_hours - hourly_hours  # hours after admission where hourly bags begin
    return con.sql(
        f"""
        WITH b AS (
          SELECT adm_idx,
                 CASE WHEN t_hours >= {edge} THEN floor(t_hours)
                      ELSE {edge} + floor((t_hours - {edge}) / 24.0) * 24.0 END AS start,
                 list_sort(list_distinct(list(tid))) AS tids,
                 count(*) AS n
          FROM tokenized GROUP BY ALL
        )
        SELECT adm_idx,
               list(CAST(start AS FLOAT) ORDER BY start) AS bag_hours,
               list(CAST(tids AS INTEGER[]) ORDER BY start) AS bags,
               CAST(sum(n) AS INTEGER) AS n_events
        FROM b GROUP BY adm_idx ORDER BY adm_idx
        """
    ).to_arrow_table()
