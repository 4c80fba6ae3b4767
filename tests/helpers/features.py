"""Small random features directories in the extract format, with a learnable signal.

``write_features`` writes train/val/test.parquet, vocab.json and manifest.json as ``extract``
would: ``N_TOKENS`` bag tokens, ``N_CONTEXT`` context tokens, every seventh admission without
bags, and admissions whose bags contain the "danger" token ``DANGER`` die far more often.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.core import fileio
from pipeline.core.contracts import FEATURES
from pipeline.data.mimic.extraction.flow import write_parquet

FEATURE_SCHEMA = FEATURES.arrow_schema()

N_TOKENS, N_CONTEXT, DANGER = 40, 9, 5


def random_rows(n: int, rng: np.random.Generator, zero_bag_every: int = 7) -> dict:
    """Columns of ``n`` random admissions (row 3 of every ``zero_bag_every`` has no bags)."""
    rows = {f.name: [] for f in FEATURE_SCHEMA}
    for i in range(n):
        t = 0 if zero_bag_every and i % zero_bag_every == 3 else int(rng.integers(1, 7))
        bags = [sorted(set(rng.integers(1, N_TOKENS, size=int(rng.integers(1, 6))).tolist())) for _ in range(t)]
        danger = any(DANGER in b for b in bags)
        p = 0.85 if danger else 0.1
        rows["key"].append(f"{i:032x}")
        rows["label"].append(int(rng.random() < p))
        rows["age"].append(float(rng.uniform(20, 90)))
        for col in ("gender", "admission_type", "admission_location"):
            rows[col].append("X")
        rows["icu_system"].append("carevue")
        rows["context"].append(rng.integers(1, N_CONTEXT, size=4).tolist())
        rows["bag_hours"].append([float(h) for h in sorted(rng.choice(np.arange(-48, 24), size=t, replace=False))])
        rows["bags"].append(bags)
        # a value channel beside each token, from (row, token) alone so that the random stream stays as it was
        rows["bag_values"].append([[((i * 31 + tok * 17) % 21 - 10) / 5.0 for tok in b] for b in bags])
        rows["n_events"].append(sum(len(b) for b in bags))
        rows["observed_hours"].append(24.0)
        rows["before_prediction_time"].append(False)
    return rows


def write_features(out: Path, n_train: int = 96, n_val: int = 32, n_test: int = 16, seed: int = 0) -> Path:
    """Random features directory (train/val/test.parquet, vocab.json, manifest.json)."""
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("val", n_val), ("test", n_test)):
        write_parquet(pa.table(random_rows(n, rng), schema=FEATURE_SCHEMA), out / f"{split}.parquet")
    fileio.write_json(out / "vocab.json", {"tokens": ["<pad>"] + [f"chart:{i}" for i in range(1, N_TOKENS)],
                                           "context": ["<pad>"] + [f"ctx:{i}" for i in range(1, N_CONTEXT)],
                                           "bins": {}})
    fileio.write_json(out / "manifest.json", {"feature_version": 3, "splits": {"train": {"admissions": n_train}}})
    return out
