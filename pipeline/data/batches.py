"""FeatureSet -> padded torch batches (docs/architecture.md, "Batches"), and the training batch order.

``collate`` builds one batch with vectorised numpy indexing; ``iter_batches`` and
``length_order`` serve evaluation and scoring; ``TrainSampler`` picks the admissions of every
training step as a pure function of (seed, step), so a resumed run sees exactly the batches an
uninterrupted one would.

Caps: ``max_bags`` keeps the most recent bags of an admission (bags are stored in time
order); ``max_tokens`` keeps an evenly spaced subset of a bag's sorted token ids (ids are
grouped by source, so a prefix would drop whole sources).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from pipeline.data.features import FeatureSet, ranks


def collate(fs: FeatureSet, idx, max_bags: int | None = None, max_tokens: int | None = None) -> dict:
    """The batch dict (docs/architecture.md) for admissions ``idx`` (B,) of ``fs`` (torch tensors).

    ``max_bags`` keeps the most recent bags; ``max_tokens`` keeps an evenly spaced subset of
    each bag's ids. T and L are the largest bag count and bag size in the batch (L >= 1).
    """
    import torch

    idx = np.asarray(idx, dtype=np.int64)
    b = idx.shape[0]
    end = fs.bag_offsets[idx + 1]
    start = fs.bag_offsets[idx]
    if max_bags is not None:
        start = np.maximum(start, end - max_bags)  # most recent bags
    nb = end - start  # (B,)
    t_len = int(nb.max()) if b else 0
    slot = ranks(nb)  # (M_b,) time slot of each selected bag
    row = np.repeat(np.arange(b), nb)  # (M_b,) batch row of each selected bag
    bag = np.repeat(start, nb) + slot  # (M_b,) bag index into fs
    t0 = fs.token_offsets[bag]
    ntok = fs.token_offsets[bag + 1] - t0  # (M_b,)
    keep = np.minimum(ntok, max_tokens) if max_tokens is not None else ntok
    l_len = max(int(keep.max()) if keep.size else 0, 1)
    j = ranks(keep)  # (Z_b,) position inside the kept bag
    which = np.repeat(np.arange(bag.shape[0]), keep)  # (Z_b,) selected-bag index
    src = t0[which] + (j * ntok[which]) // keep[which]  # evenly spaced; identity when nothing is cut
    tokens = np.zeros((b, t_len, l_len), dtype=np.int64)  # (B, T, L)
    tokens[row[which], slot[which], j] = fs.tokens[src]
    hours = np.zeros((b, t_len), dtype=np.float32)  # (B, T)
    hours[row, slot] = fs.bag_hours[bag]
    mask = np.zeros((b, t_len), dtype=bool)  # (B, T)
    mask[row, slot] = True
    label = np.nan_to_num(fs.label[idx], nan=0.0)
    out = {
        "tokens": torch.from_numpy(tokens),
        "mask": torch.from_numpy(mask),
        "hours": torch.from_numpy(hours),
        "context": torch.from_numpy(fs.context[idx].astype(np.int64)),
        "label": torch.from_numpy(label.astype(np.float32)),
    }
    if fs.values is not None:  # the value channel beside each kept token, 0 on padding
        values = np.zeros((b, t_len, l_len), dtype=np.float32)  # (B, T, L)
        values[row[which], slot[which], j] = fs.values[src]
        out["values"] = torch.from_numpy(values)
    return out


def iter_batches(fs: FeatureSet, batch_size: int, max_bags: int | None = None,
                 max_tokens: int | None = None, order: np.ndarray | None = None) -> Iterator[dict]:
    """Batches of consecutive admissions of ``order`` (default: file order).

    Evaluation and scoring pass ``length_order(fs, max_bags)``, so that each batch holds
    admissions of similar length and every LSTM step runs nearly the whole batch.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    idx = np.arange(len(fs)) if order is None else np.asarray(order, dtype=np.int64)
    if idx.shape != (len(fs),) or (order is not None and not np.array_equal(np.sort(idx), np.arange(len(fs)))):
        raise ValueError(
            f"order must hold each of the {len(fs)} admissions once (a permutation), got shape {idx.shape}"
        )
    for s in range(0, len(fs), batch_size):
        yield collate(fs, idx[s:s + batch_size], max_bags, max_tokens)


def length_order(fs: FeatureSet, max_bags: int | None = None) -> np.ndarray:
    """Admissions by non-increasing number of bags (after ``max_bags``), ties in file order."""
    nb = fs.n_bags if max_bags is None else np.minimum(fs.n_bags, max_bags)
    return np.argsort(-nb, kind="stable")


@dataclass
class TrainSampler:
    """Admissions of every training step, a pure function of (seed, step).

    The admissions are read as one endless stream of epochs, each a fresh permutation drawn
    by ``numpy.random.default_rng([seed, epoch])``; step s takes stream positions
    [s·size, (s+1)·size). Every admission appears once per epoch, the batch size is constant
    (an epoch boundary falls inside a batch when N is not a multiple of ``size``), and no
    generator state has to be checkpointed.
    """

    n: int  # admissions in the training split
    size: int  # distinct admissions per global step
    seed: int  # run seed

    def __post_init__(self) -> None:
        if self.n < 1 or self.size < 1:
            raise ValueError(f"TrainSampler needs n >= 1 and size >= 1, got n={self.n}, size={self.size}")
        self._cache: dict[int, np.ndarray] = {}

    def permutation(self, epoch: int) -> np.ndarray:
        if epoch not in self._cache:
            if len(self._cache) > 4:
                self._cache.pop(min(self._cache))
            self._cache[epoch] = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        return self._cache[epoch]

    def indices(self, step: int, rank: int = 0, world: int = 1) -> np.ndarray:
        """Global batch of 0-based ``step``; with ``world`` > 1 this rank's contiguous shard."""
        pos = np.arange(step * self.size, (step + 1) * self.size, dtype=np.int64)
        epochs = pos // self.n
        out = np.empty(self.size, dtype=np.int64)
        for e in np.unique(epochs):
            sel = epochs == e
            out[sel] = self.permutation(int(e))[pos[sel] % self.n]
        if world > 1:
            if self.size % world:
                raise ValueError(f"{self.size} admissions per step do not split over {world} processes")
            part = self.size // world
            out = out[rank * part : (rank + 1) * part]
        return out
