"""Configuration of the image models: architecture, method and the rank-1 settings.

Defaults follow the authors' published configurations (google/uncertainty-baselines):
``baselines/cifar/rank1_bnn.py`` with ``models/wide_resnet_rank1.py`` for the Wide ResNet and
``baselines/imagenet/rank1_bnn.py`` with ``models/resnet50_rank1.py`` for ResNet-50. Settings
whose published value differs between the two are ``None`` here and resolved per architecture
in ``__post_init__`` (see ``ARCH_DEFAULTS``); docs/vision.md lists every default and each change.
Imports no torch (the command line builds its options from these fields).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import Enum

from pipeline.bayes.layers.options import FactorInit, Perturbation, PosteriorKind, PriorKind, Sampling
from pipeline.core.configs import check_at_least, check_choice, invalid


class Method(str, Enum):
    """How the K members / mixture components are made (names as on the command line)."""

    DETERMINISTIC = "deterministic"  # one network, K = 1
    BATCHENSEMBLE = "batchensemble"  # shared W, K point-mass rank-1 factor pairs (Wen et al. 2020)
    RANK1 = "rank1"  # shared W, K-component mixture posterior over the rank-1 factors
    DEEP_ENSEMBLE = "deep-ensemble"  # K independently initialised deterministic networks

    @property
    def stochastic(self) -> bool:
        """Whether its weights are drawn per sample (rank-1's mixture posterior); the other methods' S draws are
        copies of one pass."""
        return self is Method.RANK1

    @property
    def tiled(self) -> bool:
        """Whether its K members share one network that sees each image K times (BatchEnsemble, rank-1: K·B rows
        for B images); the deterministic network and each of the deep ensemble's K networks see it once."""
        return self in (Method.BATCHENSEMBLE, Method.RANK1)


class Arch(str, Enum):
    """Network families."""

    WRN = "wrn"  # Wide ResNet WRN-depth-width (pre-activation basic blocks, CIFAR layout)
    RESNET50 = "resnet50"  # ResNet-50, torchvision v1.5 layout (stride on the 3x3 conv)


# Published values that differ between the CIFAR (WRN-28-10) and ImageNet (ResNet-50) scripts.
ARCH_DEFAULTS: dict[Arch, dict[str, float]] = {
    Arch.WRN: {"prior_stddev": 0.1, "random_sign_prob": 0.5},  # cifar/rank1_bnn.py flags
    Arch.RESNET50: {"prior_stddev": 0.05, "random_sign_prob": 0.75},  # imagenet/rank1_bnn.py flags
}


@dataclass
class VisionConfig:
    """Architecture and Bayesian settings of one image model."""

    arch: Arch = Arch.WRN  # wrn | resnet50
    num_classes: int = 10  # output classes (10 CIFAR-10 / digits, 100 CIFAR-100, 1000 ImageNet)
    in_channels: int = 3  # image channels (1 for the grayscale digits)
    depth: int = 28  # WRN: n in WRN-n-k, 6·blocks + 4 (28, 22, 16 or 10); unused by resnet50
    width: int = 10  # WRN: width multiplier k of 16/32/64 filters; unused by resnet50
    method: Method = Method.RANK1  # deterministic | batchensemble | rank1 | deep-ensemble
    ensemble_size: int = 4  # K members / mixture components (ignored by deterministic)
    prior: PriorKind = PriorKind.GAUSSIAN  # rank-1 prior family: gaussian | cauchy
    posterior: PosteriorKind | None = None  # normal | cauchy; None: the prior's family (normal q + cauchy p: MC KL)
    prior_mean: float = 1.0  # prior location of r and s (multiplicative factors)
    prior_stddev: float | None = None  # prior stddev (gaussian) or scale (cauchy); None: 0.1 wrn, 0.05 resnet50
    factor_init: FactorInit | None = None  # factor means random_sign | normal (None: rank1 random_sign,
        # batchensemble normal)
    random_sign_prob: float | None = None  # P(mean = +1) under random_sign; None: 0.5 wrn, 0.75 resnet50
    init_mean_stddev: float = 0.5  # stddev of the normal factor-mean init around prior_mean (batchensemble: 0.5)
    dropout_rate: float = 1e-3  # initial posterior spread as a dropout rate p: a Normal's stddev sqrt(p / (1 - p))
    init_scale: float | None = None  # initial posterior scale as given (None:
        # the scale spread as dropout_rate's Normal)
    perturbation: Perturbation = Perturbation.MULTIPLICATIVE  # W∘(r sᵀ) (published) | W + r sᵀ
    prior_signs: bool = False  # sign-symmetric prior ½N(+m) + ½N(-m) (not published; see pipeline.bayes.layers)
    clip: float | None = 10.0  # sampled factors clamped to [-clip, clip] (edward2's rank-1 layers: 10)
    kl_samples: int = 1  # MC draws for KL terms without a closed form
    member_batchnorm: bool = False  # per-member ("ensemble-specific") BatchNorm; published runs share one
    bn_momentum: float = 0.1  # BatchNorm running-stat momentum, torch convention (Keras decay 0.9)
    bn_eps: float = 1e-5  # BatchNorm epsilon (published: 1e-5, the torch default)
    bn_rows: int | None = 64  # BatchNorm statistics per ghost batch of this many tiled rows (published: 64 per core)
    l2_norm_and_bias: bool = True  # l2_penalty() also covers BN scales/offsets and biases (published)
    sampling: Sampling = Sampling.PER_EXAMPLE  # per_example (training, edward2) | per_member (evaluation)

    def __post_init__(self) -> None:
        for name, enum in (("arch", Arch), ("method", Method), ("prior", PriorKind), ("factor_init", FactorInit),
                           ("perturbation", Perturbation), ("sampling", Sampling), ("posterior", PosteriorKind)):
            value = getattr(self, name)
            if value is None and name == "factor_init":  # the method's published init
                setattr(self, name,
                        FactorInit.NORMAL if self.method == Method.BATCHENSEMBLE else FactorInit.RANDOM_SIGN)
            if value is None and name == "posterior":
                continue
            check_choice(self, name, enum)
        if self.posterior is not None:
            if self.posterior == PosteriorKind.DELTA:
                raise invalid(self, "posterior delta is method batchensemble", "posterior", "method")
        for name, value in ARCH_DEFAULTS[self.arch].items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        check_at_least(self, 1, ("num_classes", "in_channels", "ensemble_size", "width", "kl_samples"))
        if self.arch == Arch.WRN and (self.depth < 10 or (self.depth - 4) % 6):
            raise invalid(self, f"depth must be 6n + 4 with n >= 1 (10, 16, 22, 28, ...), got {self.depth}", "depth")
        if not 0.0 < self.dropout_rate < 1.0:
            raise invalid(self, f"dropout_rate must lie in (0, 1), got {self.dropout_rate}", "dropout_rate")
        if not self.prior_stddev > 0 or not math.isfinite(self.prior_mean):
            raise invalid(self, "prior_stddev must be > 0 and prior_mean finite", "prior_stddev", "prior_mean")
        if not 0.0 <= self.random_sign_prob <= 1.0:
            raise invalid(self, f"random_sign_prob must lie in [0, 1], got {self.random_sign_prob}", "random_sign_prob")
        if self.factor_init == FactorInit.RANDOM_SIGN and self.perturbation == Perturbation.ADDITIVE:
            raise invalid(self, "factor_init random_sign is for multiplicative factors; use factor_init normal",
                          "factor_init")
        if self.clip is not None and not self.clip > 0:
            raise invalid(self, f"clip must be > 0 or unset, got {self.clip}", "clip")
        if self.init_scale is not None and not self.init_scale > 0:
            raise invalid(self, f"init_scale must be > 0 or unset, got {self.init_scale}", "init_scale")
        if self.bn_rows is not None and self.bn_rows < 1:
            raise invalid(self, f"bn_rows must be >= 1 or unset, got {self.bn_rows}", "bn_rows")
        if not 0.0 <= self.bn_momentum <= 1.0 or not self.bn_eps > 0:
            raise invalid(self, "bn_momentum must lie in [0, 1] and bn_eps be > 0", "bn_momentum", "bn_eps")

    @property
    def components(self) -> int:
        """K of the model: ``ensemble_size`` for every method but deterministic (1)."""
        return 1 if self.method == Method.DETERMINISTIC else self.ensemble_size

    @property
    def init_stddev(self) -> float:
        """Initial posterior stddev sqrt(p / (1 - p)) of the published ``dropout_rate`` p."""
        return math.sqrt(self.dropout_rate / (1.0 - self.dropout_rate))

    def rank1(self):
        """Factor configuration (``pipeline.bayes.layers.Rank1Config``) of the rank-1 / BatchEnsemble layers."""
        from pipeline.bayes.layers import Rank1Config

        return Rank1Config(prior=self.prior, posterior=self.posterior, prior_mean=self.prior_mean,
                           prior_scale=self.prior_stddev,
                           init=self.factor_init, random_sign_prob=self.random_sign_prob,
                           init_mean_stddev=self.init_mean_stddev, init_stddev=self.init_stddev,
                           init_scale=self.init_scale,
                           perturbation=self.perturbation, kl_samples=self.kl_samples,
                           prior_signs=self.prior_signs, clip=self.clip)

    def to_dict(self) -> dict:
        """JSON-able dict (str enums -> values)."""
        return {k: (v.value if isinstance(v, Enum) else v) for k, v in asdict(self).items()}
