"""Packed time-major layout for per-row recurrences, against PackedSequence and padded indexing."""

from __future__ import annotations

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

from pipeline.bayes.layers.packing import Packing

CASES = {
    "equal": [3, 3, 3, 3],
    "variable": [2, 4, 1, 4, 3],
    "zero rows": [0, 3, 0, 1],
    "all zero": [0, 0],
    "shorter than T": [2, 1, 2],  # no row reaches the last padded step
}


def padded(lengths, t, d=3):
    x = torch.randn(len(lengths), t, d)
    return x * (torch.arange(t).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).unsqueeze(2)


@pytest.mark.parametrize("lengths", CASES.values(), ids=CASES.keys())
def test_pack_matches_packed_sequence_and_round_trips(lengths):
    t = 4
    lengths_t = torch.tensor(lengths)
    pk = Packing.build(lengths_t, t)
    x = padded(lengths, t)
    packed = pk.pack(x)
    assert packed.shape == (sum(lengths), 3) and sum(pk.batch_sizes) == sum(lengths)
    assert all(b1 >= b2 for b1, b2 in zip(pk.batch_sizes, pk.batch_sizes[1:]))
    real = lengths_t > 0
    if real.any():
        ref = pack_padded_sequence(x[real], lengths_t[real], batch_first=True, enforce_sorted=False)
        assert torch.equal(packed, ref.data)
        assert pk.batch_sizes == ref.batch_sizes.tolist()
    assert torch.equal(pk.unpack(packed), x)  # zeros at padding, original row order


@pytest.mark.parametrize("lengths", CASES.values(), ids=CASES.keys())
def test_final_sort_and_scale_follow_rows(lengths):
    t = 4
    lengths_t = torch.tensor(lengths)
    pk = Packing.build(lengths_t, t)
    x = padded(lengths, t)
    packed = pk.pack(x)
    expected = torch.stack([x[i, k - 1] if k > 0 else torch.zeros(3) for i, k in enumerate(lengths)])
    assert torch.equal(pk.final(packed), expected)
    factor = torch.randn(len(lengths), 3)
    scaled = pk.scale(packed, pk.sort(factor))
    assert torch.allclose(pk.unpack(scaled), x * factor.unsqueeze(1))  # each row times its own factor
    # sorted order: non-increasing lengths, and the rows alive at step t are the first batch_sizes[t]
    sorted_lengths = pk.sort(lengths_t)
    assert torch.equal(sorted_lengths, sorted_lengths.sort(descending=True).values)


def test_equal_lengths_take_the_view_path():
    pk = Packing.build(torch.tensor([5, 5]), 5)
    assert pk.equal and pk.batch_sizes == [2] * 5
    x = torch.randn(2, 5, 3)
    assert pk.pack(x).shape == (10, 3)
    assert pk.unpack(pk.pack(x))._base is not None  # a view, no scatter


def test_gradients_flow_through_pack_and_unpack():
    lengths = [3, 1, 0, 2]
    pk = Packing.build(torch.tensor(lengths), 3)
    x = padded(lengths, 3).requires_grad_()
    out = pk.unpack(pk.pack(x) * 2.0)
    out.sum().backward()
    mask = (torch.arange(3).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).float().unsqueeze(2)
    assert torch.equal(x.grad, 2.0 * mask.expand_as(x))  # padding gets no gradient
