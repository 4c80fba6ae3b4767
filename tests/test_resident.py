"""pipeline.data.resident: batches gathered from features resident on a device are ``batches.collate``'s
tensors (values, dtypes, shapes), for training steps (``TrainSampler``'s admissions, the mortality plan's
batches) and for validation and scoring (``iter_batches``' order and batching, any memory cap). On the CPU:
the same code a GPU runs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.features import write_features

from pipeline.data import batches, features, resident


@pytest.fixture(scope="module")
def fdir(tmp_path_factory):
    return write_features(tmp_path_factory.mktemp("res") / "f", n_train=150, n_val=40, n_test=8, seed=3)


@pytest.fixture(scope="module", params=[False, True], ids=["no-values", "values"])
def fs(request, fdir):
    return features.load_split(fdir / "train.parquet", values=request.param)


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert torch.equal(got[k].cpu(), want[k]), k


@pytest.mark.parametrize("caps", [(None, None), (2, None), (None, 2), (3, 1)])
def test_gather_is_collate(fs, caps):
    max_bags, max_tokens = caps
    res = resident.ResidentFeatures.of(fs, "cpu", max_bags, max_tokens)
    rng = np.random.default_rng(0)
    picks = [[3], [3, 3, 10], [10, 3, 17, 24], rng.integers(0, len(fs), 64), np.arange(len(fs)), []]
    for idx in picks:
        assert_same(res.gather(np.asarray(idx, dtype=np.int64)), batches.collate(fs, idx, max_bags, max_tokens))
    assert ("values" in res.gather([0])) == (fs.values is not None)


def test_labels_missing_are_zero_as_collate(fs):
    unlabelled = resident.subset(fs, np.arange(10))
    unlabelled.label = np.full(10, np.nan, dtype=np.float32)
    assert_same(resident.ResidentFeatures.of(unlabelled, "cpu").gather(np.arange(10)),
                batches.collate(unlabelled, np.arange(10)))


def test_training_steps_see_the_samplers_admissions(fs):
    sampler = batches.TrainSampler(len(fs), 32, seed=5)
    res = resident.ResidentFeatures.of(fs, "cpu")
    for step in (0, 1, 4, 5, 11):  # 150 / 32: epoch boundaries inside batches 4 and 9
        idx = sampler.indices(step)
        assert_same(res.gather(idx), batches.collate(fs, idx))


def test_subset_is_the_rows_in_order(fs):
    idx = np.array([7, 0, 7, 149, 3])
    sub = resident.subset(fs, idx)
    assert_same(batches.collate(sub, np.arange(5)), batches.collate(fs, idx))
    assert list(sub.keys) == list(fs.keys[idx])


@pytest.mark.parametrize("max_bytes", [10 ** 9, 1, 3_000])
@pytest.mark.parametrize("batch_size", [1, 7, 64])
def test_device_batches_are_iter_batches_under_any_cap(fs, max_bytes, batch_size):
    order = batches.length_order(fs, 4)
    got = list(resident.device_batches(fs, batch_size, "cpu", 4, 3, order, max_bytes=max_bytes))
    want = list(batches.iter_batches(fs, batch_size, 4, 3, order))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g, w)


def test_chunks_keep_whole_batches_within_the_cap(fs):
    idx = batches.length_order(fs)
    cap = resident.resident_bytes(fs) // 5
    chunks = list(resident._chunks(fs, idx, 16, cap))
    assert len(chunks) > 1 and np.array_equal(np.concatenate(chunks), idx)
    assert all(len(c) % 16 == 0 for c in chunks[:-1])
    assert all(resident.resident_bytes(fs, c) <= cap for c in chunks if len(c) > 16)


def test_bad_order_and_batch_size_are_refused(fs):
    with pytest.raises(ValueError, match="permutation"):
        list(resident.device_batches(fs, 8, "cpu", order=np.zeros(len(fs), dtype=np.int64)))
    with pytest.raises(ValueError, match="batch_size"):
        list(resident.device_batches(fs, 0, "cpu"))
