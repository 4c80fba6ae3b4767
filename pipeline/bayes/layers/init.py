"""Weight initialisation schemes of the layer family (``options.WeightInit``).

``torch`` is each layer's own ``reset_parameters`` (PyTorch's defaults: uniform ±1/√H for LSTMs,
kaiming-uniform(a=√5) dense kernels, uniform per-member biases, N(0, 1) embeddings).
``keras`` is what the authors' MIMIC-III code gets from Keras and edward2
(Google-Health/records-research ``model-uncertainty/bayesian_rnn_model.py``; edward2's
``LSTMCellRank1`` / ``DenseRank1``):

- LSTM (rank-1, BatchEnsemble, deterministic): input kernels glorot-uniform, recurrent kernels
  orthogonal, biases 0 with the forget gate's at 1 (``unit_forget_bias``), the same for every member;
- rank-1 / BatchEnsemble dense layers: he-normal kernels (truncated normal, sd √(2 / fan_in)),
  zero per-member biases; plain dense layers (the deterministic model's ``tf.keras.layers.Dense``):
  glorot-uniform kernels, zero biases;
- deterministic embeddings: uniform ±0.05 (Keras ``"uniform"``, the non-Bayesian model's
  embedding initializer); variational embeddings and mean-field layers keep theirs (the authors'
  embedding layer was not released).

Rank-1 factors are set by ``Rank1Config`` (random signs or normal means), not here.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from pipeline.bayes.layers.embedding import EmbeddingBagDeterministic
from pipeline.bayes.layers.linear import LinearRank1
from pipeline.bayes.layers.lstm import LSTMRank1
from pipeline.bayes.layers.options import WeightInit

HE_TRUNCATION = 0.87962566103423978  # sd of a standard normal truncated to [-2, 2]: Keras divides by it


def he_normal_(w: Tensor) -> Tensor:
    """Keras ``he_normal``: truncated normal in [-2σ, 2σ], σ = √(2 / fan_in) / 0.8796 (w is (out, in))."""
    std = math.sqrt(2.0 / w.shape[1]) / HE_TRUNCATION
    return nn.init.trunc_normal_(w, 0.0, std, -2 * std, 2 * std)


def lstm_bias_(bias: Tensor, hidden: int) -> Tensor:
    """Zeros with the forget gate's block at 1; gates in PyTorch order (i, f, g, o) on the last dim."""
    bias.zero_()
    bias[..., hidden:2 * hidden] = 1.0
    return bias


@torch.no_grad()
def keras_init(module: nn.Module) -> None:
    """Re-initialise every LSTM, dense layer and deterministic embedding of ``module`` as Keras would."""
    for m in module.modules():
        if isinstance(m, LSTMRank1):  # BatchEnsemble included
            for li in range(m.num_layers):
                nn.init.xavier_uniform_(m.weight_ih[li])  # (4H, D): fans D and 4H, as Keras' (D, 4H) kernel
                nn.init.orthogonal_(m.weight_hh[li])  # (4H, H): orthonormal columns = Keras' (H, 4H) rows
                lstm_bias_(m.bias[li], m.hidden_size)  # (K, 4H)
        elif isinstance(m, nn.LSTM):
            for li in range(m.num_layers):
                nn.init.xavier_uniform_(getattr(m, f"weight_ih_l{li}"))
                nn.init.orthogonal_(getattr(m, f"weight_hh_l{li}"))
                lstm_bias_(getattr(m, f"bias_ih_l{li}"), m.hidden_size)  # Keras has one bias: b_hh = 0
                getattr(m, f"bias_hh_l{li}").zero_()
        elif isinstance(m, LinearRank1):  # BatchEnsemble included
            he_normal_(m.weight)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, EmbeddingBagDeterministic):
            nn.init.uniform_(m.embedding.weight, -0.05, 0.05)
            m.embedding.weight[0].zero_()  # padding


def initialize(module: nn.Module, scheme: WeightInit | str) -> None:
    """Apply ``scheme`` to ``module`` (``torch``: leave the layers' own initialisation)."""
    if WeightInit(scheme) is WeightInit.KERAS:
        keras_init(module)
