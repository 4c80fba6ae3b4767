"""Training-only augmentation: items the model has never seen, simulated with the vocabulary's OOV tokens.

A new charting system (the era split: MetaVision after CareVue) or a new site brings items the
training vocabulary never held; the extraction maps each to its source's out-of-vocabulary token
(``chart:<oov>``, ``input:<oov>``, ...), ids that training never sees when the vocabulary covers
the training data (on the 8,000-patient era split: 0.0% of training tokens, 30.9% of test tokens;
a bag's distinct tokens fall from 37.6 to 6.7 on average). Two transforms teach the model what
those tokens mean, with no label and no test data involved:

- ``source_rate``: per admission and source, with this probability every token of that source is
  replaced by the source's OOV token (a whole source charted by an unknown system);
- ``token_rate``: per token, with this probability it is replaced by its source's OOV token.

A bag stays a set, as the extraction writes it: duplicates the replacement creates are removed
(set to padding, which the bag reductions skip). A replaced token's value channel becomes 0, as
the extraction writes it for an item it has no fitted scale for. The draws come from a torch generator seeded by
(run seed, step, rank), so the batch of a step stays a pure function of (seed, step) and a
resumed run sees the same augmented batches. A batch on another device than the CPU (the device-resident
data path, ``pipeline.data.resident``) is augmented there, from a generator on that device seeded alike: the
same rates, other draws than the CPU's.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from pipeline.core.seeds import AUGMENT_STREAM, stream_seed


class OovAugment:
    """The two transforms above for one vocabulary (``vocab.json["tokens"]``)."""

    def __init__(self, tokens: list[str], source_rate: float, token_rate: float, seed: int) -> None:
        sources = sorted({t.split(":", 1)[0] for t in tokens[1:]})
        index = {t: i for i, t in enumerate(tokens)}
        source = np.array([-1] + [sources.index(t.split(":", 1)[0]) for t in tokens[1:]], dtype=np.int64)
        oov = np.array([0] + [index.get(f"{t.split(':', 1)[0]}:<oov>", i) for i, t in enumerate(tokens) if i],
                       dtype=np.int64)
        self.source = torch.from_numpy(source)  # (V,) source index of each token id, -1 for padding
        self.oov = torch.from_numpy(oov)  # (V,) id of the token's source's OOV token (itself when none)
        self.n_sources = len(sources)
        self.source_rate, self.token_rate, self.seed = float(source_rate), float(token_rate), int(seed)

    def _tables(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """``source`` and ``oov`` on ``device`` (copied there once)."""
        if self.source.device != device:
            self.source, self.oov = self.source.to(device), self.oov.to(device)
        return self.source, self.oov

    @property
    def active(self) -> bool:
        return self.source_rate > 0 or self.token_rate > 0

    def __call__(self, batch: dict, step: int, rank: int = 0) -> dict:
        """The batch with its ``tokens`` (B, T, L) augmented, and its ``values`` (B, T, L) where present
        (a new dict; the input is not changed)."""
        if not self.active:
            return batch
        tokens = batch["tokens"]
        b, dev = tokens.shape[0], tokens.device
        g = torch.Generator(device=dev).manual_seed(stream_seed(self.seed * 1_000_003 + step, AUGMENT_STREAM, rank))
        source, oov = self._tables(dev)
        src = source[tokens]  # (B, T, L)
        real = tokens != 0
        drop = torch.zeros_like(real)
        if self.source_rate > 0:
            whole = torch.rand(b, self.n_sources, generator=g, device=dev) < self.source_rate  # (B, S)
            picked = whole.gather(1, src.clamp(min=0).reshape(b, -1)).reshape(tokens.shape)  # (B, T, L)
            drop |= picked & real
        if self.token_rate > 0:
            drop |= (torch.rand(tokens.shape, generator=g, device=dev) < self.token_rate) & real
        out = torch.where(drop, oov[tokens], tokens)
        if "values" not in batch:
            return {**batch, "tokens": dedupe(out)}
        replaced = drop & (out != tokens)  # a token of a source without an OOV token stays, with its value
        out, values = dedupe(out, torch.where(replaced, torch.zeros_like(batch["values"]), batch["values"]))
        return {**batch, "tokens": out, "values": values}


def dedupe(tokens: Tensor, values: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
    """Each bag (last axis) as a set: ids sorted, repeats set to padding 0 (B, T, L) -> (B, T, L); with
    ``values`` (B, T, L), also the values moved with their ids (a repeat's set to 0): (tokens, values)."""
    s, order = torch.sort(tokens, dim=-1, stable=True)
    repeat = torch.zeros_like(s, dtype=torch.bool)
    repeat[..., 1:] = s[..., 1:] == s[..., :-1]
    out = torch.where(repeat, torch.zeros_like(s), s)
    if values is None:
        return out
    v = values.gather(-1, order)
    return out, torch.where(repeat, torch.zeros_like(v), v)
