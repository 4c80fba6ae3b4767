"""Training on synthetic features: the CLI run loads back by URI and predicts; a Cauchy-prior
rank-1 model trains 2,000 steps without NaN."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def test_cli_train_on_synthetic_loads_by_uri_and_predicts(synth_features, tmp_path):
    import mlflow

    _, res = synth_features
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "cli.py"), "train", "--data", str(res.out_dir), "--model", "rank1",
           "--max-steps", "30", "--eval-every", "15", "--score-samples", "4", "--hidden", "16", "--embed-dim", "8",
           "--threads", "1"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = re.search(r"^run_id: ([0-9a-f]{32})$", proc.stdout, re.MULTILINE).group(1)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
        test = pd.read_parquet(res.out_dir / "test.parquet").head(50)
        scores = model.predict(test, params={"samples": 3})
    finally:
        mlflow.set_tracking_uri(previous)
    assert list(scores["key"]) == list(test["key"])
    assert scores["risk_mean"].between(0, 1).all() and np.isfinite(scores["risk_sd"]).all()


def test_cauchy_rank1_trains_2000_steps_on_synthetic_features(synth_features, tmp_path):
    import torch

    from pipeline.training import TrainConfig, train

    torch.set_num_threads(1)
    _, res = synth_features
    cfg = TrainConfig.from_preset(
        "default", max_steps=2000, eval_every=1000, eval_samples=1, score_samples=2, max_bags=12,
        max_tokens=24, threads=1, progress=False,
        model={"prior": "cauchy", "lstm_hidden": 8, "embedding_dim": 8, "dense_units": 16},
    )
    result = train(res.out_dir, "rank1", cfg, out_dir=tmp_path / "run", tracking=False)
    assert result.steps == 2000
    assert math.isfinite(result.final_val_nll) and math.isfinite(result.best_val_nll)
