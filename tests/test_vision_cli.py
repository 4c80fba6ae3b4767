"""The image benchmarks through the command line: `cli.py vision train` of a tiny WRN for a few steps into
this session's tracking store, `vision evaluate` with corruptions, `compare`'s vision table, `laplace`
on a vision run (the multi-class GGN, checked against the last layer's computed directly) and its
evaluation, each kind of run refused by the other kind's commands, and errors as one line."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import cli
from pipeline.runs import store

pytestmark = pytest.mark.usefixtures("tracking_store")

EXPERIMENT = "vision-cli-tests"
TINY = ["--dataset", "digits", "--image-size", "8", "--depth", "10", "--width", "1", "--batch-size", "32",
        "--epochs", "0.1", "--threads", "1", "--log-every", "2", "--device", "cpu", "--experiment", EXPERIMENT]


def invoke(*args: str):
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "100"})


def run_id(output: str) -> str:
    return re.search(r"run_id: ([0-9a-f]{32})", output).group(1)


def one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.fixture(scope="module")
def det_run():
    res = invoke("vision", "train", *TINY, "--method", "deterministic", "--eval-samples", "2", "--seed", "3")
    assert res.exit_code == 0, res.output
    assert "\ndeterministic on digits: steps=3 " in res.output  # 1,078 images / 32 per step x 0.1 epoch
    # not a terminal: plain progress lines on stderr (every 5% of the steps; here each of the 3)
    assert re.search(r"^vision train 3/3 \(100%\)  epoch 0\.09/0\.1, nll [0-9.]+, loss [0-9.]+", res.output, re.M)
    return run_id(res.output)


@pytest.fixture(scope="module")
def rank1_run():
    res = invoke("vision", "train", *TINY, "--method", "rank1", "--ensemble-size", "2", "--prior", "cauchy",
                 "--posterior", "normal")
    assert res.exit_code == 0, res.output
    return run_id(res.output)


@pytest.fixture(scope="module")
def evaluated(det_run, rank1_run, tmp_path_factory):
    """Both runs evaluated on clean images and two corruptions at severities 1 and 5."""
    out = tmp_path_factory.mktemp("vision-eval")
    outputs = {}
    for rid in (det_run, rank1_run):
        res = invoke("vision", "evaluate", "--run", rid, "--corruption", "rotation", "--corruption", "contrast",
                     "--severity", "1", "--severity", "5", "--threads", "1", "--out", str(out / rid))
        assert res.exit_code == 0, res.output
        assert re.search(r"^vision evaluate 5/5 \(100%\)  contrast 5: nll [0-9.]+, accuracy", res.output, re.M)
        outputs[rid] = res.output
    return out, outputs


def test_a_vision_run_records_its_kind_settings_and_model(det_run):
    run = store.client().get_run(det_run)
    tags, params = run.data.tags, run.data.params
    assert (tags[store.RUN_KIND_TAG], tags["dataset"], tags["model_label"]) == ("vision", "digits", "deterministic")
    assert params["train.seed"] == "3" and params["model.method"] == "deterministic" and params["model.depth"] == "10"
    assert params["train.device"] == "cpu" and run.data.metrics["val_nll"] > 0
    files = {f.path for f in store.client().list_artifacts(det_run)} | {
        f.path for f in store.client().list_artifacts(det_run, "checkpoint")}
    assert {"model_info.json", "checkpoint/best.pt"} <= files and "checkpoint/model.pt" not in files


def test_a_vision_run_written_before_best_pt_still_loads(det_run, tmp_path):
    """Vision runs logged their model as ``checkpoint/model.pt`` before it was ``best.pt`` as in every run: such a
    run still loads, the same model with the same info."""
    import shutil

    from pipeline.runs.load import load_run

    client = store.client()
    new = client.download_artifacts(det_run, "checkpoint/best.pt", str(tmp_path))
    (tmp_path / "old").mkdir()
    shutil.copyfile(new, tmp_path / "old" / "model.pt")
    old = client.create_run(store.experiment_id(EXPERIMENT), run_name="an-old-vision-run").info.run_id
    for key, value in client.get_run(det_run).data.tags.items():  # run_kind, dataset, model_label
        if not key.startswith("mlflow."):
            client.set_tag(old, key, value)
    client.log_artifact(old, str(tmp_path / "old" / "model.pt"), "checkpoint")
    client.set_terminated(old)
    then = load_run(old, tmp_path / "then", kind="vision")
    now = load_run(det_run, tmp_path / "now", kind="vision")
    assert then.info == now.info and then.label == now.label == "deterministic"
    for (name, a), b in zip(then.model.state_dict().items(), now.model.state_dict().values()):
        assert torch.equal(a, b), name
    empty = client.create_run(store.experiment_id(EXPERIMENT), run_name="no-model").info.run_id
    client.set_tag(empty, store.RUN_KIND_TAG, "vision")
    client.log_artifact(empty, str(tmp_path / "old" / "model.pt"), "checkpoint/elsewhere")
    with pytest.raises(store.RunError, match=r"no best\.pt \(or an older run's model\.pt\) under checkpoint/"):
        load_run(empty, tmp_path / "empty", kind="vision")


def test_evaluate_with_corruptions_scores_logs_and_plots(det_run, rank1_run, evaluated):
    from pipeline.core import fileio

    out, outputs = evaluated
    assert "setting" in outputs[det_run] and "severity 5" in outputs[det_run]
    report = fileio.read_json(out / rank1_run / "metrics.json")
    # digits: eval-samples 2 by default (the digits benchmark's settings), 2 x K=2 draws
    assert report["samples"] == 2 and report["clean"]["draws"] == 4 and report["clean"]["components"] == 2
    assert set(report["corrupted"]) == {"rotation", "contrast"} and set(report["by_severity"]) == {"1", "5"}
    assert report["by_severity"]["5"]["nll"] == pytest.approx(
        np.mean([report["corrupted"][c]["5"]["nll"] for c in ("rotation", "contrast")]))
    assert report["clean"]["mean_mutual_information"] > 0 and report["clean"]["disagreement"] is not None
    assert (out / rank1_run / "severity.png").read_bytes()[:4] == b"\x89PNG"
    det = fileio.read_json(out / det_run / "metrics.json")
    assert det["samples"] == 2 and det["clean"]["draws"] == 2  # the run's eval-samples; deterministic copies
    logged = store.client().get_run(det_run).data
    assert logged.metrics["test_nll"] == pytest.approx(det["clean"]["nll"])
    assert logged.metrics["test_s5_accuracy"] == pytest.approx(det["by_severity"]["5"]["accuracy"])
    assert {f.path for f in store.client().list_artifacts(det_run, "eval/test")} == {"eval/test/metrics.json",
                                                                                      "eval/test/severity.png"}


def test_compare_gives_the_vision_table(evaluated, tmp_path):
    res = invoke("compare", "--experiment", EXPERIMENT, "--out", str(tmp_path))
    assert res.exit_code == 0, res.output
    text = res.output
    assert "## Vision: digits (seeds per method: deterministic 1, rank1-cauchy 1)" in text
    assert "| method | clean | severity 1 | severity 5 |" in text and "split | model | seeds" not in text
    nll_rows = [ln for ln in text.splitlines() if ln.startswith("| deterministic |")]
    assert len(nll_rows) == 3  # NLL, accuracy, ECE tables
    assert {p.name for p in tmp_path.iterdir()} == {"vision.md", "vision.csv", "vision_digits.png"}
    assert "digits,rank1-cauchy,1,5," in (tmp_path / "vision.csv").read_text()


def test_laplace_on_a_vision_run_is_the_multiclass_last_layer_laplace(det_run, tmp_path):
    """The Laplace run's posterior precision is Σ_n J_nᵀ (diag(p_n) - p_n p_nᵀ) J_n · N/M + λ_S I over the
    head's weights and biases, computed here directly from the head's inputs."""
    from pipeline.runs.load import load_run
    from pipeline.workflows.vision_run import run_splits

    res = invoke("laplace", "--run", det_run, "--selection", "last-layer", "--subnet-size", "650",
                 "--prior-precision", "2.0", "--max-train", "24", "--samples", "3", "--threads", "1",
                 "--experiment", EXPERIMENT, "--out", str(tmp_path / "lap"))
    assert res.exit_code == 0, res.output
    assert res.output.startswith("laplace-last-layer-650: S=650 of D=") and "refer_threshold" not in res.output
    lap_id = run_id(res.output)
    run = store.client().get_run(lap_id)
    assert run.data.tags[store.RUN_KIND_TAG] == "vision" and run.data.tags["mlflow.parentRunId"] == det_run
    assert run.data.params["train.seed"] == "3" and run.data.params["laplace.selection"] == "last-layer"

    lap = load_run(lap_id, kind="vision")
    assert lap.info.model_kind == "laplace" and lap.info.score_samples == 3
    net = load_run(det_run, kind="vision").model
    train = run_splits(lap.train_config).train
    keep = np.sort(np.random.default_rng(0).choice(len(train), 24, replace=False))  # LaplaceConfig's subsample
    x = torch.from_numpy(train.floats(keep))
    seen = {}
    head = net.body.head
    handle = head.register_forward_hook(lambda m, args, out: seen.update(phi=args[0]))
    with torch.no_grad():
        logits = net(x)[0].double()  # (M, C)
    handle.remove()
    phi = seen["phi"].double()  # (M, d) the head's inputs
    c, d = logits.shape[1], phi.shape[1]
    p = torch.softmax(logits, -1)
    lam = torch.diag_embed(p) - p.unsqueeze(2) * p.unsqueeze(1)  # (M, C, C)
    eye = torch.eye(c, dtype=torch.float64)
    jac = torch.cat([torch.einsum("ij,nk->nijk", eye, phi).reshape(len(keep), c, c * d),
                     eye.expand(len(keep), c, c)], 2)  # (M, C, C·d + C): weight row-major, then bias
    ggn = torch.einsum("nai,nab,nbj->ij", jac, lam, jac) * len(train) / len(keep)
    n_params = sum(q.numel() for q in net.parameters())
    precision = ggn + 2.0 * 650 / n_params * torch.eye(650, dtype=torch.float64)  # λ_S = λ·S/D
    factor = lap.model.factor
    assert torch.allclose(factor @ factor.T, precision, rtol=1e-6, atol=1e-8)

    res = invoke("vision", "evaluate", "--run", lap_id, "--no-log", "--no-progress", "--threads", "1", "--out",
                 str(tmp_path / "ev"))
    assert res.exit_code == 0, res.output
    assert res.output.startswith("laplace-last-layer-650 on digits:test:seed3: n=359 draws=3x1")  # no progress line
    with torch.no_grad():
        mc = lap.model({"images": x[:4]}, samples=3)  # (3, 4, C): Monte Carlo draws of the linearized model
    assert mc.shape == (3, 4, c) and not torch.allclose(mc[0], mc[1])


def test_each_kind_of_run_is_refused_by_the_others_commands(det_run, rank1_run):
    mortality = store.client().create_run(store.experiment_id(EXPERIMENT), run_name="a-mortality-run").info.run_id
    one_line_error(invoke("vision", "evaluate", "--run", mortality),
                   f"run {mortality} is a mortality run", "this reads vision runs")
    one_line_error(invoke("evaluate", "--run", det_run), f"run {det_run} is a vision run", "this reads mortality runs")
    one_line_error(invoke("laplace", "--run", rank1_run, "--no-tracking"),
                   "Laplace needs a deterministic model with one component", "VisionNet of kind 'rank1'")


@pytest.mark.parametrize("args, fragments", [
    (["--depth", "11"], ["--depth must be 6n + 4"]),
    (["--dataset", "cifar10"], ["--data-dir is required for --dataset cifar10"]),
    (["--dataset", "cifar10", "--data-dir", "/nonexistent/cifar"], ["/nonexistent/cifar: not a directory"]),
    (["--device", "tpu:0"], ["device 'tpu:0'"]),
    (["--device", "cuda"], ["CUDA is not available"]),
    (["--method", "deep-ensemble", "--nll", "mixture", "--epochs", "0.01"], ["nll='mixture' couples the members"]),
])
@pytest.mark.slow
def test_train_errors_are_one_line(args, fragments):
    if args == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    base = [a for a in TINY if a not in ("--device", "cpu")]
    one_line_error(invoke("vision", "train", *base, "--no-tracking", *args), *fragments)


def test_device_option_defaults_to_cuda_when_available():
    from pipeline.core.devices import resolve_device

    assert resolve_device(None).type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")


def test_evaluate_errors_are_one_line(det_run, tmp_path):
    one_line_error(invoke("vision", "evaluate", "--run", "0" * 32), f"run {'0' * 32} not found")
    one_line_error(invoke("vision", "evaluate", "--run", det_run, "--cifar-c", str(tmp_path), "--no-log"),
                   "no <corruption>.npy files")
    res = invoke("vision", "evaluate", "--run", det_run, "--corruption", "fog")
    assert res.exit_code == 2 and "'fog' is not one of" in res.output  # typer's own check of the choice


@pytest.mark.parametrize("args", [["vision"], ["vision", "train"], ["vision", "evaluate"]])
def test_help_is_readable_at_80_columns(args):
    res = CliRunner().invoke(cli.app, [*args, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(ln) for ln in lines) <= 80 and "..." not in res.output.replace("[ARGS]...", "")
    assert not [ln for ln in lines if re.search(r"\w-$", ln)], "a word broken at a hyphen"
