"""The generalized Gauss-Newton (GGN) of the summed log likelihood, over the subnetwork only.

GGN = Σ_n J_nᵀ Λ_n J_n with J_n the Jacobian of example n's logits with respect to the S
subnetwork weights and Λ_n the Hessian of -log p(y_n | f) in the logits (it does not depend on
y_n): p(1 - p) for one Bernoulli logit, diag(p) - p pᵀ for a softmax over C classes
(laplace-torch's ``GGNInterface._get_functional_hessian``). ``hessian full`` keeps the dense S x S
matrix (memory S², independent of D), ``diag`` only its diagonal.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn

from .config import HessianKind
from .jacobian import jacobian
from .params import Substitution

FLUSH_ROWS = 256  # Jacobian rows gathered before one update of the dense GGN (a wider matrix product)


def logit_hessian(f: Tensor) -> Tensor:
    """Λ per example: (B,) p(1 - p) for logits (B,); (B, C, C) diag(p) - p pᵀ for logits (B, C)."""
    if f.dim() == 1:
        p = torch.sigmoid(f)
        return p * (1.0 - p)
    p = torch.softmax(f, dim=-1)  # (B, C)
    return torch.diag_embed(p) - p.unsqueeze(2) * p.unsqueeze(1)  # (B, C, C)


class GGN:
    """Running GGN over the subnetwork: dense (S, S) or diagonal (S,), in ``dtype``."""

    def __init__(self, size: int, kind: HessianKind, dtype: torch.dtype) -> None:
        self.kind, self.dtype = HessianKind(kind), dtype
        self.matrix = torch.zeros((size, size) if self.kind == HessianKind.FULL else (size,), dtype=dtype)
        self._left: list[Tensor] = []  # row blocks L, R with GGN += Lᵀ R (dense kind)
        self._right: list[Tensor] = []
        self._rows = 0
        self.examples = 0  # examples added

    def add(self, f: Tensor, jac: Tensor) -> None:
        """Add Σ_n J_nᵀ Λ_n J_n for logits f (B,) / (B, C) and J (B, S) / (B, C, S)."""
        lam = logit_hessian(f.to(self.dtype))  # (B,) or (B, C, C)
        a = jac.to(self.dtype)
        s = a.shape[-1]
        self.examples += f.shape[0]
        if f.dim() == 1:
            right = a * lam.unsqueeze(1)  # (B, S) rows scaled by p(1-p)
        else:
            right = torch.bmm(lam, a)  # (B, C, C) x (B, C, S) -> (B, C, S)
            a, right = a.reshape(-1, s), right.reshape(-1, s)  # (B, C, S) -> (B·C, S)
        if self.kind == HessianKind.DIAG:
            self.matrix += (a * right).sum(0)
            return
        self._left.append(a)
        self._right.append(right)
        self._rows += a.shape[0]
        if self._rows >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self._left:
            left, right = torch.cat(self._left), torch.cat(self._right)  # (R, S) each
            self.matrix.addmm_(left.t(), right)  # (S, R) x (R, S)
            self._left, self._right, self._rows = [], [], 0

    def result(self, scale: float = 1.0) -> Tensor:
        """The GGN (times ``scale``: N/M when M of N training examples were used), symmetric."""
        self.flush()
        out = self.matrix
        if self.kind == HessianKind.FULL:
            out = (out + out.t()).mul_(0.5)  # exact symmetry (each update is symmetric up to rounding)
        return out.mul_(scale) if scale != 1.0 else out


def accumulate_ggn(model: nn.Module, batches: Iterable[dict], sub: Substitution, kind: HessianKind,
                   dtype: torch.dtype, scale: float = 1.0) -> tuple[Tensor, int]:
    """(GGN of the subnetwork over every batch, examples seen); the model must be ``frozen``."""
    ggn = GGN(sub.size, kind, dtype)
    for batch in batches:
        f, jac = jacobian(model, batch, sub)
        ggn.add(f, jac)
    return ggn.result(scale), ggn.examples
