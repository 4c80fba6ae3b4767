"""In-hospital mortality models over bagged event sequences (Dusenberry et al. 2019/2020).

bags (B, T, L) -> bag embeddings (mean of token embeddings) [+ value channel] [+ time feature]
-> LSTM over real bags (an admission with zero bags gets a zero final state)
-> concat with the context embedding (mean of context token embeddings)
-> dense (relu6) -> one logit.

Every model returns logits (S·K, B) (see ``pipeline.bayes.layers.members``), exposes ``kl()``,
``l2_penalty()`` and ``components``; none computes metrics.

``forward(batch, samples, sampling=, generator=)``: the sampling mode and the random stream of one
call (None: each layer's own mode, torch's global generator). Evaluation and serving pass
per-member sampling and their own ``torch.Generator``, and never change the model's state, so
one model serves concurrent calls and a call's draws depend only on its generator.

Rank-1 / BatchEnsemble models under ``torch.no_grad`` with per-member sampling (evaluation,
scoring) take an inference path with the same draws: each sample's bag embeddings are computed
once for the untiled batch (``sample_bags``) and the LSTM runs on materialised per-block kernels
(``pipeline.bayes.layers.inference``). ``fast_inference = False`` turns it off (tests, benchmarks).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.bayes.layers import (
    EmbeddingBagBayes,
    EmbeddingBagDeterministic,
    EmbeddingConfig,
    LinearBatchEnsemble,
    LinearDeterministic,
    LinearMeanField,
    LinearRank1,
    LSTMBatchEnsemble,
    LSTMDeterministic,
    LSTMMeanField,
    LSTMRank1,
    MeanFieldConfig,
    ValueBag,
    expand_members,
    initialize,
    kl_divergence,
    l2_penalty,
    set_sampling,
    tile_members,
)
from pipeline.bayes.layers.base import BayesianLayer, Sampling
from pipeline.bayes.layers.embedding import BagMode
from pipeline.bayes.layers.inference import final_hidden
from pipeline.core.errors import ConfigError
from pipeline.tasks.mortality.config import ModelKind, MortalityConfig


class DrawScored:
    """What scoring needs of a mortality network (``tasks.mortality.predict.RiskModel``): weight draws on batches."""

    cfg: MortalityConfig  # the network's settings
    gaussian_logits = False  # logits of weight draws, not a Gaussian logit
    likelihood = "bernoulli"  # one logit per admission (what subnetwork Laplace's GGN and predictive take)
    scores_features = False  # called on batches of a FeatureSet

    @property
    def value_channel(self) -> bool:
        """Whether it reads the features' value channel (``MortalityConfig.value_channel``)."""
        return bool(self.cfg.value_channel)


class MortalityNet(DrawScored, nn.Module):
    """One mortality model of a given kind (every kind except deep-ensemble)."""

    fast_inference = True  # per-member inference path under no_grad (rank-1 / BatchEnsemble LSTMs)

    def __init__(self, kind: str, cfg: MortalityConfig) -> None:
        super().__init__()
        self.kind, self.cfg = ModelKind(kind), cfg
        if self.kind == ModelKind.DEEP_ENSEMBLE:
            raise ValueError("use DeepEnsemble (build_model('deep-ensemble', cfg)) for deep ensembles")
        mixture = self.kind in (ModelKind.RANK1, ModelKind.BATCHENSEMBLE)
        self.components = cfg.components if mixture else 1
        self.stochastic = self.kind in (ModelKind.BAYES_EMB, ModelKind.BAYES_FULL, ModelKind.RANK1)
        self.bayes_embeddings = self.stochastic
        dim, lstm_in = cfg.embedding_dim, cfg.embedding_dim + int(cfg.time_feature) + int(cfg.bag_size_feature)
        dense_in = cfg.lstm_hidden + cfg.embedding_dim
        if self.bayes_embeddings:
            ecfg = EmbeddingConfig(prior_stddev=cfg.embedding_prior_stddev, init_stddev=cfg.init_stddev,
                                   kl_weight=cfg.embedding_kl_weight)
            self.bag_embedding = EmbeddingBagBayes(cfg.token_vocab, dim, cfg.bag_mode, ecfg)
            self.context_embedding = EmbeddingBagBayes(cfg.context_vocab, dim, BagMode.MEAN, ecfg)
        else:
            self.bag_embedding = EmbeddingBagDeterministic(cfg.token_vocab, dim, cfg.bag_mode)
            self.context_embedding = EmbeddingBagDeterministic(cfg.context_vocab, dim, BagMode.MEAN)
        self.value_bag = ValueBag(cfg.token_vocab, dim, cfg.bag_mode) if cfg.value_channel else None
        k, h, u = self.components, cfg.lstm_hidden, cfg.dense_units
        if self.kind in (ModelKind.RANK1, ModelKind.BATCHENSEMBLE):
            lstm_cls, dense_cls = ((LSTMRank1, LinearRank1) if self.kind == ModelKind.RANK1
                                   else (LSTMBatchEnsemble, LinearBatchEnsemble))
            dcfg = cfg.rank1(dense=True)  # factor_clip applies to the dense layers only
            self.lstm = lstm_cls(lstm_in, h, cfg.lstm_layers, components=k, config=cfg.rank1())
            self.dense = dense_cls(dense_in, u, components=k, config=dcfg)
            self.output = dense_cls(u, 1, components=k, config=dcfg)
        elif self.kind == ModelKind.BAYES_FULL:
            mcfg = MeanFieldConfig(prior_stddev=cfg.weight_prior_stddev, init_stddev=cfg.init_stddev)
            self.lstm = LSTMMeanField(lstm_in, h, cfg.lstm_layers, config=mcfg)
            self.dense = LinearMeanField(dense_in, u, config=mcfg)
            self.output = LinearMeanField(u, 1, config=mcfg)
        else:
            self.lstm = LSTMDeterministic(lstm_in, h, cfg.lstm_layers)
            self.dense = LinearDeterministic(dense_in, u)
            self.output = LinearDeterministic(u, 1)
        self.dropout = nn.Dropout(cfg.dropout)
        initialize(self, cfg.weight_init)  # torch: as built; keras: records-research's (layers.init)
        set_sampling(self, cfg.sampling)

    def forward(self, batch: dict[str, Tensor], samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        """Logits (S·K, B) for a batch dict (see docs/architecture.md, "Batches"); ``sampling`` / ``generator``:
        this call's sampling mode and random stream (None: each layer's own mode, torch's global generator)."""
        tokens, mask, hours, context = check_batch(batch, self.cfg)
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        b, k = tokens.shape[0], self.components
        s_run = samples if self.stochastic else 1  # deterministic weights: compute once
        s_emb = s_run if self.bayes_embeddings else 1
        lengths = mask.sum(1)  # (B,)
        extra = self._bag_channels(tokens, mask, hours)  # (B, T, E) or None
        value = None if self.value_bag is None else self.value_bag(tokens, batch_values(batch, tokens))  # (B, T, D)
        draw = {"sampling": sampling, "generator": generator}  # this call's mode and random stream
        encode = self._encode_blocks if self.block_inference(sampling) else self._encode
        h, ctx = encode(tokens, lengths, extra, value, context, s_run, s_emb, draw)  # (S·K·B, H), (S_e·B, D)
        z = torch.cat([h, expand_members(ctx, s_run, k, b)], 1)  # (S·K·B, H + D)
        z = self.dropout(F.relu6(self.dense(z, samples=s_run, **draw)))  # (S·K·B, U)
        logits = self.output(z, samples=s_run, **draw).view(s_run * k, b)  # (S·K·B, 1) -> (S·K, B)
        return logits if s_run == samples else logits.repeat(samples, 1)

    def block_inference(self, sampling: Sampling | None = None) -> bool:
        """Whether ``forward(..., sampling=sampling)`` takes the per-member inference path (see the
        module docstring)."""
        layers = (self.lstm, self.bag_embedding, self.context_embedding)
        per_member = all(m.mode_for(sampling) == Sampling.PER_MEMBER for m in layers if isinstance(m, BayesianLayer))
        return self.fast_inference and not torch.is_grad_enabled() and isinstance(self.lstm, LSTMRank1) and per_member

    def _bag_channels(self, tokens: Tensor, mask: Tensor, hours: Tensor) -> Tensor | None:
        """Scalar channels appended to each bag's embedding (B, T, E): sign(h)·log1p(|h|) of its start
        hour (``time_feature``) and log1p of its token count (``bag_size_feature``); 0 on padding."""
        channels = []
        if self.cfg.time_feature:
            channels.append(torch.sign(hours) * torch.log1p(hours.abs()))
        if self.cfg.bag_size_feature:
            channels.append(torch.log1p((tokens != 0).sum(-1).to(hours.dtype)))
        if not channels:
            return None
        return torch.stack(channels, 2) * mask.unsqueeze(2).to(hours.dtype)  # E x (B, T) -> (B, T, E)

    def _encode(self, tokens: Tensor, lengths: Tensor, extra: Tensor | None, value: Tensor | None, context: Tensor,
                s_run: int, s_emb: int, draw: dict) -> tuple[Tensor, Tensor]:
        """LSTM final state (S·K·B, H) and context embedding (S_e·B, D) over tiled rows."""
        b, k = tokens.shape[0], self.components
        bags = self.bag_embedding(tile_members(tokens, s_emb), samples=s_emb, **draw)  # (S_e·B, T, D)
        if value is not None:
            bags = bags + tile_members(value, s_emb)  # the value channel, the same for every draw
        ctx = self.context_embedding(tile_members(context, s_emb), samples=s_emb, **draw)  # (S_e·B, D)
        if extra is not None:
            bags = torch.cat([bags, tile_members(extra, s_emb).to(bags.dtype)], 2)  # (S_e·B, T, D+E)
        x = expand_members(bags, s_run, k, b)  # (S·K·B, T, D')
        _, (h_n, _) = self.lstm(x, tile_members(lengths, s_run * k), samples=s_run, **draw)  # h_n (L, S·K·B, H)
        return h_n[-1], ctx

    def _encode_blocks(self, tokens: Tensor, lengths: Tensor, extra: Tensor | None, value: Tensor | None,
                       context: Tensor, s_run: int, s_emb: int, draw: dict) -> tuple[Tensor, Tensor]:
        """``_encode`` for per-member draws: each sample's bags once, per-block LSTM kernels.

        Admissions are sorted by length for the recurrence (the noise draws do not depend on the
        row order: they follow the distinct tokens) and the final states put back in batch order.
        """
        b, g = tokens.shape[0], s_run * self.components
        order = torch.sort(lengths, descending=True, stable=True).indices  # (B,)
        bags = self.bag_embedding.sample_bags(tokens.index_select(0, order), s_emb, **draw)  # (B, T, S_e, D), sorted
        ctx = self.context_embedding.sample_bags(context, s_emb, **draw)  # (B, S_e, D)
        if value is not None:
            bags = bags + value.index_select(0, order).unsqueeze(2)  # (B, T, D) -> (B, T, 1, D), sorted
        if extra is not None:
            # (B, T, E) -> (B, T, 1, E) -> (B, T, S_e, E)
            e = extra.index_select(0, order).to(bags.dtype)[:, :, None, :].expand(*bags.shape[:3], extra.shape[2])
            bags = torch.cat([bags, e], 3)  # (B, T, S_e, D+E)
        h = final_hidden(self.lstm, bags, lengths.index_select(0, order), s_run,
                         generator=draw["generator"])  # (S·K·B, H), sorted rows
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(b, device=order.device)
        h = h.view(g, b, -1).index_select(1, inverse).view(g * b, -1)  # (G·B, H) -> (G, B, H), batch order
        return h, ctx.transpose(0, 1).reshape(s_emb * b, ctx.shape[2])  # (B, S_e, D) -> (S_e·B, D)

    def kl(self) -> Tensor:
        return kl_divergence(self)

    def l2_penalty(self, biases: bool = False) -> Tensor:
        return l2_penalty(self, biases)


class DeepEnsemble(DrawScored, nn.Module):
    """K independently initialised deterministic models; logits (S·K, B).

    Trained jointly on the average of the members' NLLs, each member's gradient involves only
    that member, scaled by 1/K; the L2 penalty is the members' mean (``l2_penalty``), so each
    member trains with the deterministic model's L2-to-NLL ratio. What still couples them: one
    global-norm gradient clip over all members (only when it triggers), and each step's
    admissions are the same for every member.
    """

    def __init__(self, cfg: MortalityConfig) -> None:
        super().__init__()
        self.cfg, self.kind, self.components = cfg, ModelKind.DEEP_ENSEMBLE, cfg.components
        self.members = nn.ModuleList(MortalityNet(ModelKind.DETERMINISTIC, cfg) for _ in range(cfg.components))

    def forward(self, batch: dict[str, Tensor], samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        """Logits (S·K, B); deterministic members, so the S samples are copies."""
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        logits = torch.cat([m(batch, samples=1, sampling=sampling, generator=generator)
                            for m in self.members])  # (K, B)
        return logits.repeat(samples, 1)  # (S·K, B)

    def kl(self) -> Tensor:
        return kl_divergence(self)

    def l2_penalty(self, biases: bool = False) -> Tensor:
        """Mean over members of their L2 penalties (the NLL is their mean too: see the class doc)."""
        return l2_penalty(self, biases) / self.components


def build_model(kind: str, cfg: MortalityConfig) -> nn.Module:
    """A mortality model of the given kind (``ModelKind`` value)."""
    try:
        kind = ModelKind(kind)
    except ValueError:
        raise ConfigError(f"unknown model kind {kind!r}; choose from {[k.value for k in ModelKind]}") from None
    return DeepEnsemble(cfg) if kind == ModelKind.DEEP_ENSEMBLE else MortalityNet(kind, cfg)


def batch_values(batch: dict[str, Tensor], tokens: Tensor) -> Tensor:
    """The batch's value channel (B, T, L), checked against its tokens; errors name the key."""
    values = batch.get("values")
    if values is None:
        raise ValueError("batch is missing 'values': this model has a value channel (features' bag_values)")
    if values.shape != tokens.shape:
        raise ValueError(f"batch['values'] must be {tuple(tokens.shape)} like batch['tokens'], got "
                         f"{tuple(values.shape)}")
    return values


def check_batch(batch: dict[str, Tensor], cfg: MortalityConfig) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Validated (tokens, mask, hours, context) of a batch dict; errors name the key."""
    for key in ("tokens", "mask", "context") + (("hours",) if cfg.time_feature else ()):
        if key not in batch:
            raise ValueError(f"batch is missing {key!r} (have {sorted(batch)})")
    tokens, mask, context = batch["tokens"], batch["mask"], batch["context"]
    if tokens.dim() != 3:
        raise ValueError(f"batch['tokens'] must be (B, T, L), got {tuple(tokens.shape)}")
    b, t = tokens.shape[:2]
    if tuple(mask.shape) != (b, t):
        raise ValueError(f"batch['mask'] must be ({b}, {t}), got {tuple(mask.shape)}")
    if context.dim() != 2 or context.shape[0] != b:
        raise ValueError(f"batch['context'] must be ({b}, C), got {tuple(context.shape)}")
    hours = batch.get("hours")
    if hours is None:
        hours = torch.zeros(b, t, device=tokens.device)
    elif tuple(hours.shape) != (b, t):
        raise ValueError(f"batch['hours'] must be ({b}, {t}), got {tuple(hours.shape)}")
    mask = mask.bool()
    lengths = mask.sum(1)
    if not torch.equal(mask, torch.arange(t, device=mask.device).unsqueeze(0) < lengths.unsqueeze(1)):
        raise ValueError("batch['mask'] must be left-aligned (real bags first, then padding)")
    for key, ids, vocab in (("tokens", tokens, cfg.token_vocab), ("context", context, cfg.context_vocab)):
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            raise ValueError(f"batch[{key!r}] ids must lie in [0, {vocab}), got [{int(ids.min())}, {int(ids.max())}]")
    return tokens, mask, hours, context
