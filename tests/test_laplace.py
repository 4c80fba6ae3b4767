"""Subnetwork linearized Laplace (pipeline.bayes.laplace): Jacobians, GGN, posterior, predictive, selection, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.bayes import metrics
from pipeline.bayes.laplace import (
    LaplaceConfig,
    LaplaceError,
    LinearizedLaplaceModel,
    ParamVector,
    Posterior,
    Predictive,
    fit_laplace_batches,
    load_laplace,
    save_laplace,
    select_subnet,
)
from pipeline.bayes.laplace.jacobian import jacobian
from pipeline.bayes.laplace.params import Substitution, frozen
from pipeline.data import features
from pipeline.tasks.base import load_task
from pipeline.tasks.mortality import MortalityConfig, build_model, predict, risk
from pipeline.tasks.mortality.laplace import fit_laplace


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------------------- tiny models and data


class TinyMLP(nn.Module):
    """A deterministic model of the family's interface: batch {"x": (B, F)} -> logits (samples, B[, C])."""

    components = 1

    def __init__(self, features: int = 3, hidden: int = 4, classes: int | None = None) -> None:
        super().__init__()
        self.classes = classes
        self.hidden = nn.Linear(features, hidden)
        self.output = nn.Linear(hidden, classes or 1)

    def forward(self, batch: dict, samples: int = 1) -> torch.Tensor:
        out = self.output(torch.tanh(self.hidden(batch["x"])))  # (B, C) or (B, 1)
        out = out if self.classes else out.squeeze(1)  # (B, 1) -> (B,)
        return out.unsqueeze(0).expand(samples, *out.shape)  # (samples, B[, C])

    def kl(self) -> torch.Tensor:
        return torch.zeros(())


class Logistic(nn.Module):
    """Logistic regression: logit = w·x + b; its diagonal GGN is Σ_n p_n(1 - p_n) x_n² (and Σ p(1 - p) for b)."""

    components = 1

    def __init__(self, features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(features, 1)

    def forward(self, batch: dict, samples: int = 1) -> torch.Tensor:
        out = self.linear(batch["x"]).squeeze(1)  # (B, 1) -> (B,)
        return out.unsqueeze(0).expand(samples, -1)


def mlp_batches(n: int = 12, features: int = 3, classes: int | None = None, size: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g, dtype=torch.float64)
    y = torch.randint(0, classes or 2, (n,), generator=g)
    batches = [{"x": x[s:s + size], "label": y[s:s + size] if classes else y[s:s + size].double()}
               for s in range(0, n, size)]
    return batches


def tiny_mortality(**kw) -> nn.Module:
    cfg = {"token_vocab": 20, "context_vocab": 7, "embedding_dim": 4, "lstm_hidden": 5, "dense_units": 6}
    return build_model("deterministic", MortalityConfig(**{**cfg, **kw}))


def mortality_batch(b: int = 6, t: int = 5, k: int = 3, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    lengths[0], lengths[1] = t, 0  # a full row and an admission with no bags
    mask = torch.arange(t).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
    tokens = torch.randint(1, 20, (b, t, k), generator=g) * mask.unsqueeze(2)
    hours = (torch.cumsum(torch.rand(b, t, generator=g), 1) - 2.0) * mask
    return {"tokens": tokens, "mask": mask, "hours": hours, "context": torch.randint(0, 7, (b, 3), generator=g),
            "label": torch.randint(0, 2, (b,), generator=g).float()}


def mortality_batches(n_batches: int = 3, b: int = 6) -> list[dict]:
    return [mortality_batch(b=b, seed=s) for s in range(n_batches)]


def feature_set(n: int, seed: int, vocab: int = 20, context_vocab: int = 7) -> features.FeatureSet:
    """A FeatureSet in the extract layout (some admissions with zero bags)."""
    rng = np.random.default_rng(seed)
    n_bags = rng.integers(0, 5, n)
    bag_offsets = np.concatenate([[0], np.cumsum(n_bags)]).astype(np.int64)
    m = int(bag_offsets[-1])
    n_tok = rng.integers(1, 4, m)
    token_offsets = np.concatenate([[0], np.cumsum(n_tok)]).astype(np.int64)
    tokens = np.concatenate([np.sort(rng.choice(np.arange(1, vocab), k, replace=False))
                             for k in n_tok]).astype(np.int32)
    return features.FeatureSet(
        keys=np.array([f"k{seed}-{i}" for i in range(n)]), label=rng.integers(0, 2, n).astype(np.float32),
        n_events=n_tok.sum() * np.ones(n, dtype=np.int32),
        context=rng.integers(1, context_vocab, (n, 2)).astype(np.int32),
        bag_offsets=bag_offsets, bag_hours=rng.uniform(-5, 24, m).astype(np.float32), token_offsets=token_offsets,
        tokens=tokens)


MODELS = {
    "mlp-binary": (lambda: TinyMLP().double(), lambda: mlp_batches()),
    "mlp-3class": (lambda: TinyMLP(classes=3).double(), lambda: mlp_batches(classes=3)),
    "mortality-lstm": (lambda: tiny_mortality().double(), lambda: mortality_batches()),
}


def full_jacobian(model: nn.Module, batch: dict) -> torch.Tensor:
    """Independent reference: every logit's gradient w.r.t. all parameters (autograd on the module), (B[, C], D)."""
    params = list(model.parameters())
    out = model(batch, samples=1)[0]  # (B[, C])
    rows = []
    for r in out.reshape(-1):
        grads = torch.autograd.grad(r, params, retain_graph=True, allow_unused=True)
        rows.append(torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params)]))
    return torch.stack(rows).view(*out.shape, -1)


def full_laplace_covariance(model: nn.Module, batches: list[dict], prior_precision: float) -> torch.Tensor:
    """Full-network GGN Laplace covariance computed directly: (Σ_n J_nᵀ Λ_n J_n + λ I)⁻¹."""
    d = ParamVector.of(model).size
    h = torch.zeros(d, d, dtype=torch.float64)
    for batch in batches:
        jac = full_jacobian(model, batch).double()
        f = model(batch)[0].detach().double()
        if f.dim() == 1:  # Bernoulli: -log p(y|f) has second derivative p(1 - p)
            p = 1.0 / (1.0 + torch.exp(-f))
            h += jac.t() @ ((p * (1 - p)).unsqueeze(1) * jac)
        else:  # softmax: diag(p) - p pᵀ
            p = torch.exp(f - f.logsumexp(1, keepdim=True))
            lam = torch.stack([torch.diag(q) - torch.outer(q, q) for q in p])
            h += torch.einsum("bcs,bck,bkt->st", jac, lam, jac)
    return torch.linalg.inv(h + prior_precision * torch.eye(d, dtype=torch.float64))


def fit(model, batches, **kw):
    cfg = LaplaceConfig(**{"prior_precision": 1.0, **kw})
    n = sum(b["label"].shape[0] for b in batches)
    return fit_laplace_batches(model, lambda: iter(batches), (lambda: iter(batches)) if cfg.prior_precision is None
                               else None, cfg, n_train=n, n_train_used=n)


# ---------------------------------------------------------------------------- Jacobians


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("subset", ["random", "all"])
def test_subnetwork_jacobian_equals_columns_of_full_jacobian(name, subset):
    make_model, make_batches = MODELS[name]
    model, batch = make_model(), make_batches()[0]
    layout = ParamVector.of(model)
    ref = full_jacobian(model, batch)  # (B[, C], D)
    idx = None if subset == "all" else torch.randperm(layout.size)[: layout.size // 3].sort().values
    with frozen(model):
        f, jac = jacobian(model, batch, Substitution.of(layout, idx))
    torch.testing.assert_close(f, model(batch)[0].detach(), rtol=0, atol=1e-12)
    expected = ref if idx is None else ref[..., idx]
    assert jac.shape == expected.shape
    torch.testing.assert_close(jac, expected, rtol=1e-10, atol=1e-12)
    assert all(p.requires_grad for p in model.parameters())  # frozen() restored the model


def test_lstm_jacobian_covers_every_lstm_tensor_and_the_model_is_restored():
    model = tiny_mortality()
    batch = mortality_batch()
    before = model(batch).detach()
    layout = ParamVector.of(model)
    lstm = torch.cat([layout.module_indices("lstm")])  # weight_ih, weight_hh, both biases
    with frozen(model):
        _, jac = jacobian(model, batch, Substitution.of(layout, lstm))
    ref = full_jacobian(model, batch)[..., lstm]
    torch.testing.assert_close(jac, ref, rtol=1e-4, atol=1e-6)
    assert jac[1].abs().sum() == 0  # the admission with no bags never reaches the LSTM
    assert jac[0].abs().sum() > 0
    assert torch.equal(model(batch).detach(), before)  # the RNN's cached weights point at θ_MAP again


# ---------------------------------------------------------------------------- posterior


@pytest.mark.parametrize("name", sorted(MODELS))
def test_subnetwork_of_every_weight_equals_full_network_laplace(name):
    make_model, make_batches = MODELS[name]
    model, batches = make_model(), make_batches()
    d = ParamVector.of(model).size
    lam = 0.7
    laplace, report = fit(model, batches, selection="random", subnet_size=d, prior_precision=lam)
    assert report.subnet_size == d and report.subnet_prior_precision == pytest.approx(lam)  # λ_S = λ·D/D
    assert torch.equal(laplace.indices, torch.arange(d))
    expected = full_laplace_covariance(model, batches, lam)
    torch.testing.assert_close(laplace.posterior.covariance(), expected, rtol=1e-8, atol=1e-10)


def test_last_layer_subnetwork_equals_last_layer_laplace():
    model, batches = tiny_mortality().double(), mortality_batches()
    lam = 2.0
    laplace, report = fit(model, batches, selection="last-layer", subnet_size=None, prior_precision=lam)
    out = model.output
    assert report.per_tensor == {"output.weight": out.weight.numel(), "output.bias": 1}
    feats = []
    handle = out.register_forward_hook(lambda mod, args, res: feats.append(args[0].detach()))
    with torch.no_grad():
        logits = [model(b)[0] for b in batches]
    handle.remove()
    phi = torch.cat([torch.cat(feats),  # (N, U+1)
                     torch.ones(sum(f.shape[0] for f in feats), 1, dtype=torch.float64)], 1)
    p = torch.sigmoid(torch.cat(logits))
    s, d = phi.shape[1], ParamVector.of(model).size
    lam_s = lam * s / d
    expected = torch.linalg.inv(phi.t() @ ((p * (1 - p)).unsqueeze(1) * phi) + lam_s
                                * torch.eye(s, dtype=torch.float64))
    assert report.subnet_prior_precision == pytest.approx(lam_s)
    torch.testing.assert_close(laplace.posterior.covariance(), expected, rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("selection", ["wasserstein", "magnitude"])
def test_posterior_covariance_is_symmetric_positive_definite(name, selection):
    make_model, make_batches = MODELS[name]
    model, batches = make_model(), make_batches()
    laplace, _ = fit(model, batches, selection=selection, subnet_size=ParamVector.of(model).size // 2,
                     prior_precision=0.3)
    cov = laplace.posterior.covariance()
    torch.testing.assert_close(cov, cov.t(), rtol=0, atol=1e-12)
    assert float(torch.linalg.eigvalsh(cov).min()) > 0
    factor = laplace.factor
    precision = factor @ factor.t()
    torch.testing.assert_close(precision @ cov, torch.eye(cov.shape[0], dtype=cov.dtype), rtol=0, atol=1e-8)


def test_diagonal_hessian_is_diagonal_laplace_over_every_weight():
    model, batches = TinyMLP().double(), mlp_batches()
    lam = 0.5
    laplace, report = fit(model, batches, hessian="diag", subnet_size=None, prior_precision=lam)
    d = ParamVector.of(model).size
    assert report.subnet_size == d and report.selection is None and laplace.factor.shape == (d,)
    full_cov = full_laplace_covariance(model, batches, lam)
    ggn_diag = 1.0 / full_cov.inverse().diagonal()  # 1 / (diag GGN + λ)
    torch.testing.assert_close(laplace.posterior.covariance(), ggn_diag, rtol=1e-10, atol=1e-12)
    batch = batches[0]
    _, var = laplace.moments(batch)
    jac = full_jacobian(model, batch)
    torch.testing.assert_close(var, (jac.square() * ggn_diag).sum(1), rtol=1e-10, atol=1e-12)


def test_ggn_of_a_subsample_is_scaled_to_the_training_set():
    model, batches = TinyMLP().double(), mlp_batches(n=12, size=4)
    cfg = LaplaceConfig(selection="random", subnet_size=ParamVector.of(model).size, prior_precision=1.0)
    whole, _ = fit_laplace_batches(model, lambda: iter(batches), None, cfg, n_train=12, n_train_used=12)
    part, report = fit_laplace_batches(model, lambda: iter(batches[:1]), None, cfg, n_train=12, n_train_used=4)
    one, _ = fit_laplace_batches(model, lambda: iter(batches[:1]), None, cfg, n_train=4, n_train_used=4)
    assert report.ggn_scale == 3.0
    def precision(m):
        return m.factor @ m.factor.t()

    torch.testing.assert_close(precision(part) - torch.eye(part.subnet_size, dtype=torch.float64),
                               3.0 * (precision(one) - torch.eye(one.subnet_size, dtype=torch.float64)))
    assert not torch.allclose(precision(part), precision(whole))


# ---------------------------------------------------------------------------- predictive


@pytest.mark.parametrize("name", sorted(MODELS))
def test_glm_predictive_at_zero_covariance_is_the_map_prediction(name):
    make_model, make_batches = MODELS[name]
    model, batch = make_model(), make_batches()[1]
    layout = ParamVector.of(model)
    idx = torch.arange(0, layout.size, 2)
    tiny = Posterior(1e9 * torch.eye(idx.numel(), dtype=torch.float64), 0.0)  # precision 1e18 I: Σ ≈ 0
    laplace = LinearizedLaplaceModel(model, idx, tiny, prior_precision=0.0, selection="random", hessian="full")
    expected = model(batch).detach()  # (1, B[, C])
    for predictive in Predictive:
        laplace.predictive = predictive
        out = laplace(batch, samples=4)
        assert out.shape == (4, *expected.shape[1:])
        torch.testing.assert_close(out, expected.expand_as(out), rtol=0, atol=1e-7)
    mu, var = laplace.moments(batch)
    torch.testing.assert_close(mu, expected[0], rtol=0, atol=1e-12)  # (grouped in micro-batches: rounding only)
    assert float(var.max()) < 1e-12
    probs = laplace.probit_mean(batch)
    ref = torch.sigmoid(expected[0]) if expected.dim() == 2 else torch.softmax(expected[0], -1)
    torch.testing.assert_close(probs, ref, rtol=0, atol=1e-9)


def test_predictive_mean_is_the_map_logit_for_any_covariance():
    model, batches = tiny_mortality().double(), mortality_batches()
    laplace, _ = fit(model, batches, selection="random", subnet_size=40, prior_precision=0.05)
    mu, var = laplace.moments(batches[2])
    torch.testing.assert_close(mu, model(batches[2])[0].detach(), rtol=0, atol=1e-12)
    assert float(var.min()) > 0


@pytest.mark.parametrize("classes", [None, 3])
def test_probit_matches_monte_carlo_over_the_linearized_model(classes):
    model = TinyMLP(classes=classes).double()
    batches = mlp_batches(classes=classes)
    laplace, _ = fit(model, batches, selection="random", subnet_size=ParamVector.of(model).size, prior_precision=3.0)
    batch = batches[0]
    mu, var = laplace.moments(batch)
    assert 0.05 < float(var.sqrt().max()) < 1.0  # a regime where the probit approximation is close
    n = 40_000
    laplace.predictive = Predictive.MC
    torch.manual_seed(1)
    draws = laplace(batch, samples=n)  # (n, B[, C])
    # the draws are the linearized model's logits: mean μ, covariance J Σ Jᵀ (across classes too)
    torch.testing.assert_close(draws.mean(0), mu, rtol=0, atol=5 * float(var.sqrt().max()) / math.sqrt(n))
    rel = draws.var(0) / var
    assert float((rel - 1).abs().max()) < 5 * math.sqrt(2 / n)
    if classes is not None:
        _, jac = laplace.jacobian(batch)
        cov = jac @ laplace.posterior.covariance() @ jac.transpose(1, 2)  # (B, C, C)
        centred = draws - mu
        torch.testing.assert_close(torch.einsum("nbc,nbk->bck", centred, centred) / n, cov, rtol=0,
                                   atol=5 * float(var.max()) * math.sqrt(2 / n))
    probs = torch.sigmoid(draws) if classes is None else torch.softmax(draws, -1)
    mc, se = probs.mean(0), probs.std(0) / math.sqrt(n)
    probit = laplace.probit_mean(batch)
    if classes is None:  # exact E[sigmoid(f)] by Gauss-Hermite quadrature: probit's own error is below 2e-3 here
        x, w = np.polynomial.hermite_e.hermegauss(60)
        f = mu.numpy()[:, None] + var.sqrt().numpy()[:, None] * x[None]
        exact = torch.from_numpy((w * (1 / (1 + np.exp(-f)))).sum(1) / w.sum())
        assert float((probit - exact).abs().max()) < 2e-3
        assert bool(((mc - exact).abs() < 4 * se).all())
        assert bool(((mc - probit).abs() < 4 * se + 2e-3).all())
    else:  # the multi-class probit drops the logits' correlations: a coarser approximation
        assert bool(((mc - probit).abs() < 4 * se + 2e-2).all())


def test_multiclass_probit_is_laplace_torch_formula():
    model, batches = TinyMLP(classes=3).double(), mlp_batches(classes=3)
    laplace, _ = fit(model, batches, selection="random", subnet_size=10, prior_precision=0.5)
    mu, var = laplace.moments(batches[1])  # (B, C) each: the diagonal of the logit covariance
    _, jac = laplace.jacobian(batches[1])  # (B, C, S)
    cov = jac @ laplace.posterior.covariance() @ jac.transpose(1, 2)  # (B, C, C), laplace-torch functional_variance
    torch.testing.assert_close(var, cov.diagonal(dim1=1, dim2=2))
    kappa = 1 / torch.sqrt(1 + math.pi / 8 * cov.diagonal(dim1=1, dim2=2))
    torch.testing.assert_close(laplace.probit_mean(batches[1]), torch.softmax(kappa * mu, -1))
    assert laplace(batches[1], samples=2).shape == (2, 5, 3)


# ---------------------------------------------------------------------------- selection


@pytest.mark.parametrize("skip_unused", [True, False])
def test_wasserstein_picks_the_largest_diagonal_laplace_variances(skip_unused):
    g = torch.Generator().manual_seed(3)
    n, features = 40, 8
    x = (torch.randn(n, features, generator=g, dtype=torch.float64)
         * torch.linspace(0.2, 3.0, features, dtype=torch.float64))
    x[:, 5] = 0.0  # a feature no admission has: its weight has zero GGN (the prior's variance)
    model = Logistic(features).double()
    batches = [{"x": x[s:s + 10], "label": (torch.rand(10, generator=g) < 0.5).double()} for s in range(0, n, 10)]
    with torch.no_grad():
        p = torch.sigmoid(model.linear(x).squeeze(1))
    w = p * (1 - p)
    h = torch.cat([(w.unsqueeze(1) * x.square()).sum(0), w.sum().reshape(1)])  # by hand: weights then bias
    lam = 1.0
    variance = 1.0 / (h + lam)
    size = 4
    cfg = LaplaceConfig(selection="wasserstein", subnet_size=size, prior_precision=lam, skip_unused=skip_unused)
    with frozen(model):
        mask = select_subnet(model, ParamVector.of(model), cfg, lambda: iter(batches))
    torch.testing.assert_close(mask.diagonal_ggn, h)
    eligible = variance.clone()
    if skip_unused:
        eligible[5] = -1.0
    expected = torch.topk(eligible, size).indices.sort().values
    assert torch.equal(mask.indices, expected)
    assert (5 in mask.indices.tolist()) is (not skip_unused) and mask.unused == 1
    laplace, report = fit(model, batches, **{k: getattr(cfg, k) for k in ("selection", "subnet_size", "prior_precision",
                                                                           "skip_unused")})
    assert torch.equal(laplace.indices, expected) and report.unused_weights == 1


def test_random_and_magnitude_selection():
    model, batches = tiny_mortality(), mortality_batches()
    layout = ParamVector.of(model)
    theta = layout.vector(model)
    with frozen(model):
        mag = select_subnet(model, layout, LaplaceConfig(selection="magnitude", subnet_size=25), lambda: iter(batches))
        r1 = select_subnet(model, layout, LaplaceConfig(selection="random", subnet_size=25, seed=1),
                           lambda: iter(batches))
        r2 = select_subnet(model, layout, LaplaceConfig(selection="random", subnet_size=25, seed=1),
                           lambda: iter(batches))
        r3 = select_subnet(model, layout, LaplaceConfig(selection="random", subnet_size=25, seed=2),
                           lambda: iter(batches))
    assert float(theta.abs()[mag.indices].min()) >= float(theta.abs().sort(descending=True).values[24])
    assert torch.equal(r1.indices, r2.indices) and not torch.equal(r1.indices, r3.indices)
    for m in (mag, r1):
        assert m.size == 25 and bool((m.indices[1:] > m.indices[:-1]).all()) and sum(m.per_tensor.values()) == 25


def test_wasserstein_on_the_lstm_model_skips_padding_rows():
    model, batches = tiny_mortality(), mortality_batches()
    layout = ParamVector.of(model)
    with frozen(model):
        mask = select_subnet(model, layout, LaplaceConfig(selection="wasserstein", subnet_size=30),
                             lambda: iter(batches))
    h = mask.diagonal_ggn
    pad = layout.module_indices("bag_embedding")[:4]  # padding row 0 of the token table: never used
    assert bool((h[pad] == 0).all()) and not set(pad.tolist()) & set(mask.indices.tolist())
    chosen = h[mask.indices]
    rest = torch.ones_like(h, dtype=torch.bool)
    rest[mask.indices] = False
    assert float(chosen.max()) <= float(h[rest & (h > 0)].min())  # the smallest positive GGN = largest variances


@pytest.mark.parametrize("given", [True, False], ids=["given-prior", "marglik-prior"])
def test_predictive_rule_ranks_by_the_training_predictive_variance(given):
    """Σ_n J_ni² / (h_i + λ) from the full Jacobian by hand, λ given or the diagonal Laplace's marglik choice."""
    from pipeline.bayes.laplace.marglik import optimize_marglik

    model, batches = tiny_mortality(), mortality_batches()
    layout = ParamVector.of(model)
    model.eval()
    jac = torch.cat([full_jacobian(model, b) for b in batches]).double()  # (N, D)
    with torch.no_grad():
        f = torch.cat([model(b, samples=1)[0] for b in batches]).double()  # (N,)
    p = torch.sigmoid(f)
    h = ((p * (1 - p)).unsqueeze(1) * jac.square()).sum(0)
    lam = 3.0 if given else optimize_marglik(h, layout.vector(model)).prior_precision
    score = jac.square().sum(0) / (h + lam)
    score[h == 0] = -1.0  # skip_unused
    cfg = LaplaceConfig(selection="predictive", subnet_size=25, prior_precision=lam if given else None)
    with frozen(model):
        mask = select_subnet(model, layout, cfg, lambda: iter(batches))
    torch.testing.assert_close(mask.diagonal_ggn, h)
    assert torch.equal(mask.indices, torch.topk(score, 25).indices.sort().values)


def test_swag_variances_leave_weights_no_logit_moves_at_zero_and_pick_the_largest():
    from pipeline.bayes.laplace.swag import swag_variances

    g = torch.Generator().manual_seed(5)
    x = torch.randn(40, 6, generator=g, dtype=torch.float64)
    x[:, 2] = 0.0  # a feature no admission has: no NLL gradient, the diagonal Laplace's prior variance
    model = Logistic(6).double()
    batches = [{"x": x[s:s + 8], "label": (torch.rand(8, generator=g) < 0.5).double()} for s in range(0, 40, 8)]
    layout = ParamVector.of(model)
    before = layout.vector(model).clone()
    kw = dict(steps=60, lr=0.05, l2=0.0, burn_in=10, seed=3)
    var = swag_variances(model, layout, batches, **kw)
    assert torch.equal(var, swag_variances(model, layout, batches, **kw))  # seeded
    assert torch.equal(layout.vector(model), before)  # the MAP model is left as it was
    assert var[2] == 0 and bool((var[[0, 1, 3, 4, 5, 6]] > 0).all())
    cfg = LaplaceConfig(selection="swag", subnet_size=3, prior_precision=1.0, swag_steps=60, swag_lr=0.05, swag_l2=0.0,
                        swag_burn_in=10, seed=3)
    with frozen(model):
        mask = select_subnet(model, layout, cfg, lambda: iter(batches))
    assert torch.equal(mask.indices, torch.topk(var, 3).indices.sort().values) and 2 not in mask.indices.tolist()
    with pytest.raises(LaplaceError, match="swag_steps must exceed"):
        LaplaceConfig(selection="swag", swag_steps=5, swag_burn_in=5)


@pytest.mark.parametrize("selection", ["wasserstein", "predictive", "random", "magnitude", "swag"])
def test_exclude_embeddings_keeps_every_rule_off_the_tables(selection):
    model, batches = tiny_mortality(), mortality_batches()
    layout = ParamVector.of(model)
    tables = set(torch.cat([layout.module_indices("bag_embedding"),
                            layout.module_indices("context_embedding")]).tolist())
    size = layout.size - len(tables) - 40
    cfg = LaplaceConfig(selection=selection, subnet_size=30, prior_precision=1.0, exclude=("embeddings",),
                        swag_steps=20, swag_burn_in=5)
    with frozen(model):
        mask = select_subnet(model, layout, cfg, lambda: iter(batches))
        assert not set(mask.indices.tolist()) & tables and mask.size == 30
        with pytest.raises(LaplaceError, match="exceeds"):
            select_subnet(model, layout, LaplaceConfig(selection=selection, subnet_size=size + 41, prior_precision=1.0,
                                                       exclude=("embeddings",), skip_unused=False, swag_steps=20,
                                                       swag_burn_in=5),
                          lambda: iter(batches))
    with pytest.raises(LaplaceError, match="exclude applies"):
        LaplaceConfig(selection="last-layer", exclude=("embeddings",))


# ---------------------------------------------------------------------------- prior precision


def test_prior_precision_grid_picks_the_best_validation_nll():
    model, batches = TinyMLP().double(), mlp_batches(n=20)
    d = ParamVector.of(model).size
    laplace, report = fit(model, batches, selection="random", subnet_size=d // 2, prior_precision=None,
                          prior_method="val-nll", grid_log10_min=-2, grid_log10_max=2, grid_size=5)
    nlls = [row["val_nll"] for row in report.grid]
    grid = [row["prior_precision"] for row in report.grid]
    best_first = int(np.argmin(nlls[4:9])) + 4 if len(grid) == 13 else int(np.argmin(nlls))
    # the 5-point grid, or (its best at an end) the grid widened by 4 decades on each side
    assert grid == pytest.approx([10.0 ** k for k in (range(-2, 3) if len(grid) == 5 else range(-6, 7))])
    assert len(grid) == 5 or best_first in (4, 8)
    assert (report.prior_source == "grid"
            and report.prior_precision == report.grid[int(np.argmin(nlls))]["prior_precision"])
    assert report.val_nll == pytest.approx(min(nlls))
    assert report.subnet_prior_precision == pytest.approx(report.prior_precision * (d // 2) / d)
    assert laplace.prior_precision == report.prior_precision
    # the reported NLL is the probit predictive's on the validation batches
    nll = np.mean([float(metrics.nll_from_probs(b["label"].numpy(), laplace.probit_mean(b).numpy()).sum())
                   for b in batches]) * len(batches) / 20
    assert report.val_nll == pytest.approx(nll, rel=1e-9)


def test_prior_precision_by_default_maximises_the_marginal_likelihood():
    from pipeline.bayes.laplace.curvature import accumulate_ggn
    from pipeline.bayes.laplace.marglik import eigenvalues, log_marglik
    from pipeline.bayes.laplace.params import Substitution

    model, batches = TinyMLP().double(), mlp_batches(n=20)
    layout = ParamVector.of(model)
    d = layout.size
    laplace, report = fit(model, batches, selection="random", subnet_size=d // 2, prior_precision=None)
    assert report.prior_source == "marglik" and not report.grid and report.val_nll is not None
    sub = Substitution.of(layout, laplace.indices)
    ggn, _ = accumulate_ggn(model, iter(batches), sub, laplace.hessian, torch.float64, 1.0)
    e, tsq = eigenvalues(ggn), float(layout.vector(model)[laplace.indices].double().square().sum())
    lam_s = report.subnet_prior_precision
    assert lam_s == pytest.approx(report.prior_precision * (d // 2) / d)
    assert report.log_marglik == pytest.approx(log_marglik(e, tsq, lam_s))
    assert all(log_marglik(e, tsq, lam_s * f) < report.log_marglik for f in (0.8, 1.25))
    assert report.effective_params == pytest.approx(lam_s * tsq, rel=1e-6)


def test_a_val_nll_choice_at_the_grid_edge_widens_the_grid_then_warns():
    model, batches = TinyMLP().double(), mlp_batches(n=20)
    d = ParamVector.of(model).size
    _, report = fit(model, batches, selection="random", subnet_size=d // 2, prior_precision=None,
                    prior_method="val-nll", grid_log10_min=10, grid_log10_max=11, grid_size=3)
    grid = [row["prior_precision"] for row in report.grid]
    assert grid[0] == pytest.approx(1e6) and len(grid) == 3 + 2 * 8  # 4 decades more on each side, same spacing
    if report.at_grid_edge:
        assert report.warning and "grid" not in report.warning and "searched" in report.warning
    else:
        assert report.warning is None


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize("kind", ["rank1", "batchensemble", "bayes-emb", "bayes-full", "deep-ensemble"])
def test_a_model_that_is_not_deterministic_is_one_clear_error(kind):
    model = build_model(kind, MortalityConfig(token_vocab=20, context_vocab=7, embedding_dim=4, lstm_hidden=5,
                                              dense_units=6, components=2))
    with pytest.raises(LaplaceError, match="deterministic") as err:
        fit(model, mortality_batches())
    assert "\n" not in str(err.value)


def test_subnet_larger_than_the_network_is_one_clear_error():
    model = TinyMLP().double()
    d = ParamVector.of(model).size
    with pytest.raises(LaplaceError, match=f"subnet size {d + 1} exceeds the model's {d} weights") as err:
        fit(model, mlp_batches(), selection="random", subnet_size=d + 1)
    assert "\n" not in str(err.value)


def test_singular_posterior_is_one_clear_error():
    model, batches = TinyMLP().double(), mlp_batches(n=4, size=4)  # 4 examples: GGN rank <= 4 < S
    with pytest.raises(LaplaceError, match="singular or not positive definite") as err:
        fit(model, batches, selection="random", subnet_size=ParamVector.of(model).size, prior_precision=0.0)
    assert "\n" not in str(err.value)
    logistic, x = Logistic(3).double(), torch.randn(8, 3, dtype=torch.float64)
    x[:, 1] = 0.0  # a weight no example depends on: zero curvature, and no prior with λ = 0
    with pytest.raises(LaplaceError, match="diagonal posterior precision is not positive at 1 of 4 weights") as err:
        fit(logistic, [{"x": x, "label": torch.ones(8, dtype=torch.float64)}], hessian="diag", subnet_size=None,
            prior_precision=0.0)
    assert "\n" not in str(err.value)


def test_config_errors():
    with pytest.raises(LaplaceError, match="selection must be one of"):
        LaplaceConfig(selection="largest")
    with pytest.raises(LaplaceError, match="hessian diag"):
        LaplaceConfig(hessian="diag", subnet_size=10)
    batches = mlp_batches()
    with pytest.raises(LaplaceError, match="needs validation"):
        fit_laplace_batches(TinyMLP().double(), lambda: iter(batches), None,
                            LaplaceConfig(prior_precision=None, prior_method="val-nll"), n_train=12, n_train_used=12)
    with pytest.raises(LaplaceError, match="prior_method must be one of"):
        LaplaceConfig(prior_method="guess")
    with pytest.raises(LaplaceError, match="last layer 'output' has 5 weights"):
        fit(TinyMLP().double(), batches, selection="last-layer", subnet_size=3)


# ---------------------------------------------------------------------------- FeatureSets, scoring, checkpoints


@pytest.mark.parametrize("selection, hessian", [("wasserstein", "full"), ("last-layer", "full"), (None, "diag")])
def test_fit_on_feature_sets_scores_like_any_model(selection, hessian, tmp_path):
    train_fs, val_fs = feature_set(30, seed=1), feature_set(12, seed=2)
    model = tiny_mortality()
    kw = {"hessian": hessian, "subnet_size": 50 if selection == "wasserstein" else None,
          "selection": selection or "wasserstein", "grid_size": 5, "batch_size": 8, "max_train": 20}
    laplace, report = fit_laplace(model, train_fs, val_fs, LaplaceConfig(**kw))
    assert report.n_train == 30 and report.n_train_used == 20 and report.ggn_scale == 1.5 and report.n_val == 12
    out = risk.score_features(laplace, val_fs, samples=3, refer=0.1, batch_size=5)
    assert len(out) == 12 and np.isfinite(out["risk_mean"]).all()
    # probit: the risk table's spread is each admission's Gaussian logit (the repeated logits would agree)
    spread = out["has_spread"].to_numpy()
    assert spread.any() and (out.loc[spread, "mutual_info"] > 0).all() and (out.loc[spread, "risk_sd"] > 0).all()
    assert (out.loc[~spread, ["risk_sd", "mutual_info"]] == 0).all().all()
    laplace.predictive = Predictive.MC
    logits = predict.feature_logits(laplace, val_fs, samples=4, batch_size=5)  # (S, K, N)
    assert logits.shape == (4, 1, 12)
    assert metrics.mutual_information(logits).max() > 0  # MC draws disagree
    assert np.isfinite(metrics.mixture_nll(logits, val_fs.label))
    # the MAP model given to fit_laplace is untouched
    assert all(p.requires_grad for p in model.parameters()) and model.training


@pytest.mark.parametrize("hessian", ["full", "diag"])
def test_checkpoint_roundtrip_rebuilds_the_same_predictive(hessian, tmp_path):
    model, batches = tiny_mortality(), mortality_batches()
    laplace, _ = fit(model, batches, hessian=hessian, subnet_size=None if hessian == "diag" else 30,
                     predictive="mc", prior_precision=0.2)
    path = save_laplace(tmp_path / "laplace.pt", laplace, extra={"refer_threshold": 0.01})
    payload = laplace.checkpoint()  # the MAP model rebuilt from map_kind / map_config by its task (runs.formats)
    map_model = load_task("mortality").build_model(payload["map_kind"], payload["map_config"])
    loaded, info = load_laplace(path, map_model=map_model)
    assert info["refer_threshold"] == 0.01 and info["laplace"]["hessian"] == hessian
    assert info["map_kind"] == "deterministic" and info["laplace"]["subnet_size"] == laplace.subnet_size
    assert loaded.label == ("laplace-diag" if hessian == "diag" else "laplace-wasserstein-30")
    assert torch.equal(loaded.indices, laplace.indices) and torch.equal(loaded.factor, laplace.factor)
    batch = batches[0]
    torch.testing.assert_close(loaded.probit_mean(batch), laplace.probit_mean(batch), rtol=0, atol=0)
    torch.manual_seed(9)
    a = laplace(batch, samples=3)
    torch.manual_seed(9)
    torch.testing.assert_close(loaded(batch, samples=3), a, rtol=0, atol=0)
    other = tiny_mortality(lstm_hidden=6)
    with pytest.raises(LaplaceError, match="do not match"):
        load_laplace(path, map_model=other)


def test_a_value_channel_model_fits_and_scores_and_needs_its_values():
    """Micro-groups cut the batch's time axis, values included (a value-channel model would otherwise
    see tokens and values of different lengths); scoring without values names the input."""
    train_fs, val_fs = feature_set(30, seed=1), feature_set(12, seed=2)
    for fs in (train_fs, val_fs):
        fs.values = np.random.default_rng(3).normal(size=fs.tokens.shape).astype(np.float32)
    model = tiny_mortality(value_channel=True)
    torch.nn.init.normal_(model.value_bag.embedding.weight)  # a trained channel, away from zero
    laplace, report = fit_laplace(model, train_fs, val_fs, LaplaceConfig(subnet_size=40, grid_size=3, batch_size=8,
                                                                         max_train=20))
    out = risk.score_features(laplace, val_fs, samples=2, refer=0.1, batch_size=5)
    assert len(out) == 12 and np.isfinite(out["risk_mean"]).all()
    val_fs.values = None
    with pytest.raises(features.FeatureError, match="column 'bag_values' is missing"):
        risk.score_features(laplace, val_fs, samples=2, refer=0.1, batch_size=5)
