"""Rank-1 / BatchEnsemble / mean-field Bayesian layer family (see ``members`` for the layout).

Every layer takes a leading size S·K·B (samples, components, batch) and an explicit
``samples`` argument; Bayesian layers expose ``kl()`` and are switched between sampling
modes with ``set_sampling``. The choices (``Sampling``, ``PriorKind`` ...) live in ``options``,
which imports no torch; the names below load their module on first use (``pipeline.core.lazy``).
"""

from pipeline.core.lazy import lazy

_HOMES = {  # public name -> submodule that defines it
    **dict.fromkeys(("BayesianLayer", "kl_divergence", "l2_penalty", "set_sampling"), "base"),
    **dict.fromkeys(("Conv2dBatchEnsemble", "Conv2dDeterministic", "Conv2dRank1"), "conv"),
    **dict.fromkeys(("EmbeddingBagBayes", "EmbeddingBagDeterministic", "EmbeddingBayes", "EmbeddingConfig",
                     "ValueBag"), "embedding"),
    **dict.fromkeys(("Draw", "Rank1Config", "Rank1Vector", "materialize"), "factors"),
    **dict.fromkeys(("LinearBatchEnsemble", "LinearDeterministic", "LinearRank1"), "linear"),
    **dict.fromkeys(("LSTMBatchEnsemble", "LSTMDeterministic", "LSTMRank1", "set_lstm_kernel"), "lstm"),
    **dict.fromkeys(("LinearMeanField", "LSTMMeanField", "MeanFieldConfig"), "meanfield"),
    **dict.fromkeys(("block_rows", "component_rows", "expand_members", "tile_members", "untile"), "members"),
    **dict.fromkeys(("BagMode", "FactorInit", "LSTMKernel", "Perturbation", "PosteriorKind", "PriorKind", "Sampling",
                     "WeightInit"), "options"),
    **dict.fromkeys(("initialize", "keras_init"), "init"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
