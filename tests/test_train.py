"""pipeline.engine: loss terms, learning, exact resume, NaN guard, torchrun data parallel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.features import write_features
from torch import nn

from pipeline.bayes import metrics
from pipeline.bayes.objective import Objective, kl_weight
from pipeline.core.errors import TrainError
from pipeline.data import features
from pipeline.engine import checkpoints as checkpoint
from pipeline.runs import formats
from pipeline.tasks import mortality as models
from pipeline.tasks.mortality import build_model, risk
from pipeline.tasks.mortality.task import progress_status
from pipeline.tasks.mortality.train_config import TrainConfig
from pipeline.workflows import train as training

ROOT = Path(__file__).resolve().parents[1]
TINY = {"embedding_dim": 8, "lstm_hidden": 8, "dense_units": 8, "components": 2}


def _cfg(**kw) -> TrainConfig:
    base = dict(max_steps=12, eval_every=4, eval_samples=2, score_samples=3, lr=1e-2, progress=False,
                anneal_steps=10, model=dict(TINY))
    return TrainConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def feats(tmp_path_factory):
    return write_features(tmp_path_factory.mktemp("feats"), n_train=96, n_val=48, n_test=8)


class _Fixed(nn.Module):
    """Stub with the model interface returning fixed logits (S·K, B)."""

    components = 2
    likelihood = "bernoulli"  # one logit per admission, as the mortality networks declare

    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.logits = nn.Parameter(logits.clone())

    def forward(self, batch, samples=1):
        return self.logits

    def kl(self):
        return torch.tensor(30.0)

    def l2_penalty(self):
        return (self.logits ** 2).sum()


@pytest.mark.parametrize("mode", ["average", "mixture"])
def test_objective_terms(mode):
    logits = torch.tensor([[2.0, -1.0, 0.5], [-3.0, 0.2, 1.5]])  # (K=2, B=3)
    y = torch.tensor([1.0, 0.0, 1.0])
    obj = Objective(_Fixed(logits), mode, n_train=10, l2=0.01, samples=1)
    out = obj({"label": y}, kl_weight=0.5)
    if mode == "average":
        expected = float(np.mean(metrics.draw_nll(logits.numpy(), y.numpy())))
    else:
        expected = metrics.mixture_nll(logits.numpy(), y.numpy())
    assert out["nll"].item() == pytest.approx(expected, rel=1e-6)
    total = expected + 0.5 * 30.0 / 10 + 0.01 * float((logits ** 2).sum())
    assert out["loss"].item() == pytest.approx(total, rel=1e-6)


@pytest.mark.parametrize("step, anneal, w", [(1, 10, 0.1), (5, 10, 0.5), (10, 10, 1.0), (50, 10, 1.0), (3, 0, 1.0)])
def test_kl_weight(step, anneal, w):
    assert kl_weight(step, anneal) == pytest.approx(w)


@pytest.mark.parametrize("kl, shown", [(3.5, True), (0.0, False)])
def test_the_progress_line_shows_a_kl_weight_only_for_a_model_with_a_kl(kl, shown):
    """A deterministic model (its KL is 0) ramps no weight: its progress line names none."""
    line = progress_status({"loss": 1.25, "nll": 0.5, "kl": kl, "kl_weight": 0.25, "grad_norm": 2.0}, 40)
    assert ("at KL weight 0.25 (ramping up to 1 by step 40)" in line) is shown, line
    assert line.startswith("nll 0.5000, loss 1.2500")


def test_presets_and_config_errors():
    paper = TrainConfig.from_preset("paper", seed=3, model={"components": 2})
    assert paper.model == {"lstm_hidden": 256, "embedding_dim": 32, "components": 2} and paper.seed == 3
    assert paper.max_steps == 20_000 and TrainConfig().max_steps is None  # a fixed budget; the default: no cap
    with pytest.raises(ValueError, match="mixture2"):
        TrainConfig(nll="mixture2")
    with pytest.raises(ValueError, match="^refer_fraction"):
        TrainConfig(refer_fraction=1.0)
    with pytest.raises(ValueError, match=r"unknown model setting\(s\) \['hiden'\]"):
        models.model_config({"hiden": 3}, {"tokens": 5, "context": 5})


def _initial_val_nll(feats: Path, kind: str, cfg: TrainConfig) -> float:
    val = features.load_split(feats / "val.parquet")
    torch.manual_seed(cfg.seed)
    model = build_model(kind, models.model_config(cfg.model, {"tokens": 40, "context": 9}))
    return metrics.mixture_nll(training.validate(model, val, cfg, cfg.eval_samples), val.label)


@pytest.mark.parametrize("kind",
                         ["deterministic", "bayes-emb", "bayes-full", "batchensemble", "rank1", "deep-ensemble"])
def test_training_reduces_validation_nll(feats, tmp_path, kind):
    cfg = _cfg(max_steps=40, eval_every=20)
    before = _initial_val_nll(feats, kind, cfg)
    res = training.train(feats, kind, cfg, out_dir=tmp_path, tracking=False)
    assert res.steps == 40 and res.best_step in (20, 40)
    assert res.best_val_nll < before - 0.05, (before, res.best_val_nll)
    model, info = formats.load_model(res.best_checkpoint)
    assert info.refer_threshold == res.refer_threshold and info.step == res.best_step
    # the threshold refers the top refer_fraction of the validation's selection half by the refer measure, at
    # score_samples with the eval seed; no true risk here (random features): a point model by its entropy, the
    # others by the benchmark's choice for their kind (validation.BENCHMARK_REFER_MEASURE)
    from pipeline.tasks.mortality.task import split_validation

    val, cal = split_validation(features.load_split(feats / "val.parquet"), cfg.calibration_share)
    assert len(val) + len(cal) == 48 and len(cal) > 0 and res.policy is not None
    summary = metrics.Summary.from_draws(training.validate(model, val, cfg, cfg.score_samples))
    from pipeline.tasks.mortality.validation import BENCHMARK_REFER_MEASURE, FALLBACK_REFER_MEASURE

    expected = "entropy" if kind == "deterministic" else BENCHMARK_REFER_MEASURE.get(kind, FALLBACK_REFER_MEASURE).value
    assert info.refer_measure == res.refer_measure == expected
    u = summary.measure(expected)  # (N,)
    assert res.refer_threshold == risk.refer_threshold(u, cfg.refer_fraction)
    assert bool(summary.spread.any()) == (kind != "deterministic")  # a point model's draws agree
    # the 90% quantile of n distinct values: the top ceil(n/10) - 1 or so are referred
    assert len(np.unique(u)) == len(val) and (u > res.refer_threshold).sum() == int(np.sum(u > np.quantile(u, 0.9)))
    assert (tmp_path / "model_info.json").exists() and (tmp_path / "last.pt").exists()


@pytest.mark.parametrize("kind, nll", [("deterministic", "average"), ("rank1", "average"), ("rank1", "mixture")])
def test_resume_equals_uninterrupted(feats, tmp_path, kind, nll):
    full = training.train(feats, kind, _cfg(max_steps=8, nll=nll), out_dir=tmp_path / "full", tracking=False)
    training.train(feats, kind, _cfg(max_steps=4, nll=nll), out_dir=tmp_path / "split", tracking=False)
    resumed = training.train(feats, kind, _cfg(max_steps=8, nll=nll), out_dir=tmp_path / "split", resume=True,
                       tracking=False)
    assert resumed.final_val_nll == full.final_val_nll
    assert resumed.best_val_nll == full.best_val_nll and resumed.best_step == full.best_step
    assert resumed.refer_threshold == full.refer_threshold
    a, b = (checkpoint.read_checkpoint(r.last_checkpoint) for r in (full, resumed))
    assert a["step"] == b["step"] == 8
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert torch.equal(a["rng"][0]["torch"], b["rng"][0]["torch"])


@pytest.mark.slow
def test_run_keeps_redacted_copies_of_vocab_and_manifest(tmp_path):
    feats = write_features(tmp_path / "feats", n_train=16, n_val=8, n_test=2)
    manifest = {"source": {"location": "postgresql://me:hunter2@db/mimic"}, "splits": {}}
    (feats / "manifest.json").write_text(json.dumps(manifest))
    training.train(feats, "deterministic", _cfg(max_steps=2, eval_every=2), out_dir=tmp_path / "out", tracking=False)
    copied = (tmp_path / "out" / "manifest.json").read_text()
    assert "hunter2" not in copied and "postgresql://me:***@db/mimic" in copied
    assert (tmp_path / "out" / "vocab.json").read_bytes() == (feats / "vocab.json").read_bytes()


def test_resume_refuses_changed_settings(feats, tmp_path):
    training.train(feats, "deterministic", _cfg(max_steps=4), out_dir=tmp_path, tracking=False)
    with pytest.raises(TrainError, match="last.pt exists; resume from it"):
        training.train(feats, "deterministic", _cfg(max_steps=8), out_dir=tmp_path, tracking=False)
    with pytest.raises(ValueError, match=r"differ from the checkpoint's \(lr\)"):
        training.train(feats, "deterministic", _cfg(max_steps=8, lr=1e-3), out_dir=tmp_path, resume=True,
                       tracking=False)
    with pytest.raises(ValueError, match="other settings"):
        training.train(feats, "rank1", _cfg(max_steps=8), out_dir=tmp_path, resume=True, tracking=False)
    with pytest.raises(ValueError, match="already at step 4"):
        training.train(feats, "deterministic", _cfg(max_steps=4), out_dir=tmp_path, resume=True, tracking=False)
    with pytest.raises(ValueError, match="`resume` needs the output directory"):
        training.train(feats, "deterministic", _cfg(max_steps=8), resume=True, tracking=False)


def test_resume_of_a_checkpoint_from_before_a_default_changed(feats, tmp_path):
    from pipeline.engine.checkpoints import read_checkpoint, save_checkpoint
    from pipeline.tasks.mortality.train_config import FORMER_DEFAULTS

    off = {k: 0.0 for k in FORMER_DEFAULTS}
    training.train(feats, "deterministic", _cfg(max_steps=4, **off), out_dir=tmp_path, tracking=False)
    ckpt = read_checkpoint(tmp_path / "last.pt")  # as written before the OOV settings existed
    ckpt["train_config"] = {k: v for k, v in ckpt["train_config"].items() if k not in FORMER_DEFAULTS}
    save_checkpoint(tmp_path / "last.pt", ckpt)
    changed = r"calibration_share, source_oov_rate, token_oov_rate"
    with pytest.raises(ValueError, match=rf"differ from the checkpoint's \({changed}\)"):
        training.train(feats, "deterministic", _cfg(max_steps=8), out_dir=tmp_path, resume=True, tracking=False)
    res = training.train(feats, "deterministic", _cfg(max_steps=8, **off), out_dir=tmp_path, resume=True,
                         tracking=False)
    assert res.steps == 8


def test_nan_guard_stops_and_keeps_last_good_checkpoint(feats, tmp_path, monkeypatch):
    calls = {"n": 0}
    forward = Objective.forward

    def poisoned(self, batch, kl_weight):
        calls["n"] += 1
        out = forward(self, batch, kl_weight)
        if calls["n"] == 7:  # step 7: the loss turns NaN
            out["loss"] = out["loss"] * float("nan")
        return out

    monkeypatch.setattr(Objective, "forward", poisoned)
    with pytest.raises(training.TrainingDiverged, match=r"at step 7 .*last good checkpoint is .*last.pt \(step 4\)"):
        training.train(feats, "rank1", _cfg(max_steps=12, eval_every=4), out_dir=tmp_path, tracking=False)
    last = checkpoint.read_checkpoint(tmp_path / "last.pt")
    assert last["step"] == 4
    assert all(torch.isfinite(t).all() for t in last["model"].values())
    assert checkpoint.read_checkpoint(tmp_path / "best.pt")["step"] == 4
    monkeypatch.setattr(Objective, "forward", forward)
    res = training.train(feats, "rank1", _cfg(max_steps=12, eval_every=4), out_dir=tmp_path, resume=True,
                         tracking=False)
    clean = training.train(feats, "rank1", _cfg(max_steps=12, eval_every=4), out_dir=tmp_path / "clean", tracking=False)
    assert res.steps == 12 and res.final_val_nll == clean.final_val_nll  # step 4 kept exactly, as if never poisoned


def test_nan_in_validation_stops_with_the_step(feats, tmp_path, monkeypatch):
    from pipeline.tasks.mortality import task

    validate = task.validation_logits

    def poisoned(draws, val, cfg, samples, resident=None):
        logits = validate(draws, val, cfg, samples, resident)
        if poisoned.calls == 1:  # second evaluation (step 8)
            logits[0, 0, 3] = np.nan
        poisoned.calls += 1
        return logits

    poisoned.calls = 0
    monkeypatch.setattr(task, "validation_logits", poisoned)
    with pytest.raises(training.TrainingDiverged, match=r"validation logits at step 8; .*last.pt \(step 4\)"):
        training.train(feats, "deterministic", _cfg(max_steps=12, eval_every=4), out_dir=tmp_path, tracking=False)
    assert checkpoint.read_checkpoint(tmp_path / "last.pt")["step"] == 4


def _torchrun(feats: Path, out: Path, kind: str, steps: int) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(ROOT / "cli.py"), "train", "--data", str(feats), "--model", kind, "--out", str(out),
           "--max-steps", str(steps), "--eval-every", str(steps), "--lr", "0.01", "--seed", "0",
           "--anneal-steps", "10", "--score-samples", "3", "--no-tracking", "--no-progress",
           "--hidden", "8", "--embed-dim", "8", "--dense", "8", "--components", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_torchrun_two_processes_match_one(feats, tmp_path):
    """2-process DDP (gloo) vs one process on the same global batches."""
    det = training.train(feats, "deterministic", _cfg(max_steps=6, eval_every=6), out_dir=tmp_path / "det1",
                         tracking=False)
    _torchrun(feats, tmp_path / "det2", "deterministic", 6)
    one, two = (checkpoint.read_checkpoint(det.last_checkpoint),
                checkpoint.read_checkpoint(tmp_path / "det2" / "last.pt"))
    assert len(two["rng"]) == 2 and not torch.equal(two["rng"][0]["torch"], two["rng"][1]["torch"])
    for name, tensor in one["model"].items():
        torch.testing.assert_close(two["model"][name], tensor, rtol=1e-4, atol=1e-5, msg=name)

    r1 = training.train(feats, "rank1", _cfg(max_steps=30, eval_every=30), out_dir=tmp_path / "r1", tracking=False)
    _torchrun(feats, tmp_path / "r2", "rank1", 30)
    two = checkpoint.read_checkpoint(tmp_path / "r2" / "last.pt")
    before = _initial_val_nll(feats, "rank1", _cfg())
    assert two["val_nll"] < before - 0.05  # the 2-process run learns ...
    assert abs(two["val_nll"] - r1.final_val_nll) < 0.1, (two["val_nll"], r1.final_val_nll)  # ... as much as one


def test_value_channel_learns_and_needs_its_column(feats, tmp_path):
    """value_channel=true: the value table leaves zero in training; train features without bag_values
    are refused naming the file."""
    import shutil

    import pyarrow.parquet as pq

    cfg = _cfg(model={**TINY, "value_channel": True})
    res = training.train(feats, "rank1", cfg, out_dir=tmp_path / "run", tracking=False)
    model, _ = formats.load_model(res.best_checkpoint)
    assert model.value_bag.embedding.weight.abs().sum() > 0
    old = tmp_path / "v2"
    shutil.copytree(feats, old)
    for split in ("train", "val"):
        pq.write_table(pq.read_table(feats / f"{split}.parquet").drop_columns(["bag_values"]), old / f"{split}.parquet")
    with pytest.raises(features.FeatureError, match=r"train.parquet: column 'bag_values' is missing"):
        training.train(old, "rank1", cfg, out_dir=tmp_path / "run2", tracking=False)


def test_early_stopping_stops_after_patience_validations_without_a_better_one(feats, tmp_path):
    # a learning rate too small to move any weight: every validation equals the first (step 2), the best
    stopped = training.train(feats, "deterministic", _cfg(max_steps=40, eval_every=2, lr=1e-30, patience=3),
                             out_dir=tmp_path / "a", tracking=False)
    assert (stopped.best_step, stopped.steps) == (2, 8)
    full = training.train(feats, "deterministic", _cfg(max_steps=12, eval_every=2, lr=1e-30),
                          out_dir=tmp_path / "b", tracking=False)  # the default: no early stopping
    assert (full.best_step, full.steps) == (2, 12)


def test_zero_switches_the_budget_rules_off_and_the_defaults_grow_with_the_data():
    assert (_cfg(patience=0, max_epochs=0).patience, _cfg(patience=0, max_epochs=0).max_epochs) == (None, None)
    cfg = TrainConfig()  # 16 validations' patience, 40 epochs, no step cap (2026-12-06)
    assert (cfg.patience, cfg.max_epochs, cfg.max_steps) == (16, 40.0, None)
    assert cfg.step_budget(7_031, 16) == 17_578 and cfg.step_budget(7_031, 64) == 4_395
    assert cfg.step_budget(46_000, 16) == 115_000  # full scale: 40 epochs, no cap binds
    assert TrainConfig(max_steps=12_000).step_budget(7_031, 16) == 12_000  # a cap still binds where asked
    for preset in ("paper", "records-research"):  # the published budgets stay fixed
        p = TrainConfig.from_preset(preset)
        assert (p.patience, p.max_epochs) == (None, None)


def test_epoch_budget_ends_training_before_max_steps(feats, tmp_path):
    cfg = _cfg(max_steps=100, max_epochs=0.5, batch_size=16)  # 96 admissions, 16 distinct per step: 3 steps
    assert cfg.step_budget(96, 16) == 3 and _cfg().step_budget(96, 16) == 12  # unset: max_steps
    assert training.train(feats, "deterministic", cfg, out_dir=tmp_path, tracking=False).steps == 3


def test_the_ceiling_is_the_setting_that_ends_training_first():
    cfg = TrainConfig(max_steps=None)  # no step cap: 40 epochs bound at any size
    assert cfg.ceiling(7_031, 16) == ("max_epochs", 17_578) and cfg.ceiling(46_000, 16) == ("max_epochs", 115_000)
    assert TrainConfig(max_steps=12_000).ceiling(7_031, 16) == ("max_steps", 12_000)
    assert TrainConfig(max_steps=4_395).ceiling(7_031, 64) == ("max_steps", 4_395)  # a tie: max_steps
    assert TrainConfig(max_steps=200, max_epochs=None).ceiling(10, 1) == ("max_steps", 200)


def test_patience_in_epochs_is_the_larger_of_the_two():
    cfg = TrainConfig(patience=8, patience_epochs=1.0, eval_every=250)
    assert cfg.patience_validations(7_031, 16) == 8  # one epoch: 440 steps, under 8 validations
    assert cfg.patience_validations(40_000, 16) == 10  # 2,500 steps: 10 validations
    assert TrainConfig(patience=8).patience_validations(40_000, 16) == 8  # unset: validations alone
    assert TrainConfig(patience=0, patience_epochs=1.0).patience_validations(40_000, 16) is None  # no early stopping


def test_a_run_ended_by_its_epoch_ceiling_records_why(feats, tmp_path):
    cfg = _cfg(max_steps=None, max_epochs=0.5, batch_size=16, patience=100)  # 96 admissions, 16 a step: 3 steps
    r = training.train(feats, "deterministic", cfg, out_dir=tmp_path, tracking=False)
    assert (r.steps, r.stopped_by) == (3, "max_epochs")
    assert any(n.startswith("budget: training ended at step 3 by its ceiling max_epochs 0.5, while the "
                            "validation NLL was still improving") for n in r.notes), r.notes


def test_a_wall_clock_ceiling_stops_at_the_first_step_past_it_and_checkpoints(feats, tmp_path):
    r = training.train(feats, "deterministic", _cfg(max_minutes=1e-9, eval_every=4), out_dir=tmp_path,
                       tracking=False)
    assert (r.steps, r.stopped_by, r.best_step) == (1, "max_minutes", 1)  # validated at the step it stopped
    assert (tmp_path / "last.pt").exists()
    assert any("the wall-clock ceiling (max_minutes" in n for n in r.notes), r.notes


@pytest.mark.parametrize("kw, message", [({"patience": -1}, "^patience must be >= 0"),
                                         ({"max_epochs": -1.0}, r"^max_epochs must be >= 0 \(0: off\)")])
def test_early_stopping_settings_are_checked(kw, message):
    with pytest.raises(ValueError, match=message):
        _cfg(**kw)


def test_preset_notes_name_the_presets_that_set_each_field():
    from pipeline.cli.train import preset_notes
    from pipeline.tasks.mortality.config import MortalityConfig
    from pipeline.tasks.mortality.train_config import TrainConfig

    notes = preset_notes()
    assert notes[(TrainConfig, "max_steps")] == "--preset paper, records-research, gpu set their own"
    assert notes[(TrainConfig, "lr")] == "--preset records-research, gpu set their own"
    assert notes[(TrainConfig, "warmup_epochs")] == "--preset gpu sets its own"
    assert notes[(MortalityConfig, "lstm_hidden")] == "--preset paper, records-research set their own"
    assert (TrainConfig, "seed") not in notes and (TrainConfig, "model") not in notes
