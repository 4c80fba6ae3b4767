"""The choices of the layer family, as ``str`` enums (the names used in configs and on the command line).

Only the standard library is imported here, so configs (and ``cli.py --help``) can name the
choices without importing torch.
"""

from __future__ import annotations

from enum import Enum


class Sampling(str, Enum):
    """How weight samples are drawn for a leading size S·K·B.

    ``per_example``: an independent draw for every row (fixed over its time steps), the
    paper's choice for training. ``per_member``: one draw per block of B rows (each of the
    S·K blocks), materialised once so fused kernels apply; used in evaluation.
    """

    PER_EXAMPLE = "per_example"
    PER_MEMBER = "per_member"


class LSTMKernel(str, Enum):
    """Which kernels run a rank-1 LSTM's recurrence (``LSTMRank1.kernel``, set by ``lstm.set_lstm_kernel``).

    Both give the same outputs and gradients to float32 tolerance (tests/test_layers_fused.py).
    """

    AUTO = "auto"  # fused on a CUDA device when triton imports, else reference (the CPU's default: unchanged)
    REFERENCE = "reference"  # per_example: the hand-fused step loop (recurrence.rank1_recurrence); per_member:
    # PyTorch's fused kernel per block at equal lengths, the step loop on the block draws at variable lengths
    FUSED = "fused"  # per_example: the Triton kernel (triton_lstm; CPU tensors only under TRITON_INTERPRET=1);
    # per_member: PyTorch's fused kernel (cuDNN) per block with its materialised weights at any lengths


class PriorKind(str, Enum):
    """Prior family on rank-1 factors."""

    GAUSSIAN = "gaussian"
    CAUCHY = "cauchy"


class PosteriorKind(str, Enum):
    """Variational family on rank-1 factors (``delta`` = point mass, i.e. BatchEnsemble)."""

    NORMAL = "normal"
    CAUCHY = "cauchy"
    DELTA = "delta"


class Perturbation(str, Enum):
    """How the rank-1 factors act on W."""

    MULTIPLICATIVE = "multiplicative"  # W ∘ (r sᵀ)
    ADDITIVE = "additive"  # W + r sᵀ


class FactorInit(str, Enum):
    """Initialisation of the factor means."""

    RANDOM_SIGN = "random_sign"  # ±1 with P(+1) = random_sign_prob (multiplicative only)
    NORMAL = "normal"  # N(prior_mean, init_mean_stddev)


class WeightInit(str, Enum):
    """Initialisation of the deterministic weights (``bayes.layers.init``)."""

    TORCH = "torch"  # each layer's PyTorch default
    KERAS = "keras"  # glorot / orthogonal LSTM, forget bias 1, he-normal rank-1 dense, zero biases (records-research)


class BagMode(str, Enum):
    """Reduction of a bag's token embeddings (padding excluded)."""

    MEAN = "mean"
    SUM = "sum"
    ATTENTION = "attention"  # softmax over the bag of (learned query . embedding) / sqrt(D); zero query = mean


class NllMode(str, Enum):
    """Likelihood term of the training loss."""

    AVERAGE = "average"  # mean over draws of each draw's BCE (deep-ensemble style, the paper's default)
    MIXTURE = "mixture"  # -log mean_d p_d(y): tighter bound, couples the components
