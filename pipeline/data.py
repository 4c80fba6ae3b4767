"""Parquet features -> padded torch batches (DESIGN.md "Batches").

A split is held as flat numpy arrays with offsets (no Python object per bag), so a few
hundred thousand admissions stay small in memory. ``collate`` builds one batch with
vectorised numpy indexing; ``TrainSampler`` picks the admissions of every training step as
a pure function of (seed, step), so a resumed run sees exactly the batches an
uninterrupted one would; ``iter_parquet`` streams a file by row chunks for scoring.

Caps: ``max_bags`` keeps the most recent bags of an admission (bags are stored in time
order); ``max_tokens`` keeps an evenly spaced subset of a bag's sorted token ids (ids are
grouped by source, so a prefix would drop whole sources).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

REQUIRED = ("key", "context", "bag_hours", "bags", "n_events")  # columns every use needs
LABEL = "label"  # required for training and validation, optional for scoring
WINDOW = ("observed_hours", "before_prediction_time")  # optional (features of FEATURE_VERSION 2): the window's coverage
OPTIONAL = (LABEL, *WINDOW)  # read where present


class FeatureError(ValueError):
    """Bad feature input; the message names the file, column and row."""


@dataclass
class FeatureSet:
    """One split in flat arrays. N admissions, M bags, Z token occurrences."""

    keys: np.ndarray  # (N,) str pseudonyms
    label: np.ndarray  # (N,) float32 0/1; nan where the input has no label
    n_events: np.ndarray  # (N,) int32 events used before the prediction time
    context: np.ndarray  # (N, C) int32 context ids, 0-padded
    bag_offsets: np.ndarray  # (N+1,) int64: bags of admission i are bag_offsets[i]:bag_offsets[i+1]
    bag_hours: np.ndarray  # (M,) float32 bag start hours
    token_offsets: np.ndarray  # (M+1,) int64: tokens of bag j are token_offsets[j]:token_offsets[j+1]
    tokens: np.ndarray  # (Z,) int32 token ids
    source: str = "<memory>"  # file name used in error messages
    observed_hours: np.ndarray | None = None  # (N,) float32 hours of the window the data covers; nan: not recorded
    before_prediction_time: np.ndarray | None = None  # (N,) bool: the data ends before T (partial window)

    def __len__(self) -> int:
        return int(self.keys.shape[0])

    @property
    def n_bags(self) -> np.ndarray:
        """Bags per admission, (N,)."""
        return np.diff(self.bag_offsets)

    @property
    def has_labels(self) -> bool:
        return bool(len(self)) and not np.isnan(self.label).any()

    def check_vocab(self, n_tokens: int, n_context: int) -> None:
        """Raise naming the first row whose ids fall outside the vocabulary."""
        for name, ids, size, owner in (
            ("bags", self.tokens, n_tokens, self._token_row),
            ("context", self.context.ravel(), n_context, lambda j: j // max(self.context.shape[1], 1)),
        ):
            bad = np.flatnonzero((ids < 0) | (ids >= size))
            if bad.size:
                j = int(bad[0])
                raise FeatureError(
                    f"{self.source}: column {name!r} row {owner(j)}: id {int(ids[j])} outside the vocabulary "
                    f"[0, {size}) ({bad.size} bad ids); were these features extracted with this vocab.json?"
                )

    def _token_row(self, z: int) -> int:
        bag = int(np.searchsorted(self.token_offsets, z, side="right")) - 1
        return int(np.searchsorted(self.bag_offsets, bag, side="right")) - 1

    def require_labels(self) -> None:
        if not len(self):
            raise FeatureError(f"{self.source}: no admissions")
        bad = np.flatnonzero(np.isnan(self.label))
        if bad.size:
            raise FeatureError(f"{self.source}: column 'label' row {int(bad[0])} is missing ({bad.size} rows)")


# ---------------------------------------------------------------------------- loading


def _list_parts(col, name: str, source: str) -> tuple[np.ndarray, pa.Array]:
    """(offsets rebased to 0, flattened child) of a list column; raise on nulls."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if not pa.types.is_list(arr.type) and not pa.types.is_large_list(arr.type):
        raise FeatureError(f"{source}: column {name!r} must be a list, got {arr.type}")
    if arr.null_count:
        row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise FeatureError(f"{source}: column {name!r} row {row} is null")
    offsets = arr.offsets.to_numpy().astype(np.int64)
    return offsets - offsets[0], arr.flatten()


def _ints(arr: pa.Array, name: str, source: str) -> np.ndarray:
    if arr.null_count:
        raise FeatureError(f"{source}: column {name!r} holds a null id")
    if not pa.types.is_integer(arr.type):
        raise FeatureError(f"{source}: column {name!r} must hold integers, got {arr.type}")
    return arr.to_numpy(zero_copy_only=False).astype(np.int32)


def from_arrow(table: pa.Table | pa.RecordBatch, source: str = "<memory>", row0: int = 0) -> FeatureSet:
    """Validate and flatten a features table (the extract schema; ``label`` optional).

    ``row0`` is added to row numbers in error messages (for chunks of a larger file).
    """
    names = set(table.schema.names)
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise FeatureError(f"{source}: missing column(s) {missing}; expected the features written by `cli.py extract`")
    n = table.num_rows
    try:
        ctx_off, ctx_vals = _list_parts(table.column("context"), "context", source)
        bag_off, bag_lists = _list_parts(table.column("bags"), "bags", source)
        hour_off, hours = _list_parts(table.column("bag_hours"), "bag_hours", source)
    except FeatureError as exc:
        raise FeatureError(_shift_row(str(exc), row0)) from None
    if bag_lists.null_count:
        j = _first_null(bag_lists)
        row = int(np.searchsorted(bag_off, j, side="right")) - 1
        raise FeatureError(f"{source}: column 'bags' row {row + row0} holds a null bag")
    tok_off, toks = _list_parts(bag_lists, "bags", source)
    if not np.array_equal(bag_off, hour_off):
        row = int(np.flatnonzero(np.diff(bag_off) != np.diff(hour_off))[0])
        raise FeatureError(f"{source}: row {row + row0}: 'bags' and 'bag_hours' have different lengths")
    hours_np = hours.to_numpy(zero_copy_only=False).astype(np.float32)
    if hours.null_count or not np.isfinite(hours_np).all():
        j = int(np.flatnonzero(~np.isfinite(hours_np) | hours.is_null().to_numpy(zero_copy_only=False))[0])
        row = int(np.searchsorted(bag_off, j, side="right")) - 1
        raise FeatureError(f"{source}: column 'bag_hours' row {row + row0} is not a finite number")
    ctx_len = np.diff(ctx_off)
    width = int(ctx_len.max()) if n else 0
    context = np.zeros((n, width), dtype=np.int32)  # (N, C) 0-padded
    rows = np.repeat(np.arange(n), ctx_len)
    context[rows, _ranks(ctx_len)] = _ints(ctx_vals, "context", source)
    key_col = table.column("key")
    if key_col.null_count:
        raise FeatureError(f"{source}: column 'key' row {_first_null(key_col) + row0} is null")
    keys = key_col.to_numpy(zero_copy_only=False).astype(str)
    events = table.column("n_events")
    if events.null_count:
        raise FeatureError(f"{source}: column 'n_events' row {_first_null(events) + row0} is null")
    label = _labels(table, source, row0) if LABEL in names else np.full(n, np.nan, dtype=np.float32)
    observed = _observed(table, source, row0) if WINDOW[0] in names else None
    before = None
    if WINDOW[1] in names:
        col = table.column(WINDOW[1])
        if col.null_count:
            raise FeatureError(f"{source}: column {WINDOW[1]!r} row {_first_null(col) + row0} is null")
        if not pa.types.is_boolean(col.type):
            raise FeatureError(f"{source}: column {WINDOW[1]!r} must hold booleans, got {col.type}")
        before = col.to_numpy(zero_copy_only=False).astype(bool)
    return FeatureSet(
        keys=keys,
        label=label,
        n_events=events.to_numpy(zero_copy_only=False).astype(np.int32),
        context=context,
        bag_offsets=bag_off,
        bag_hours=hours_np,
        token_offsets=tok_off,
        tokens=_ints(toks, "bags", source),
        source=source,
        observed_hours=observed,
        before_prediction_time=before,
    )


def _observed(table, source: str, row0: int) -> np.ndarray:
    """``observed_hours`` as float32 (null -> nan); a negative or infinite value names its row."""
    col = table.column(WINDOW[0])
    if not (pa.types.is_floating(col.type) or pa.types.is_integer(col.type)):
        raise FeatureError(f"{source}: column {WINDOW[0]!r} must hold numbers, got {col.type}")
    h = col.to_numpy(zero_copy_only=False).astype(np.float32)  # nulls -> nan
    bad = np.flatnonzero(np.isinf(h) | (h < 0))
    if bad.size:
        raise FeatureError(f"{source}: column {WINDOW[0]!r} row {int(bad[0]) + row0} = {h[bad[0]]}: hours must be "
                           "finite and >= 0")
    return h


def _labels(table, source: str, row0: int) -> np.ndarray:
    col = table.column(LABEL)
    y = col.to_numpy(zero_copy_only=False).astype(np.float32)  # nulls -> nan
    bad = np.flatnonzero(~np.isnan(y) & (y != 0) & (y != 1))
    if bad.size:
        raise FeatureError(f"{source}: column 'label' row {int(bad[0]) + row0} = {y[bad[0]]}: labels must be 0 or 1")
    return y


def _first_null(col) -> int:
    return int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])


def _shift_row(msg: str, row0: int) -> str:
    if not row0:
        return msg
    head, sep, tail = msg.partition(" row ")
    num, _, rest = tail.partition(" ")
    return f"{head}{sep}{int(num) + row0} {rest}" if sep and num.isdigit() else msg


def load_split(path: Path | str, require_labels: bool = True) -> FeatureSet:
    """Read one split Parquet file (e.g. ``FEATURES/train.parquet``) into a FeatureSet."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.exists():
        raise FeatureError(f"{path}: features file not found (run `cli.py extract` first)")
    cols = [c for c in (*REQUIRED, *OPTIONAL) if c in pq.read_schema(path).names]
    fs = from_arrow(pq.read_table(path, columns=cols), source=str(path))
    if require_labels:
        fs.require_labels()
    return fs


def from_pandas(frame, source: str = "<dataframe>") -> FeatureSet:
    """FeatureSet from a pandas DataFrame with the features columns (lists as lists/arrays)."""
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise FeatureError(f"{source}: missing column(s) {missing}")
    types = {
        "key": pa.string(),
        "context": pa.list_(pa.int32()),
        "bag_hours": pa.list_(pa.float32()),
        "bags": pa.list_(pa.list_(pa.int32())),
        "n_events": pa.int32(),
        LABEL: pa.float32(),
        WINDOW[0]: pa.float32(),
        WINDOW[1]: pa.bool_(),
    }
    arrays, names = [], []
    for name, typ in types.items():
        if name not in frame.columns:
            continue
        values = frame[name].tolist()
        if name == "bags":
            values = [None if v is None else [list(b) for b in v] for v in values]
        elif typ != pa.string() and pa.types.is_list(typ):
            values = [None if v is None else list(v) for v in values]
        try:
            arrays.append(pa.array(values, type=typ))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            raise FeatureError(f"{source}: column {name!r} does not convert to {typ}: {exc}") from None
        names.append(name)
    return from_arrow(pa.table(arrays, names=names), source=source)


def iter_parquet(path: Path | str, chunk_rows: int = 4096) -> Iterator[FeatureSet]:
    """Stream a features file by chunks of ``chunk_rows`` admissions (bounded memory)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    cols = [c for c in (*REQUIRED, *OPTIONAL) if c in pf.schema_arrow.names]
    row0 = 0
    for rb in pf.iter_batches(batch_size=chunk_rows, columns=cols):
        yield from_arrow(rb, source=str(path), row0=row0)
        row0 += rb.num_rows


# ---------------------------------------------------------------------------- batching


def _ranks(counts: np.ndarray) -> np.ndarray:
    """0..c-1 for every count c, concatenated: [2, 0, 3] -> [0, 1, 0, 1, 2]."""
    total = int(counts.sum())
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    return np.arange(total) - starts


def collate(fs: FeatureSet, idx, max_bags: int | None = None, max_tokens: int | None = None) -> dict:
    """The DESIGN.md batch dict for admissions ``idx`` (B,) of ``fs`` (torch tensors).

    ``max_bags`` keeps the most recent bags; ``max_tokens`` keeps an evenly spaced subset of
    each bag's ids. T and L are the largest bag count and bag size in the batch (L >= 1).
    """
    import torch

    idx = np.asarray(idx, dtype=np.int64)
    b = idx.shape[0]
    end = fs.bag_offsets[idx + 1]
    start = fs.bag_offsets[idx]
    if max_bags is not None:
        start = np.maximum(start, end - max_bags)  # most recent bags
    nb = end - start  # (B,)
    t_len = int(nb.max()) if b else 0
    slot = _ranks(nb)  # (M_b,) time slot of each selected bag
    row = np.repeat(np.arange(b), nb)  # (M_b,) batch row of each selected bag
    bag = np.repeat(start, nb) + slot  # (M_b,) bag index into fs
    t0 = fs.token_offsets[bag]
    ntok = fs.token_offsets[bag + 1] - t0  # (M_b,)
    keep = np.minimum(ntok, max_tokens) if max_tokens is not None else ntok
    l_len = max(int(keep.max()) if keep.size else 0, 1)
    j = _ranks(keep)  # (Z_b,) position inside the kept bag
    which = np.repeat(np.arange(bag.shape[0]), keep)  # (Z_b,) selected-bag index
    src = t0[which] + (j * ntok[which]) // keep[which]  # evenly spaced; identity when nothing is cut
    tokens = np.zeros((b, t_len, l_len), dtype=np.int64)  # (B, T, L)
    tokens[row[which], slot[which], j] = fs.tokens[src]
    hours = np.zeros((b, t_len), dtype=np.float32)  # (B, T)
    hours[row, slot] = fs.bag_hours[bag]
    mask = np.zeros((b, t_len), dtype=bool)  # (B, T)
    mask[row, slot] = True
    label = np.nan_to_num(fs.label[idx], nan=0.0)
    return {
        "tokens": torch.from_numpy(tokens),
        "mask": torch.from_numpy(mask),
        "hours": torch.from_numpy(hours),
        "context": torch.from_numpy(fs.context[idx].astype(np.int64)),
        "label": torch.from_numpy(label.astype(np.float32)),
    }


def iter_batches(fs: FeatureSet, batch_size: int, max_bags: int | None = None,
                 max_tokens: int | None = None, order: np.ndarray | None = None) -> Iterator[dict]:
    """Batches of consecutive admissions of ``order`` (default: file order).

    Evaluation and scoring pass ``length_order(fs, max_bags)``, so that each batch holds
    admissions of similar length and every LSTM step runs nearly the whole batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    idx = np.arange(len(fs)) if order is None else np.asarray(order, dtype=np.int64)
    if idx.shape != (len(fs),) or (order is not None and not np.array_equal(np.sort(idx), np.arange(len(fs)))):
        raise ValueError(f"order must hold each of the {len(fs)} admissions once (a permutation), got shape {idx.shape}")
    for s in range(0, len(fs), batch_size):
        yield collate(fs, idx[s:s + batch_size], max_bags, max_tokens)


def length_order(fs: FeatureSet, max_bags: int | None = None) -> np.ndarray:
    """Admissions by non-increasing number of bags (after ``max_bags``), ties in file order."""
    nb = fs.n_bags if max_bags is None else np.minimum(fs.n_bags, max_bags)
    return np.argsort(-nb, kind="stable")


@dataclass
class TrainSampler:
    """Admissions of every training step, a pure function of (seed, step).

    The admissions are read as one endless stream of epochs, each a fresh permutation drawn
    by ``numpy.random.default_rng([seed, epoch])``; step s takes stream positions
    [s·size, (s+1)·size). Every admission appears once per epoch, the batch size is constant
    (an epoch boundary falls inside a batch when N is not a multiple of ``size``), and no
    generator state has to be checkpointed.
    """

    n: int  # admissions in the training split
    size: int  # distinct admissions per global step
    seed: int  # run seed

    def __post_init__(self) -> None:
        if self.n < 1 or self.size < 1:
            raise ValueError(f"TrainSampler needs n >= 1 and size >= 1, got n={self.n}, size={self.size}")
        self._cache: dict[int, np.ndarray] = {}

    def permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._cache:
            if len(self._cache) > 4:
                self._cache.pop(min(self._cache))
            self._cache[epoch] = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        return self._cache[epoch]

    def indices(self, step: int, rank: int = 0, world: int = 1) -> np.ndarray:
        """Global batch of 0-based ``step``; with ``world`` > 1 this rank's contiguous shard."""
        pos = np.arange(step * self.size, (step + 1) * self.size, dtype=np.int64)
        epochs = pos // self.n
        out = np.empty(self.size, dtype=np.int64)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = self.permutation(int(e))[pos[sel] % self.n]
        if world > 1:
            if self.size % world:
                raise ValueError(f"{self.size} admissions per step do not split over {world} processes")
            part = self.size // world
            out = out[rank * part : (rank + 1) * part]
        return out
