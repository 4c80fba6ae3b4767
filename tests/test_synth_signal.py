"""Synthetic MIMIC-III through the real extraction: the signal is learnable but not trivial,
and the synthetic outputs pass the de-identification scan."""

from __future__ import annotations

import numpy as np
import pandas as pd
from helpers.privacy_scan import scan
from helpers.raw_ids import raw_ids_of
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score


def _bag_of_tokens(frame: pd.DataFrame, vocab_size: int) -> np.ndarray:
    from scipy.sparse import csr_matrix

    rows, cols = [], []
    for i, (bags, ctx) in enumerate(zip(frame["bags"], frame["context"])):
        toks = {int(t) for b in bags for t in b} | {vocab_size + int(c) for c in ctx}
        rows += [i] * len(toks)
        cols += sorted(toks)
    return csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(frame), vocab_size + 64))


def _with_truth(root, res, split: str) -> pd.DataFrame:
    frame = pd.read_parquet(res.out_dir / f"{split}.parquet")
    link = pd.read_csv(res.link_file)
    truth = pd.read_csv(root / "mimic" / "_truth" / "truth.csv.gz")
    truth.columns = [c.lower() for c in truth.columns]
    return frame.merge(link, on="key").merge(truth, on="hadm_id", how="left")


def test_signal_learnable_but_not_trivial(synth_features):
    root, res = synth_features
    train = _with_truth(root, res, "train")
    test = pd.concat([_with_truth(root, res, "val"), _with_truth(root, res, "test")])
    assert train["true_risk"].notna().all() and test["true_risk"].notna().all()
    v = res.manifest["vocab"]["tokens"]
    clf = LogisticRegression(C=0.01, max_iter=3000)
    clf.fit(_bag_of_tokens(train, v), train["label"])
    p = clf.predict_proba(_bag_of_tokens(test, v))[:, 1]
    base = test["label"].mean()
    ap_lr = average_precision_score(test["label"], p)
    ap_true = average_precision_score(test["label"], test["true_risk"])
    print(f"\nbase rate {base:.3f}  AUC-PR: bag-of-tokens logistic regression {ap_lr:.3f}, true risk {ap_true:.3f}")
    assert 0.05 <= base <= 0.2
    assert ap_lr > 1.8 * base  # learnable: well above the base rate
    assert ap_true > ap_lr + 0.05  # not trivial: clearly below the Bayes-optimal risk


def test_synthetic_outputs_pass_the_scan(synth_features):
    root, res = synth_features
    findings = scan([res.out_dir], raw_ids_of(root / "mimic"))
    assert findings == [], "\n".join(map(str, findings[:20]))


def test_extract_never_reads_truth(synth_features, tmp_path):
    """The same tables without _truth/ give byte-identical outputs: extraction never reads the answers."""
    from pipeline.data.mimic.extraction import extract

    root, res = synth_features
    assert (root / "mimic" / "_truth" / "truth.csv.gz").exists()
    blind = tmp_path / "mimic"
    blind.mkdir()
    for path in (root / "mimic").iterdir():
        if path.name != "_truth":
            (blind / path.name).symlink_to(path)
    again = extract(blind, tmp_path / "features")
    assert set(res.manifest["sha256"]) >= {"train", "val", "test", "vocab"}  # every output file
    assert again.manifest["sha256"] == res.manifest["sha256"]
    assert again.link_file.read_bytes() == res.link_file.read_bytes()
    same = {k: v for k, v in res.manifest.items() if k != "source"}  # the source names its directory
    assert {k: v for k, v in again.manifest.items() if k != "source"} == same
    assert "_truth" not in str(res.manifest["source"]["tables"])
