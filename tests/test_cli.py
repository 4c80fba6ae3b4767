"""cli.py as a new user meets it: --help readable at 80 columns, one set of model names, progress on
a terminal (and plain lines from training elsewhere), no warnings from a normal train or the
README's predict example, one line for any unexpected error, a failed extract without leftovers,
a fresh tracking store initialised once when commands start together."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import cli
from pipeline.core.contracts import RISK
from pipeline.tasks.mortality import variants
from pipeline.tasks.mortality.config import ModelKind

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [c.name for c in cli.app.registered_commands]


def _help(*args: str) -> str:
    result = CliRunner().invoke(cli.app, [*args, "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("name", ["", *COMMANDS])
def test_help_is_readable_at_80_columns(name):
    text = _help(*([name] if name else []))
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 80, [ln for ln in lines if len(ln) > 80]
    assert " ." not in text and "..." not in text.replace("[RUN_ID]...", "").replace("[ARGS]...", "")
    assert not [ln for ln in lines if re.search(r"\w-$", ln)], "a word broken at a hyphen"
    options = [ln for ln in lines if ln.startswith("  -")]
    undescribed = [ln for i, ln in enumerate(lines) if ln in options and len(ln.split("  ")) < 3 and
                   not (i + 1 < len(lines) and lines[i + 1].startswith(" " * 10))]
    assert not undescribed, undescribed  # every option has a description (on its line or the next)


def test_compare_help_says_run_ids_may_be_arguments():
    text = _help("compare")
    assert " compare [OPTIONS] [RUN_ID]..." in text.splitlines()[0] and "RUN_ID...: run ids to compare" in text


def test_train_accepts_every_name_compare_prints():
    """compare labels runs by variant_label, which falls back to model_label: every such name resolves,
    and train --help lists them."""
    from pipeline.bayes.layers.options import PriorKind

    printed = set(variants.VARIANTS) | {variants.model_label(k.value, p.value) for k in ModelKind for p in PriorKind}
    text = " ".join(_help("train").split())
    for name in sorted(printed):
        kind, settings = variants.resolve(name)
        assert name in (variants.variant_label(kind, settings), variants.model_label(kind, settings.get("prior")))
        assert name in text, name


def test_an_unexpected_error_is_one_line_and_a_log_file(tmp_path, monkeypatch):
    import pipeline.data.mimic.synth

    def broken(*args, **kwargs):
        raise RuntimeError("the disk said no\nsecond line")

    monkeypatch.setattr(pipeline.data.mimic.synth, "generate", broken)
    result = CliRunner().invoke(cli.app, ["synth", "--out", str(tmp_path / "s"), "--patients", "3"],
                                env={cli.LOG_DIR_ENV: str(tmp_path / "logs")})
    assert result.exit_code == 3 and "Traceback" not in result.output
    (log,) = (tmp_path / "logs").glob("synth-error-*.log")
    assert result.output.strip().splitlines() == [
        f"error: unexpected RuntimeError in `synth`: the disk said no (the traceback is in {log})"]
    assert "Traceback (most recent call last)" in log.read_text() and "second line" in log.read_text()


def _on_a_terminal(cmd: list[str], cwd: Path, timeout: float = 300) -> tuple[int, str]:
    """Run ``cmd`` with stdout and stderr on a pseudo-terminal; (exit code, everything it drew)."""
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "TERM": "xterm"}
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(leader)
    return proc.wait(timeout=60), out.decode("utf-8", "replace")


def test_synth_shows_a_bar_on_a_terminal_only(tmp_path):
    cmd = [sys.executable, str(ROOT / "cli.py"), "synth", "--patients", "300", "--density", "0.01"]
    code, drawn = _on_a_terminal([*cmd, "--out", str(tmp_path / "tty")], tmp_path)
    assert code == 0, drawn[-2000:]
    assert "synth: patients" in drawn and "300/300" in drawn and "━" in drawn
    plain = subprocess.run([*cmd, "--out", str(tmp_path / "pipe")], cwd=tmp_path, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert plain.returncode == 0 and "synth: patients" not in plain.stdout + plain.stderr


@pytest.mark.slow
def test_extract_shows_its_stages_on_a_terminal(demo_dir, tmp_path):
    code, drawn = _on_a_terminal([sys.executable, str(ROOT / "cli.py"), "extract", "--source", str(demo_dir),
                                  "--out", str(tmp_path / "f")], tmp_path)
    assert code == 0, drawn[-2000:]
    # a stage line as the spinner drew it (which event table it caught depends on the frame times)
    stage = r"extract \[\d+ s\]: +(events \w+|cohort|union events|tokenize|bag|assemble) "
    assert re.search(stage, drawn), drawn[-2000:]
    assert "features written to" in drawn and "INFO" not in drawn  # the status line, not the log lines


@pytest.mark.slow
def test_training_prints_plain_progress_lines_off_a_terminal(tmp_path, capsys):
    """Not a terminal (make main | tee): a plain line every 5% of the steps; while the KL weight ramps
    up the loss is labelled with it."""
    from helpers.features import write_features

    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows import train as training

    feats = write_features(tmp_path / "feats", n_train=32, n_val=16, n_test=4)
    cfg = TrainConfig(max_steps=40, eval_every=20, eval_samples=1, score_samples=2, anneal_steps=30,
                               progress=True, threads=1, model={"embedding_dim": 4, "lstm_hidden": 4,
                                                                "dense_units": 4, "components": 2})
    training.train(feats, "rank1", cfg, out_dir=tmp_path / "out", tracking=False)
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("train ")]
    assert [ln.split()[1] for ln in lines] == [f"{2 * i}/40" for i in range(1, 21)]
    assert re.search(r"^train 2/40 \(5%\)  nll [\d.]+, loss [\d.]+ at KL weight 0\.0667 \(ramping up to 1 by step 30\)"
                     r"  \[\d+ s, about \d+ s left\]$", lines[0]), lines[0]
    assert re.search(r"^train 40/40 \(100%\)  nll [\d.]+, loss [\d.]+  \[\d+ s\]$", lines[-1]), lines[-1]


def test_a_failed_extract_leaves_no_tmp_folder(tmp_path):
    from pipeline.core.errors import PipelineError
    from pipeline.data.mimic.extraction import extract

    (tmp_path / "src").mkdir()  # no tables at all
    with pytest.raises(PipelineError):
        extract(tmp_path / "src", tmp_path / "out")
    assert not (tmp_path / "out" / ".tmp").exists()


def test_a_fresh_tracking_store_is_initialised_once_by_concurrent_commands(tmp_path):
    """Four processes open a new sqlite store at the same instant (MLflow's table creation races:
    'table _alembic_tmp_latest_metrics already exists'); each gets a working client."""
    db = tmp_path / "mlflow.db"
    code = ("import sys, time; from pipeline.runs import store; t = float(sys.argv[1]); "
            "time.sleep(max(0.0, t - time.time())); c = store.client(); "
            "c.create_experiment(f'exp-{sys.argv[2]}'); print('ok', len(c.search_experiments()))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{db}"}
    start = time.time() + 8  # after every interpreter has imported mlflow
    procs = [subprocess.Popen([sys.executable, "-c", code, str(start), str(i)], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-1500:] for _, err in outs]
    assert all(out.startswith("ok") for out, _ in outs)
    assert not any("Creating initial MLflow database tables" in err for _, err in outs)


def test_the_package_metadata_builds_without_license_warnings(tmp_path):
    """setuptools reads pyproject.toml's SPDX `license` string: no project.license deprecation warning."""
    for name in ("pyproject.toml", "README.md", "cli.py"):
        (tmp_path / name).write_bytes((ROOT / name).read_bytes())
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "pipeline" / "__init__.py").write_text("")
    code = "import setuptools.build_meta as b, sys; b.prepare_metadata_for_build_wheel(sys.argv[1])"
    (tmp_path / "meta").mkdir()
    proc = subprocess.run([sys.executable, "-W", "always", "-c", code, str(tmp_path / "meta")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "license" not in proc.stderr.lower(), proc.stderr[-2000:]
    meta = next((tmp_path / "meta").glob("*.dist-info")) / "METADATA"
    assert "License-Expression: MIT" in meta.read_text()


def test_a_normal_train_and_the_readme_predict_example_print_no_warning(demo_features, tmp_path):
    """On a fresh tracking store: train prints its result and its progress lines only (no MLflow
    table-creation lines, no type-hint or pickling warning); the README's predict example prints
    nothing on stderr (the features file passed whole: its other columns are accepted)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    train = subprocess.run([sys.executable, str(ROOT / "cli.py"), "train", "--data", str(demo_features.out_dir),
                            "--max-steps", "4", "--eval-every", "2", "--threads", "1", "--hidden", "8", "--embed-dim",
                            "8", "--dense", "8", "--components", "2", "--score-samples", "2"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert train.returncode == 0, train.stderr[-3000:]
    others = [ln for ln in train.stderr.splitlines() if not ln.startswith("train ")]
    assert others == [] and len(train.stderr.splitlines()) == 4, train.stderr[-3000:]
    run_id = train.stdout.split("run_id: ")[1].strip()
    example = ("import mlflow, pandas as pd\n"
               f"features_df = pd.read_parquet({str(demo_features.out_dir / 'test.parquet')!r})\n"
               f"print(mlflow.pyfunc.load_model('runs:/{run_id}/model').predict(features_df).shape)\n")
    predict = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=600)
    assert predict.returncode == 0 and predict.stderr == "", predict.stderr[-3000:]
    assert predict.stdout.strip() == f"({demo_features.manifest['splits']['test']['admissions']}, {len(RISK.columns)})"


def test_the_mlproject_is_rendered_from_the_train_options():
    proc = subprocess.run([sys.executable, str(ROOT / "mlflow" / "render_mlproject.py"), "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("args, expected", [
    ([], {}),  # every field keeps the config's default
    (["--bins", "3", "--split", "era", "--era-groups", "2008 - 2010", "--era-groups", "2011 - 2013",
      "--hourly-hours", "6", "--verify-counts", "--scan-workers", "1"],
     {"n_bins": 3, "split": "era", "era_groups": ("2008 - 2010", "2011 - 2013"), "hourly_hours": 6.0,
      "verify_counts": True, "scan_workers": 1}),
])
def test_extract_options_are_the_config_fields(args, expected, monkeypatch, tmp_path):
    """`extract`'s options come from ExtractConfig (``--bins`` for n_bins, ``--era-groups`` repeatable)."""
    import pipeline.data.mimic.extraction
    from pipeline.core.errors import PipelineError
    from pipeline.data.mimic.extraction import ExtractConfig

    seen = {}

    def fake_extract(source, out, cfg, schema):
        seen["cfg"] = cfg
        raise PipelineError("stopped by the test")

    monkeypatch.setattr(pipeline.data.mimic.extraction, "extract", fake_extract)
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(tmp_path), "--out", str(tmp_path / "f"), *args])
    assert "stopped by the test" in result.output, result.output
    assert seen["cfg"] == ExtractConfig(**expected)


@pytest.mark.parametrize("args, bad", [(["--scan-workers", "0"], "--scan-workers"), (["--split", "x"], "--split")])
def test_extract_refuses_out_of_range_options(args, bad, tmp_path):
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(tmp_path), "--out", str(tmp_path / "f"), *args])
    assert result.exit_code == 2 and bad in result.output


@pytest.mark.parametrize("args, expected", [
    ([], {}),  # every field keeps the config's default
    (["--samples", "3", "--batch-size", "7", "--bootstrap", "0", "--seed", "2", "--threads", "1", "--no-log"],
     {"samples": 3, "batch_size": 7, "n_bootstrap": 0, "seed": 2, "threads": 1, "log_to_run": False}),
])
def test_evaluate_options_are_the_config_fields(args, expected, monkeypatch):
    """`evaluate`'s options come from EvalConfig (``--bootstrap`` for n_bootstrap, ``--log/--no-log``)."""
    from pipeline.core.errors import PipelineError
    from pipeline.workflows import evaluate
    from pipeline.workflows.evaluate_config import EvalConfig

    seen = {}

    def fake_evaluate_run(run, split, cfg, **kwargs):
        seen["cfg"], seen["split"] = cfg, split
        raise PipelineError("stopped by the test")

    monkeypatch.setattr(evaluate, "evaluate_run", fake_evaluate_run)
    result = CliRunner().invoke(cli.app, ["evaluate", "--run", "abc", "--split", "val", *args])
    assert "stopped by the test" in result.output, result.output
    assert seen["cfg"] == EvalConfig(**expected) and seen["split"] == "val"


@pytest.mark.parametrize("args, expected", [
    ([], {}),  # every field keeps the config's default
    (["--samples", "3", "--batch-size", "7", "--chunk-rows", "9", "--seed", "2", "--threads", "1"],
     {"samples": 3, "batch_size": 7, "chunk_rows": 9, "seed": 2, "threads": 1}),
])
def test_score_options_are_the_config_fields(args, expected, monkeypatch, tmp_path):
    """`score`'s options come from ScoreConfig."""
    from pipeline.core.errors import PipelineError
    from pipeline.serving import score
    from pipeline.serving.config import ScoreConfig

    seen = {}

    def fake_score(model, out, cfg, **kwargs):
        seen["cfg"] = cfg
        raise PipelineError("stopped by the test")

    monkeypatch.setattr(score, "score", fake_score)
    result = CliRunner().invoke(cli.app, ["score", "--model", "abc", "--out", str(tmp_path / "s.parquet"), *args])
    assert "stopped by the test" in result.output, result.output
    assert seen["cfg"] == ScoreConfig(**expected)


def test_the_console_script_is_the_app(monkeypatch):
    """pyproject's [project.scripts] entry (`mimic-risk`) names cli.main, which runs the same app."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"mimic-risk": "cli:main"}
    monkeypatch.setattr(sys, "argv", ["mimic-risk", "--help"])
    with pytest.raises(SystemExit) as done:
        cli.main()
    assert done.value.code == 0
