"""The fitted linearized Laplace model: behaves like the project's models for evaluation and scoring.

``forward(batch, samples)`` returns logits (samples, B) (or (samples, B, C)), like a model with
K = 1 component: with ``predictive = mc`` draws of the linearized model's logits μ + J_S ε (one
ε ~ N(0, Σ) per draw, shared by the batch, as the project's per-member draws), so the mixture
NLL, mutual information and referral curve of ``pipeline.bayes.metrics`` apply unchanged; with
``probit`` the probit-adjusted logits κμ repeated (their sigmoid is the probit predictive; the
draws agree, MI = 0). Every call takes one backward pass per logit (the Jacobian), also under
``torch.no_grad``.

Checkpoint (``checkpoint()`` / ``from_checkpoint``), a dict for ``torch.save`` with weights_only:
``format`` (LAPLACE_FORMAT), ``kind`` = "laplace", ``laplace`` (the settings: selection, hessian,
predictive, subnet_size S, n_params D, prior_precision λ, subnet_prior_precision λ_S, dtype,
param_names, param_shapes), ``map_kind`` / ``map_config`` (the MAP model's kind and settings, which its
task rebuilds: the caller records the task's key, ``pipeline.tasks.base``; this package knows no task) and
``model``, this module's state dict:
``map_model.*`` (θ_MAP), ``indices`` (S,) and ``factor`` ((S, S) lower Cholesky factor of the
posterior precision, or (D,) square root of the diagonal precision).
"""

from __future__ import annotations

import copy
from dataclasses import asdict, is_dataclass
from enum import Enum
from pathlib import Path

import torch
from torch import Tensor, nn

from pipeline.bayes.laplace.config import DTYPES, HessianKind, Predictive, Selection
from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.jacobian import iter_jacobians, jacobian, map_logits
from pipeline.bayes.laplace.params import ParamVector, Substitution, check_deterministic
from pipeline.bayes.laplace.posterior import Posterior
from pipeline.bayes.laplace.predictive import mc_logits, probit_logits, probit_probs
from pipeline.core import fileio

LAPLACE_FORMAT = 1  # bump when the checkpoint layout changes


class LinearizedLaplaceModel(nn.Module):
    """θ_MAP plus a Gaussian posterior over a subnetwork, predicting with the linearized model."""

    components = 1  # one component: logits (samples·1, B)
    scores_features = False  # called on batches (models.predict.RiskModel)
    kind = "laplace"

    def __init__(self, map_model: nn.Module, indices: Tensor, posterior: Posterior, *, prior_precision: float,
                 selection: Selection | str | None, hessian: HessianKind | str,
                 predictive: Predictive | str = Predictive.PROBIT) -> None:
        super().__init__()
        check_deterministic(map_model)
        self.map_model = map_model
        for p in self.map_model.parameters():
            p.requires_grad_(False)  # θ_MAP is fixed; Jacobians go through a separate offset δ
        self.map_model.eval()
        self.layout = ParamVector.of(map_model)
        self.hessian = HessianKind(hessian)
        self.selection = None if selection is None else Selection(selection)
        self.predictive = Predictive(predictive)
        self.prior_precision = float(prior_precision)  # λ of the full network
        indices = self.layout.check_indices(indices)
        if posterior.size != indices.numel() or posterior.diagonal != (self.hessian == HessianKind.DIAG):
            shape = "diagonal" if posterior.diagonal else "full"
            raise LaplaceError(f"posterior over {posterior.size} weights ({shape}) "
                               f"does not match {indices.numel()} indices with hessian {self.hessian.value}")
        self.subnet_prior_precision = float(posterior.prior_precision)  # λ_S = λ·S/D
        self.register_buffer("indices", indices)
        self.register_buffer("factor", posterior.factor)
        self._sub = Substitution.of(self.layout, None if indices.numel() == self.layout.size else indices)
        self.cfg = getattr(map_model, "cfg", None)  # the MAP model's configuration (batch checks, scoring)

    # ------------------------------------------------------------------ predictive

    @property
    def posterior(self) -> Posterior:
        return Posterior(self.factor, self.subnet_prior_precision)

    @property
    def subnet_size(self) -> int:
        return int(self.indices.numel())

    @property
    def label(self) -> str:
        """Name for compare tables: ``laplace-<selection>-<S>`` (``laplace-diag`` for hessian diag)."""
        if self.hessian == HessianKind.DIAG:
            return "laplace-diag"
        return f"laplace-{self.selection.value if self.selection else 'subnet'}-{self.subnet_size}"

    def train(self, mode: bool = True) -> LinearizedLaplaceModel:
        super().train(mode)
        self.map_model.eval()  # the linearization point has no dropout
        return self

    def jacobian(self, batch: dict) -> tuple[Tensor, Tensor]:
        """(μ (B[, C]), J_S (B[, C], S)) at θ_MAP."""
        return jacobian(self.map_model, batch, self._sub)

    def _jacobians(self, batch: dict):
        """(μ, J) for the whole batch (dense posterior: memory O(B·S)) or per group (diagonal: O(group·D))."""
        return iter_jacobians(self.map_model, batch, self._sub, whole=self.hessian == HessianKind.FULL)

    def moments(self, batch: dict) -> tuple[Tensor, Tensor]:
        """Mean μ and variance J_S Σ J_Sᵀ of each logit: (B,) each, or (B, C) (the covariance's diagonal)."""
        post = self.posterior
        parts = [(mu, post.variance(jac).to(mu.dtype)) for mu, jac in self._jacobians(batch)]
        return torch.cat([m for m, _ in parts]), torch.cat([v for _, v in parts])

    @property
    def gaussian_logits(self) -> bool:
        """Mortality scoring asks for ``logit_moments`` (the logit is N(μ, σ²)) with the probit predictive:
        the risk table's spread, percentiles and MI then come from that Gaussian (``predict``)."""
        return self.predictive == Predictive.PROBIT and self.likelihood == "bernoulli"

    @property
    def value_channel(self) -> bool:
        """Whether its MAP model reads the features' value channel (an image MAP model: never)."""
        return bool(getattr(self.map_model, "value_channel", False))

    @property
    def likelihood(self) -> str:
        """The MAP network's likelihood as it declares it: ``bernoulli`` (one logit per example) or
        ``categorical`` (a softmax over classes)."""
        return str(getattr(self.map_model, "likelihood", "bernoulli"))

    def logit_moments(self, batch: dict) -> tuple[Tensor, Tensor]:
        """μ (B,) and σ² (B,) of the linearized logit under the posterior (σ² = 0: no subnetwork weight reaches it)."""
        return self.moments(batch)

    @staticmethod
    def predictive_logit(mu, var):
        """The probit predictive's logit μ / sqrt(1 + πσ²/8) of numpy moments (N,): its sigmoid is the published
        risk."""
        return probit_logits(torch.as_tensor(mu, dtype=torch.float64),
                             torch.as_tensor(var, dtype=torch.float64)).numpy()

    def probit_mean(self, batch: dict) -> Tensor:
        """Probit predictive probabilities: p(y = 1) (B,) or (B, C)."""
        mu, var = self.moments(batch)
        return probit_probs(mu, var)

    def map_logits(self, batch: dict) -> Tensor:
        """f(x; θ_MAP): (B,) or (B, C)."""
        return map_logits(self.map_model, batch)

    def forward(self, batch: dict, samples: int = 1, *, sampling=None, generator: torch.Generator | None = None
                ) -> Tensor:
        """Logits (samples, B) or (samples, B, C): MC draws or repeated probit logits (``predictive``).

        MC draws ε are made once per call from ``generator`` (None: torch's global generator), so every
        admission of the batch shares them. ``sampling`` is accepted as the project's models take it
        (the draws are always one per sample for the whole batch, i.e. per member).
        """
        if samples < 1:
            raise ValueError(f"samples must be >= 1, got {samples}")
        post = self.posterior
        if self.predictive == Predictive.MC:
            eps = post.draw(samples, generator)  # (S, samples)
            parts = [mc_logits(mu, jac, eps) for mu, jac in self._jacobians(batch)]
            return torch.cat(parts, 1)  # (samples, B[, C])
        mu, var = self.moments(batch)
        z = probit_logits(mu, var)  # (B[, C])
        return z.unsqueeze(0).expand(samples, *z.shape).clone()  # (B[, C]) -> (samples, B[, C])

    def kl(self) -> Tensor:
        return self.factor.new_zeros(()).float()

    def l2_penalty(self) -> Tensor:
        return self.factor.new_zeros(()).float()

    # ------------------------------------------------------------------ checkpoint

    def settings(self) -> dict:
        """The ``laplace`` entry of the checkpoint (JSON-able)."""
        return {
            "selection": None if self.selection is None else self.selection.value,
            "hessian": self.hessian.value,
            "predictive": self.predictive.value,
            "subnet_size": self.subnet_size,
            "n_params": self.layout.size,
            "prior_precision": self.prior_precision,
            "subnet_prior_precision": self.subnet_prior_precision,
            "dtype": str(self.factor.dtype).removeprefix("torch."),
            "param_names": list(self.layout.names),
            "param_shapes": [list(s) for s in self.layout.shapes],
        }

    def checkpoint(self, extra: dict | None = None) -> dict:
        """The checkpoint payload (see the module docstring); ``extra`` entries are added at top level."""
        kind = getattr(self.map_model, "kind", None)
        cfg = getattr(self.map_model, "cfg", None)
        payload = {
            "format": LAPLACE_FORMAT,
            "kind": self.kind,
            "laplace": self.settings(),
            "map_kind": getattr(kind, "value", kind),
            "map_config": _plain(asdict(cfg)) if is_dataclass(cfg) else None,
            "model": self.state_dict(),
        }
        clash = set(payload) & set(extra or {})
        if clash:
            raise LaplaceError(f"checkpoint extra entries {sorted(clash)} would replace Laplace entries")
        return payload | dict(extra or {})

    @classmethod
    def is_checkpoint(cls, payload: dict) -> bool:
        """Whether a checkpoint payload is one of this model's (``checkpoint()``: its ``kind``)."""
        return payload.get("kind") == cls.kind

    @classmethod
    def from_checkpoint(cls, payload: dict, map_model: nn.Module | None = None) -> LinearizedLaplaceModel:
        """Rebuild from ``checkpoint()`` around ``map_model``, an untrained network of the checkpoint's ``map_kind``
        and ``map_config`` (its task builds it: ``pipeline.runs.formats``); the MAP weights come from the payload."""
        if payload.get("format") != LAPLACE_FORMAT or not cls.is_checkpoint(payload):
            raise LaplaceError(f"not a Laplace checkpoint of format {LAPLACE_FORMAT} "
                               f"(kind {payload.get('kind')!r}, format {payload.get('format')!r})")
        meta = payload["laplace"]
        if map_model is None:
            raise LaplaceError("a Laplace checkpoint is rebuilt around its MAP network: pass map_model (an untrained "
                               f"{payload.get('map_kind')} network of the checkpoint's map_config)")
        layout = ParamVector.of(map_model)
        if list(layout.names) != meta["param_names"] or [list(s) for s in layout.shapes] != meta["param_shapes"]:
            raise LaplaceError(f"the MAP model's parameters do not match the checkpoint's ({len(layout.names)} vs "
                               f"{len(meta['param_names'])} tensors, D={layout.size} vs {meta['n_params']})")
        s, dtype = int(meta["subnet_size"]), DTYPES[meta["dtype"]]
        diag = meta["hessian"] == HessianKind.DIAG.value
        factor = torch.empty((s,) if diag else (s, s), dtype=dtype)  # placeholder: load_state_dict fills it
        model = cls(map_model, torch.arange(s), Posterior(factor, meta["subnet_prior_precision"]),
                    prior_precision=meta["prior_precision"], selection=meta["selection"], hessian=meta["hessian"],
                    predictive=meta["predictive"])
        model.load_state_dict(payload["model"])
        model._sub = Substitution.of(model.layout, None if s == model.layout.size else model.indices)
        model.layout.check_indices(model.indices)
        return model


def save_laplace(path: Path | str, model: LinearizedLaplaceModel, extra: dict | None = None) -> Path:
    """Write ``model.checkpoint(extra)`` atomically with torch.save."""
    path = Path(path)
    with fileio.atomic_path(path) as tmp:
        torch.save(model.checkpoint(extra), tmp)
    return path


def load_laplace(path: Path | str, map_model: nn.Module | None = None) -> tuple[LinearizedLaplaceModel, dict]:
    """(model in eval mode, the checkpoint's other entries) from ``save_laplace``."""
    path = Path(path)
    if not path.exists():
        raise LaplaceError(f"{path}: Laplace checkpoint not found")
    payload = torch.load(path, map_location="cpu", weights_only=True)
    model = LinearizedLaplaceModel.from_checkpoint(payload, map_model).eval()
    return model, {k: v for k, v in payload.items() if k != "model"}


def wrap(map_model: nn.Module, indices: Tensor, posterior: Posterior, **settings) -> LinearizedLaplaceModel:
    """A LinearizedLaplaceModel over a copy of ``map_model`` (the caller's model is left as it was)."""
    return LinearizedLaplaceModel(copy.deepcopy(map_model), indices, posterior, **settings)


def _plain(d: dict) -> dict:
    return {k: (v.value if isinstance(v, Enum) else v) for k, v in d.items()}
