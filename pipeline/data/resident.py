"""A split's features resident on a torch device, and batches gathered there by index.

``batches.collate`` builds every batch on the CPU with numpy and the training loop copies it to the device:
on a GPU the step then waits for the CPU (issue 38: the deterministic model's throughput was flat from 256
rows on). ``ResidentFeatures`` copies a ``FeatureSet``'s flat arrays to the device once (offsets, token ids,
bag hours, context, labels, the value channel where the features hold it) and ``gather(idx)`` builds the
batch of admissions ``idx`` there with the same index arithmetic as ``collate``: the same tensors (values,
dtypes and shapes; ``tests/test_resident.py`` checks them equal on the CPU), so a training run sees the
same admissions per step (``batches.TrainSampler``'s) and the model the same inputs. The batch's sizes T
and L are the largest bag count and bag size in it, as ``collate``'s: two small device-to-host reads per
batch (the only synchronisations).

``device_batches`` is ``batches.iter_batches`` on the device: the same batches of the same ``order``; a
FeatureSet larger than ``max_bytes`` on the device is made resident in consecutive runs of whole batches
(a chunk never splits a batch), so the batches, and hence the draws a model takes per batch, do not depend
on the cap. On the CPU the same code runs (tests); ``collate`` stays the CPU's path.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from pipeline.data.features import FeatureSet

DEFAULT_MAX_BYTES = 2 << 30  # device bytes a FeatureSet may take before it is made resident in chunks


def resident_bytes(fs: FeatureSet, idx: np.ndarray | None = None) -> int:
    """Bytes ``ResidentFeatures`` takes on the device for the admissions ``idx`` of ``fs`` (None: all)."""
    if idx is None:
        n, m, z = len(fs), int(fs.bag_offsets[-1]), int(fs.token_offsets[-1])
    else:
        nb = fs.bag_offsets[idx + 1] - fs.bag_offsets[idx]
        bag = _bags_of(fs, idx, nb)
        n, m = len(idx), int(nb.sum())
        z = int((fs.token_offsets[bag + 1] - fs.token_offsets[bag]).sum())
    per_token = 4 + (4 if fs.values is not None else 0)  # int32 ids (+ float32 values)
    return 8 * (n + 1) + 8 * (m + 1) + 4 * m + per_token * z + 8 * n * fs.context.shape[1] + 4 * n


def _bags_of(fs: FeatureSet, idx: np.ndarray, nb: np.ndarray) -> np.ndarray:
    """Bag indices (into ``fs``) of admissions ``idx`` in order, (M,)."""
    starts = np.repeat(fs.bag_offsets[idx], nb)
    return starts + np.arange(int(nb.sum())) - np.repeat(np.cumsum(nb) - nb, nb)


def subset(fs: FeatureSet, idx) -> FeatureSet:
    """The admissions ``idx`` of ``fs`` as a FeatureSet of their own, in that order (flat arrays gathered)."""
    idx = np.asarray(idx, dtype=np.int64)
    nb = fs.bag_offsets[idx + 1] - fs.bag_offsets[idx]  # (n,)
    bag = _bags_of(fs, idx, nb)  # (m,)
    nt = fs.token_offsets[bag + 1] - fs.token_offsets[bag]  # (m,)
    tok = np.repeat(fs.token_offsets[bag], nt) + np.arange(int(nt.sum())) - np.repeat(np.cumsum(nt) - nt, nt)

    def opt(a):
        return None if a is None else a[idx]

    return FeatureSet(keys=fs.keys[idx], label=fs.label[idx], n_events=fs.n_events[idx], context=fs.context[idx],
                      bag_offsets=np.concatenate([[0], np.cumsum(nb)]).astype(np.int64),
                      bag_hours=fs.bag_hours[bag],
                      token_offsets=np.concatenate([[0], np.cumsum(nt)]).astype(np.int64),
                      tokens=fs.tokens[tok], source=fs.source,
                      values=None if fs.values is None else fs.values[tok],
                      observed_hours=opt(fs.observed_hours), before_prediction_time=opt(fs.before_prediction_time))


def _ranks(counts: Tensor, total: int) -> Tensor:
    """0..c-1 for every count c, concatenated (``features.ranks`` on the device; ``total`` = counts.sum())."""
    starts = torch.repeat_interleave(torch.cumsum(counts, 0) - counts, counts, output_size=total)
    return torch.arange(total, device=counts.device) - starts


def _sum_max(t: Tensor) -> tuple[int, int]:
    """(sum, max) of a non-empty int64 tensor in one device-to-host read."""
    s, m = torch.stack([t.sum(), t.max()]).tolist()
    return int(s), int(m)


@dataclass
class ResidentFeatures:
    """A FeatureSet's arrays on ``device`` (see the module docstring). N admissions, M bags, Z tokens."""

    bag_offsets: Tensor  # (N+1,) int64
    token_offsets: Tensor  # (M+1,) int64
    bag_hours: Tensor  # (M,) float32
    tokens: Tensor  # (Z,) int32 token ids
    context: Tensor  # (N, C) int64
    label: Tensor  # (N,) float32, 0 where the input has no label (as collate)
    values: Tensor | None  # (Z,) float32 value channel, None when the features hold none
    max_bags: int | None = None  # collate's caps: the most recent bags, evenly spaced tokens
    max_tokens: int | None = None

    @classmethod
    def of(cls, fs: FeatureSet, device, max_bags: int | None = None,
           max_tokens: int | None = None) -> ResidentFeatures:
        """``fs`` copied to ``device`` (once; a batch is then a gather there)."""
        def put(a, dtype):
            return torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)

        return cls(bag_offsets=put(fs.bag_offsets, torch.int64), token_offsets=put(fs.token_offsets, torch.int64),
                   bag_hours=put(fs.bag_hours, torch.float32), tokens=put(fs.tokens, torch.int32),
                   context=put(fs.context, torch.int64),
                   label=put(np.nan_to_num(fs.label, nan=0.0), torch.float32),
                   values=None if fs.values is None else put(fs.values, torch.float32),
                   max_bags=max_bags, max_tokens=max_tokens)

    def __len__(self) -> int:
        return int(self.label.shape[0])

    @property
    def device(self) -> torch.device:
        return self.label.device

    def gather(self, idx) -> dict[str, Tensor]:
        """The batch dict of admissions ``idx`` (B,), on the device: ``batches.collate(fs, idx, max_bags,
        max_tokens)``'s tensors (docs/architecture.md, "Batches")."""
        dev = self.device
        idx = torch.as_tensor(idx, dtype=torch.int64).to(dev, non_blocking=True)
        b = int(idx.shape[0])
        end = self.bag_offsets[idx + 1]
        start = self.bag_offsets[idx]
        if self.max_bags is not None:
            start = torch.maximum(start, end - self.max_bags)  # most recent bags
        nb = end - start  # (B,)
        m_b, t_len = _sum_max(nb) if b else (0, 0)
        row = torch.repeat_interleave(torch.arange(b, device=dev), nb, output_size=m_b)  # (M_b,) batch row
        slot = _ranks(nb, m_b)  # (M_b,) time slot of each selected bag
        bag = start[row] + slot  # (M_b,) bag index
        t0 = self.token_offsets[bag]
        ntok = self.token_offsets[bag + 1] - t0  # (M_b,)
        keep = ntok.clamp(max=self.max_tokens) if self.max_tokens is not None else ntok
        z_b, l_max = _sum_max(keep) if m_b else (0, 0)
        l_len = max(l_max, 1)
        which = torch.repeat_interleave(torch.arange(m_b, device=dev), keep, output_size=z_b)  # (Z_b,) bag
        j = _ranks(keep, z_b)  # (Z_b,) position inside the kept bag
        src = t0[which] + torch.div(j * ntok[which], keep[which], rounding_mode="floor")  # evenly spaced
        r, s = row[which], slot[which]
        tokens = torch.zeros(b, t_len, l_len, dtype=torch.int64, device=dev)  # (B, T, L)
        tokens[r, s, j] = self.tokens[src].long()
        hours = torch.zeros(b, t_len, dtype=torch.float32, device=dev)  # (B, T)
        hours[row, slot] = self.bag_hours[bag]
        mask = torch.zeros(b, t_len, dtype=torch.bool, device=dev)  # (B, T)
        mask[row, slot] = True
        out = {"tokens": tokens, "mask": mask, "hours": hours, "context": self.context[idx],
               "label": self.label[idx]}
        if self.values is not None:
            values = torch.zeros(b, t_len, l_len, dtype=torch.float32, device=dev)  # (B, T, L)
            values[r, s, j] = self.values[src]
            out["values"] = values
        return out


def device_batches(fs: FeatureSet, batch_size: int, device, max_bags: int | None = None,
                   max_tokens: int | None = None, order: np.ndarray | None = None,
                   max_bytes: int | None = None) -> Iterator[dict[str, Tensor]]:
    """``batches.iter_batches(fs, batch_size, max_bags, max_tokens, order)`` gathered on ``device``: the same
    batches, each a dict of tensors there. A FeatureSet within ``max_bytes`` (None: ``DEFAULT_MAX_BYTES``) on
    the device is made resident whole; a larger one in runs of whole batches, as many as fit (at least one
    batch), so that it streams through the device."""
    max_bytes = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    n = len(fs)
    idx = np.arange(n) if order is None else np.asarray(order, dtype=np.int64)
    if idx.shape != (n,) or (order is not None and not np.array_equal(np.sort(idx), np.arange(n))):
        raise ValueError(f"order must hold each of the {n} admissions once (a permutation), got shape {idx.shape}")
    if n and resident_bytes(fs) <= max_bytes:
        res = ResidentFeatures.of(fs, device, max_bags, max_tokens)
        for s in range(0, n, batch_size):
            yield res.gather(idx[s:s + batch_size])
        return
    for chunk in _chunks(fs, idx, batch_size, max_bytes):
        res = ResidentFeatures.of(subset(fs, chunk), device, max_bags, max_tokens)
        for s in range(0, len(chunk), batch_size):
            yield res.gather(np.arange(s, min(s + batch_size, len(chunk))))


def _chunks(fs: FeatureSet, idx: np.ndarray, batch_size: int, max_bytes: int) -> Iterator[np.ndarray]:
    """Consecutive runs of whole batches of ``idx`` whose resident bytes stay within ``max_bytes`` (a batch
    larger than that alone is a run of its own)."""
    sizes = [resident_bytes(fs, idx[s:s + batch_size]) for s in range(0, len(idx), batch_size)]
    start, used = 0, 0
    for i, size in enumerate(sizes):
        if used and used + size > max_bytes:
            yield idx[start * batch_size:i * batch_size]
            start, used = i, 0
        used += size
    if start * batch_size < len(idx):
        yield idx[start * batch_size:]
