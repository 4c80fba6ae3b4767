"""The GPU recipe on the CPU (issue 38): the mortality plan on the device data path trains exactly as on
collated batches; validation and scoring on it give the CPU path's answers (the same seed and batching),
however the features are chunked; the warm-up and the KL anneal in epochs; ``--preset gpu`` and the
preset a CUDA device gets."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.features import write_features

from pipeline.data import features, resident
from pipeline.engine import predict
from pipeline.engine.loop import run_loop
from pipeline.tasks import mortality as models
from pipeline.tasks.mortality import build_model, risk
from pipeline.tasks.mortality.task import plan
from pipeline.tasks.mortality.train_config import TrainConfig

TINY = {"embedding_dim": 8, "lstm_hidden": 8, "dense_units": 8, "components": 2}
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def feats(tmp_path_factory):
    return write_features(tmp_path_factory.mktemp("gpu") / "f", n_train=96, n_val=40, n_test=8, seed=1)


def _cfg(**kw) -> TrainConfig:
    base = dict(max_steps=8, eval_every=4, eval_samples=2, score_samples=3, lr=1e-2, progress=False, batch_size=32,
                anneal_steps=5, source_oov_rate=0.2, token_oov_rate=0.2, model=dict(TINY))
    return TrainConfig(**{**base, **kw})


@pytest.mark.parametrize("kind", ["rank1", "deterministic"])
def test_the_device_data_path_trains_exactly_as_collated_batches(feats, kind):
    cfg = _cfg()
    host, dev = plan(feats, kind, cfg, CPU, resident=False), plan(feats, kind, cfg, CPU, resident=True)
    assert host.train_res is None and dev.train_res is not None and dev.val_res is not None
    for step in range(1, 9):  # the sampler's admissions, OOV augmentation included (the same generator)
        a, b = host.batch(step, 0, 1), dev.batch(step, 0, 1)
        assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a), step
    states = []
    for p in (host, dev):
        torch.manual_seed(7)
        states.append(run_loop(p, progress=False))
    assert states[0].best_val_nll == states[1].best_val_nll and states[0].val_nll == states[1].val_nll
    for name, tensor in host.model.state_dict().items():
        assert torch.equal(tensor, dev.model.state_dict()[name]), name


def test_warmup_and_anneal_in_epochs_scale_with_the_data(feats):
    cfg = _cfg(warmup_epochs=0.5, anneal_epochs=1.0, batch_size=16, lr=0.01)  # rank-1, K = 2: 8 admissions a step
    p = plan(feats, "rank1", cfg, CPU)
    assert (p.warmup_steps, p.anneal_steps) == (6, 12)  # 96 admissions: half an epoch is 6 steps, one 12
    assert p.before_step(1)["lr"] == pytest.approx(0.01 / 6) and p.before_step(6)["lr"] == 0.01
    assert all(g["lr"] == 0.01 for g in p.optimizer.param_groups) and p.before_step(20) == {"lr": 0.01}
    plain = plan(feats, "rank1", _cfg(), CPU)
    assert (plain.warmup_steps, plain.anneal_steps, plain.before_step(1)) == (0, 5, {})  # the defaults: as before
    with pytest.raises(ValueError, match="^warmup_epochs must be >= 0"):
        _cfg(warmup_epochs=-1.0)


def test_the_gpu_preset_keeps_its_budgets_in_epochs():
    gpu = TrainConfig.from_preset("gpu")
    assert gpu.batch_size >= 1024 and gpu.anneal_epochs and gpu.warmup_epochs and gpu.max_epochs
    distinct = gpu.batch_size // 4  # rank-1, K = 4
    # the 8k benchmark (7,031 training admissions) and full-scale MIMIC-III (46,000): the same epochs, more steps
    for n in (7_031, 46_000):
        assert gpu.step_budget(n, distinct) == int(np.ceil(gpu.max_epochs * n / distinct))
        assert gpu.anneal_steps_for(n, distinct) == int(np.ceil(gpu.anneal_epochs * n / distinct))
    assert TrainConfig().anneal_steps_for(46_000, 16) == 1_000  # the default's anneal stays in steps


def _model(kind: str = "rank1"):
    torch.manual_seed(0)
    return build_model(kind, models.model_config(dict(TINY), {"tokens": 40, "context": 9})).eval()


@pytest.mark.parametrize("kind", ["rank1", "deterministic"])
@pytest.mark.parametrize("max_bytes", [None, 400])
def test_scoring_on_the_device_path_gives_the_cpu_answers(feats, monkeypatch, kind, max_bytes):
    fs = features.load_split(feats / "val.parquet")
    model = _model(kind)
    if max_bytes is not None:  # a cap far below the split: resident in chunks of whole batches
        monkeypatch.setattr(resident, "DEFAULT_MAX_BYTES", max_bytes)
        assert resident.resident_bytes(fs) > 10 * max_bytes
    tables = [risk.score_features(model, fs, 4, 0.05, batch_size=6, generator=predict.seeded_generator(3),
                                     resident=on) for on in (False, True)]
    pd.testing.assert_frame_equal(tables[0], tables[1], check_exact=False, rtol=1e-6, atol=1e-7)
    assert np.array_equal(tables[0]["refer"], tables[1]["refer"]) and len(tables[0]) == len(fs)
