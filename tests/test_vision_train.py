"""Training and evaluation routines of the image models on a small digits subset."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pipeline.bayes.layers import Rank1Vector, Sampling, set_sampling
from pipeline.bayes.layers.base import BayesianLayer
from pipeline.bayes.metrics import multiclass as mm
from pipeline.bayes.objective import kl_weight
from pipeline.data.images.data import Splits, digits_splits
from pipeline.runs.formats import load_model
from pipeline.tasks.vision import VisionTrainConfig
from pipeline.tasks.vision.train import augment, batch_indices, learning_rate, objective, parameter_groups
from pipeline.workflows.vision_run import evaluate_model, train_vision
from pipeline.workflows.vision_run import image_logits as predict_logits

TINY_MODEL = {"depth": 10, "width": 1, "ensemble_size": 3}


@pytest.fixture(scope="module")
def small():
    s = digits_splits(0, size=8)
    return Splits(s.train.subset(np.arange(240)), s.val.subset(np.arange(90)), s.test.subset(np.arange(60)))


def cfg(method: str, **kw) -> VisionTrainConfig:
    base = {"dataset": "digits", "image_size": 8, "epochs": 1.0, "batch_size": 24, "base_lr": 0.4,
            "kl_anneal_epochs": 1.0, "log_every": 5, "model": {**TINY_MODEL, "method": method}}
    return VisionTrainConfig(**{**base, **kw})


class RecordingTracker:
    def __init__(self):
        self.params, self.metrics, self.artifacts = {}, [], []

    def log_params(self, params):
        self.params.update(params)

    def log_metrics(self, metrics, step):
        self.metrics.append((step, dict(metrics)))

    def log_artifact(self, path, artifact_path=None):
        self.artifacts.append((str(path), artifact_path))

    def set_tag(self, key, value):
        self.params[f"tag:{key}"] = value


@pytest.mark.parametrize("method", ["deterministic", "batchensemble", "rank1", "deep-ensemble"])
def test_train_every_method_is_reproducible_and_saves(method, small, tmp_path):
    tracker = RecordingTracker()
    a = train_vision(cfg(method), splits=small, out_dir=tmp_path, tracker=tracker)
    k = 1 if method == "deterministic" else 3
    distinct = 24 // k
    assert a.steps_per_epoch == 240 // distinct and a.steps == a.steps_per_epoch
    assert math.isfinite(a.final_train["loss"]) and (a.final_train["kl"] > 0) == (method == "rank1")
    assert a.val_metrics["n"] == 90 and a.val_metrics["components"] == k
    # train_vision logs params and metrics; the run's files are the run writer's (workflows.vision_run.train_run)
    assert tracker.params["distinct_per_step"] == distinct and tracker.artifacts == [] and a.checkpoint.exists()
    assert a.checkpoint == tmp_path / "best.pt"  # the model file of every kind of run
    assert any("train_loss" in m for _, m in tracker.metrics) and any("val_nll" in m for _, m in tracker.metrics)
    b = train_vision(cfg(method), splits=small)
    for (name, p), q in zip(a.model.state_dict().items(), b.model.state_dict().values()):
        assert torch.equal(p, q), name
    assert a.val_metrics["nll"] == b.val_metrics["nll"]
    model, info = load_model(a.checkpoint)
    x = small.test.floats()
    assert np.array_equal(predict_logits(model, x, 2, seed=5), predict_logits(a.model, x, 2, seed=5))
    assert info.model_config["method"] == method and info.step == a.steps


def test_deterministic_training_learns(small):
    r = train_vision(cfg("deterministic", epochs=6.0), splits=small)
    assert r.val_metrics["accuracy"] > 0.6 and r.val_metrics["nll"] < 1.5  # chance: 0.1 and log(10) = 2.30


def test_non_finite_loss_raises(small):
    with pytest.raises(FloatingPointError, match="step 1"):
        train_vision(cfg("deterministic", l2=float("inf")), splits=small)


def test_config_errors():
    with pytest.raises(ValueError, match="^data_dir is required"):
        VisionTrainConfig(dataset="cifar10")
    with pytest.raises(ValueError, match="unknown model setting"):
        VisionTrainConfig(model={"depht": 16})
    with pytest.raises(ValueError, match="nll"):
        VisionTrainConfig(nll="sum")
    c = VisionTrainConfig(dataset="cifar100", data_dir="/x", model={"arch": "resnet50"})
    assert (c.model_config().num_classes, c.model_config().in_channels) == (100, 3)


@pytest.mark.parametrize("dataset, method, expected", [
    ("digits", "rank1", {"epochs": 20.0, "batch_size": 64, "eval_samples": 2, "kl_anneal_epochs": 16.0, "l2": 1e-4,
                         "lr_decay_epochs": (80.0, 160.0, 180.0), "fast_weight_lr_multiplier": 1.0}),
    ("digits", "batchensemble", {"epochs": 20.0, "l2": 3e-4, "fast_weight_lr_multiplier": 0.5}),
    ("digits", "deterministic", {"epochs": 20.0, "l2": 2e-4, "lr_decay_epochs": (60.0, 120.0, 160.0)}),
    ("cifar10", "rank1", {"epochs": 250.0, "batch_size": 512, "eval_samples": 1, "kl_anneal_epochs": 200.0,
                          "l2": 1e-4}),
    ("cifar10", "batchensemble", {"epochs": 250.0, "l2": 3e-4, "fast_weight_lr_multiplier": 0.5}),
    ("cifar10", "deterministic", {"epochs": 200.0, "batch_size": 512, "l2": 2e-4,
                                  "lr_decay_epochs": (60.0, 120.0, 160.0)}),
    ("cifar10", "deep-ensemble", {"epochs": 200.0, "l2": 2e-4, "lr_decay_epochs": (60.0, 120.0, 160.0)}),
])
def test_defaults_per_dataset_and_method(dataset, method, expected):
    """digits takes the digits benchmark's settings, CIFAR the published ones; each method uncertainty-baselines'
    recipe (L2, decays, fast-weight multiplier; the deterministic CIFAR run 200 epochs)."""
    c = VisionTrainConfig(dataset=dataset, data_dir="/x", model={"method": method})
    assert {k: getattr(c, k) for k in expected} == expected
    m = c.model_config()
    assert (m.depth, m.width) == ((10, 1) if dataset == "digits" else (28, 10))
    given = VisionTrainConfig(dataset=dataset, data_dir="/x", epochs=3.0, l2=0.0, batch_size=8,
                              model={"method": method, "depth": 16})
    assert (given.epochs, given.l2, given.batch_size, given.model_config().depth) == (3.0, 0.0, 8, 16)
    assert given.kl_anneal_epochs == pytest.approx(2.4)


def test_fast_weights_get_the_multiplied_learning_rate(small):
    from pipeline.tasks.vision import build_vision_model

    model = build_vision_model(cfg("batchensemble").model_config())
    slow, fast = parameter_groups(model, 0.5)
    assert (slow["lr_multiplier"], fast["lr_multiplier"]) == (1.0, 0.5)
    fast_ids = {id(p) for p in fast["params"]}
    factors = [p for m in model.modules() if isinstance(m, Rank1Vector) for p in m.parameters()]
    assert factors and all(id(p) in fast_ids for p in factors)
    assert id(model.body.head.bias) in fast_ids and id(model.body.head.weight) not in fast_ids
    assert len(fast["params"]) + len(slow["params"]) == len(list(model.parameters()))
    assert len(parameter_groups(build_vision_model(cfg("deterministic").model_config()), 0.5)) == 1  # no fast weights
    with pytest.raises(ValueError, match="bn_rows 64"):  # 3 members x 22 images: no 64-row groups
        train_vision(cfg("rank1", batch_size=66), splits=small)


def test_learning_rate_schedule_and_kl_weight():
    c = VisionTrainConfig(epochs=250.0, base_lr=0.1)
    spe = 10
    assert learning_rate(0, spe, c, 128) == pytest.approx(0.01)  # warm-up: 1/10 of the first epoch
    assert learning_rate(9, spe, c, 128) == pytest.approx(0.1)
    assert learning_rate(10, spe, c, 64) == pytest.approx(0.05)  # linear in distinct images per step
    assert learning_rate(999, spe, c, 128) == pytest.approx(0.1)  # 80/200 of 250 epochs = epoch 100
    assert learning_rate(1000, spe, c, 128) == pytest.approx(0.02)
    assert learning_rate(2000, spe, c, 128) == pytest.approx(0.004)
    assert learning_rate(2250, spe, c, 128) == pytest.approx(0.0008)
    # the shared weight of the 1-based step; training passes step + 1 for its 0-based step (published (step+1)/N)
    assert kl_weight(1, 100) == 0.01 and kl_weight(100, 100) == 1.0 and kl_weight(501, 100) == 1.0
    assert kl_weight(1, 0) == 1.0 and kl_weight(1, 12.5) == 0.08  # annealing over a fractional number of steps


def test_batches_are_epoch_permutations():
    n, distinct, spe = 50, 8, 6
    epoch0 = np.concatenate([batch_indices(n, distinct, spe, s, seed=1) for s in range(spe)])
    assert len(set(epoch0.tolist())) == 48  # 6 batches of 8, no repeats, 2 left out
    epoch1 = np.concatenate([batch_indices(n, distinct, spe, s, seed=1) for s in range(spe, 2 * spe)])
    assert not np.array_equal(epoch0, epoch1)
    assert np.array_equal(batch_indices(n, distinct, spe, 7, seed=1), batch_indices(n, distinct, spe, 7, seed=1))


def test_augment_crops_and_flips_without_losing_centred_content():
    x = torch.zeros(64, 2, 16, 16)
    x[:, :, 7, 8] = 1.0  # at least 4 px from every edge, flipped too: a shift of at most 4 px keeps it
    g = torch.Generator().manual_seed(0)
    y = augment(x, g, pad=4)
    assert y.shape == x.shape and torch.equal(y.sum((2, 3)), x.sum((2, 3)))  # one pixel moved, never cropped
    positions = {tuple(torch.nonzero(y[i, 0])[0].tolist()) for i in range(64)}
    assert len(positions) > 10  # shifted around
    assert torch.equal(y[:, 0], y[:, 1])  # channels move together


def test_objective_average_and_mixture(small):
    from pipeline.tasks.vision import build_vision_model

    model = build_vision_model(cfg("rank1").model_config())
    images, labels = torch.from_numpy(small.train.floats(np.arange(6))), torch.from_numpy(small.train.labels[:6])
    torch.manual_seed(0)
    avg = objective(model, images, labels, 0.5, 240, 1e-4, "average")
    torch.manual_seed(0)
    mix = objective(model, images, labels, 0.5, 240, 1e-4, "mixture")
    torch.manual_seed(0)
    logits = model(images)  # (K, B, C), the same draws
    ll = torch.log_softmax(logits, -1).gather(2, labels.view(1, 6, 1).expand(3, 6, 1))[..., 0]  # (K, B)
    assert torch.allclose(avg["nll"], -ll.mean())
    assert torch.allclose(mix["nll"], -(torch.logsumexp(ll, 0) - math.log(3)).mean())
    assert mix["nll"] <= avg["nll"]  # Jensen
    assert torch.allclose(avg["loss"], avg["nll"] + 0.5 * avg["kl"] / 240 + 1e-4 * avg["l2"])


def test_evaluate_vision_report(small):
    r = train_vision(cfg("rank1"), splits=small)
    model = r.model
    layers = [m for m in model.modules() if isinstance(m, BayesianLayer)]
    set_sampling(model, Sampling.PER_EXAMPLE)
    model.train()
    rep = evaluate_model(model, small.test, samples=2, corruptions=("contrast", "rotation"), severities=(1, 5))
    assert model.training and all(m.sampling == Sampling.PER_EXAMPLE for m in layers)  # modes restored
    logits = predict_logits(model, small.test.floats(), 2)
    assert logits.shape == (2, 3, 60, 10)
    assert rep.clean == mm.evaluate_predictions(logits, small.test.labels, components=3)
    assert set(rep.corrupted) == {"contrast", "rotation"} and set(rep.corrupted["rotation"]) == {1, 5}
    summary = rep.by_severity()
    both = [rep.corrupted[c][5]["nll"] for c in ("contrast", "rotation")]
    assert summary[5]["nll"] == pytest.approx(sum(both) / 2)
    d = rep.to_dict()
    assert set(d) == {"samples", "clean", "corrupted", "by_severity"} and "5" in d["corrupted"]["rotation"]
    other = predict_logits(model, small.test.floats(), 2, seed=1)
    assert not np.array_equal(logits, other)  # the seed sets the weight draws


def test_summary_table_means_and_sds_over_seeds():
    from pipeline.reports.vision_summary import markdown_table, summarize_runs

    def run(method, seed, nll):
        row = {"nll": nll, "accuracy": 0.9, "ece": 0.05}
        return {"method": method, "seed": seed,
                "report": {"clean": row, "by_severity": {"1": {**row, "nll": nll + 1}, "5": {**row, "nll": nll + 2}}}}

    runs = [run("rank1", 0, 0.1), run("rank1", 1, 0.3), run("deterministic", 0, 0.5)]
    summary = summarize_runs(runs)
    assert summary["rank1"]["clean"]["nll"] == {"mean": pytest.approx(0.2), "sd": pytest.approx(0.1414213562), "n": 2}
    assert summary["rank1"]["5"]["nll"]["mean"] == pytest.approx(2.2)
    one = summary["deterministic"]["1"]["nll"]  # one seed: its spread is undefined (core.tables: NaN, never 0)
    assert (one["mean"], one["n"]) == (1.5, 1) and math.isnan(one["sd"])
    table = markdown_table(summary, "nll").splitlines()
    assert table[0] == "| method | clean | severity 1 | severity 5 |"
    assert table[2] == "| rank1 | 0.200 ± 0.141 | 1.200 ± 0.141 | 2.200 ± 0.141 |"
    assert table[3] == "| deterministic | 0.500 | 1.500 | 2.500 |"  # one seed: the value alone


def test_deep_ensemble_members_get_the_deterministic_gradient(small):
    """Summed member losses: member k's gradient is the deterministic network's on the same images."""
    import dataclasses

    from pipeline.tasks.vision import VisionNet, build_vision_model

    mcfg = cfg("deep-ensemble").model_config()
    ensemble = build_vision_model(mcfg)
    det = VisionNet(dataclasses.replace(mcfg, method="deterministic"))
    det.load_state_dict(ensemble.members[1].state_dict())
    images, labels = torch.from_numpy(small.train.floats(np.arange(8))), torch.from_numpy(small.train.labels[:8])
    objective(ensemble, images, labels, 1.0, 240, 1e-3)["loss"].backward()
    objective(det, images, labels, 1.0, 240, 1e-3)["loss"].backward()
    for (name, p), q in zip(ensemble.members[1].named_parameters(), det.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6, rtol=1e-5), name
    with pytest.raises(ValueError, match="mixture"):
        objective(ensemble, images, labels, 1.0, 240, 1e-3, "mixture")


def test_an_interrupted_vision_run_resumes_to_the_weights_of_an_uninterrupted_one(small, tmp_path, monkeypatch):
    """The image task trains through the one training workflow (``workflows.train.train_plan``): a run interrupted
    (Ctrl-C) after its first validation resumes from ``last.pt`` and ends with the weights, the BatchNorm
    statistics and the validation of the run that was never interrupted (seeded, CPU; rank-1 draws and the
    augmentation's crops and flips both restored); other settings are refused, naming them."""
    from pipeline.core.errors import TrainError
    from pipeline.tasks.vision.task import VisionPlan
    from pipeline.workflows.vision_run import train_run

    c = cfg("rank1", epochs=2.0, eval_every_epochs=1.0, augment=True)
    whole = train_run(c, out_dir=tmp_path / "whole", tracking=False, splits=small)
    per_epoch = whole.result.steps_per_epoch
    assert whole.result.steps == 2 * per_epoch and (tmp_path / "whole" / "last.pt").exists()
    real = VisionPlan.before_step

    def interrupted(self, step):
        if step == per_epoch + 3:  # in the second epoch, after the first validation's last.pt
            raise KeyboardInterrupt
        return real(self, step)

    monkeypatch.setattr(VisionPlan, "before_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train_run(c, out_dir=tmp_path / "cut", tracking=False, splits=small)
    monkeypatch.undo()
    assert (tmp_path / "cut" / "last.pt").exists() and not (tmp_path / "cut" / "best.pt").exists()
    with pytest.raises(TrainError, match="epochs"):
        train_run(cfg("rank1", epochs=3.0, eval_every_epochs=1.0, augment=True), out_dir=tmp_path / "cut",
                  tracking=False, splits=small, resume=True)
    resumed = train_run(c, out_dir=tmp_path / "cut", tracking=False, splits=small, resume=True)
    assert resumed.result.steps == whole.result.steps
    for (name, a), b in zip(whole.result.model.state_dict().items(), resumed.result.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert resumed.result.val_metrics["nll"] == whole.result.val_metrics["nll"]
    (m1, i1), (m2, i2) = load_model(tmp_path / "whole" / "best.pt"), load_model(tmp_path / "cut" / "best.pt")
    assert i1.step == i2.step == whole.result.steps and i1.val_metrics == i2.val_metrics
    for (name, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), name
