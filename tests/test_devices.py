"""pipeline.core.devices and the mortality commands' --device, on the CPU: the device is resolved and honoured end
to end (training moves the model and its batches; evaluate and score load the model there), `train --device cpu`
and the default on a machine without CUDA train the same weights as before, and a device that is not here is a
one-line error naming --device."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

import cli
from pipeline.core import devices
from pipeline.core.errors import ConfigError

pytestmark = pytest.mark.usefixtures("tracking_store")
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
TINY = {"embedding_dim": 8, "lstm_hidden": 16, "dense_units": 16, "components": 3}


@pytest.mark.parametrize("name, message", [("tpu:0", "--device 'tpu:0'"), ("gpu", "is not a torch device"),
                                           ("cuda:99", "--device 'cuda:99'")])
def test_a_device_not_here_is_one_error_naming_the_option(name, message):
    with pytest.raises(ConfigError, match=message):
        devices.resolve_device(name)


@NO_CUDA
def test_default_is_the_cpu_without_cuda():
    assert devices.resolve_device(None) == devices.resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ConfigError, match="CUDA is not available"):
        devices.resolve_device("cuda")


def test_to_device_moves_tensors_only():
    batch = {"tokens": torch.zeros(2, 3), "n": 4}
    assert devices.to_device(batch, torch.device("cpu")) is batch
    assert devices.model_device(torch.nn.Linear(2, 2)) == torch.device("cpu")
    assert devices.model_device(object()) == torch.device("cpu")  # a classical baseline: no parameters


def _train(features_dir, out, device, monkeypatch=None, seen=None):
    from pipeline.engine import loop
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows import train as workflow
    from pipeline.workflows.train import train

    if monkeypatch is not None:  # record the devices the loop asks for and moves batches to
        real_resolve, real_to = workflow.resolve_device, loop.to_device
        monkeypatch.setattr(workflow, "resolve_device",
                            lambda name: seen.append(("resolve", name)) or real_resolve(name))
        monkeypatch.setattr(loop, "to_device", lambda b, d: seen.append(("batch", str(d))) or real_to(b, d))
    cfg = TrainConfig(max_steps=6, eval_every=3, eval_samples=2, score_samples=2, lr=1e-2, progress=False, threads=1,
                      model=dict(TINY))
    return train(features_dir, "rank1", cfg, out_dir=out, tracking=False, device=device)


@NO_CUDA
def test_train_on_the_cpu_is_todays_training(demo_features, tmp_path, monkeypatch):
    seen: list = []
    explicit = _train(demo_features.out_dir, tmp_path / "cpu", "cpu", monkeypatch, seen)
    assert ("resolve", "cpu") in seen and ("batch", "cpu") in seen and len([s for s in seen if s[0] == "batch"]) == 6
    default = _train(demo_features.out_dir, tmp_path / "default", None)
    a = torch.load(explicit.best_checkpoint, map_location="cpu", weights_only=True)["model"]
    b = torch.load(default.best_checkpoint, map_location="cpu", weights_only=True)["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert explicit.best_val_nll == default.best_val_nll


def test_checkpoints_load_onto_the_device_asked(demo_features, tmp_path):
    from pipeline.runs.formats import load_model

    result = _train(demo_features.out_dir, tmp_path / "ckpt", "cpu")
    model, _ = load_model(result.best_checkpoint, torch.device("cpu"))
    assert devices.model_device(model) == torch.device("cpu")


@NO_CUDA
@pytest.mark.parametrize("command", ["train", "evaluate", "score", "laplace", "serve", "benchmark-models"])
def test_cli_device_unavailable_is_one_line(command, demo_features, tmp_path):
    args = {"train": ["train", "--data", str(demo_features.out_dir), "--no-tracking", "--max-steps", "2",
                      "--out", str(tmp_path / "t")],
            "evaluate": ["evaluate", "--run", "0" * 32],
            "score": ["score", "--model", "0" * 32, "--out", str(tmp_path / "s.parquet"),
                      "--data", str(demo_features.out_dir)],
            "laplace": ["laplace", "--run", "0" * 32],
            "serve": ["serve", "--model", "0" * 32],
            "benchmark-models": ["benchmark-models", "--synth", str(tmp_path / "synth"), "--out", str(tmp_path / "b")],
            }[command]
    result = CliRunner().invoke(cli.app, [*args, "--device", "cuda"])
    assert result.exit_code == 2, result.output
    assert "--device 'cuda': CUDA is not available" in result.output and len(result.output.strip().splitlines()) == 1


def test_evaluate_and_score_load_the_model_on_the_device(demo_run, demo_features, tmp_path, monkeypatch):
    from pipeline.runs.load import load_run

    seen = []
    monkeypatch.setattr("pipeline.workflows.evaluate.load_run",
                        lambda *a, **kw: seen.append(("evaluate", str(a[2]))) or load_run(*a, **kw))
    monkeypatch.setattr("pipeline.serving.score.load_run",
                        lambda *a, **kw: seen.append(("score", str(a[2]))) or load_run(*a, **kw))
    result = CliRunner().invoke(cli.app, ["evaluate", "--run", demo_run, "--split", "val", "--bootstrap", "0",
                                          "--out", str(tmp_path / "eval"), "--device", "cpu", "--no-log"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli.app, ["score", "--model", demo_run, "--out", str(tmp_path / "s.parquet"),
                                          "--data", str(demo_features.out_dir / "test.parquet"), "--device", "cpu",
                                          "--no-link"])
    assert result.exit_code == 0, result.output
    assert seen == [("evaluate", "cpu"), ("score", "cpu")]


class _Stop(Exception):
    pass


def test_laplace_loads_the_map_model_on_the_device(monkeypatch):
    from pipeline.bayes.laplace.config import LaplaceConfig
    from pipeline.runs.info import ModelInfo
    from pipeline.runs.load import Run
    from pipeline.workflows import laplace_run

    seen = []

    class Model:  # the MAP model: where it is moved is what counts
        def to(self, device):
            seen.append(str(device))
            raise _Stop

    info = ModelInfo(run_kind="mortality", model_kind="deterministic", model_config={}, train_config={}, step=1,
                     val_nll=None, refer_threshold=None, refer_measure=None, score_samples=1, max_bags=None,
                     max_tokens=None, model_format="torch")
    monkeypatch.setattr(laplace_run, "load_run", lambda uri, tmp: Run(Model(), info, "0" * 32))
    with pytest.raises(_Stop):
        laplace_run.fit_laplace_run("0" * 32, LaplaceConfig(), device="cpu")
    assert seen == ["cpu"]


def test_serve_moves_the_model_to_the_device(monkeypatch):
    from pipeline.serving import server

    seen = []

    class Loaded:  # MLflow's PyFuncModel of a mortality model: its python model moves itself
        def unwrap_python_model(self):
            return type("M", (), {"to_device": lambda self, d: seen.append(str(d))})()

    monkeypatch.setattr(server, "load", lambda uri: Loaded())
    monkeypatch.setattr("pipeline.serving.guard.GuardedModel", lambda m: (_ for _ in ()).throw(_Stop()))
    with pytest.raises(_Stop):
        server.build_app(server.ServeConfig(model="0" * 32, device="cpu", threads=None))
    assert seen == ["cpu"]


def test_benchmark_models_jobs_train_and_evaluate_on_the_device(monkeypatch, tmp_path):
    import pipeline.workflows.evaluate as evaluate
    import pipeline.workflows.train as training
    from pipeline.workflows.grid import GridConfig, run_job

    seen = []
    monkeypatch.setattr(training, "train", lambda *a, **kw: seen.append(("train", kw["device"])) or
                        type("R", (), {"run_id": "r"})())
    monkeypatch.setattr(evaluate, "evaluate_run", lambda *a, **kw: seen.append(("evaluate", kw["device"])))
    run_job(tmp_path, "deterministic", "random", 0, GridConfig(device="cpu"), tmp_path / "work")
    assert seen == [("train", "cpu"), ("evaluate", "cpu"), ("evaluate", "cpu")]


@pytest.mark.slow
def test_device_benchmark_runs_every_part_on_the_cpu(tmp_path, monkeypatch, capsys):
    """benchmarks/device_mortality.py (the GPU measurements) at toy sizes on the CPU: every part gives a result,
    none an error, the layer rows cover both hidden sizes and both length kinds (the fused candidates too: the
    Triton kernel in its interpreter), the image part every method, and the page renders them."""
    import json
    import runpy
    import sys

    out = tmp_path / "dm.json"
    monkeypatch.setattr(sys, "argv", ["device_mortality", "--device", "cpu", "--hidden", "8", "--hidden", "12",
                                      "--batch", "4", "--steps", "6", "--reps", "2", "--train-steps", "4",
                                      "--train-n", "64", "--score-n", "150", "--cpu-score-n", "50", "--samples", "2",
                                      "--vision-depth", "10", "--vision-width", "1", "--vision-size", "8",
                                      "--vision-images", "4", "--vision-bn-rows", "8", "--vision-steps", "4",
                                      "--train-hidden", "8", "--train-hidden", "12", "--gpu-rows", "32",
                                      "--score-batch", "16", "--check-n", "40", "--parts", "layer,train,score,vision",
                                      "--json", str(out)])
    runpy.run_module("benchmarks.device_mortality", run_name="__main__", alter_sys=True)
    r = json.loads(out.read_text())
    assert r["device"] == "cpu" and {"commit", "date", "command"} <= set(r)
    for part in ("layer", "train", "score", "vision"):
        assert "error" not in r[part], f"{part}: {r[part].get('error')}"
    assert [(x["hidden"], x["lengths"]) for x in r["layer"]["result"]] == [
        (8, "equal"), (8, "variable"), (12, "equal"), (12, "variable")]
    from benchmarks.device_mortality import fused_candidates, render

    fused = fused_candidates("cpu")  # the Triton kernel in its interpreter (conftest.py), PyTorch's per block
    assert "per_member_fused" in fused and ("per_example_fused" in fused) == (r["triton"] is not None)
    assert all(x[n] > 0 for x in r["layer"]["result"] for n in ("per_example", "per_member", *fused))
    assert [(x["method"], x["rows"]) for x in r["vision"]["result"]] == [
        ("deterministic", 4), ("batchensemble", 16), ("rank1", 16), ("deep-ensemble", 4), ("deterministic", 16)]
    assert all(x["fp32_ms"] > 0 and x["bf16_ms"] > 0 and x["bf16_cl_ms"] > 0 for x in r["vision"]["result"])
    assert sorted({x["hidden"] for x in r["train"]["result"]["rows"]}) == [8, 12]  # part 2: rows per recipe
    score = r["score"]["result"]
    assert (score["admissions"], score["cpu_admissions"], score["draws"]) == (150, 50, 8)
    page = render(r)
    assert "| 12 | variable |" in page and "150 admissions x 8 draws" in page and "| rank1 | 4 | 16 |" in page
