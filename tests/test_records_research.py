"""The records-research preset and the settings it needs: Keras initialisation (layers.init), clipped
dense factor draws, the jittered initial scale, L2 on biases and inside the KL, and the best
checkpoint by validation loss; the preset trains every kind it names end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from helpers.features import write_features

from pipeline.bayes.layers import LinearRank1, Rank1Config, keras_init, l2_penalty
from pipeline.bayes.layers.init import HE_TRUNCATION
from pipeline.bayes.objective import Objective, regularizer
from pipeline.engine import checkpoints as checkpoint
from pipeline.tasks.mortality import build_model, model_config
from pipeline.tasks.mortality.task import val_score
from pipeline.tasks.mortality.train_config import PRESETS, CheckpointMetric, Preset, TrainConfig
from pipeline.workflows import train as training

SIZES = {"tokens": 30, "context": 6}

# The table of issue 17 as read in the authors' files (docs/experiments/2026-12-01-records-research-preset.md
# gives the file and line of each): a changed preset value must be a deliberate edit here too.
AUTHORS = {"max_steps": 10_000, "anneal_steps": 5_000, "lr": 3.0352e-4, "clip": 7.29199, "batch_size": 64,
           "l2": 1e-4, "l2_in_kl": True, "l2_biases": True, "checkpoint_metric": "loss", "eval_samples": 1,
           "nll": "average", "train_samples": 1}
AUTHORS_MODEL = {"lstm_hidden": 256, "lstm_layers": 1, "dense_units": 128, "components": 4, "prior": "gaussian",
                 "prior_mean": 1.0, "prior_stddev": 1.0, "factor_init": "random_sign", "random_sign_prob": 0.5,
                 "init_stddev_jitter": 0.1, "weight_init": "keras", "factor_clip": 10.0}


def test_preset_is_the_authors_table():
    cfg = TrainConfig.from_preset("records-research")
    got = cfg.to_dict()
    assert {k: got[k] for k in AUTHORS} == AUTHORS
    assert {k: got["model"][k] for k in AUTHORS_MODEL} == AUTHORS_MODEL
    assert math.isclose(got["model"]["init_stddev"], math.sqrt(1e-3 / 0.999))  # a dropout rate of 1e-3 as a stddev
    assert math.isclose(got["model"]["init_stddev"], 0.0316386, rel_tol=1e-5)
    over = TrainConfig.from_preset("records-research", max_steps=50, model={"lstm_hidden": 16})
    assert over.max_steps == 50 and over.model["lstm_hidden"] == 16 and over.model["prior_stddev"] == 1.0
    assert set(PRESETS) == set(Preset)


@pytest.mark.parametrize("kind", ["rank1", "batchensemble", "deterministic"])
def test_keras_init(kind):
    torch.manual_seed(0)
    m = build_model(kind, model_config({**PRESETS[Preset.RECORDS_RESEARCH]["model"], "lstm_hidden": 64}, SIZES))
    h = 64
    if kind == "deterministic":
        w_ih, w_hh = m.lstm.weight_ih_l0, m.lstm.weight_hh_l0
        b = m.lstm.bias_ih_l0
        assert (m.lstm.bias_hh_l0 == 0).all()
        assert (m.dense.bias == 0).all() and m.dense.weight.abs().max() <= math.sqrt(6 / sum(m.dense.weight.shape))
        emb = m.bag_embedding.embedding.weight
        assert emb.abs().max() <= 0.05 and (emb[0] == 0).all()
    else:
        w_ih, w_hh, b = m.lstm.weight_ih[0], m.lstm.weight_hh[0], m.lstm.bias[0]  # (4H, D), (4H, H), (K, 4H)
        for layer in (m.dense, m.output):
            assert (layer.bias == 0).all()
            std = math.sqrt(2 / layer.weight.shape[1]) / HE_TRUNCATION
            assert layer.weight.abs().max() <= 2 * std + 1e-6
        w = m.dense.weight.detach()
        assert abs(w.std().item() - math.sqrt(2 / w.shape[1])) < 0.05 * math.sqrt(2 / w.shape[1])  # he-normal
    assert w_ih.abs().max() <= math.sqrt(6 / (w_ih.shape[0] + w_ih.shape[1])) + 1e-7  # glorot-uniform
    eye = w_hh.detach().t() @ w_hh.detach()  # (H, H): orthonormal columns
    assert torch.allclose(eye, torch.eye(h), atol=1e-5)
    bias = b.detach().reshape(-1, 4 * h)
    assert (bias[:, h:2 * h] == 1).all() and (bias[:, :h] == 0).all() and (bias[:, 2 * h:] == 0).all()


def test_torch_init_is_unchanged_by_default():
    torch.manual_seed(0)
    a = build_model("rank1", model_config({}, SIZES))
    assert (a.lstm.bias[0] != 0).any() and (a.dense.bias != 0).any()  # PyTorch's uniform biases


def test_dense_factor_draws_are_clipped_and_means_are_not():
    torch.manual_seed(0)
    layer = LinearRank1(5, 3, components=2, config=Rank1Config(init_stddev=50.0, clip=10.0))
    draws = layer.draw(rows=2 * 400)
    for d in draws.values():
        assert d.value.abs().max() <= 10.0 and (d.value.abs() == 10.0).any()  # sd 50: many draws clipped
    with torch.no_grad():
        layer.r.mean.fill_(20.0)
    layer.use_mean = True
    assert (layer.draw(rows=4)["r"].value == 20.0).all()
    model = build_model("rank1", model_config({"init_stddev": 50.0, "factor_clip": 10.0}, SIZES))
    assert model.dense.config.clip == model.output.config.clip == 10.0 and model.lstm.config.clip is None
    assert model.lstm.draw(rows=2 * 400)[0]["r_ih"].value.abs().max() > 10.0  # edward2 clips dense layers only
    assert model.dense.draw(rows=2 * 400)["r"].value.abs().max() <= 10.0


def test_initial_scale_jitter():
    torch.manual_seed(0)
    cfg = Rank1Config(init_stddev=math.sqrt(1e-3 / 0.999), init_scale_jitter=0.1)
    layer = LinearRank1(200, 100, components=4, config=cfg)
    raw = layer.s.rho.detach()
    base = math.log(math.expm1(math.sqrt(1e-3 / 0.999)))
    assert abs(raw.mean().item() - base) < 0.01 and 0.07 < raw.std().item() < 0.095  # truncated at 2 sd
    assert (raw - base).abs().max() <= 0.2 + 1e-6


def test_l2_biases():
    torch.manual_seed(0)
    m = build_model("rank1", model_config({"lstm_hidden": 8, "dense_units": 8, "embedding_dim": 4}, SIZES))
    weights = sum(w.pow(2).sum() for w in [*m.lstm.weight_ih, *m.lstm.weight_hh, m.dense.weight, m.output.weight])
    biases = sum(b.pow(2).sum() for b in [*m.lstm.bias, m.dense.bias, m.output.bias])
    assert torch.isclose(l2_penalty(m), weights) and torch.isclose(m.l2_penalty(biases=True), weights + biases)
    d = build_model("deterministic", model_config({"lstm_hidden": 8, "dense_units": 8, "embedding_dim": 4}, SIZES))
    extra = d.l2_penalty(biases=True) - d.l2_penalty()
    lstm_b = d.lstm.bias_ih_l0.pow(2).sum() + d.lstm.bias_hh_l0.pow(2).sum()
    assert torch.isclose(extra, lstm_b + d.dense.bias.pow(2).sum() + d.output.bias.pow(2).sum())


def _batch(n: int = 6):
    g = torch.Generator().manual_seed(1)
    return {"tokens": torch.randint(1, SIZES["tokens"], (n, 3, 2), generator=g),
            "mask": torch.ones(n, 3, dtype=torch.bool),
            "hours": torch.zeros(n, 3), "context": torch.randint(1, SIZES["context"], (n, 2), generator=g),
            "label": torch.tensor([1.0, 0, 0, 1, 0, 0])[:n]}


def test_l2_inside_the_kl_is_annealed_and_divided_by_n():
    torch.manual_seed(0)
    m = build_model("rank1", model_config({"lstm_hidden": 8, "dense_units": 8, "embedding_dim": 4}, SIZES))
    batch = _batch()
    outside = Objective(m, "average", 100, 1e-2, 1)
    inside = Objective(m, "average", 100, 1e-2, 1, l2_in_kl=True, l2_biases=True)
    for w in (0.25, 1.0):
        torch.manual_seed(3)
        a = outside(batch, w)
        torch.manual_seed(3)
        b = inside(batch, w)
        kl, pen = m.kl().detach(), m.l2_penalty(biases=True).detach()
        assert torch.isclose(a["loss"], a["nll"] + w * kl / 100 + 1e-2 * m.l2_penalty().detach(), rtol=1e-5)
        assert torch.isclose(b["loss"], b["nll"] + w * (kl + 1e-2 * pen) / 100, rtol=1e-5)
    assert torch.isclose(regularizer(m, 1e-2, True, True), m.kl() + 1e-2 * m.l2_penalty(biases=True))
    assert torch.isclose(regularizer(m, 1e-2, False, True), m.kl())


def test_validation_loss_score():
    m = build_model("rank1", model_config({"lstm_hidden": 8, "dense_units": 8, "embedding_dim": 4}, SIZES))
    nll_cfg = TrainConfig(model={})
    loss_cfg = TrainConfig(checkpoint_metric="loss", l2_in_kl=True, l2=1e-3)
    assert val_score(m, nll_cfg, 0.3, 50) == 0.3
    want = 0.3 + float((m.kl() + 1e-3 * m.l2_penalty()).detach()) / 50
    assert math.isclose(val_score(m, loss_cfg, 0.3, 50), want, rel_tol=1e-6)
    assert loss_cfg.checkpoint_metric is CheckpointMetric.LOSS
    with pytest.raises(Exception, match="^checkpoint_metric must be one of"):
        TrainConfig(checkpoint_metric="auc")


@pytest.fixture(scope="module")
def feats(tmp_path_factory):
    return write_features(tmp_path_factory.mktemp("rr_feats"), n_train=64, n_val=32, n_test=8)


@pytest.mark.parametrize("kind", ["rank1", "batchensemble", "deterministic"])
def test_preset_trains_each_kind(feats, kind, tmp_path):
    cfg = TrainConfig.from_preset("records-research", max_steps=8, eval_every=4, anneal_steps=4, score_samples=2,
                                  progress=False, threads=1,
                                  model={"lstm_hidden": 8, "dense_units": 8, "embedding_dim": 4})
    r = training.train(feats, kind, cfg, out_dir=tmp_path / kind, tracking=False)
    assert r.steps == 8 and np.isfinite(r.best_val_nll) and r.best_step in (4, 8)
    ckpt = checkpoint.read_checkpoint(r.best_checkpoint)
    assert ckpt["train_config"]["checkpoint_metric"] == "loss" and ckpt["model_config"]["weight_init"] == "keras"
    last = checkpoint.read_checkpoint(r.last_checkpoint)
    assert last["best_score"] >= last["best_val_nll"]  # the loss adds the regularisers


def test_resume_of_a_checkpoint_written_before_the_new_settings(feats, tmp_path):
    cfg = TrainConfig(max_steps=4, eval_every=2, score_samples=2, progress=False, threads=1,
                      model={"lstm_hidden": 8, "dense_units": 8, "embedding_dim": 4, "components": 2})
    training.train(feats, "rank1", cfg, out_dir=tmp_path, tracking=False)
    last = checkpoint.read_checkpoint(tmp_path / "last.pt")
    for key in ("l2_in_kl", "l2_biases", "checkpoint_metric"):
        del last["train_config"][key]
    del last["best_score"]
    checkpoint.save_checkpoint(tmp_path / "last.pt", last)
    more = TrainConfig(**{**cfg.to_dict(), "max_steps": 6})
    r = training.train(feats, "rank1", more, out_dir=tmp_path, resume=True, tracking=False)
    assert r.steps == 6


def test_keras_init_leaves_variational_layers_alone():
    torch.manual_seed(0)
    m = build_model("bayes-full", model_config({"lstm_hidden": 8, "dense_units": 8, "embedding_dim": 4}, SIZES))
    before = {k: v.clone() for k, v in m.state_dict().items()}
    keras_init(m)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_embedding_kl_weight_scales_only_the_embeddings_kl():
    cfg = {"lstm_hidden": 8, "dense_units": 8, "embedding_dim": 4}
    torch.manual_seed(0)
    a = build_model("rank1", model_config(cfg, SIZES))
    torch.manual_seed(0)
    b = build_model("rank1", model_config({**cfg, "embedding_kl_weight": 0.25}, SIZES))
    emb = a.bag_embedding.kl() + a.context_embedding.kl()
    assert torch.isclose(b.kl(), a.kl() - 0.75 * emb)
