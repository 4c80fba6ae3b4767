"""Multi-layer LSTMs of the family: rank-1, BatchEnsemble and a plain deterministic member.

All take x (N, T, D) batch-first with ``lengths`` (N,) and return
``(out (N, T, H), (h_n (L, N, H), c_n (L, N, H)))`` like ``nn.LSTM`` on packed input.
For the rank-1 LSTM the input and recurrent kernels of every layer are ``W ∘ (r sᵀ)`` with
their own factors; each component has one bias (the role of b_ih + b_hh).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Iterator
from functools import cache

import torch
from torch import Tensor, nn

from pipeline.bayes.layers.base import BayesianLayer, Sampling
from pipeline.bayes.layers.factors import Draw, Perturbation, Rank1Config, Rank1Vector, materialize
from pipeline.bayes.layers.members import component_rows
from pipeline.bayes.layers.options import LSTMKernel
from pipeline.bayes.layers.packing import Packing
from pipeline.bayes.layers.priors import PosteriorKind
from pipeline.bayes.layers.recurrence import (
    check_sequence,
    final_states,
    fused_lstm,
    gate_permutation,
    rank1_recurrence,
    run_recurrence,
    step_mask,
)

State = tuple[Tensor, Tensor]


class LSTMRank1(BayesianLayer):
    """Rank-1 Bayesian LSTM with K mixture components over a leading size S·K·B.

    ``per_example`` sampling draws factors per row and runs a fused-by-hand recurrence
    (``rank1_recurrence``, input projection included). ``per_member``
    draws once per block: with equal lengths it materialises each block's weights and runs
    PyTorch's fused kernel per block; with variable lengths (where PyTorch's packed kernel
    is its slow native path) it runs the same recurrence as ``per_example`` on the block draws.
    ``kernel`` (``options.LSTMKernel``) switches both modes to fused paths: by default on a CUDA
    device when triton imports (``per_example``: the Triton kernel; ``per_member``: PyTorch's
    fused kernel at any lengths).
    """

    kernel: LSTMKernel = LSTMKernel.AUTO  # which kernels run the recurrence (set_lstm_kernel)

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 components: int = 4, config: Rank1Config | None = None) -> None:
        super().__init__()
        self.input_size, self.hidden_size = input_size, hidden_size
        self.num_layers, self.components = num_layers, components
        self.config = config if config is not None else Rank1Config()
        h4 = 4 * hidden_size
        sizes = [input_size] + [hidden_size] * (num_layers - 1)
        self.weight_ih = nn.ParameterList([nn.Parameter(torch.empty(h4, d)) for d in sizes])
        self.weight_hh = nn.ParameterList([nn.Parameter(torch.empty(h4, hidden_size)) for _ in sizes])
        self.bias = nn.ParameterList([nn.Parameter(torch.empty(components, h4)) for _ in sizes])
        self.factors = nn.ModuleList(
            nn.ModuleDict({
                "r_ih": Rank1Vector(components, h4, self.config),
                "s_ih": Rank1Vector(components, d, self.config),
                "r_hh": Rank1Vector(components, h4, self.config),
                "s_hh": Rank1Vector(components, hidden_size, self.config),
            })
            for d in sizes
        )
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)  # as nn.LSTM
        for p in [*self.weight_ih, *self.weight_hh, *self.bias]:
            nn.init.uniform_(p, -bound, bound)

    def draw(self, rows: int, samples: int = 1, sampling: Sampling | None = None,
             generator: torch.Generator | None = None) -> list[dict[str, Draw]]:
        """Factor draws per layer for a leading size rows = samples·K·B (``sampling``: the call's
        mode, None = the layer's; ``generator``: the call's random stream, None = torch's global one)."""
        mode = self.mode_for(sampling)
        return [{name: vec.draw(rows, samples, mode, self.use_mean, generator) for name, vec in f.items()}
                for f in self.factors]

    def forward(self, x: Tensor, lengths: Tensor, samples: int = 1, *, sampling: Sampling | None = None,
                generator: torch.Generator | None = None) -> tuple[Tensor, State]:
        draws = self.draw(x.shape[0], samples, sampling, generator)
        return self.forward_with(x, lengths, draws, samples, sampling=sampling)

    def forward_with(self, x: Tensor, lengths: Tensor, draws: list[dict[str, Draw]],
                     samples: int = 1, sampling: Sampling | None = None) -> tuple[Tensor, State]:
        """Run with given factor draws (per-block draws are required for ``per_member``; ``sampling``:
        the call's mode, None = the layer's)."""
        lengths = check_sequence(x, lengths, self.input_size)
        fused = self.fused_for(x)
        if self.mode_for(sampling) == Sampling.PER_MEMBER and (
                fused or bool((lengths == x.shape[1]).all()) or self.additive):
            return self._per_member(x, lengths, draws)
        if fused and not self.additive:
            return self._per_example_fused(x, lengths, draws, samples)
        return self._per_example(x, lengths, draws, samples)

    def fused_for(self, x: Tensor) -> bool:
        """Whether a call on ``x`` runs the fused paths (``kernel``; AUTO: on CUDA when triton imports)."""
        kernel = LSTMKernel(self.kernel)
        if kernel == LSTMKernel.AUTO:
            return x.is_cuda and _triton_installed()
        return kernel == LSTMKernel.FUSED

    @property
    def additive(self) -> bool:
        return self.config.perturbation == Perturbation.ADDITIVE

    def block_weights(self, draws: list[dict[str, Draw]], block: int | None = None) -> list[list[Tensor]]:
        """Materialised fused-kernel weights per block: [w_ih, w_hh, b_ih, b_hh] per layer; of every
        block, or of ``block`` alone (a one-element list: memory for one block's weights)."""
        pick = slice(None) if block is None else slice(block, block + 1)
        per_layer = []
        for li, d in enumerate(draws):
            pert = self.config.perturbation
            w_ih = materialize(self.weight_ih[li], d["r_ih"].blocks()[pick], d["s_ih"].blocks()[pick], pert)
            w_hh = materialize(self.weight_hh[li], d["r_hh"].blocks()[pick], d["s_hh"].blocks()[pick], pert)
            per_layer.append((w_ih, w_hh, self.bias[li]))  # (G, 4H, D), (G, 4H, H), (K, 4H); G = 1 for one block
        first = 0 if block is None else block
        zero = self.bias[0].new_zeros(4 * self.hidden_size)
        return [[t for w_ih, w_hh, b in per_layer for t in (w_ih[i], w_hh[i], b[(first + i) % self.components], zero)]
                for i in range(per_layer[0][0].shape[0])]

    def _per_member(self, x: Tensor, lengths: Tensor, draws: list[dict[str, Draw]]) -> tuple[Tensor, State]:
        """PyTorch's fused kernel per block of rows, with that block's materialised weights."""
        weights = self.block_weights(draws)
        if x.shape[0] % len(weights):
            raise ValueError(f"LSTMRank1: {x.shape[0]} rows do not split into {len(weights)} sample/member blocks")
        b = x.shape[0] // len(weights)
        outs, hs, cs = [], [], []
        for j, flat in enumerate(weights):
            rows = slice(j * b, (j + 1) * b)
            out, h_n, c_n = fused_lstm(x[rows], lengths[rows], flat, self.num_layers, self.hidden_size,
                                       self.training)
            outs.append(out)
            hs.append(h_n)
            cs.append(c_n)
        return torch.cat(outs), (torch.cat(hs, 1), torch.cat(cs, 1))  # (N, T, H), (L, N, H) x2

    def _row_factors(self, d: dict[str, Draw], n: int, layer: int, samples: int,
                     sort: Callable[[Tensor], Tensor] = lambda rows: rows) -> dict[str, Tensor]:
        """Per-row factors and bias of one layer (rows reordered by ``sort``) and its kernels,
        gates in (i, f, o, g) order."""
        perm = gate_permutation(self.hidden_size, self.bias[layer].device)
        rows = {
            "s_ih": d["s_ih"].rows(n), "s_hh": d["s_hh"].rows(n),  # (N, D), (N, H)
            "r_ih": d["r_ih"].rows(n).index_select(1, perm), "r_hh": d["r_hh"].rows(n).index_select(1, perm),
            "bias": component_rows(self.bias[layer].index_select(1, perm), n, samples),  # (N, 4H)
        }
        return {k: sort(v) for k, v in rows.items()} | {
            "w_ih": self.weight_ih[layer].index_select(0, perm),  # (4H, D)
            "w_hh_t": self.weight_hh[layer].index_select(0, perm).t(),  # (H, 4H)
        }

    def _per_example(self, x: Tensor, lengths: Tensor, draws: list[dict[str, Draw]],
                     samples: int) -> tuple[Tensor, State]:
        """Per-row factors; multiplicative: ``rank1_recurrence`` over the real steps only."""
        if self.additive:
            return self._per_example_additive(x, lengths, draws, samples)
        n, t_len, _ = x.shape
        pk = Packing.build(lengths, t_len)  # rows sorted by length, only real steps computed
        inp = pk.pack(x)  # (P, D) packed time-major
        h_last, c_last = [], []
        for li, d in enumerate(draws):
            f = self._row_factors(d, n, li, samples, pk.sort)
            hs, cs = rank1_recurrence(pk.scale(inp, f["s_ih"]), f["w_ih"].t(), f["r_ih"], f["bias"], f["s_hh"],
                                      f["r_hh"], f["w_hh_t"], pk.batch_sizes)  # (P, D) -> (P, H) each
            h_last.append(pk.final(hs))
            c_last.append(pk.final(cs))
            inp = hs
        return pk.unpack(inp), (torch.stack(h_last), torch.stack(c_last))  # (N, T, H), (L, N, H) x2

    def _per_example_fused(self, x: Tensor, lengths: Tensor, draws: list[dict[str, Draw]],
                           samples: int) -> tuple[Tensor, State]:
        """Per-row factors, multiplicative: the Triton recurrence (``triton_lstm``), padded time-major."""
        from pipeline.bayes.layers.triton_lstm import rank1_layer

        inp = x.transpose(0, 1)  # (N, T, D) -> (T, N, D) time-major
        h_last, c_last = [], []
        for li, d in enumerate(draws):
            hs, cs = rank1_layer(inp, lengths, self._row_factors(d, x.shape[0], li, samples))  # (T, N, H) each
            h_n, c_n = final_states(hs, cs, lengths)
            h_last.append(h_n)
            c_last.append(c_n)
            inp = hs
        return inp.transpose(0, 1), (torch.stack(h_last), torch.stack(c_last))  # (N, T, H), (L, N, H) x2

    def _per_example_additive(self, x: Tensor, lengths: Tensor, draws: list[dict[str, Draw]],
                              samples: int) -> tuple[Tensor, State]:
        """Additive perturbation: autograd recurrence over all T steps (rows padded)."""
        n, t_len, _ = x.shape
        inp = x.transpose(0, 1)  # (T, N, D) time-major
        h_last, c_last = [], []
        for li, d in enumerate(draws):
            f = self._row_factors(d, n, li, samples)
            xp = inp @ f["w_ih"].t() + (inp * f["s_ih"]).sum(-1, keepdim=True) * f["r_ih"] + f["bias"]  # (T, N, 4H)

            def step(xt: Tensor, h: Tensor, s=f["s_hh"], r=f["r_hh"], w=f["w_hh_t"]) -> Tensor:
                return xt + h @ w + (h * s).sum(-1, keepdim=True) * r
            hs, cs = run_recurrence(xp, step)  # (T, N, H) each
            h_n, c_n = final_states(hs, cs, lengths)
            h_last.append(h_n)
            c_last.append(c_n)
            inp = hs
        out = inp.transpose(0, 1) * step_mask(lengths, t_len, x.dtype)  # (N, T, H)
        return out, (torch.stack(h_last), torch.stack(c_last))

    def kl(self) -> Tensor:
        return torch.stack([v.kl() for f in self.factors for v in f.values()]).sum()

    def l2_weights(self) -> Iterator[Tensor]:
        yield from self.weight_ih
        yield from self.weight_hh

    def l2_biases(self) -> Iterator[Tensor]:
        yield from self.bias


@cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def set_lstm_kernel(module: nn.Module, kernel: LSTMKernel | str) -> None:
    """Set ``kernel`` (``options.LSTMKernel``) on every rank-1 LSTM of ``module``."""
    kernel = LSTMKernel(kernel)
    for m in module.modules():
        if isinstance(m, LSTMRank1):
            m.kernel = kernel


class LSTMBatchEnsemble(LSTMRank1):
    """BatchEnsemble LSTM: rank-1 LSTM with point-mass (delta) factors, no KL."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 components: int = 4, config: Rank1Config | None = None) -> None:
        cfg = config if config is not None else Rank1Config()
        cfg = Rank1Config(**{**vars(cfg), "posterior": PosteriorKind.DELTA})
        super().__init__(input_size, hidden_size, num_layers, components, cfg)


class LSTMDeterministic(nn.LSTM):
    """Plain batch-first ``nn.LSTM`` with the family's ``forward(x, lengths, samples)``."""

    components = 1

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1) -> None:
        super().__init__(input_size, hidden_size, num_layers, batch_first=True)

    def forward(self, x: Tensor, lengths: Tensor, samples: int = 1, *, sampling=None,  # noqa: ARG002
                generator=None) -> tuple[Tensor, State]:  # noqa: ARG002 (uniform signature: no weight draws)
        lengths = check_sequence(x, lengths, self.input_size)
        out, h_n, c_n = fused_lstm(x, lengths, self._flat_weights, self.num_layers, self.hidden_size,
                                   self.training)
        return out, (h_n, c_n)
