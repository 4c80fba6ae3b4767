"""pipeline.tasks: a new task added through the registry alone (docs/architecture.md, "Adding a task").

A toy binary task, planted as a package of its own (as tests/test_architecture.py plants packages for the
import rules) and registered with one entry in ``TASKS``, trains through the one training workflow
(``workflows.train.train_plan``: the engine's loop, its checkpoints, the run written and tracked), is read back
by ``runs.load.load_run`` (its task found by the key its checkpoint records), scores through its run's scorer
(``Run.scorer``), and takes subnetwork Laplace through the one Laplace workflow (``workflows.laplace_run``):
no file of the project names it. The three "Adding ..." sections of docs/architecture.md name files that
exist."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.usefixtures("tracking_store")

ROOT = Path(__file__).resolve().parents[1]

TOY_TASK = '''
"""A toy binary task: points in R^D, a logistic model of their label (its network, recipe, finish and scorer)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from pipeline.bayes import metrics
from pipeline.bayes.objective import Objective
from pipeline.engine.predict import predict_logits, seeded_generator
from pipeline.tasks.base import Finished, FinishSettings, RequestError, RunSpec, Validated


@dataclass
class ToyConfig:
    dim: int = 3  # the points' dimension


class ToyNet(nn.Module):
    """logit = w.x + b: one draw, one component (deterministic, so Laplace takes it)."""

    components = 1
    likelihood = "bernoulli"
    kind = "logistic"

    def __init__(self, cfg: ToyConfig):
        super().__init__()
        self.cfg = cfg
        self.linear = nn.Linear(cfg.dim, 1)

    def forward(self, batch, samples=1, sampling=None, generator=None):
        return self.linear(batch["x"]).squeeze(-1).expand(samples, -1)  # (B,) -> (S, B)

    def kl(self):
        return torch.zeros(())

    def l2_penalty(self):
        return sum((p ** 2).sum() for p in self.parameters())


def batches(x, y, size=64):
    for s in range(0, len(x), size):
        yield {"x": torch.from_numpy(x[s:s + size]), "label": torch.from_numpy(y[s:s + size])}


@dataclass
class ToyData:
    x: np.ndarray  # (N, D) float32
    y: np.ndarray  # (N,) float32 0/1
    xv: np.ndarray  # validation points
    yv: np.ndarray


@dataclass
class ToyPlan:
    model: object
    objective: object
    optimizer: object
    data: ToyData
    seed: int
    last_step: int
    eval_every: int = 10
    patience: int | None = None
    anneal_steps: int = 0
    clip: float = 0.0
    keep_best: bool = True
    label: str = "toy train"
    progress: bool = False

    @property
    def task(self):
        return TASK

    def batch(self, step, rank, world):
        idx = np.random.default_rng([self.seed, step]).choice(len(self.data.x), 32, replace=False)
        return {"x": torch.from_numpy(self.data.x[idx]), "label": torch.from_numpy(self.data.y[idx])}

    def step_context(self, device):
        return contextlib.nullcontext()

    def before_step(self, step):
        return {}

    def validate(self, draws):
        logits = draws(batches(self.data.xv, self.data.yv), 1, self.seed)  # (1, 1, N)
        nll = metrics.mixture_nll(logits, self.data.yv)
        return Validated(score=nll, nll=nll)

    def train_metrics(self, step, stats):
        return {}

    def status(self, step, stats):
        return f"nll {stats['nll']:.3f}"

    def extra_state(self):
        return {}

    def load_extra_state(self, state):
        pass

    def entries(self):
        return {"model_kind": "logistic", "model_config": {"dim": self.model.cfg.dim},
                "train_config": {"seed": self.seed, "steps": self.last_step}}

    def run_spec(self):
        return RunSpec(folder="toy", untracked=f"toy-s{self.seed}", experiment="toy-task", run_name=None,
                       params={"steps": self.last_step}, tags={})

    def seed_stream(self, rank, step):
        torch.manual_seed(self.seed + step)

    def check_resume(self, ckpt, path):
        if ckpt["train_config"] != self.entries()["train_config"]:
            raise ValueError(f"{path}: other settings")

    def finish_settings(self):
        return FinishSettings(samples=1, batch_size=64, seed=self.seed, draws_seed=self.seed, model_kind="logistic")

    def record(self, state):
        return {**self.entries(), "steps": state.step}, {}


def plan(data: ToyData, seed: int = 0, steps: int = 60) -> ToyPlan:
    torch.manual_seed(seed)
    model = ToyNet(ToyConfig(data.x.shape[1]))
    return ToyPlan(model=model, objective=Objective(model, "average", len(data.x), 1e-4, 1, likelihood="bernoulli"),
                   optimizer=torch.optim.Adam(model.parameters(), lr=0.1), data=data, seed=seed, last_step=steps)


class ToyScorer:
    def __init__(self, run, samples=None):
        self.model, self.samples = run.model, samples or 1

    def risk(self, x, seed=0):
        logits = predict_logits(self.model, batches(x, np.zeros(len(x), np.float32)), self.samples,
                                seeded_generator(seed), TASK.likelihood)  # (S, 1, N)
        return metrics.sigmoid(logits).mean(axis=(0, 1))

    def prepare_requests(self):
        raise RequestError("a toy model is not served")

    check_request = predict_request = lambda self, frame, params=None: self.prepare_requests()


class ToyTask:
    key = "toy"
    likelihood = "bernoulli"
    words = "a toy classifier of points"
    serves = False
    info_aliases: dict = {}

    def build_model(self, model_kind, model_config):
        return ToyNet(ToyConfig(**model_config))

    def model_from_checkpoint(self, ckpt):
        model = self.build_model(ckpt["model_kind"], ckpt["model_config"])
        model.load_state_dict(ckpt["model"])
        return model.eval()

    def info_fields(self, ckpt):
        return dict(run_kind=self.key, model_kind=ckpt["model_kind"], model_config=ckpt["model_config"],
                    train_config=ckpt["train_config"], step=ckpt.get("step"), val_nll=ckpt.get("val_nll"),
                    refer_threshold=None, refer_measure=None, score_samples=1, max_bags=None, max_tokens=None,
                    model_format="torch", val_metrics=ckpt.get("val_metrics"))

    def load_file(self, path):
        return None

    def label(self, model_kind, model_config):
        return f"toy-{model_kind}"

    def scorer(self, run, **settings):
        return ToyScorer(run, **settings)

    def finish(self, model, data, s):
        data = data.data if hasattr(data, "data") else data
        logits = predict_logits(model, batches(data.xv, data.yv, s.batch_size), s.samples,
                                seeded_generator(s.draws_seed), self.likelihood)
        m = metrics.evaluate_predictions(logits, data.yv, n_bootstrap=0)
        kept = {k: m[k] for k in ("nll", "auc_roc", "n")}
        return Finished(checkpoint={"val_metrics": kept, "val_nll": m["nll"]}, info={"val_metrics": kept},
                        metrics={f"best_val_{k}": v for k, v in kept.items()}, val_nll=m["nll"], val_metrics=kept,
                        score_samples=s.samples)

    def laplace_data(self, run, data_dir, cfg):
        from pipeline.tasks.base import LaplaceData

        data = DATA
        return LaplaceData(train=lambda: batches(data.x, data.y, cfg.batch_size),
                           val=lambda: batches(data.xv, data.yv, cfg.batch_size), n_train=len(data.x),
                           n_used=len(data.x), n_val=len(data.xv), data=data, changes={}, train_config={},
                           params={}, tags={}, experiment="toy-task")


TASK = ToyTask()
DATA: ToyData | None = None  # the points a run was trained on (a real task reads its run's recorded data)
'''


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """The planted task package ``toytask``, registered as ``toy`` (one entry in ``TASKS``) with its points."""
    from pipeline.tasks import base

    pkg = tmp_path / "planted" / "toytask"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "task.py").write_text(TOY_TASK)
    monkeypatch.syspath_prepend(str(tmp_path / "planted"))
    monkeypatch.setitem(base.TASKS, "toy", "toytask.task")
    import importlib

    module = importlib.import_module("toytask.task")
    rng = np.random.default_rng(0)
    w = np.array([2.0, -1.5, 1.0])
    x = rng.normal(size=(400, 3)).astype(np.float32)
    y = (rng.random(400) < 1.0 / (1.0 + np.exp(-x @ w))).astype(np.float32)
    module.DATA = module.ToyData(x[:300], y[:300], x[300:], y[300:])
    yield module
    for name in [m for m in sys.modules if m == "toytask" or m.startswith("toytask.")]:
        del sys.modules[name]


def test_a_toy_task_trains_scores_and_takes_laplace_through_the_registry_alone(toy, tmp_path):
    from pipeline.bayes.laplace.config import LaplaceConfig
    from pipeline.runs import store
    from pipeline.runs.load import load_run
    from pipeline.workflows.laplace_run import fit_laplace_run
    from pipeline.workflows.train import train_plan

    trained = train_plan(toy.plan(toy.DATA), out_dir=tmp_path / "run")
    assert trained.state.step == 60 and trained.finished.val_metrics["n"] == 100
    tags = store.client().get_run(trained.run_id).data.tags
    assert tags[store.RUN_KIND_TAG] == "toy"  # the run names its task; the checkpoint too
    assert torch.load(tmp_path / "run" / "best.pt", weights_only=True)["task"] == "toy"

    run = load_run(trained.run_id, tmp_path / "read")  # its task found by its key: no pyfunc, the checkpoint
    assert run.kind == "toy" and run.label == "toy-logistic" and run.info.step == trained.state.best_step
    risk = run.scorer().risk(toy.DATA.xv)  # (N,) from the engine's predictor
    auc = run.model_info["val_metrics"]["auc_roc"]
    assert risk.shape == (100,) and 0.8 < auc <= 1.0 and ((risk > 0.5) == (toy.DATA.yv > 0.5)).mean() > 0.7
    with pytest.raises(store.RunError, match=r"is a toy run \(a toy classifier of points\); this reads mortality"):
        load_run(trained.run_id, tmp_path / "refused", kind="mortality")

    lap = fit_laplace_run(trained.run_id, LaplaceConfig(subnet_size=None), tracking=True)  # the one Laplace path
    assert lap.refer_threshold is None and lap.val_metrics["n"] == 100
    laplace_run = load_run(lap.run_id, tmp_path / "laplace")
    assert laplace_run.kind == "toy" and laplace_run.info.model_kind == "laplace"
    assert store.client().get_run(lap.run_id).data.tags[store.RUN_KIND_TAG] == "toy"
    spread = laplace_run.scorer().risk(toy.DATA.xv)
    assert np.abs(spread - risk).max() < 0.2  # the probit predictive stays near the MAP risk


@pytest.mark.parametrize("section", ["Adding a task", "Adding a Bayesian method", "Adding a data source"])
def test_the_adding_sections_name_files_that_exist(section):
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = re.search(rf"^## {section}\n(.*?)(?=^## )", text, re.S | re.M)
    assert found, f"docs/architecture.md has no section '## {section}'"
    paths = re.findall(r"`((?:pipeline|tests|docs|sql)/[\w./<>-]+)`", found.group(1))
    assert len(paths) >= 3, f"'{section}' names {paths}"
    missing = [p for p in paths if "<" not in p and not (ROOT / p).exists()]
    assert not missing, f"'{section}' names files that do not exist: {missing}"
    if section == "Adding a task":  # what the toy task above touched: its package and the registry
        assert "pipeline/tasks/base.py" in paths and "TASKS" in found.group(1)


@pytest.mark.parametrize("payload, key", [
    ({"task": "vision", "model_kind": "rank1"}, "vision"),  # today's: one key
    ({}, "mortality"),  # a mortality checkpoint written before tasks had keys
    ({"kind": "vision", "task": "vision"}, "vision"),  # an image model's, before the one key
    ({"kind": "vision"}, "vision"),
    ({"kind": "laplace", "map_family": "vision", "run_kind": "vision"}, "vision"),  # a Laplace run of an image model
    ({"kind": "laplace", "map_family": "mortality"}, "mortality"),
    ({"kind": "laplace", "run_kind": "vision"}, "vision"),
    ({"kind": "laplace"}, "mortality"),  # a Laplace checkpoint written before it recorded its MAP task
])
def test_a_checkpoint_names_its_task_with_one_key_and_older_ones_still_say_it(payload, key):
    from pipeline.tasks.base import checkpoint_task, task_of_checkpoint

    assert checkpoint_task(payload) == key and task_of_checkpoint(payload).key == key


def test_new_checkpoints_name_their_task_with_the_one_key(toy, tmp_path):
    from pipeline.bayes.laplace.config import LaplaceConfig
    from pipeline.workflows.laplace_run import fit_laplace_run
    from pipeline.workflows.train import train_plan

    trained = train_plan(toy.plan(toy.DATA, steps=20), out_dir=tmp_path / "run", tracking=False)
    lap = fit_laplace_run(str(tmp_path / "run" / "best.pt"), LaplaceConfig(subnet_size=None), tracking=False,
                          out_dir=tmp_path / "laplace")
    for path in (trained.out_dir / "best.pt", trained.out_dir / "last.pt", lap.out_dir / "best.pt"):
        payload = torch.load(path, weights_only=True)
        assert payload["task"] == "toy" and not {"run_kind", "map_family"} & set(payload), path
    assert torch.load(lap.out_dir / "best.pt", weights_only=True)["kind"] == "laplace"  # the method's own format
