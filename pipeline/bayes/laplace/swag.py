"""Diagonal SWAG variances (Maddox et al. 2019), the subnetwork paper's other estimator of marginal variances.

A copy of the MAP model continues training by plain SGD at a constant learning rate from θ_MAP on
random training batches (the mean NLL of a batch plus ``l2``·Σθ², the MAP run's penalty); after
``burn_in`` steps every iterate is collected, and the per-weight variance of the collected
iterates, E[θ²] - E[θ]², is the diagonal SWAG variance. A weight that few training logits depend on
(a rare token's embedding row) is rarely moved by the gradient, so its SWAG variance stays small,
where a diagonal Laplace gives it the prior's (the largest) variance. The MAP model itself is left
unchanged; the run is seeded.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from pipeline.bayes.laplace.errors import LaplaceError
from pipeline.bayes.laplace.jacobian import as_logits
from pipeline.bayes.laplace.params import ParamVector


def swag_variances(model: nn.Module, layout: ParamVector, batches: Iterable[dict], *, steps: int, lr: float,
                   l2: float, burn_in: int, seed: int = 0) -> Tensor:
    """(D,) float64: the variance of each weight over SGD iterates ``burn_in+1 .. steps`` from θ_MAP."""
    if steps <= burn_in or lr <= 0 or l2 < 0:
        raise LaplaceError(f"SWAG needs steps > burn_in, lr > 0 and l2 >= 0 (got {steps}, {burn_in}, {lr}, {l2})")
    pool = list(batches)  # the training batches, sampled at random
    if not pool:
        raise LaplaceError("SWAG: no training batches")
    work = copy.deepcopy(model).eval()  # no dropout: the iterates move by the gradient alone
    params = [p for p in work.parameters()]
    for p in params:
        p.requires_grad_(True)
    opt = torch.optim.SGD(params, lr=lr)
    gen = torch.Generator().manual_seed(seed)
    start = layout.vector(model).double()  # θ_MAP (D,): moments of the offset from it (no cancellation)
    mean = torch.zeros(layout.size, dtype=torch.float64)
    sq = torch.zeros(layout.size, dtype=torch.float64)
    n = 0
    for step in range(1, steps + 1):
        batch = pool[int(torch.randint(len(pool), (1,), generator=gen))]
        logits = as_logits(work(batch, samples=1))  # (B,) or (B, C)
        y = batch["label"]
        nll = (F.binary_cross_entropy_with_logits(logits, y.to(logits.dtype)) if logits.dim() == 1
               else F.cross_entropy(logits, y.long()))
        loss = nll + l2 * sum(p.square().sum() for p in params)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step > burn_in:
            delta = torch.cat([p.detach().reshape(-1) for p in params]).double() - start  # (D,)
            mean += delta
            sq += delta * delta
            n += 1
    mean /= n
    return (sq / n - mean * mean).clamp_min(0.0)
