"""One tiny tracked training per features directory and model kind, shared by the test modules
that need a logged run (evaluation, scoring, serving).

The run is tracked in the store that is active when it is first trained: use it under the
``tracking_store`` fixture (tests/conftest.py), which every such module requests.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.core import fileio

TINY = {"embedding_dim": 8, "lstm_hidden": 16, "dense_units": 16, "components": 3}  # the trained runs' model


def trained_run(tmp_path_factory, features_dir: Path, kind: str = "rank1", steps: int = 20) -> str:
    """Run id of a tiny training on ``features_dir`` (trained once per session, tracked in MLflow)."""
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows.train import train

    cache = tmp_path_factory.getbasetemp() / "trained_runs" / f"{features_dir.name}-{kind}-{steps}"
    if (cache / "run_id").exists():
        return (cache / "run_id").read_text().strip()
    cfg = TrainConfig(max_steps=steps, eval_every=10, eval_samples=2, score_samples=4, lr=1e-2, progress=False,
                      threads=1, model=dict(TINY))
    result = train(features_dir, kind, cfg, out_dir=cache / "ckpt", experiment="evaluate-tests",
                   run_name=f"{kind}-{features_dir.name}")
    fileio.write_text(cache / "run_id", result.run_id)
    return result.run_id


def promise_run(tmp_path_factory) -> tuple[str, Path]:
    """(run id, features directory) of a tiny rank-1 run on random features (``helpers.features``) whose
    calibration half certifies a promise (alpha 0.2): 500 validation and 600 test admissions; trained once per
    session."""
    from helpers.features import write_features
    from pipeline.bayes.referral.config import ReferralConfig
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows.train import train

    cache = tmp_path_factory.getbasetemp() / "trained_runs" / "promise"
    feats = cache / "features"
    if (cache / "run_id").exists():
        return (cache / "run_id").read_text().strip(), feats
    write_features(feats, n_train=200, n_val=500, n_test=600, seed=1)
    cfg = TrainConfig(max_steps=20, eval_every=10, eval_samples=2, score_samples=4, lr=1e-2, progress=False,
                      threads=1, model=dict(TINY))
    result = train(feats, "rank1", cfg, out_dir=cache / "ckpt", experiment="promise-tests", run_name="promise",
                   referral=ReferralConfig(alpha=0.2))
    fileio.write_text(cache / "run_id", result.run_id)
    return result.run_id, feats
