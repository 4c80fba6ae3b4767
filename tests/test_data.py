"""pipeline.data.batches and pipeline.data.features: loading, padding, caps, zero-bag admissions, sampling,
chunked reads, errors. (Random features directories: tests/helpers/features.py.)"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers.features import FEATURE_SCHEMA, write_features

from pipeline.core import fileio
from pipeline.data import batches, features
from pipeline.data.mimic.extraction.flow import write_parquet


def _table(rows: list[dict]) -> pa.Table:
    """The rows as a features table; a row without bag_values gets a value channel of 0 beside each token."""
    rows = [r if "bag_values" in r else {**r, "bag_values": _zeros_like(r.get("bags", []))} for r in rows]
    cols = {f.name: [r.get(f.name, d) for r in rows] for f, d in zip(FEATURE_SCHEMA, _DEFAULTS)}
    return pa.table(cols, schema=FEATURE_SCHEMA)


def _zeros_like(bags):
    """A value channel of 0 for every token of ``bags`` (None where a bag, or the whole list, is None)."""
    if not isinstance(bags, list):
        return None
    return [[0.0] * len(b) if isinstance(b, list) else None for b in bags]


_DEFAULTS = ["k", 0, 50.0, "M", "EMERGENCY", "EMERGENCY ROOM ADMIT", "carevue", [1, 2], [], [], [], 0, 24.0, False]

HAND = [
    {"key": "a", "label": 1, "context": [1, 2, 3], "bag_hours": [-24.0, 1.0, 2.0],
     "bags": [[1, 4], [2, 3, 5, 7, 9], [6]], "n_events": 8},
    {"key": "b", "label": 0, "context": [4], "bag_hours": [], "bags": [], "n_events": 0},
    {"key": "c", "label": 0, "context": [2, 5], "bag_hours": [3.0], "bags": [[8]], "n_events": 1},
]


@pytest.fixture
def hand(tmp_path):
    path = write_parquet(_table(HAND), tmp_path / "train.parquet")
    return features.load_split(path)


def test_collate_pads_and_aligns(hand):
    b = batches.collate(hand, [0, 1, 2])
    assert b["tokens"].shape == (3, 3, 5) and b["tokens"].dtype.is_floating_point is False
    assert b["tokens"][0].tolist() == [[1, 4, 0, 0, 0], [2, 3, 5, 7, 9], [6, 0, 0, 0, 0]]
    assert b["tokens"][1].abs().sum() == 0  # zero-bag admission: all padding
    assert b["tokens"][2].tolist() == [[8, 0, 0, 0, 0], [0] * 5, [0] * 5]
    assert b["mask"].tolist() == [[True, True, True], [False] * 3, [True, False, False]]
    assert b["hours"].tolist() == [[-24.0, 1.0, 2.0], [0.0] * 3, [3.0, 0.0, 0.0]]
    assert b["context"].tolist() == [[1, 2, 3], [4, 0, 0], [2, 5, 0]]
    assert b["label"].tolist() == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("order", [[1], [1, 1], [2, 0], [0, 2, 1]])
def test_collate_any_order_and_zero_bags(hand, order):
    b = batches.collate(hand, order)
    n_bags = [len(HAND[i]["bags"]) for i in order]
    assert b["tokens"].shape[:2] == (len(order), max(n_bags))
    assert b["tokens"].shape[2] >= 1  # L >= 1 even when no admission has a bag
    assert b["mask"].sum(1).tolist() == n_bags
    assert [HAND[i]["key"] for i in order] == [hand.keys[i] for i in order]


@pytest.mark.parametrize("max_bags, expected", [(None, [0, 2, 1]), (0, [0, 1, 2])])
def test_length_order_longest_first_ties_in_file_order(hand, max_bags, expected):
    assert batches.length_order(hand, max_bags).tolist() == expected  # bags: a 3, b 0, c 1; max_bags 0 ties all


def test_iter_batches_follow_order_and_cover_every_admission(hand):
    out = list(batches.iter_batches(hand, 2, order=[2, 0, 1]))
    assert [b["label"].shape[0] for b in out] == [2, 1]
    assert out[0]["context"].tolist() == [[2, 5, 0], [1, 2, 3]]  # admissions c, a
    assert out[1]["context"].tolist() == [[4, 0, 0]]  # admission b
    for bad in ([0, 1], [0, 0, 1]):
        with pytest.raises(ValueError, match="each of the 3 admissions once"):
            list(batches.iter_batches(hand, 2, order=bad))


@pytest.mark.parametrize("max_bags, expected_hours", [(1, [2.0]), (2, [1.0, 2.0]), (5, [-24.0, 1.0, 2.0])])
def test_max_bags_keeps_most_recent(hand, max_bags, expected_hours):
    b = batches.collate(hand, [0], max_bags=max_bags)
    assert b["hours"][0].tolist() == expected_hours
    assert b["mask"][0].all()


@pytest.mark.parametrize("max_tokens, expected", [(1, [2]), (2, [2, 5]), (3, [2, 3, 7]), (5, [2, 3, 5, 7, 9])])
def test_max_tokens_evenly_spaced(hand, max_tokens, expected):
    b = batches.collate(hand, [0], max_tokens=max_tokens)
    assert b["tokens"].shape[2] == min(max_tokens, 5)
    assert [t for t in b["tokens"][0, 1].tolist() if t] == expected
    assert [t for t in b["tokens"][0, 2].tolist() if t] == [6]  # short bags untouched


def test_from_pandas_and_chunks_match_full_load(tmp_path):
    write_features(tmp_path, n_train=50)
    path = tmp_path / "train.parquet"
    full = features.load_split(path)
    same = features.from_pandas(pq.read_table(path).to_pandas())
    for name in ("tokens", "token_offsets", "bag_offsets", "bag_hours", "context", "label", "n_events", "keys"):
        assert np.array_equal(getattr(full, name), getattr(same, name)), name
    for chunk in (1, 7, 50, 64):
        parts = list(features.iter_parquet(path, chunk_rows=chunk))
        assert [len(p) for p in parts][:-1] == [chunk] * (len(parts) - 1)
        assert np.array_equal(np.concatenate([p.keys for p in parts]), full.keys)
        assert np.array_equal(np.concatenate([p.tokens for p in parts]), full.tokens)


def test_sampler_is_pure_covers_epochs_and_shards():
    s = batches.TrainSampler(n=10, size=4, seed=3)
    again = batches.TrainSampler(n=10, size=4, seed=3)
    steps = [s.indices(i) for i in range(5)]  # 20 positions = exactly 2 epochs
    assert all(np.array_equal(a, again.indices(i)) for i, a in enumerate(steps))
    stream = np.concatenate(steps)
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:]) == list(range(10))
    assert not np.array_equal(stream[:10], stream[10:])  # a new permutation per epoch
    assert not np.array_equal(batches.TrainSampler(10, 4, seed=4).indices(0), steps[0])
    shards = [s.indices(3, rank=r, world=2) for r in range(2)]
    assert np.array_equal(np.concatenate(shards), steps[3])
    with pytest.raises(ValueError, match="do not split over 3"):
        s.indices(0, rank=0, world=3)


def test_small_split_keeps_batch_size():
    s = batches.TrainSampler(n=3, size=8, seed=0)
    idx = s.indices(0)
    assert idx.shape == (8,) and set(idx) == {0, 1, 2}


def _write(tmp_path, rows, name="bad.parquet"):
    return write_parquet(_table(rows), tmp_path / name)


@pytest.mark.parametrize(
    "mutate, pattern",
    [
        (lambda r: r.update(label=3), r"column 'label' row 1 = 3\.0"),
        (lambda r: r.update(bag_hours=[1.0, 2.0]), r"row 1: 'bags' and 'bag_hours' have different lengths"),
        (lambda r: r.update(bags=[[1], None], bag_hours=[0.0, 1.0]), r"column 'bags' row 1 holds a null bag"),
        (lambda r: r.update(bag_hours=[float("nan"), 1.0], bags=[[1], [2]]), r"column 'bag_hours' row 1"),
        (lambda r: r.update(bag_values=[]), r"row 1: 'bags' and 'bag_values' have different lengths"),
        (lambda r: r.update(bag_values=[[0.5, 1.0]]), r"row 1: a bag of 'bags' and its list in 'bag_values' have"),
        (lambda r: r.update(bag_values=[None]), r"column 'bag_values' row 1 holds a null list"),
        (lambda r: r.update(bag_values=[[float("inf")]]),
         r"column 'bag_values' row 1 holds a value that is not a finite"),
    ],
)
def test_bad_rows_are_named(tmp_path, mutate, pattern):
    rows = [dict(HAND[0]), dict(HAND[2])]
    mutate(rows[1])
    path = _write(tmp_path, rows)
    with pytest.raises(features.FeatureError, match=pattern) as exc:
        features.load_split(path, values=True)  # the value channel's checks too
    assert "bad.parquet" in str(exc.value)


def test_vocab_check_names_column_and_row(hand):
    hand.check_vocab(10, 6)
    with pytest.raises(features.FeatureError, match=r"column 'bags' row 0: id 9 outside the vocabulary \[0, 9\)"):
        hand.check_vocab(9, 6)
    with pytest.raises(features.FeatureError, match=r"column 'context' row 2: id 5 outside"):
        hand.check_vocab(10, 5)


def test_missing_file_column_and_label(tmp_path):
    with pytest.raises(features.FeatureError, match="features file not found"):
        features.load_split(tmp_path / "nope.parquet")
    pq.write_table(_table(HAND).drop(["bags"]), tmp_path / "nobags.parquet")
    with pytest.raises(features.FeatureError, match=r"nobags.parquet: missing column\(s\) \['bags'\]"):
        features.load_split(tmp_path / "nobags.parquet")
    unlabeled = features.from_pandas(pq.read_table(_write(tmp_path, HAND)).to_pandas().drop(columns=["label"]))
    assert np.isnan(unlabeled.label).all() and not unlabeled.has_labels
    with pytest.raises(features.FeatureError, match="column 'label' row 0 is missing"):
        unlabeled.require_labels()


def test_demo_features_batch_through_every_model(demo_features):
    """Real demo features, a zero-bag admission added, through every model kind (tiny sizes)."""
    import torch

    from pipeline.tasks.mortality import MortalityConfig, build_model

    fs = features.load_split(demo_features.out_dir / "train.parquet")
    vocab = fileio.read_json(demo_features.out_dir / "vocab.json")
    fs.check_vocab(len(vocab["tokens"]), len(vocab["context"]))
    batch = batches.collate(fs, np.arange(6), max_bags=8, max_tokens=16)
    assert batch["tokens"].shape[1] <= 8 and batch["tokens"].shape[2] <= 16
    empty = features.from_pandas(pq.read_table(demo_features.out_dir / "val.parquet").to_pandas().head(2)
                             .assign(bags=[[], []], bag_hours=[[], []], n_events=[0, 0]))
    zero = batches.collate(empty, [0, 1])
    assert zero["tokens"].shape == (2, 0, 1)
    cfg = MortalityConfig(len(vocab["tokens"]), len(vocab["context"]), embedding_dim=4, lstm_hidden=4,
                          dense_units=4, components=2)
    for kind in ("deterministic", "rank1", "deep-ensemble"):
        model = build_model(kind, cfg)
        for b in (batch, zero):
            out = model(b, samples=3)
            assert out.shape == (3 * model.components, b["label"].shape[0]) and torch.isfinite(out).all()


def test_window_columns_are_optional_and_checked(tmp_path):
    rows = [dict(HAND[0], observed_hours=5.5, before_prediction_time=True), dict(HAND[1])]
    fs = features.from_arrow(_table(rows))
    assert fs.observed_hours.tolist() == [5.5, 24.0] and fs.before_prediction_time.tolist() == [True, False]
    old = _table(rows).drop_columns(["observed_hours", "before_prediction_time"])  # FEATURE_VERSION 1 files
    fs = features.from_arrow(old)
    assert fs.observed_hours is None and fs.before_prediction_time is None
    write_parquet(_table(rows), tmp_path / "f.parquet")
    assert features.load_split(tmp_path / "f.parquet").before_prediction_time.tolist() == [True, False]
    bad = _table([dict(HAND[0]), dict(HAND[1], observed_hours=-1.0)])
    with pytest.raises(features.FeatureError, match="column 'observed_hours' row 1 = -1.0"):
        features.from_arrow(bad, source="f.parquet")
    frame = _table(rows).to_pandas()
    assert features.from_pandas(frame).before_prediction_time.tolist() == [True, False]


@pytest.mark.slow
def test_value_channel_is_optional_and_rides_beside_its_tokens(tmp_path):
    """bag_values is read where present (None in older files); collate puts each value beside its
    token, through the max_tokens cap too; a model with a value channel refuses a file without it."""
    rows = [dict(HAND[0], bag_values=[[0.1, 0.4], [0.2, 0.3, 0.5, 0.7, 0.9], [0.6]]), dict(HAND[1]),
            dict(HAND[2], bag_values=[[0.8]])]
    fs = features.from_arrow(_table(rows))
    assert fs.values.tolist() == pytest.approx([0.1, 0.4, 0.2, 0.3, 0.5, 0.7, 0.9, 0.6, 0.8])
    b = batches.collate(fs, [0, 1, 2])
    torch = pytest.importorskip("torch")
    torch.testing.assert_close(b["values"], b["tokens"].float() / 10)  # each value is its id / 10 here
    capped = batches.collate(fs, [0], max_tokens=2)  # ids 2, 3, 5, 7, 9 -> every other: 2, 5
    assert capped["tokens"][0, 1].tolist() == [2, 5] and capped["values"][0, 1].tolist() == pytest.approx([0.2, 0.5])
    old = features.from_arrow(_table(rows).drop_columns(["bag_values"]))  # feature version 1 and 2 files
    assert old.values is None and "values" not in batches.collate(old, [0])
    with pytest.raises(features.FeatureError,
                       match="column 'bag_values' is missing, and the model has a value channel"):
        old.require_values()
    v3 = write_parquet(_table(rows), tmp_path / "v3.parquet")
    assert features.load_split(v3).values is None  # a model without the channel neither holds nor checks it
    assert features.load_split(v3, values=True).values.tolist() == pytest.approx(fs.values.tolist())
    assert [c.values is None for c in features.iter_parquet(v3, chunk_rows=2)] == [True, True]
    assert np.concatenate([c.values for c in features.iter_parquet(v3, chunk_rows=2, values=True)]).tolist() == \
        pytest.approx(fs.values.tolist())
    path = write_parquet(_table(rows).drop_columns(["bag_values"]), tmp_path / "v2.parquet")
    features.check_file(path)
    with pytest.raises(features.FeatureError, match=r"v2.parquet: column 'bag_values' is missing"):
        features.check_file(path, values=True)
    frame = _table(rows).to_pandas()
    assert features.from_pandas(frame).values.tolist() == pytest.approx(fs.values.tolist())
