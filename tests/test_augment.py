"""training.augment: unseen items simulated with the OOV tokens (per source and admission, per token),
bags kept as sets, reproducible per (seed, step, rank), and wired into training (resume exact)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.features import write_features

from pipeline.tasks.mortality.augment import OovAugment, dedupe
from pipeline.tasks.mortality.train_config import TrainConfig
from pipeline.workflows import train as training

TOKENS = ["<pad>", "chart:<oov>", "lab:<oov>", "chart:1:q1", "chart:2:q3", "lab:7:q2", "lab:8:q5"]


def _batch():
    tokens = torch.tensor([[[3, 4, 5, 0], [5, 6, 0, 0]], [[4, 6, 0, 0], [0, 0, 0, 0]]])  # (B=2, T=2, L=4)
    return {"tokens": tokens, "mask": torch.tensor([[True, True], [True, False]])}


def test_maps_each_token_to_its_sources_oov():
    aug = OovAugment(TOKENS, 0.0, 0.0, 0)
    assert aug.oov.tolist() == [0, 1, 2, 1, 1, 2, 2] and aug.source.tolist() == [-1, 0, 1, 0, 0, 1, 1]
    assert not aug.active and aug(_batch(), 1) is not None


def test_whole_source_replaced_and_bags_stay_sets():
    aug = OovAugment(TOKENS, 0.999999, 0.0, 0)  # every source of every admission
    out = aug(_batch(), 1)["tokens"]
    want = torch.tensor([[[0, 1, 0, 2], [0, 0, 2, 0]], [[0, 0, 1, 2], [0, 0, 0, 0]]])  # sorted, repeats -> 0
    assert torch.equal(out, want)
    assert torch.equal(_batch()["tokens"], _batch()["tokens"])  # input untouched


def test_source_dropout_takes_whole_sources():
    aug = OovAugment(TOKENS, 0.5, 0.0, 3)
    for step in range(1, 30):
        out = aug(_batch(), step)["tokens"]
        for adm in range(2):
            real = out[adm][out[adm] != 0]
            for oov, members in ((1, (3, 4)), (2, (5, 6))):
                has_oov, has_item = bool((real == oov).any()), bool(np.isin(real, members).any())
                assert not (has_oov and has_item)  # a source is dropped whole or not at all


def test_token_rate_and_reproducibility():
    aug = OovAugment(TOKENS, 0.0, 0.5, 7)
    a, b = aug(_batch(), 5)["tokens"], aug(_batch(), 5)["tokens"]
    assert torch.equal(a, b)  # a pure function of (seed, step, rank)
    outs = {tuple(aug(_batch(), s)["tokens"].flatten().tolist()) for s in range(1, 20)}
    assert len(outs) > 3  # steps differ
    ranks = {tuple(aug(_batch(), 5, rank=r)["tokens"].flatten().tolist()) for r in range(8)}
    assert len(ranks) > 1  # each rank draws its own stream


@pytest.mark.slow
def test_dedupe():
    x = torch.tensor([[[5, 1, 5, 0, 1]]])
    assert dedupe(x).tolist() == [[[0, 1, 0, 5, 0]]]  # sorted [0, 1, 1, 5, 5], repeats -> padding
    tokens, values = dedupe(x, torch.tensor([[[0.5, 0.1, 0.7, 0.0, 0.2]]]))  # values move with their ids
    assert tokens.tolist() == [[[0, 1, 0, 5, 0]]]
    torch.testing.assert_close(values, torch.tensor([[[0.0, 0.1, 0.0, 0.5, 0.0]]]))  # the first of a repeat stays


def test_values_follow_their_tokens_and_replaced_tokens_lose_theirs():
    """Token rate 1/2: a kept token keeps its value beside it; a token replaced by its OOV gets 0."""
    batch = _batch()
    batch["values"] = batch["tokens"].float() / 10  # a token's value says who it is
    aug = OovAugment(TOKENS, 0.0, 0.5, 7)
    for step in range(1, 20):
        out = aug(batch, step)
        assert torch.equal(out["tokens"], aug(_batch(), step)["tokens"])  # the values change no draw
        kept = out["tokens"] > 2  # not padding, not an OOV id
        assert torch.allclose(out["values"][kept], out["tokens"][kept].float() / 10)
        assert (out["values"][~kept] == 0).all()


def test_a_token_without_an_oov_of_its_source_keeps_its_value():
    """rx has no OOV token: a drawn rx token stays itself, and so does its value."""
    aug = OovAugment([*TOKENS, "rx:drug"], 0.0, 0.999999, 7)
    batch = {"tokens": torch.tensor([[[3, 7, 0]]]), "mask": torch.tensor([[True]]),
             "values": torch.tensor([[[0.5, 0.25, 0.0]]])}
    out = aug(batch, 1)
    assert out["tokens"].tolist() == [[[0, 1, 7]]] and out["values"].tolist() == [[[0.0, 0.0, 0.25]]]


@pytest.fixture(scope="module")
def feats(tmp_path_factory):
    from pipeline.core import fileio

    out = write_features(tmp_path_factory.mktemp("aug_feats"), n_train=64, n_val=32, n_test=8)
    vocab = fileio.read_json(out / "vocab.json")
    n = len(vocab["tokens"])
    vocab["tokens"] = (["<pad>", "chart:<oov>", "lab:<oov>"]
                       + [f"{'chart' if i % 2 else 'lab'}:{i}" for i in range(3, n)])
    fileio.write_json(out / "vocab.json", vocab)
    return out


def test_training_with_augmentation_resumes_exactly(feats, tmp_path):
    model = {"lstm_hidden": 8, "dense_units": 8, "embedding_dim": 4, "components": 2}
    cfg = dict(eval_every=3, score_samples=2, progress=False, threads=1, source_oov_rate=0.3, token_oov_rate=0.1,
               model=model)
    full = training.train(feats, "rank1", TrainConfig(max_steps=6, **cfg), out_dir=tmp_path / "a",
                          tracking=False)
    training.train(feats, "rank1", TrainConfig(max_steps=3, **cfg), out_dir=tmp_path / "b", tracking=False)
    resumed = training.train(feats, "rank1", TrainConfig(max_steps=6, **cfg), out_dir=tmp_path / "b",
                             resume=True, tracking=False)
    assert resumed.final_val_nll == full.final_val_nll
    plain = training.train(feats, "rank1", TrainConfig(max_steps=6, **{**cfg, "source_oov_rate": 0.0,
                                                                                "token_oov_rate": 0.0}),
                           out_dir=tmp_path / "c", tracking=False)
    assert plain.final_val_nll != full.final_val_nll


def test_rates_are_checked():
    with pytest.raises(Exception, match="^source_oov_rate must lie in"):
        TrainConfig(source_oov_rate=1.0)
