"""Rank-1 / BatchEnsemble / mean-field Bayesian layer family (see ``members`` for the layout).

Every layer takes a leading size S·K·B (samples, components, batch) and an explicit
``samples`` argument; Bayesian layers expose ``kl()`` and are switched between sampling
modes with ``set_sampling``.
"""

from .base import BayesianLayer, Sampling, kl_divergence, l2_penalty, set_sampling
from .conv import Conv2dBatchEnsemble, Conv2dDeterministic, Conv2dRank1
from .embedding import (BagMode, EmbeddingBagBayes, EmbeddingBagDeterministic, EmbeddingBayes,
                        EmbeddingConfig)
from .factors import Draw, FactorInit, Perturbation, Rank1Config, Rank1Vector, materialize
from .linear import LinearBatchEnsemble, LinearDeterministic, LinearRank1
from .lstm import LSTMBatchEnsemble, LSTMDeterministic, LSTMRank1
from .meanfield import LinearMeanField, LSTMMeanField, MeanFieldConfig
from .members import block_rows, component_rows, expand_members, tile_members, untile
from .priors import PosteriorKind, PriorKind

__all__ = [
    "BagMode", "BayesianLayer", "Conv2dBatchEnsemble", "Conv2dDeterministic", "Conv2dRank1", "Draw",
    "EmbeddingBagBayes", "EmbeddingBagDeterministic", "EmbeddingBayes", "EmbeddingConfig", "FactorInit",
    "LSTMBatchEnsemble", "LSTMDeterministic", "LSTMMeanField", "LSTMRank1", "LinearBatchEnsemble",
    "LinearDeterministic", "LinearMeanField", "LinearRank1", "MeanFieldConfig", "Perturbation",
    "PosteriorKind", "PriorKind", "Rank1Config", "Rank1Vector", "Sampling", "block_rows",
    "component_rows", "expand_members", "kl_divergence", "l2_penalty", "materialize", "set_sampling",
    "tile_members", "untile",
]
