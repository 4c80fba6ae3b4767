"""Embeddings of the family: variational (Gaussian posterior per row) and deterministic.

Id 0 is padding: it embeds to zero and is excluded from bag means. Inputs have leading
size N = S·B. ``per_example`` sampling gives every row one draw per distinct token, shared by
all its occurrences (fixed across the time steps of a sequence); ``per_member`` gives one
draw of the table per block of B rows. Only the tokens actually used are sampled.

``sample_bags`` is the inference form of per-member bags: S samples of an untiled batch in one
``embedding_bag`` over a table whose row holds a token's S draws side by side (no tiling of the
ids by S, no per-sample bag of the mean table).

``attention`` bags weight each token by a softmax over the bag of q·e/√D, with one learned query
q per table (a deterministic vector, zero at initialisation, so a new layer starts as the mean;
counted by the L2 penalty as a weight). The weights depend on the drawn embeddings, so these bags
materialise the (bag, token) embeddings instead of ``embedding_bag``'s fused reduction.

``ValueBag`` is the value channel of a bag: token l of a bag with value v_l adds v_l·u_{id_l} to
its embedding, u a deterministic table, zero at initialisation (a new layer changes nothing), so
the bag gains the pooled v_l·u_{id_l}. It pools linearly (mean or sum, as the bag it joins).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.bayes.layers.base import BayesianLayer, Sampling
from pipeline.bayes.layers.members import block_size
from pipeline.bayes.layers.options import BagMode
from pipeline.bayes.layers.priors import inverse_softplus, kl_normal_normal


@dataclass
class EmbeddingConfig:
    """Prior and initialisation of a variational embedding table."""

    prior_stddev: float = 1.0  # stddev of the zero-mean Gaussian prior on every entry
    init_mean_stddev: float = 1.0  # stddev of the N(0, ·) initial posterior means (as nn.Embedding)
    init_stddev: float = 1e-3  # initial posterior stddev (through softplus)
    kl_weight: float = 1.0  # multiplies this table's KL (1: the ELBO; below 1 a tempered posterior, an ablation)

    def __post_init__(self) -> None:
        for name in ("prior_stddev", "init_mean_stddev", "init_stddev"):
            if not getattr(self, name) > 0:
                raise ValueError(f"EmbeddingConfig.{name} must be > 0, got {getattr(self, name)}")
        if self.kl_weight < 0:
            raise ValueError(f"EmbeddingConfig.kl_weight must be >= 0, got {self.kl_weight}")


class EmbeddingBayes(BayesianLayer):
    """Variational lookup: ids (N, *) -> (N, *, D)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, config: EmbeddingConfig | None = None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.config = config if config is not None else EmbeddingConfig()
        self.mean = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        self.rho = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.mean.normal_(0.0, self.config.init_mean_stddev)
            self.mean[0].zero_()
            self.rho.fill_(inverse_softplus(self.config.init_stddev))

    def forward(self, ids: Tensor, samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        check_ids(ids, self.num_embeddings)
        out = F.embedding(ids, self.mean, padding_idx=0)  # (N, *, D)
        if not self.use_mean:
            table, index = self._noise(ids, samples, self.mode_for(sampling), generator)
            out = out + F.embedding(index, table, padding_idx=0)
        return out * (ids != 0).unsqueeze(-1).to(out.dtype)  # padding embeds to zero

    def _noise(self, ids: Tensor, samples: int, sampling: Sampling,
               generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """Noise rows for the used (group, token) pairs and an index into them (0 = padding),
        drawn from ``generator`` (None: torch's global generator)."""
        n = ids.shape[0]
        if sampling == Sampling.PER_MEMBER:
            group = torch.arange(n, device=ids.device) // block_size(n, samples, 1)
        else:
            group = torch.arange(n, device=ids.device)
        shape = (n,) + (1,) * (ids.dim() - 1)
        keys = group.view(shape) * self.num_embeddings + ids  # (N, *) one key per (group, token)
        keys = torch.where(ids == 0, torch.zeros_like(keys), keys + 1)  # 0 = padding
        uniq, index = torch.unique(keys, return_inverse=True)  # uniq sorted: padding first
        tokens = (uniq - 1).remainder(self.num_embeddings)  # (U,)
        eps = torch.randn(uniq.shape[0], self.embedding_dim, dtype=self.mean.dtype, device=ids.device,
                          generator=generator)
        table = F.softplus(self.rho).index_select(0, tokens) * eps  # (U, D)
        if uniq.numel() and int(uniq[0]) == 0:
            return table * (uniq != 0).unsqueeze(1).to(table.dtype), index  # padding row -> 0
        # no padding present: shift by one so that index 0 stays the (absent) padding row
        return torch.cat([table.new_zeros(1, self.embedding_dim), table]), index + 1

    def kl(self) -> Tensor:
        """KL over every row except padding row 0 (times ``kl_weight``)."""
        kl = kl_normal_normal(self.mean[1:], F.softplus(self.rho[1:]), 0.0, self.config.prior_stddev).sum()
        return kl if self.config.kl_weight == 1.0 else kl * self.config.kl_weight


class EmbeddingBagBayes(EmbeddingBayes):
    """Variational bag embedding: ids (N, *, L) -> (N, *, D), mean or sum over non-padding ids.

    An all-padding bag embeds to zero.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean",
                 config: EmbeddingConfig | None = None) -> None:
        super().__init__(num_embeddings, embedding_dim, config)
        self.mode = BagMode(mode)
        self.query = bag_query(self.mode, embedding_dim)

    def l2_weights(self) -> Iterator[Tensor]:
        """The attention query (the table itself is variational: its prior is its regulariser)."""
        return iter(() if self.query is None else (self.query,))

    def forward(self, ids: Tensor, samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> Tensor:
        check_ids(ids, self.num_embeddings)
        lead, length = ids.shape[:-1], ids.shape[-1]
        bags = math.prod(lead)
        flat = ids.reshape(bags, length)  # (N·P, L), P = bags per row
        noisy = not self.use_mean and ids.numel()
        if noisy:
            table, index = self._noise(ids, samples, self.mode_for(sampling), generator)
            index = index.reshape(bags, length)
        if self.query is not None:  # the weights depend on the draws: pool mean + noise together
            emb = F.embedding(flat, self.mean)  # (N·P, L, D)
            out = attend(emb + F.embedding(index, table) if noisy else emb, flat, self.query)
        else:  # linear pooling: the mean table's bag plus the noise's bag
            out = bag(flat, self.mean, self.mode) + (bag(index, table, self.mode) if noisy else 0)  # (N·P, D)
        return out.view(*lead, self.embedding_dim)

    def sample_bags(self, ids: Tensor, samples: int, *, sampling: Sampling | None = None,
                    generator: torch.Generator | None = None) -> Tensor:
        """Bags of ``samples`` per-member table draws: ids (B, *, L) -> (B, *, S, D).

        ``out[..., s, :]`` equals ``forward(tile_members(ids, S), S, sampling="per_member")``
        block s (same noise for the same generator state: the same (sample, token) pairs go
        through ``_noise``). ``sampling`` (the call's mode, None = the layer's) must be per_member.
        """
        check_ids(ids, self.num_embeddings)
        lead, length, d = ids.shape[:-1], ids.shape[-1], self.embedding_dim
        flat = ids.reshape(math.prod(lead), length)  # (M, L)
        if self.use_mean or not ids.numel():
            return pool(flat, self.mean, self.mode, self.query).view(*lead, 1, d).expand(*lead, samples, d)
        if self.mode_for(sampling) != Sampling.PER_MEMBER:
            raise ValueError("sample_bags draws one table per sample: per_member sampling only")
        used = torch.zeros(self.num_embeddings, dtype=torch.bool, device=ids.device)
        used[flat.reshape(-1)] = True
        tokens = used.nonzero().squeeze(1)  # (U,) distinct ids, sorted (0 first when padding occurs)
        u = tokens.shape[0]
        table, index = self._noise(tokens.repeat(samples), samples, Sampling.PER_MEMBER, generator)  # sample-major
        noise = F.embedding(index, table).view(samples, u, d)  # (S·U,) -> (S, U, D)
        rows = self.mean.index_select(0, tokens).unsqueeze(1) + noise.transpose(0, 1)  # (U, S, D)
        table = torch.cat([rows.new_zeros(1, samples * d), rows.reshape(u, samples * d)])  # (1 + U, S·D), 0: pad
        compact = torch.zeros(self.num_embeddings, dtype=torch.long, device=ids.device)
        compact[tokens] = torch.arange(1, u + 1, device=ids.device)
        compact[0] = 0
        if self.query is not None:
            return attend_samples(compact[flat], table, flat, self.query, samples).view(*lead, samples, d)
        return bag(compact[flat], table, self.mode).view(*lead, samples, d)  # (M, S·D) -> (B, *, S, D)


class EmbeddingBagDeterministic(nn.Module):
    """Deterministic bag embedding with the family's ``forward(ids, samples)``."""

    components = 1

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean") -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.mode = BagMode(mode)
        self.embedding = nn.Embedding(num_embeddings, embedding_dim, padding_idx=0)
        self.query = bag_query(self.mode, embedding_dim)

    def l2_weights(self) -> Iterator[Tensor]:
        """The attention query (the table is an ``nn.Embedding``: counted as such)."""
        return iter(() if self.query is None else (self.query,))

    def forward(self, ids: Tensor, samples: int = 1, *, sampling: Sampling | None = None,  # noqa: ARG002
                generator: torch.Generator | None = None) -> Tensor:  # noqa: ARG002 (uniform signature)
        check_ids(ids, self.num_embeddings)
        lead, length = ids.shape[:-1], ids.shape[-1]
        out = pool(ids.reshape(math.prod(lead), length), self.embedding.weight, self.mode, self.query)  # (N·P, D)
        return out.view(*lead, self.embedding_dim)

    def sample_bags(self, ids: Tensor, samples: int, *, sampling: Sampling | None = None,  # noqa: ARG002
                    generator: torch.Generator | None = None) -> Tensor:  # noqa: ARG002
        """``forward`` with a broadcast sample axis: ids (B, *, L) -> (B, *, S, D)."""
        out = self(ids)  # (B, *, D)
        return out.unsqueeze(-2).expand(*out.shape[:-1], samples, self.embedding_dim)


class ValueBag(nn.Module):
    """Value channel of bags: ids (N, *, L) and values (N, *, L) -> (N, *, D), the bag's mean (or sum)
    over its non-padding ids of value·u[id]; ``u`` (an ``nn.Embedding``, so the L2 penalty counts it)
    starts at zero."""

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "mean") -> None:
        super().__init__()
        self.mode = BagMode(mode)
        if self.mode == BagMode.ATTENTION:
            raise ValueError("the value channel pools linearly: bag mode mean or sum, not attention")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.embedding = nn.Embedding(num_embeddings, embedding_dim, padding_idx=0)
        nn.init.zeros_(self.embedding.weight)

    def forward(self, ids: Tensor, values: Tensor) -> Tensor:
        check_ids(ids, self.num_embeddings)
        if values.shape != ids.shape:
            raise ValueError(f"values must have the ids' shape {tuple(ids.shape)}, got {tuple(values.shape)}")
        lead, length, d = ids.shape[:-1], ids.shape[-1], self.embedding_dim
        flat = ids.reshape(math.prod(lead), length)  # (M, L)
        if not flat.numel():
            return self.embedding.weight.new_zeros(*lead, d)
        weights = values.reshape(flat.shape).to(self.embedding.weight.dtype)  # (M, L)
        out = F.embedding_bag(flat, self.embedding.weight, per_sample_weights=weights, mode="sum",
                              padding_idx=0)  # (M, D)
        if self.mode == BagMode.MEAN:
            out = out / (flat != 0).sum(1, keepdim=True).clamp(min=1).to(out.dtype)
        return out.view(*lead, d)


def bag(ids: Tensor, weight: Tensor, mode: BagMode) -> Tensor:
    """Padding-aware bag reduction of ids (M, L) over ``weight`` -> (M, D); empty bags -> 0."""
    if ids.shape[1] == 0 or ids.shape[0] == 0:
        return weight.new_zeros(ids.shape[0], weight.shape[1])
    return F.embedding_bag(ids, weight, mode=BagMode(mode).value, padding_idx=0)


def bag_query(mode: BagMode, dim: int) -> nn.Parameter | None:
    """The learned query of an attention bag, zero (the mean) at the start; None for the other modes."""
    return nn.Parameter(torch.zeros(dim)) if mode == BagMode.ATTENTION else None


def pool(ids: Tensor, weight: Tensor, mode: BagMode, query: Tensor | None) -> Tensor:
    """A bag of ``weight``'s rows ids (M, L) -> (M, D): ``bag`` or, with a query, ``attend``."""
    return bag(ids, weight, mode) if query is None else attend(F.embedding(ids, weight), ids, query)


def attend(emb: Tensor, ids: Tensor, query: Tensor) -> Tensor:
    """Attention pooling of bags: embeddings emb (M, L, *, D) of tokens ids (M, L) -> (M, *, D).

    Weights softmax_l(q·e_l / √D) over each bag's non-padding tokens; an all-padding bag -> 0.
    Padding gets the dtype's lowest finite score, not -inf, so that such a bag's softmax (uniform,
    then zeroed) stays finite in the backward pass.
    """
    pad = (ids == 0).view(*ids.shape, *(1,) * (emb.dim() - 3))  # (M, L, 1...)
    scores = (emb @ query) / math.sqrt(emb.shape[-1])  # (M, L, *)
    scores = scores.masked_fill(pad, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=1).masked_fill(pad, 0.0)  # (M, L, *)
    return (weights.unsqueeze(-1) * emb).sum(1)  # (M, *, D)


ATTEND_ELEMENTS = 1 << 24  # largest (bags x tokens x samples x D) block that attend_samples materialises


def attend_samples(index: Tensor, table: Tensor, ids: Tensor, query: Tensor, samples: int) -> Tensor:
    """``attend`` over S draws held side by side: table (R, S·D) rows ``index`` (M, L) -> (M, S·D),
    in blocks of samples so that no block holds more than ``ATTEND_ELEMENTS`` numbers."""
    m, length = index.shape
    d = table.shape[1] // samples
    step = max(1, ATTEND_ELEMENTS // max(1, m * length * d))
    out = []
    for s in range(0, samples, step):
        n = min(step, samples - s)
        emb = F.embedding(index, table[:, s * d:(s + n) * d]).view(m, length, n, d)  # (M, L, n·D) -> (M, L, n, D)
        out.append(attend(emb, ids, query))  # (M, n, D)
    return torch.cat(out, 1).reshape(m, samples * d)


def check_ids(ids: Tensor, num_embeddings: int) -> None:
    """Clear error for ids outside [0, num_embeddings)."""
    if ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"embedding ids must be int32/int64, got {ids.dtype}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= num_embeddings):
        raise ValueError(f"embedding ids must lie in [0, {num_embeddings}), got [{int(ids.min())}, {int(ids.max())}]")
