"""Settings of the mortality models: ``ModelKind`` and ``MortalityConfig`` (one comment per field).

Imports no torch (the choices come from ``pipeline.bayes.layers.options``), so the CLI can build its
options from these fields without importing torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any

from pipeline.bayes.layers.options import BagMode, FactorInit, Perturbation, PriorKind, Sampling, WeightInit
from pipeline.core.configs import check_at_least, check_choice, invalid
from pipeline.core.errors import ConfigError


class ModelKind(str, Enum):
    """Model variants (names as used on the command line)."""

    DETERMINISTIC = "deterministic"
    BAYES_EMB = "bayes-emb"  # variational embeddings only
    BAYES_FULL = "bayes-full"  # mean-field over every weight, LSTM included
    BATCHENSEMBLE = "batchensemble"
    RANK1 = "rank1"  # rank-1 LSTM + dense, variational embeddings
    DEEP_ENSEMBLE = "deep-ensemble"  # K independently initialised deterministic models


@dataclass
class MortalityConfig:
    """Architecture and Bayesian settings of the mortality models."""

    token_vocab: int  # len(vocab.json["tokens"]) (id 0 = padding)
    context_vocab: int  # len(vocab.json["context"]) (id 0 = padding)
    embedding_dim: int = 32  # token and context embedding size
    bag_mode: BagMode = BagMode.MEAN  # reduction of a bag's token embeddings: mean | sum | attention (learned query)
    time_feature: bool = True  # append sign(h)·log1p(|h|) of the bag start hour to each bag
    bag_size_feature: bool = True  # append log1p(tokens in the bag) to each bag (a mean hides how much was charted)
    value_channel: bool = False  # add value·u[token] to each token's embedding (features' bag_values; u learned,
        # 0 at init)
    lstm_hidden: int = 64  # LSTM units (small for 2-core CPU training; paper scale: 256)
    lstm_layers: int = 1  # stacked LSTM layers
    dense_units: int = 128  # hidden dense layer width (relu6)
    components: int = 4  # K mixture components / ensemble members (rank1, batchensemble, deep-ensemble)
    prior: PriorKind = PriorKind.GAUSSIAN  # rank-1 factor prior: gaussian | cauchy (posterior of the same family)
    prior_mean: float | None = None  # rank-1 prior location (unset: 1, or 0 for additive factors)
    prior_stddev: float = 0.1  # rank-1 prior stddev (gaussian) or scale (cauchy), centred at the prior mean
    prior_signs: bool = False  # rank-1 prior symmetric in sign: half centred at +mean, half at -mean
    init_stddev: float = 1e-3  # initial posterior stddev of every variational parameter (embeddings included)
    init_scale: float | None = None  # rank-1 factors' initial posterior scale as given, either family (unset: the
        # scale whose draws spread as init_stddev's: init_stddev for a Normal, 0.6745·init_stddev for a Cauchy)
    init_stddev_jitter: float = 0.0  # rank-1 factors: sd of noise on the raw (pre-softplus) initial stddev (edward2:
        # 0.1)
    factor_init: FactorInit | None = None  # factor mean init: random_sign | normal (unset: normal;
        # random_sign for BatchEnsemble)
    random_sign_prob: float = 0.5  # P(+1) for random-sign factor init
    sampling: Sampling = Sampling.PER_EXAMPLE  # per_example (training) | per_member (evaluation)
    perturbation: Perturbation = Perturbation.MULTIPLICATIVE  # rank-1 factors: multiplicative | additive
    embedding_prior_stddev: float = 1.0  # N(0, ·) prior on variational embedding entries
    embedding_kl_weight: float = 1.0  # weight of the variational embeddings' KL (1: the ELBO; an ablation knob)
    weight_prior_stddev: float = 1.0  # N(0, ·) prior on mean-field weights (bayes-full)
    kl_samples: int = 1  # MC draws for KL terms without closed form
    dropout: float = 0.0  # dropout on the dense layer's output (training only)
    weight_init: WeightInit = WeightInit.TORCH  # deterministic weights: torch (PyTorch defaults) | keras
        # (records-research)
    factor_clip: float | None = None  # clip sampled rank-1 factors of the dense layers to [-c, c] (edward2: 10)

    def __post_init__(self) -> None:
        for name, enum in (("bag_mode", BagMode), ("prior", PriorKind), ("sampling", Sampling),
                           ("perturbation", Perturbation), ("weight_init", WeightInit)):
            check_choice(self, name, enum)
        if self.init_scale is not None and not self.init_scale > 0:
            raise invalid(self, f"init_scale must be > 0 or unset, got {self.init_scale}", "init_scale")
        if self.init_stddev_jitter < 0 or (self.factor_clip is not None and not self.factor_clip > 0):
            raise invalid(self, "init_stddev_jitter must be >= 0 and factor_clip > 0 (or unset)", "init_stddev_jitter",
                          "factor_clip")
        if self.factor_init is not None and self.factor_init not in {f.value for f in FactorInit}:
            raise invalid(self, f"factor_init must be one of {[f.value for f in FactorInit]} or unset, "
                                f"got {self.factor_init!r}", "factor_init")
        self.factor_init = None if self.factor_init is None else FactorInit(self.factor_init)
        if self.prior_mean is not None and not math.isfinite(self.prior_mean):
            raise invalid(self, f"prior_mean must be finite or unset, got {self.prior_mean}", "prior_mean")
        if self.factor_init == FactorInit.RANDOM_SIGN and self.perturbation == Perturbation.ADDITIVE:
            raise invalid(self, "factor_init random_sign is for multiplicative factors (perturbation multiplicative)",
                          "factor_init", "perturbation")
        if self.value_channel and self.bag_mode == BagMode.ATTENTION:
            raise invalid(self, "value_channel pools linearly: bag_mode mean or sum, not attention", "value_channel",
                          "bag_mode")
        check_at_least(self, 0, ("embedding_kl_weight",))
        for name in ("prior_stddev", "init_stddev"):
            if not getattr(self, name) > 0:
                raise invalid(self, f"{name} must be > 0, got {getattr(self, name)}", name)
        check_at_least(self, 1, ("token_vocab", "context_vocab", "embedding_dim", "lstm_hidden", "lstm_layers",
                                 "dense_units", "components"))
        if not 0.0 <= self.dropout < 1.0:
            raise invalid(self, f"dropout must be in [0, 1), got {self.dropout}", "dropout")

    def rank1(self, dense: bool = False):
        """Factor configuration (``layers.Rank1Config``) of the rank-1 / BatchEnsemble layers: the LSTM's
        (``dense=False``: never clipped) or the dense layers' (``Rank1Config.clip`` = ``factor_clip``, as
        edward2's DenseRank1 clips its sampled factors and its LSTM cell does not)."""
        from pipeline.bayes.layers import Rank1Config

        return Rank1Config(prior=self.prior, prior_mean=self.prior_mean, prior_scale=self.prior_stddev,
                           init=self.factor_init, random_sign_prob=self.random_sign_prob,
                           init_stddev=self.init_stddev, init_scale=self.init_scale, perturbation=self.perturbation,
                           kl_samples=self.kl_samples,
                           prior_signs=self.prior_signs, init_scale_jitter=self.init_stddev_jitter,
                           clip=self.factor_clip if dense else None)


# Settings whose default changed, with the value a saved config that lacks them was trained with
# (bag_size_feature: False until 2026-12-01; docs/experiments/2026-12-01-learning-curves-ablations-shift.md).
FORMER_DEFAULTS: dict[str, Any] = {"bag_size_feature": False}


def saved_config(saved: dict[str, Any]) -> MortalityConfig:
    """The MortalityConfig a checkpoint holds as a dict; settings it predates take their former defaults."""
    return MortalityConfig(**{**FORMER_DEFAULTS, **saved})


def model_config(overrides: dict[str, Any], vocab_sizes: dict[str, int]) -> MortalityConfig:
    """MortalityConfig from vocabulary sizes and overrides (an unknown key is a clear error)."""
    known = {f.name for f in fields(MortalityConfig)} - {"token_vocab", "context_vocab"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown model setting(s) {unknown}; MortalityConfig has {sorted(known)}")
    return MortalityConfig(token_vocab=vocab_sizes["tokens"], context_vocab=vocab_sizes["context"], **overrides)
