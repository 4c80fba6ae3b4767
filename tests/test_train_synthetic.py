"""Training on synthetic features: the CLI run loads back by URI and predicts; a Cauchy-prior
rank-1 model trains 2,000 steps without NaN."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]


def test_cli_train_on_synthetic_loads_by_uri_and_predicts(synth_features, tmp_path, monkeypatch):
    """The pyfunc logged by `cli.py train` gives, at a fixed seed, exactly risk.score_features's risk
    table of the run's best checkpoint (same rows, same numbers), with the stored samples by default."""
    import torch

    import mlflow
    from pipeline.data import features
    from pipeline.runs.load import load_run
    from pipeline.tasks.mortality import risk

    _, res = synth_features
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "cli.py"), "train", "--data", str(res.out_dir), "--model", "rank1",
           "--max-steps", "30", "--eval-every", "15", "--score-samples", "4", "--hidden", "16", "--embed-dim", "8",
           "--threads", "1", "--max-bags", "12"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_id = re.search(r"^run_id: ([0-9a-f]{32})$", proc.stdout, re.MULTILINE).group(1)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
        test = pd.read_parquet(res.out_dir / "test.parquet").head(50)
        scores = {n: model.predict(test, params={"samples": n, "seed": 11} if n else {"seed": 11}) for n in (3, None)}
        run = load_run(run_id)  # the checkpoint, read without the pyfunc
    finally:
        mlflow.set_tracking_uri(previous)
    assert (run.info.score_samples, run.info.max_bags) == (4, 12)
    fs = features.from_pandas(test)
    for samples, n in ((3, 3), (None, 4)):  # no samples given: the model's score_samples
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(11)
            direct = risk.score_features(run.model, fs, n, run.info.refer_threshold, max_bags=12,
                                         refer_measure=risk.refer_measure_of(run.info),
                                         policy=risk.policy_of(run.info), context_vocab=run.vocab["context"])
        pd.testing.assert_frame_equal(scores[samples], direct, check_exact=True)
    assert list(scores[3]["key"]) == list(test["key"])
    assert scores[3]["risk_sd"].gt(0).all()  # rank-1 draws differ, so the seed decides the numbers


def test_cauchy_rank1_trains_2000_steps_on_synthetic_features(synth_features, tmp_path):
    import torch

    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows.train import train

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
