"""Multi-class metrics: against brute force, sklearn, and the binary module on two classes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from sklearn.metrics import log_loss

from pipeline.bayes import metrics as mb
from pipeline.bayes.metrics import multiclass as mm


@pytest.fixture
def draws():
    rng = np.random.default_rng(0)
    s, k, n, c = 2, 3, 40, 4
    logits = rng.normal(0, 2, size=(s, k, n, c))
    labels = rng.integers(0, c, size=n)
    return logits, labels


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_layouts_are_sample_major(draws):
    logits, _ = draws
    flat = mm.as_draws(logits)
    assert flat.shape == (6, 40, 4) and np.array_equal(flat[1 * 3 + 2], logits[1, 2])
    assert np.array_equal(mm.as_components(flat, 3), logits)
    assert mm.as_draws(logits[0, 0]).shape == (1, 40, 4)
    with pytest.raises(ValueError, match="components=4"):
        mm.as_components(flat, 4)
    bad = logits.copy()
    bad[0, 1, 2, 3] = np.nan
    with pytest.raises(ValueError, match="logits\\[0, 1, 2, 3\\]"):
        mm.as_draws(bad)


def test_mixture_nll_brute_force_and_sklearn(draws):
    logits, labels = draws
    p = softmax(logits).reshape(6, 40, 4)
    brute = -np.mean(np.log(p[:, np.arange(40), labels].mean(0)))
    assert np.isclose(mm.mixture_nll_classes(logits, labels), brute)
    assert np.isclose(mm.mixture_nll_classes(logits[0, 0], labels),
                      log_loss(labels, softmax(logits[0, 0]), labels=range(4)))
    members = mm.member_nll(logits, labels)
    assert np.allclose(members, [-np.mean(np.log(softmax(logits[:, j]).mean(0)[np.arange(40), labels]))
                                 for j in range(3)])
    huge = np.array([[[1000.0, -1000.0]]])
    assert np.isclose(mm.mixture_nll_classes(huge, [1]), 2000.0)  # no log(0)


def test_accuracy_brier_and_top_label_ece_brute_force(draws):
    logits, labels = draws
    p = mm.predictive(logits)
    assert np.allclose(p, softmax(logits).mean((0, 1)))
    assert mm.accuracy(labels, p) == np.mean(p.argmax(1) == labels)
    onehot = np.eye(4)[labels]
    assert np.isclose(mm.brier(labels, p), np.mean(((p - onehot) ** 2).sum(1)))
    conf, correct = p.max(1), (p.argmax(1) == labels)
    ece = 0.0
    for b in range(15):
        lo, hi = b / 15, (b + 1) / 15
        inside = (conf >= lo) & ((conf < hi) if b < 14 else (conf <= hi))
        if inside.any():
            ece += inside.mean() * abs(correct[inside].mean() - conf[inside].mean())
    assert np.isclose(mm.top_label_ece(labels, p), ece)
    rel = mm.reliability(labels, p)
    assert rel.counts.sum() == 40 and rel.mode.value == "top_label"


def test_entropies_and_mutual_information(draws):
    logits, labels = draws
    p = softmax(logits).reshape(6, 40, 4)
    pbar = p.mean(0)
    h = -(pbar * np.log(pbar)).sum(1)
    eh = (-(p * np.log(p)).sum(2)).mean(0)
    assert np.allclose(mm.predictive_entropy(logits), h)
    assert np.allclose(mm.expected_entropy(logits), eh)
    assert np.allclose(mm.mutual_information(logits), h - eh)
    same = np.repeat(logits[:1, :1], 3, axis=1)
    assert np.allclose(mm.mutual_information(same), 0.0, atol=1e-12)


def test_disagreement_brute_force(draws):
    logits, labels = draws
    members = softmax(logits).mean(0).argmax(2)  # (K, N)
    pairs = list(itertools.combinations(range(3), 2))
    raw = np.mean([np.mean(members[a] != members[b]) for a, b in pairs])
    d = mm.disagreement(logits, labels)
    acc = mm.accuracy(labels, mm.predictive(logits))
    assert np.isclose(d.raw, raw) and np.isclose(d.normalized, raw / (1 - acc)) and d.accuracy == acc
    assert np.isnan(mm.disagreement(logits[:, :1], labels).raw)


def test_two_classes_agree_with_the_binary_module():
    rng = np.random.default_rng(1)
    z = rng.normal(0, 3, size=(2, 3, 50))  # binary logits (S, K, N)
    y = rng.integers(0, 2, size=50)
    two = np.stack([np.zeros_like(z), z], axis=-1)  # softmax([0, z])[1] = sigmoid(z)
    assert np.isclose(mm.mixture_nll_classes(two, y), mb.mixture_nll(z, y))
    assert np.allclose(mm.mutual_information(two), mb.mutual_information(z))
    assert np.allclose(mm.predictive(two)[:, 1], mb.predictive(z))
    p = mb.predictive(z)
    assert not np.any(p == 0.5)  # no ties: argmax and the 0.5 threshold agree
    assert np.isclose(mm.top_label_ece(y, mm.predictive(two)), mb.ece(y, p, mode="top_label"))
    assert np.isclose(mm.disagreement(two, y).raw, mb.disagreement(z, y).raw)


def test_report_is_json_able(draws):
    import json

    logits, labels = draws
    rep = mm.evaluate_predictions(logits, labels)
    assert rep["draws"] == 6 and rep["components"] == 3 and rep["classes"] == 4 and rep["ece_mode"] == "top_label"
    assert len(rep["member_nll"]) == 3 and len(rep["reliability_counts"]) == 15
    json.dumps(rep, allow_nan=False)
    assert mm.evaluate_predictions(logits.reshape(6, 40, 4), labels, components=3)["nll"] == rep["nll"]


@pytest.mark.parametrize("labels, match", [([0, 1, 4], "class ids must lie in \\[0, 4\\)"), ([0, 1], "2 examples"),
                                           ([0.5, 1, 2], "integers")])
def test_label_errors(labels, match):
    with pytest.raises(ValueError, match=match):
        mm.mixture_nll_classes(np.zeros((1, 3, 4)), labels)
