"""The member-major ensemble convention, written once.

K mixture components (rank-1 / BatchEnsemble members, deep-ensemble members) are folded into
the batch dimension **member-major**: a tensor of leading size K·B holds member 0's B rows,
then member 1's B rows, and so on, so ``x.view(K, B, ...)`` recovers the member axis. With S
Monte Carlo samples per component the leading size is S·K·B, sample-major then member-major:
``x.view(S, K, B, ...)``; block ``j = s·K + k`` (of G = S·K blocks) belongs to component
``k = j % K``. Every layer and model in this package uses these helpers instead of
re-deriving the layout.
"""

from __future__ import annotations

from torch import Tensor


def tile_members(x: Tensor, k: int) -> Tensor:
    """Repeat a (B, ...) batch k times member-major: (B, ...) -> (k·B, ...).

    Tiling S·K times gives the (S·K·B, ...) layout with samples outermost.
    """
    if k < 1:
        raise ValueError(f"tile_members: k must be >= 1, got {k}")
    b = x.shape[0]
    # (B, ...) -> (1, B, ...) -> (k, B, ...) -> (k·B, ...)
    return x.unsqueeze(0).expand(k, *x.shape).reshape(k * b, *x.shape[1:])


def untile(x: Tensor, k: int) -> Tensor:
    """Recover the member axis: (k·B, ...) -> (k, B, ...)."""
    if k < 1 or x.shape[0] % k:
        raise ValueError(f"untile: leading size {x.shape[0]} is not a multiple of k={k}")
    # (k·B, ...) -> (k, B, ...)
    return x.view(k, x.shape[0] // k, *x.shape[1:])


def block_size(rows: int, samples: int, components: int) -> int:
    """Rows per block B for a leading size rows = samples·components·B (checked)."""
    groups = samples * components
    if samples < 1 or components < 1 or rows % groups:
        raise ValueError(
            f"leading size {rows} is not samples*components*B "
            f"(samples={samples}, components={components})"
        )
    return rows // groups


def expand_members(x: Tensor, samples: int, components: int, batch: int) -> Tensor:
    """Broadcast per-sample rows over components: (S_x·B, ...) -> (S·K·B, ...).

    ``x`` holds either one block (S_x = 1, shared by every sample) or one block per sample
    (S_x = samples); each block is repeated for the K components of its sample.
    """
    if x.shape[0] not in (batch, samples * batch):
        raise ValueError(
            f"expand_members: leading size {x.shape[0]} is neither B={batch} nor S*B={samples * batch}"
        )
    s_x = x.shape[0] // batch
    rest = x.shape[1:]
    # (S_x·B, ...) -> (S_x, 1, B, ...) -> (S, K, B, ...) -> (S·K·B, ...)
    view = x.reshape(s_x, 1, batch, *rest).expand(samples, components, batch, *rest)
    return view.reshape(samples * components * batch, *rest)


def component_rows(param: Tensor, rows: int, samples: int) -> Tensor:
    """Per-row copy of a per-component parameter: (K, n) -> (S·K·B, n) for rows = S·K·B."""
    k, n = param.shape
    b = block_size(rows, samples, k)
    # (K, n) -> (1, K, 1, n) -> (S, K, B, n) -> (S·K·B, n)
    return param.view(1, k, 1, n).expand(samples, k, b, n).reshape(rows, n)


def block_rows(values: Tensor, rows: int) -> Tensor:
    """Repeat one value row per block over the block's rows: (G, n) -> (G·B, n), rows = G·B."""
    g, n = values.shape
    if rows % g:
        raise ValueError(f"block_rows: {rows} rows do not split into {g} blocks")
    b = rows // g
    # (G, n) -> (G, 1, n) -> (G, B, n) -> (G·B, n)
    return values.unsqueeze(1).expand(g, b, n).reshape(rows, n)
