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

from pipeline.bayes.laplace.config import HessianKind
from pipeline.bayes.laplace.jacobian import iter_jacobians
from pipeline.bayes.laplace.params import Substitution

FLUSH_ROWS = 128  # Jacobian rows gathered (in a preallocated buffer) before one update of the dense GGN


def logit_hessian(f: Tensor) -> Tensor:
    """Λ per example: (B,) p(1 - p) for logits (B,); (B, C, C) diag(p) - p pᵀ for logits (B, C)."""
    if f.dim() == 1:
        p = torch.sigmoid(f)
        return p * (1.0 - p)
    p = torch.softmax(f, dim=-1)  # (B, C)
    return torch.diag_embed(p) - p.unsqueeze(2) * p.unsqueeze(1)  # (B, C, C)


class GGN:
    """Running GGN over the subnetwork: dense (S, S) or diagonal (S,), in ``dtype``.

    Dense updates are GGN += Lᵀ R over blocks of rows: for one logit L = R = sqrt(p(1-p))·J (one
    buffer), for C classes L = J and R = Λ J; the buffers hold FLUSH_ROWS x S numbers.
    """

    def __init__(self, size: int, kind: HessianKind, dtype: torch.dtype, device: torch.device | None = None) -> None:
        self.kind, self.dtype, self.size = HessianKind(kind), dtype, size
        self.matrix = torch.zeros((size, size) if self.kind == HessianKind.FULL else (size,), dtype=dtype,
                                  device=device)
        self._left: Tensor | None = None  # (FLUSH_ROWS, S) rows L (dense kind)
        self._right: Tensor | None = None  # (FLUSH_ROWS, S) rows R (multi-class only; else R = L)
        self._fill = 0  # rows in the buffers
        self.examples = 0  # examples added

    def add(self, f: Tensor, jac: Tensor) -> None:
        """Add Σ_n J_nᵀ Λ_n J_n for logits f (B,) / (B, C) and J (B, S) / (B, C, S)."""
        lam = logit_hessian(f.to(self.dtype))  # (B,) or (B, C, C)
        a = jac.to(self.dtype)
        self.examples += f.shape[0]
        if f.dim() == 1:
            left = a * lam.sqrt().unsqueeze(1)  # (B, S) rows scaled by sqrt(p(1-p))
            right = None
        else:
            right = torch.bmm(lam, a).reshape(-1, self.size)  # (B, C, C) x (B, C, S) -> (B·C, S)
            left = a.reshape(-1, self.size)  # (B, C, S) -> (B·C, S)
        if self.kind == HessianKind.DIAG:
            self.matrix += (left * (left if right is None else right)).sum(0)
            return
        n = left.shape[0]
        if n > FLUSH_ROWS:
            self.matrix.addmm_(left.t(), left if right is None else right)  # (S, n) x (n, S)
            return
        if self._fill + n > FLUSH_ROWS:
            self.flush()
        if self._left is None:
            self._left = torch.empty(FLUSH_ROWS, self.size, dtype=self.dtype, device=self.matrix.device)
        self._left[self._fill:self._fill + n] = left
        if right is not None:
            if self._right is None:
                self._right = torch.empty(FLUSH_ROWS, self.size, dtype=self.dtype, device=self.matrix.device)
            self._right[self._fill:self._fill + n] = right
        self._fill += n

    def flush(self) -> None:
        if self._fill:
            left = self._left[:self._fill]  # (R, S)
            right = left if self._right is None else self._right[:self._fill]
            self.matrix.addmm_(left.t(), right)  # (S, R) x (R, S)
            self._fill = 0

    def result(self, scale: float = 1.0) -> Tensor:
        """The GGN (times ``scale``: N/M when M of N training examples were used).

        Dense: symmetric up to rounding (each update is Lᵀ Λ L); the Cholesky factorization reads only its
        lower triangle, so it is not symmetrised (that would take a second S x S matrix).
        """
        self.flush()
        self._left = self._right = None
        return self.matrix.mul_(scale) if scale != 1.0 else self.matrix


def accumulate_ggn(model: nn.Module, batches: Iterable[dict], sub: Substitution, kind: HessianKind,
                   dtype: torch.dtype, scale: float = 1.0) -> tuple[Tensor, int]:
    """(GGN of the subnetwork over every batch, examples seen); the model must be ``frozen``."""
    ggn = GGN(sub.size, kind, dtype, next(model.parameters()).device)
    for batch in batches:
        for f, jac in iter_jacobians(model, batch, sub):  # one small group at a time: memory O(group·S)
            ggn.add(f, jac)
    return ggn.result(scale), ggn.examples
