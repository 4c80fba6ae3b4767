"""Mortality model variants: shapes, zero-bag admissions, padding, KL/L2, overfitting, stability."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.nn import functional as F

from pipeline.bayes.layers import set_sampling
from pipeline.core.errors import PipelineError
from pipeline.tasks.mortality import ModelKind, MortalityConfig, build_model

KINDS = [k.value for k in ModelKind]
STOCHASTIC = {"bayes-emb", "bayes-full", "rank1"}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def tiny_cfg(**kw) -> MortalityConfig:
    base = {"token_vocab": 30, "context_vocab": 9, "embedding_dim": 8, "lstm_hidden": 12, "dense_units": 16,
            "components": 3}
    return MortalityConfig(**{**base, **kw})


def make_batch(b=6, t=5, k=3, zero_rows=(1,), seed=0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[list(zero_rows)] = 0
    lengths[0] = t
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T) left-aligned
    tokens = torch.randint(1, 30, (b, t, k), generator=g)
    tokens[:, :, -1] = 0  # some token padding inside real bags
    tokens = tokens * mask.unsqueeze(2)
    hours = torch.cumsum(torch.rand(b, t, generator=g) * 5, 1) - 10.0
    batch = {"tokens": tokens, "mask": mask, "hours": hours * mask, "context": torch.randint(0, 9, (b, 4), generator=g),
             "label": torch.randint(0, 2, (b,), generator=g).float()}
    batch["values"] = torch.randn(b, t, k, generator=g) * (tokens != 0)  # the value channel (read when configured)
    return batch


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("samples", [1, 3])
def test_output_shape_and_sample_layout(kind, samples):
    model = build_model(kind, tiny_cfg())
    k = model.components
    assert k == (3 if kind in ("rank1", "batchensemble", "deep-ensemble") else 1)
    batch = make_batch()
    out = model(batch, samples=samples)
    assert out.shape == (samples * k, 6) and torch.isfinite(out).all()
    per_sample = out.view(samples, k, 6)
    if kind not in STOCHASTIC or samples == 1:
        assert torch.equal(per_sample, per_sample[:1].expand_as(per_sample))


def _member(model, k: int):
    """Member k of a K-component model on its own: for deep ensembles ``members[k]``; for rank-1 and
    BatchEnsemble the K = 1 model with the shared weights and member k's factors and biases."""
    if model.kind == "deep-ensemble":
        return model.members[k]
    single = build_model(model.kind, dataclasses.replace(model.cfg, components=1))
    shapes = {name: v.shape for name, v in single.state_dict().items()}
    single.load_state_dict({name: v[k : k + 1] if v.shape != shapes[name] else v  # (K, n) -> (1, n)
                            for name, v in model.state_dict().items()})
    return single


@pytest.mark.parametrize("kind", ["rank1", "batchensemble", "deep-ensemble"])
@pytest.mark.parametrize("samples", [1, 3])
def test_component_k_of_the_output_is_member_k(kind, samples):
    """Logits (S·K, B) hold component k at rows s·K + k: each is member k's own model (posterior means)."""
    model = build_model(kind, tiny_cfg(init_stddev=0.2))
    set_sampling(model, use_mean=True)
    batch = make_batch()
    out = model(batch, samples=samples).view(samples, 3, 6)  # (S·K, B) -> (S, K, B)
    members = []
    for k in range(3):
        member = _member(model, k)
        set_sampling(member, use_mean=True)
        members.append(member(batch)[0])
        for s in range(samples):
            torch.testing.assert_close(out[s, k], members[k], rtol=1e-5, atol=1e-6)
    assert min((members[i] - members[j]).abs().max() for i, j in ((0, 1), (0, 2), (1, 2))) > 1e-3  # distinct


@pytest.mark.parametrize("kind", sorted(STOCHASTIC))
@pytest.mark.parametrize("sampling", ["per_example", "per_member"])
def test_samples_are_the_mean_plus_scaled_noise(kind, sampling):
    """A draw is mean + σ·ε: with the same ε (seed) the logits' deviations from the posterior-mean logits
    grow linearly with the posterior scale σ (to first order; float64 keeps rounding out), and the S
    draws differ from one another."""
    deviations = {}
    for sd in (1e-5, 3e-5):
        torch.manual_seed(0)
        model = build_model(kind, tiny_cfg(init_stddev=sd, sampling=sampling)).double()
        batch = {**make_batch(), "hours": make_batch()["hours"].double()}
        with torch.no_grad():
            torch.manual_seed(1)
            draws = model(batch, samples=2)
            torch.manual_seed(1)
            assert torch.equal(model(batch, samples=2), draws)  # the draws follow the torch seed
            set_sampling(model, use_mean=True)
            deviations[sd] = draws - model(batch, samples=2)  # (S·K, B)
    small, large = deviations[1e-5], deviations[3e-5]
    scale = float(large.abs().max())
    assert scale > 0
    torch.testing.assert_close(large, 3 * small, rtol=0, atol=2e-3 * scale)
    per_sample = small.view(2, -1)  # (S, K·B)
    assert float((per_sample[0] - per_sample[1]).abs().max()) > 0.2 * float(small.abs().max())  # new ε per sample


@pytest.mark.parametrize("kind", KINDS)
def test_zero_bag_admissions_and_empty_time_axis(kind):
    model = build_model(kind, tiny_cfg())
    set_sampling(model, use_mean=True)
    batch = make_batch(zero_rows=(1, 3))
    out = model(batch)
    alone = {key: v[[1]] for key, v in batch.items()}
    alone = {**alone, "tokens": alone["tokens"][:, :0], "mask": alone["mask"][:, :0], "hours": alone["hours"][:, :0]}
    out_alone = model(alone)  # T = 0: context only
    assert torch.allclose(out[:, 1], out_alone[:, 0], atol=1e-5)
    empty = {**batch, "tokens": batch["tokens"][:, :0], "mask": batch["mask"][:, :0],
             "hours": batch["hours"][:, :0]}
    assert model(empty).shape == (model.components, 6)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_never_changes_outputs(kind):
    model = build_model(kind, tiny_cfg())
    batch = make_batch()
    b, _t, k = batch["tokens"].shape
    padded = dict(batch)
    padded["tokens"] = torch.cat([F.pad(batch["tokens"], (0, 2)), torch.zeros(b, 3, k + 2, dtype=torch.long)], 1)
    padded["mask"] = torch.cat([batch["mask"], torch.zeros(b, 3, dtype=torch.bool)], 1)
    padded["hours"] = torch.cat([batch["hours"], torch.zeros(b, 3)], 1)
    padded["context"] = F.pad(batch["context"], (0, 3))
    torch.manual_seed(7)
    out = model(batch, samples=2)
    torch.manual_seed(7)
    out_p = model(padded, samples=2)
    if kind in STOCHASTIC:  # the noise draw depends on the ids seen; compare posterior means
        set_sampling(model, use_mean=True)
        out, out_p = model(batch, samples=2), model(padded, samples=2)
    assert torch.allclose(out, out_p, atol=1e-5)


@pytest.mark.parametrize("kind", ["rank1", "batchensemble", "bayes-full"])
def test_sampling_modes_agree_on_posterior_means(kind):
    model = build_model(kind, tiny_cfg())
    batch = make_batch()
    set_sampling(model, "per_member", use_mean=True)
    ref = model(batch, samples=2)
    set_sampling(model, "per_example", use_mean=True)
    assert torch.allclose(model(batch, samples=2), ref, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_kl_and_l2(kind):
    model = build_model(kind, tiny_cfg())
    kl, l2 = model.kl(), model.l2_penalty()
    assert kl.shape == () and l2.shape == ()
    if kind in STOCHASTIC:
        assert kl.item() > 0 and kl.requires_grad
    else:
        assert kl.item() == 0.0
    if kind == "bayes-full":
        assert l2.item() == 0.0  # every weight is variational
    else:
        assert l2.item() > 0 and l2.requires_grad


def test_deep_ensemble_members_are_independent():
    model = build_model("deep-ensemble", tiny_cfg())
    batch = make_batch()
    logits = model(batch)
    nll = F.binary_cross_entropy_with_logits(logits, batch["label"].expand_as(logits), reduction="none")
    nll.mean(1)[0].backward()  # member 0's own loss
    assert all(p.grad is None or p.grad.abs().sum() == 0 for p in model.members[1].parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.members[0].parameters())


def test_bad_input_errors_name_the_problem():
    model = build_model("rank1", tiny_cfg())
    batch = make_batch()
    with pytest.raises(ValueError, match="missing 'mask'"):
        model({k: v for k, v in batch.items() if k != "mask"})
    with pytest.raises(ValueError, match=r"batch\['tokens'\] ids must lie in \[0, 30\)"):
        model({**batch, "tokens": batch["tokens"] + 100})
    with pytest.raises(ValueError, match="left-aligned"):
        model({**batch, "mask": batch["mask"].flip(1)})
    with pytest.raises(ValueError, match="unknown model kind"):
        build_model("rank2", tiny_cfg())
    with pytest.raises(ValueError, match="components"):
        tiny_cfg(components=0)


def train(model, batch, steps, lr, kl_weight):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        logits = model(batch)
        nll = F.binary_cross_entropy_with_logits(logits, batch["label"].expand_as(logits))
        loss = nll + kl_weight * model.kl()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


# A constant predictor on balanced random labels has NLL ln 2 = 0.693; 0.1 means every
# sample/member gives the right label ~90% probability on average, i.e. memorisation.
OVERFIT_NLL = 0.1


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.slow
def test_each_variant_overfits_tiny_dataset(kind):
    model = build_model(kind, tiny_cfg())
    batch = make_batch(b=16, t=4, zero_rows=(3,), seed=1)
    batch["context"] = batch["context"][:1].expand(16, -1)  # one shared context: labels need the sequence path
    batch["label"] = torch.tensor([0.0, 1.0] * 8)[torch.randperm(16)]
    train(model, batch, steps=200, lr=0.02, kl_weight=1e-6)
    with torch.no_grad():
        logits = model(batch, samples=2)
        nll = F.binary_cross_entropy_with_logits(logits, batch["label"].expand_as(logits)).item()
    assert nll < OVERFIT_NLL, f"{kind}: train NLL {nll:.3f}"


@pytest.mark.slow
def test_cauchy_rank1_runs_2000_steps_without_nan():
    model = build_model("rank1", tiny_cfg(prior="cauchy", embedding_dim=4, lstm_hidden=4, dense_units=8,
                                          components=2))
    batch = make_batch(b=8, t=3, k=2, zero_rows=(2,), seed=3)
    losses = train(model, batch, steps=2000, lr=0.01, kl_weight=1.0 / 1000)  # KL scaled as for N = 1000
    assert all(math.isfinite(v) for v in losses)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert torch.isfinite(model(batch, samples=4)).all()


# ---------------------------------------------------------------------------- per-member inference path


def _both_paths(model, batch, samples, seed=5):
    """Logits of the inference path and of the training path (per-member sampling and a generator
    seeded alike passed with the call, evaluation mode, no grad); the layers' own mode is untouched."""
    from pipeline.bayes.layers import Sampling
    from pipeline.engine.predict import evaluation_mode, seeded_generator

    per_member = Sampling.PER_MEMBER
    with evaluation_mode(model), torch.no_grad():
        assert model.block_inference(per_member) and not model.block_inference()  # the layers' mode: per_example
        fast = model(batch, samples=samples, sampling=per_member, generator=seeded_generator(seed))
        model.fast_inference = False
        assert not model.block_inference(per_member)
        slow = model(batch, samples=samples, sampling=per_member, generator=seeded_generator(seed))
        model.fast_inference = True
    assert all(m.sampling == Sampling.PER_EXAMPLE for m in model.modules() if hasattr(m, "sampling"))
    return fast, slow


@pytest.mark.parametrize("kind, kw", [
    ("rank1", {}), ("rank1", {"lstm_layers": 2}), ("rank1", {"perturbation": "additive"}),
    ("rank1", {"prior": "cauchy"}), ("rank1", {"bag_mode": "sum", "time_feature": False}),
    ("rank1", {"bag_size_feature": True}), ("rank1", {"bag_size_feature": True, "time_feature": False}),
    ("rank1", {"bag_mode": "attention"}), ("batchensemble", {}), ("batchensemble", {"lstm_layers": 2}),
    ("rank1", {"value_channel": True}), ("rank1", {"value_channel": True, "bag_mode": "sum"}),
    ("batchensemble", {"value_channel": True}),
])
@pytest.mark.parametrize("chunk_rows", [1, 1024])
def test_block_inference_equals_training_path(kind, kw, chunk_rows, monkeypatch):
    """Same seed -> the same draws (embedding noise, factors) and the same logits on both paths;
    zero-bag admissions included, rows of every length, one sample per recurrence chunk or all."""
    from pipeline.bayes.layers import inference

    monkeypatch.setattr(inference, "CHUNK_ROWS", chunk_rows)
    model = build_model(kind, tiny_cfg(init_stddev=0.2, **kw))
    for m in model.modules():  # attention bags: a query away from zero (the mean); a value channel away from 0
        if getattr(m, "query", None) is not None:
            torch.nn.init.normal_(m.query)
        if type(m).__name__ == "ValueBag":
            torch.nn.init.normal_(m.embedding.weight)
    batch = make_batch(b=9, t=6, zero_rows=(1, 4))
    fast, slow = _both_paths(model, batch, samples=4)
    assert fast.shape == (4 * 3, 9)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
    if kind == "rank1":
        assert fast.view(4, 3, 9).std(0).min() > 1e-4  # the samples really differ


def test_block_inference_empty_time_axis_and_full_bags():
    """T = 0 (context only) and bags without token padding take the inference path too."""
    model = build_model("rank1", tiny_cfg(init_stddev=0.2))
    batch = make_batch(zero_rows=(1, 3))
    empty = {**batch, "tokens": batch["tokens"][:, :0], "mask": batch["mask"][:, :0], "hours": batch["hours"][:, :0]}
    fast, slow = _both_paths(model, empty, samples=3)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)
    full = make_batch(zero_rows=())
    full["tokens"] = torch.randint(1, 30, full["tokens"].shape) * full["mask"].unsqueeze(2)  # no padding in real bags
    full["context"] = torch.randint(1, 9, full["context"].shape)
    fast, slow = _both_paths(model, full, samples=3)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-5)


def test_block_inference_only_for_per_member_draws_without_grad():
    model = build_model("rank1", tiny_cfg()).eval()
    assert not model.block_inference()  # per_example sampling
    set_sampling(model, "per_member")
    assert model.block_inference() is False  # grad enabled: the training path
    with torch.no_grad():
        assert model.block_inference()
        assert not build_model("bayes-full", tiny_cfg()).block_inference()  # no rank-1 LSTM
        assert not build_model("deterministic", tiny_cfg()).block_inference()


@pytest.mark.parametrize("mode, block", [("mean", None), ("sum", None), ("attention", None), ("attention", 50)])
def test_sample_bags_equal_tiled_forward(mode, block, monkeypatch):
    """S per-member draws of an untiled batch == the tiled forward, block by block (same seed);
    attention with a random query, in one block of samples or (``block``) several."""
    from pipeline.bayes.layers import EmbeddingBagBayes, EmbeddingConfig, embedding, tile_members

    if block:
        monkeypatch.setattr(embedding, "ATTEND_ELEMENTS", block)
    emb = EmbeddingBagBayes(30, 5, mode, EmbeddingConfig(init_stddev=0.3))
    if emb.query is not None:
        torch.nn.init.normal_(emb.query)
    set_sampling(emb, "per_member")
    ids = make_batch()["tokens"]  # (B, T, L) with padding and empty bags
    torch.manual_seed(3)
    fast = emb.sample_bags(ids, 4)  # (B, T, S, D)
    torch.manual_seed(3)
    tiled = emb(tile_members(ids, 4), samples=4).view(4, *ids.shape[:2], 5)  # (S·B, T, D) -> (S, B, T, D)
    torch.testing.assert_close(fast, tiled.permute(1, 2, 0, 3), rtol=1e-5, atol=1e-6)
    assert (fast[:, :, 0] - fast[:, :, 1]).abs().max() > 1e-3  # samples differ
    set_sampling(emb, "per_example")
    with pytest.raises(ValueError, match="per_member"):
        emb.sample_bags(ids, 4)


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("backend", ["blocks", "fused"])
@pytest.mark.parametrize("perturbation", ["multiplicative", "additive"])
def test_final_hidden_equals_lstm_forward_with_same_draws(layers, backend, perturbation):
    """inference.final_hidden == LSTMRank1.forward_with on the same per-block draws (sorted rows)."""
    from pipeline.bayes.layers import LSTMRank1, Rank1Config, expand_members
    from pipeline.bayes.layers.inference import final_hidden

    lstm = LSTMRank1(5, 7, num_layers=layers, components=2,
                     config=Rank1Config(init_stddev=0.3, perturbation=perturbation))
    set_sampling(lstm, "per_member")
    s, b = 3, 6
    x = torch.randn(b, 4, s, 5)  # (B, T, S, D)
    lengths = torch.tensor([4, 4, 3, 1, 0, 0])
    with torch.no_grad():
        torch.manual_seed(1)
        fast = final_hidden(lstm, x, lengths, s, backend)  # (S·K·B, H)
        torch.manual_seed(1)
        draws = lstm.draw(s * 2 * b, s)
        rows = expand_members(x.permute(2, 0, 1, 3).reshape(s * b, 4, 5), s, 2, b)  # (S·B, T, D) -> (S·K·B, T, D)
        _, (h_n, _) = lstm.forward_with(rows, lengths.repeat(s * 2), draws, s)
    torch.testing.assert_close(fast, h_n[-1], rtol=1e-5, atol=1e-6)
    assert fast.view(s * 2, b, 7)[:, 4:].abs().max() == 0  # length 0: zero state
    with pytest.raises(ValueError, match="sorted"):
        final_hidden(lstm, x, lengths.flip(0), s, backend)
    with torch.no_grad():  # no row runs: zero states, no kernel call
        assert final_hidden(lstm, x, torch.zeros(b, dtype=torch.long), s, backend).abs().max() == 0
    padded = x.clone()
    padded[4:] = float("nan")  # whatever the padding holds, a length-0 row keeps the zero state
    padded[2, 3:] = float("nan")  # and steps after a row's end never reach it
    torch.manual_seed(1)
    out = final_hidden(lstm, padded, lengths, s, backend)  # autograd on: final_hidden runs without it
    torch.testing.assert_close(out, fast, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        shared = []
        for kind in (backend, "blocks"):  # one input sample for every draw (S_x = 1), same draws
            torch.manual_seed(2)
            shared.append(final_hidden(lstm, x[:, :, :1], lengths, s, kind))
    torch.testing.assert_close(shared[0], shared[1], rtol=1e-5, atol=1e-6)


def test_final_hidden_backend_auto_follows_the_hidden_size(monkeypatch):
    from pipeline.bayes.layers import LSTMRank1, inference

    called = []
    monkeypatch.setattr(inference, "_fused_per_draw", lambda *a: called.append("fused") or torch.zeros(0))
    monkeypatch.setattr(inference, "block_kernels", lambda *a: called.append("blocks") or [])
    for hid in (inference.FUSED_MIN_HIDDEN - 1, inference.FUSED_MIN_HIDDEN):
        lstm = LSTMRank1(3, hid, components=1)
        set_sampling(lstm, "per_member")
        with torch.no_grad():
            inference.final_hidden(lstm, torch.randn(2, 1, 1, 3), torch.tensor([1, 1]), 1)
    assert called == ["blocks", "fused"]


def _factors(model):
    from pipeline.bayes.layers.factors import Rank1Vector

    return [m for m in model.modules() if isinstance(m, Rank1Vector)]


def test_rank1_prior_and_init_settings_reach_every_factor():
    """prior_mean / prior_stddev / factor_init / init_stddev reach every factor (and init_stddev the embeddings)."""
    default = _factors(build_model("rank1", tiny_cfg()))
    assert all(v.config.prior_mean == 1.0 and v.config.prior_scale == 0.1 for v in default)
    assert not all(set(v.mean.detach().unique().tolist()) <= {-1.0, 1.0} for v in default)  # normal init
    model = build_model("rank1", tiny_cfg(prior_mean=0.0, prior_stddev=1.0, factor_init="random_sign",
                                          init_stddev=0.03))
    vecs = _factors(model)
    assert len(vecs) == 8  # r and s of the LSTM kernel and recurrent kernel, dense and output layers
    for v in vecs:
        assert v.config.prior_mean == 0.0 and v.config.prior_scale == 1.0
        assert set(v.mean.detach().unique().tolist()) == {-1.0, 1.0}
        torch.testing.assert_close(v.scale(), torch.full_like(v.mean, 0.03))
        # KL(N(±1, σ²) || N(0, 1)) = -log σ + (σ² + 1)/2 - 1/2 per entry: sign-symmetric
        expected = v.mean.numel() * (-math.log(0.03) + 0.03 ** 2 / 2)
        assert v.kl().item() == pytest.approx(expected, rel=1e-5)
    for emb in (model.bag_embedding, model.context_embedding):
        torch.testing.assert_close(F.softplus(emb.rho), torch.full_like(emb.rho, 0.03))


@pytest.mark.parametrize("prior, init_scale, expected", [("gaussian", None, 1e-3), ("cauchy", None, 0.6745e-3),
                                                         ("cauchy", 1e-3, 1e-3), ("gaussian", 2e-3, 2e-3)])
def test_factor_initial_scale_per_family_or_as_given(prior, init_scale, expected):
    """Issue 23's rule in the mortality models: a Cauchy factor (unclipped) starts at the scale with the Normal's
    interquartile range, 0.6745·init_stddev; --init-scale sets any family's as given (the embeddings keep
    init_stddev)."""
    model = build_model("rank1", tiny_cfg(prior=prior, init_scale=init_scale))
    for v in _factors(model):
        torch.testing.assert_close(v.scale(), torch.full_like(v.mean, expected), rtol=1e-4, atol=0)
    torch.testing.assert_close(F.softplus(model.bag_embedding.rho), torch.full_like(model.bag_embedding.rho, 1e-3))


def test_rank1_config_errors_name_the_setting():
    for kw, match in [({"factor_init": "uniform"}, "^factor_init"), ({"prior_mean": float("nan")}, "^prior_mean"),
                      ({"init_scale": 0.0}, "^init_scale"),
                      ({"init_stddev": 0.0}, "^init_stddev"), ({"prior_stddev": -1.0}, "^prior_stddev"),
                      ({"factor_init": "random_sign", "perturbation": "additive"}, "random_sign")]:
        with pytest.raises(ValueError, match=match):
            tiny_cfg(**kw)


def test_rank1_settings_survive_checkpoint_reload(tmp_path):
    from pipeline.core.configs import config_dict
    from pipeline.engine.checkpoints import CHECKPOINT_FORMAT
    from pipeline.runs.formats import load_model

    cfg = tiny_cfg(prior_mean=0.0, prior_stddev=1.0, factor_init="random_sign", init_stddev=0.03)
    model = build_model("rank1", cfg)
    saved = config_dict(cfg)
    assert saved["prior_mean"] == 0.0 and saved["factor_init"] == "random_sign" and saved["init_stddev"] == 0.03
    train_config = {"score_samples": 2, "max_bags": None, "max_tokens": None}
    torch.save({"format": CHECKPOINT_FORMAT, "model_kind": "rank1", "model_config": saved, "model": model.state_dict(),
                "train_config": train_config}, tmp_path / "best.pt")
    loaded, info = load_model(tmp_path / "best.pt")
    assert info.model_config["prior_mean"] == 0.0
    for a, b in zip(_factors(model), _factors(loaded), strict=True):
        assert b.config.prior_mean == 0.0 and b.config.prior_scale == 1.0 and b.config.init == "random_sign"
        assert b.kl().item() == pytest.approx(a.kl().item())
    old = {k: v for k, v in saved.items() if k != "prior_mean"}  # a checkpoint from before prior_mean existed
    assert MortalityConfig(**old).rank1().prior_mean == 1.0


def test_cli_train_forwards_rank1_settings(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    import cli
    import pipeline.workflows.train

    seen = {}

    def fake_train(data, model, cfg, **kw):
        seen["model"] = cfg.model
        raise PipelineError("stop after forwarding")

    monkeypatch.setattr(pipeline.workflows.train, "train", fake_train)
    args = ["train", "--data", str(tmp_path), "--no-tracking", "--prior-mean", "0", "--prior-stddev", "1",
            "--factor-init", "random_sign", "--init-stddev", "0.03", "--prior-signs"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2 and "stop after forwarding" in result.output
    assert seen["model"] == {"prior_mean": 0.0, "prior_stddev": 1.0, "factor_init": "random_sign", "init_stddev": 0.03,
                             "prior_signs": True}
    result = CliRunner().invoke(cli.app, ["train", "--data", str(tmp_path), "--no-tracking"])
    assert seen["model"] == {}  # unset flags keep the defaults


def test_deep_ensemble_member_trains_like_a_deterministic_model():
    """Each member's gradient (NLL + L2) is the deterministic model's on the same weights, scaled by 1/K:
    the L2 penalty is the members' mean, as the NLL is."""
    from pipeline.bayes.objective import Objective

    cfg = tiny_cfg(components=2)
    ens, det = build_model("deep-ensemble", cfg), build_model("deterministic", cfg)
    det.load_state_dict(ens.members[0].state_dict())
    batch = make_batch()
    for model in (ens, det):
        Objective(model, "average", n_train=10, l2=0.05, samples=1)(batch, kl_weight=1.0)["loss"].backward()
    member = dict(ens.members[0].named_parameters())
    for name, p in det.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(member[name].grad * 2, p.grad, msg=name)


@pytest.mark.parametrize("prior", ["gaussian", "cauchy"])
def test_sign_symmetric_prior_kl(prior):
    """KL to ½p(+m) + ½p(-m): the Jensen bound -log(½e^-KL₊ + ½e^-KL₋), symmetric in the factor's sign,
    an upper bound on a Monte Carlo estimate of the true KL, and close to it when the modes are apart."""
    from pipeline.bayes.layers.factors import Rank1Config, Rank1Vector
    from pipeline.bayes.layers.priors import distribution

    torch.manual_seed(0)
    f = Rank1Vector(2, 5, Rank1Config(prior=prior, prior_signs=True, init="random_sign", init_stddev=0.05))
    with torch.no_grad():
        f.mean.copy_(torch.tensor([[1.0, -1.0, 0.9, -1.1, 0.0], [-1.0, 1.0, -0.9, 1.1, 0.3]]))
    kl = f.kl()
    with torch.no_grad():  # flipping every sign leaves the KL unchanged
        f.mean.neg_()
    torch.testing.assert_close(f.kl(), kl)
    q = distribution(prior, f.mean.detach(), f.scale().detach())
    z = q.sample((200_000,))  # (draws, K, n)
    p_plus, p_minus = distribution(prior, torch.tensor(1.0), torch.tensor(0.1)), distribution(prior, torch.tensor(-1.0),
                                                                                               torch.tensor(0.1))
    log_p = torch.logaddexp(p_plus.log_prob(z), p_minus.log_prob(z)) - math.log(2.0)
    mc = (q.log_prob(z) - log_p).mean(0).sum()
    assert float(kl) >= float(mc) - 0.05 and float(kl) == pytest.approx(float(mc), rel=0.05)
    plain = Rank1Vector(2, 5, Rank1Config(prior=prior, init="random_sign", init_stddev=0.05))
    with torch.no_grad():
        plain.mean.copy_(f.mean)
        plain.rho.copy_(f.rho)
    assert float(plain.kl()) > float(kl) + (100.0 if prior == "gaussian" else 10.0)  # the plain prior charges -1s


def test_prior_signs_needs_a_nonzero_prior_mean():
    from pipeline.bayes.layers.factors import Rank1Config

    with pytest.raises(ValueError, match="prior_signs"):
        Rank1Config(prior_signs=True, prior_mean=0.0)


def test_bag_channels_hold_the_hour_and_the_bag_size():
    model = build_model("deterministic", tiny_cfg(bag_size_feature=True))
    assert model.lstm.input_size == 8 + 2
    batch = make_batch()
    tokens, mask, hours = batch["tokens"], batch["mask"], batch["hours"]
    extra = model._bag_channels(tokens, mask, hours)  # (B, T, 2)
    size = (tokens != 0).sum(-1).float()
    torch.testing.assert_close(extra[..., 1], torch.log1p(size) * mask)
    torch.testing.assert_close(extra[..., 0], torch.sign(hours) * torch.log1p(hours.abs()) * mask)
    assert build_model("deterministic",
                       tiny_cfg(time_feature=False, bag_size_feature=False))._bag_channels(tokens, mask, hours) is None


@pytest.mark.slow
def test_a_checkpoint_from_before_a_default_changed_loads_as_trained(tmp_path):
    from pipeline.core.configs import config_dict
    from pipeline.engine.checkpoints import save_checkpoint
    from pipeline.runs.formats import load_model
    from pipeline.tasks.mortality.config import FORMER_DEFAULTS, saved_config

    old = MortalityConfig(token_vocab=20, context_vocab=6, lstm_hidden=8, dense_units=8, embedding_dim=4,
                          **FORMER_DEFAULTS)
    saved = {k: v for k, v in config_dict(old).items() if k not in FORMER_DEFAULTS}  # written before the keys existed
    assert saved_config(saved) == old and MortalityConfig(token_vocab=20, context_vocab=6).bag_size_feature
    assert saved_config({**saved, "bag_size_feature": True}).bag_size_feature
    torch.manual_seed(0)
    model = build_model("rank1", old)
    path = save_checkpoint(tmp_path / "best.pt", {
        "format": 1, "model_kind": "rank1", "model_config": saved, "model": model.state_dict(),
        "train_config": {"score_samples": 2, "max_bags": None, "max_tokens": None}})
    loaded, _ = load_model(path)  # the new default would add an input column: a shape mismatch
    for (name, a), b in zip(model.state_dict().items(), loaded.state_dict().values()):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("kind", ["deterministic", "rank1", "deep-ensemble"])
def test_value_channel_starts_as_no_channel_and_then_reads_the_values(kind):
    """A new value channel is zero: the model's logits equal those of the same weights without one;
    once its table moves, the logits depend on the values, and only through it."""
    torch.manual_seed(1)
    plain = build_model(kind, tiny_cfg())
    valued = build_model(kind, tiny_cfg(value_channel=True))
    missing, unexpected = valued.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing and all("value_bag" in k for k in missing)
    batch = make_batch()
    for m in (plain, valued):
        set_sampling(m, use_mean=True)
    with torch.no_grad():
        torch.testing.assert_close(valued(batch), plain(batch))
        for m in valued.modules():
            if type(m).__name__ == "ValueBag":
                torch.nn.init.normal_(m.embedding.weight)
        moved = valued(batch)
        assert not torch.allclose(moved, plain(batch))
        torch.testing.assert_close(valued({**batch, "values": torch.zeros_like(batch["values"])}), plain(batch))


def test_value_channel_is_added_to_the_bag_as_the_mean_of_value_times_token_vector():
    """By hand, one bag [a, b, pad] with values [va, vb, 9]: mean mode adds (va·u_a + vb·u_b) / 2."""
    from pipeline.bayes.layers import ValueBag

    layer = ValueBag(6, 3, "mean")
    torch.nn.init.normal_(layer.embedding.weight)
    u = layer.embedding.weight.detach()
    ids, values = torch.tensor([[[2, 5, 0], [0, 0, 0]]]), torch.tensor([[[0.5, -2.0, 9.0], [1.0, 1.0, 1.0]]])
    out = layer(ids, values)  # (1, 2, 3)
    torch.testing.assert_close(out[0, 0], (0.5 * u[2] - 2.0 * u[5]) / 2)
    torch.testing.assert_close(out[0, 1], torch.zeros(3))  # an all-padding bag adds nothing
    total = ValueBag(6, 3, "sum")
    total.load_state_dict(layer.state_dict())
    torch.testing.assert_close(total(ids, values)[0, 0], 0.5 * u[2] - 2.0 * u[5])
    out.sum().backward()
    assert layer.embedding.weight.grad[[2, 5]].abs().sum() > 0 and layer.embedding.weight.grad[0].abs().sum() == 0


def test_value_channel_errors_name_the_problem():
    from pipeline.bayes.layers import ValueBag
    from pipeline.core.errors import ConfigError

    model = build_model("rank1", tiny_cfg(value_channel=True))
    batch = make_batch()
    with pytest.raises(ValueError, match="missing 'values'"):
        model({k: v for k, v in batch.items() if k != "values"})
    with pytest.raises(ValueError, match=r"batch\['values'\] must be"):
        model({**batch, "values": batch["values"][:, :, :1]})
    with pytest.raises(ConfigError, match="^value_channel pools linearly"):
        tiny_cfg(value_channel=True, bag_mode="attention")
    with pytest.raises(ValueError, match="not attention"):
        ValueBag(5, 2, "attention")
    before = model.l2_penalty().item()
    with torch.no_grad():
        model.value_bag.embedding.weight.fill_(0.5)  # (30, 8): the L2 penalty counts it as a weight
    assert model.l2_penalty().item() == pytest.approx(before + 30 * 8 * 0.25, rel=1e-5)
