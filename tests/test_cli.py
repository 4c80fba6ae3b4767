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
import tomllib
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


def test_recertify_and_monitor_help_say_what_they_promise_and_assume():
    """Issue 43: the new commands' help names their inputs, the weighted rule's assumption, the child run and the
    alarm."""
    text = " ".join(_help("recertify").split())
    for said in ("--run", "--data", "--source", "--labels", "--weighted", "--refit-threshold", "--alpha", "--delta",
                 "valid under covariate shift only", "mlflow.parentRunId", "recertified_from", "size it needs"):
        assert said in text, said
    text = " ".join(_help("monitor").split())
    for said in ("--run", "--scores", "--outcomes", "--state", "--json", "key,label", "MEDS label files",
                 "anytime-valid", "since admission N of this stream", "nothing is written"):
        assert said in text, said
    listed = _help()
    assert "recertify" in listed and "monitor" in listed


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
            "time.sleep(max(0.0, t - time.time())); c = store.client(create=True); "
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
    table-creation lines, no type-hint or pickling warning) and records its settings file in the run; the
    README's predict example prints nothing on stderr (the features file passed whole: its other columns
    are accepted)."""
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
    settings = ("import mlflow, pathlib\n"  # the run's settings file, among its artifacts beside train_config.json
                f"print(pathlib.Path(mlflow.artifacts.download_artifacts(run_id='{run_id}', "
                "artifact_path='settings.toml')).read_text())")
    recorded = subprocess.run([sys.executable, "-c", settings], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
    assert recorded.returncode == 0, recorded.stderr[-3000:]
    written = tomllib.loads(recorded.stdout)
    assert written["train"] == {"max_steps": 4, "eval_every": 2, "threads": 1, "score_samples": 2}
    assert written["model"] == {"lstm_hidden": 8, "embedding_dim": 8, "dense_units": 8, "components": 2}


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


# ---------------------------------------------------------------------------- settings as files

MAIN_SETTINGS = ROOT / "configs" / "main.toml"  # `make main`'s training settings as a settings file


def _makefile_train_args(out: str = "runs/main", seed: str = "0") -> list[str]:
    """The arguments of `make main`'s `cli.py train` line, with its variables' defaults (OUT, SEED)."""
    line = next(ln for ln in (ROOT / "Makefile").read_text().splitlines() if "cli.py train " in ln)
    words = line.split("cli.py train ", 1)[1].split("|")[0].replace("$(OUT)", out).replace("$(SEED)", seed).split()
    assert "$" not in " ".join(words), words  # every variable substituted
    return words


def _captured_train(monkeypatch, args: list[str]) -> dict:
    """What `cli.py train ARGS` hands the training loop: model kind, TrainConfig, the other arguments."""
    import pipeline.workflows.train
    from pipeline.core.errors import PipelineError

    seen = {}

    def fake_train(data, kind, cfg, **kwargs):
        seen.update(data=data, kind=kind, cfg=cfg, **kwargs)
        raise PipelineError("stopped by the test")

    monkeypatch.setattr(pipeline.workflows.train, "train", fake_train)
    result = CliRunner().invoke(cli.app, ["train", *args])
    assert "stopped by the test" in result.output, result.output
    return seen


def test_the_main_settings_file_reproduces_make_mains_training_run(monkeypatch):
    """`train --data D --config configs/main.toml` gives the training loop exactly what `make main`'s flags
    give it (the same TrainConfig, kind and run arguments), and the file is what `--print-config` prints
    for those flags (so it changes when a default does)."""
    flags = _makefile_train_args()
    assert flags[:2] == ["--data", "runs/main/features"]
    by_flags = _captured_train(monkeypatch, flags)
    by_file = _captured_train(monkeypatch, [*flags[:2], "--config", str(MAIN_SETTINGS)])
    assert by_file == by_flags and by_flags["cfg"].to_dict() == by_file["cfg"].to_dict()
    assert by_flags["kind"] == "rank1" and by_flags["cfg"].seed == 0 and by_flags["cfg"].threads == 1
    printed = CliRunner().invoke(cli.app, ["train", *flags, "--print-config"])
    assert printed.exit_code == 0 and printed.output == MAIN_SETTINGS.read_text(), (
        "configs/main.toml is stale: python cli.py train " + " ".join(flags) + " --print-config > configs/main.toml")


def test_train_settings_precedence_defaults_preset_file_set_flags(monkeypatch, tmp_path):
    """defaults < preset < --config < --set < the flags typed, for the training and the model settings."""
    path = tmp_path / "s.toml"
    path.write_text('preset = "paper"\n[train]\nlr = 0.001\nanneal_steps = 7\nmax_steps = 30\n'
                    '[model]\nname = "deterministic"\nlstm_hidden = 16\nembedding_dim = 8\n')
    seen = _captured_train(monkeypatch, ["--data", "d", "--config", str(path), "--set", "train.anneal_steps=9",
                                         "--set", "embedding_dim=12", "--max-steps", "40", "--set", "max_steps=35"])
    cfg = seen["cfg"]
    assert seen["kind"] == "deterministic" and cfg.eval_every == 1_000  # the paper preset's, set by no one else
    assert (cfg.lr, cfg.anneal_steps, cfg.max_steps) == (0.001, 9, 40)  # file < --set < flag
    assert cfg.model == {"lstm_hidden": 16, "embedding_dim": 12}  # the preset's 256 / 32 under the file, --set


@pytest.mark.parametrize("args", [
    ["train", "--data", "d", "--model", "rank1-cauchy", "--preset", "paper", "--hidden", "32", "--set", "lr=0.01"],
    ["train", "--data", "d", "--model", "gbm", "--seed", "3"],
    ["benchmark-models", "--synth", "s", "--out", "o", "--seeds", "1", "--set", "lstm_hidden=8", "--set", "lr=0.01"],
    ["evaluate", "--run", "r", "--split", "val", "--split", "test", "--samples", "3", "--no-log"],
    ["score", "--model", "m", "--out", "o.parquet", "--seed", "2", "--source", "postgresql://x/y"],
    ["laplace", "--run", "r", "--selection", "last-layer", "--exclude", "lstm", "--prior-precision", "2"],
    ["extract", "--source", "s", "--out", "o", "--bins", "3", "--era-groups", "2008 - 2010", "--values"],
    ["stage", "--source", "s", "--out", "o", "--workers", "1"],
    ["serve", "--model", "m", "--port", "5001", "--via-mlflow", "--timeout", "9"],
    ["vision", "train", "--dataset", "digits", "--method", "batchensemble", "--epochs", "2", "--factor-clip", "3"],
    ["vision", "evaluate", "--run", "r", "--corruption", "rotation", "--severity", "2", "--no-log"],
], ids=lambda a: " ".join(a[:2]))
def test_print_config_is_a_settings_file_that_reads_back(args, tmp_path):
    """--print-config prints TOML; --config FILE with it (and the required options) prints the same again."""
    first = CliRunner().invoke(cli.app, [*args, "--print-config"])
    assert first.exit_code == 0, first.output
    tomllib.loads(first.output)
    (tmp_path / "s.toml").write_text(first.output)
    cmd = args[:2] if args[0] == "vision" else args[:1]
    required = {"train": 2, "benchmark-models": 4, "evaluate": 2, "score": 4, "laplace": 2, "extract": 4, "stage": 4,
                "serve": 2, "vision train": 0, "vision evaluate": 2}[" ".join(cmd)]
    rest = args[len(cmd):len(cmd) + required]
    again = CliRunner().invoke(cli.app, [*cmd, *rest, "--config", str(tmp_path / "s.toml"), "--print-config"])
    assert again.exit_code == 0 and again.output == first.output, again.output


def test_benchmark_models_set_keeps_its_spellings_and_takes_the_new_keys(monkeypatch, tmp_path):
    """`--set FIELD=VALUE` as before (a bare training or model field, `-` for `_`), the settings file's keys
    (train.*, model.*) and the grid's own options; the fields each job sets are refused, naming the key."""
    from pipeline.core.errors import PipelineError
    from pipeline.workflows import grid

    seen = {}

    def fake_run_grid(synth_dir, out_dir, cfg):
        seen["cfg"] = cfg
        raise PipelineError("stopped by the test")

    monkeypatch.setattr(grid, "run_grid", fake_run_grid)
    base = ["benchmark-models", "--synth", str(tmp_path / "s"), "--out", str(tmp_path / "o")]
    words = ["--set", "lstm_hidden=128", "--set", "anneal-steps=500", "--set", "model.dropout=0.1", "--set",
             "train.nll=mixture", "--set", "jobs=1", "--set", "seeds=[4, 5]", "6"]
    result = CliRunner().invoke(cli.app, [*base, *words])
    assert "stopped by the test" in result.output, result.output
    cfg = seen["cfg"]
    assert cfg.model_overrides == {"lstm_hidden": 128, "dropout": 0.1}
    assert cfg.train_overrides == {"anneal_steps": 500, "nll": "mixture"} and cfg.jobs == 1
    assert cfg.seeds == (4, 5, 6)  # set by --set: the bare words join them
    refused = CliRunner().invoke(cli.app, [*base, "--set", "train.seed=3"])
    assert refused.exit_code == 2 and "--set 'train.seed=3': unknown key 'train.seed'" in refused.output


@pytest.mark.parametrize("args, message", [
    (["train", "--data", "d", "--max-steps", "-2"], "--max-steps must be >= 0 (0: off), got -2"),
    (["train", "--data", "d", "--max-steps", "0", "--max-epochs", "0"],
     "--max-steps and --max-epochs are both off: training needs one of them to end"),
    (["train", "--data", "d", "--set", "max_minutes=-1"], "--set max_minutes must be >= 0 (0: off), got -1.0"),
    (["train", "--data", "d", "--lr", "0"], "--lr must be > 0, got 0.0"),
    (["train", "--data", "d", "--set", "train.refer_fraction=1"], "--set train.refer_fraction must lie in [0, 1)"),
    (["train", "--data", "d", "--set", "max_epochs=-1"], "--set max_epochs must be >= 0 (0: off), got -1.0"),
    (["train", "--data", "d", "--model", "logreg", "--max-steps", "3", "--seed", "1", "--hidden", "8", "--preset",
      "paper", "--resume"], "logreg is a classical baseline: --max-steps, --lstm-hidden, --preset, --resume do not "
     "apply to it (it takes --seed, --threads, --refer-fraction, --progress, --calibration-share and the referral "
     "options)"),
    (["train", "--data", "d", "--alpha", "1.5"], "--alpha must lie strictly between 0 and 1, got 1.5"),
    (["train", "--data", "d", "--refer-group", "icu"], "--refer-group must be one of ['age', 'gender', "
     "'admission_type', 'admission_location'], got 'icu'"),
    (["train", "--data", "d", "--threshold-rule", "fixed"], "--threshold-rule fixed needs --decision-threshold"),
    (["score", "--model", "m", "--out", "o.parquet", "--data", "d", "--delta", "0"],
     "--delta must lie strictly between 0 and 1, got 0"),
    (["laplace", "--run", "r", "--alpha", "-0.1"], "--alpha must lie strictly between 0 and 1, got -0.1"),
    (["extract", "--source", "s", "--out", "o", "--train-fraction", "0.9", "--val-fraction", "0.3"],
     "--train-fraction 0.9 + --val-fraction 0.3 must be < 1"),
    (["extract", "--source", "s", "--out", "o", "--prediction-hours", "-1"], "--prediction-hours must be a positive"),
    (["extract", "--source", "s", "--out", "o", "--set", "n_bins=0"], "--set n_bins must be >= 1, got 0"),
    (["evaluate", "--run", "r", "--json", "m.json", "--split", "val", "--split", "test"],
     "--json names one file: give a single --split"),
    (["evaluate", "--run", "r", "--set", "n_bootstrap=-1"], "--set n_bootstrap must be >= 0, got -1"),
    (["score", "--model", "m", "--out", "o.parquet", "--set", "chunk_rows=0"], "--set chunk_rows must be >= 1, got 0"),
    (["serve", "--model", "m", "--set", "max_body_mb=0"], "--set max_body_mb must be >= 0.001, got 0.0"),
    (["laplace", "--run", "r", "--selection", "last-layer", "--exclude", "lstm"],
     "--exclude applies to a selected subnetwork (not to --selection last-layer or --hessian diag)"),
    (["laplace", "--run", "r", "--set", "exclude=lstm", "--set", "selection=last-layer"],
     "--set exclude applies to a selected subnetwork (not to --set selection last-layer or --hessian diag)"),
    (["vision", "train", "--dataset", "cifar10"], "--data-dir is required for --dataset cifar10"),
    (["vision", "train", "--factor-clip", "0"], "--factor-clip must be > 0 or unset, got 0.0"),
    (["vision", "evaluate", "--run", "r", "--set", "severity=[9]"], "--set severity must be <= 5, got 9"),
    (["train", "--data", "d", "--set", "max_step=3"], "--set 'max_step=3': unknown key 'max_step' (did you mean "
                                                      "'max_steps'?)"),
    (["train", "--data", "d", "--set", "model.prior=laplace"],
     "--set model.prior must be one of ['gaussian', 'cauchy'], got 'laplace'"),
    (["train", "--data", "d", "--set", "lstm_hidden"], "--set 'lstm_hidden': expected KEY=VALUE"),
    (["train", "--data", "d", "--set", "data=x"], "--set 'data=x': 'data' has no default: give it on the command line"),
], ids=lambda a: " ".join(a[:4]) if isinstance(a, list) else None)
def test_a_bad_setting_is_one_line_naming_what_the_user_typed(args, message, tmp_path, monkeypatch):
    """A config's error names its fields; the command line says each as the user gave it: the flag, or the
    settings key given to --set; one line, exit code 2."""
    monkeypatch.chdir(tmp_path)  # nothing a command might write lands in the checkout
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 2 and result.output.startswith(f"error: {message}"), result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_a_bad_settings_file_names_the_file_and_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cases = {"a.toml": ("[train]\nmax_steps = -1\n", "a.toml: train.max_steps must be >= 0 (0: off), got -1"),
             "b.toml": ("[train]\nmax_step = 1\n", "b.toml: unknown key 'train.max_step' (did you mean "
                                                    "'train.max_steps'?)"),
             "c.toml": ("[model]\nlstm_hidden = 'big'\n", "c.toml: model.lstm_hidden must be an integer, got 'big'"),
             "d.toml": ("seed = [\n", "--config d.toml: not TOML: "),
             "e.toml": ("[train]\nlr = 0.0\n", "e.toml: train.lr must be > 0, got 0.0")}
    for name, (text, message) in cases.items():
        (tmp_path / name).write_text(text)
        result = CliRunner().invoke(cli.app, ["train", "--data", "d", "--config", name])
        assert result.exit_code == 2 and result.output.startswith(f"error: {message}"), (name, result.output)
    missing = CliRunner().invoke(cli.app, ["train", "--data", "d", "--config", "nope.toml"])
    assert missing.exit_code == 2 and "error: --config nope.toml: cannot be read" in missing.output


def test_a_run_records_its_settings_file(monkeypatch, tmp_path):
    """train writes the effective settings (what --print-config prints) beside the run's files and logs them
    to a tracked run: `train --config` of that file gives the same TrainConfig."""
    import pipeline.workflows.train
    from pipeline.runs import store
    from pipeline.workflows.train import TrainResult

    logged, seen, tags = [], [], []

    class FakeClient:
        def log_artifact(self, run_id, path):
            logged.append((run_id, Path(path).read_text()))

        def set_tag(self, run_id, key, value):
            tags.append((run_id, key, value))

    def fake_train(data, kind, cfg, **kwargs):
        seen.append(cfg)
        return TrainResult("f" * 32, 0.3, 10, 0.3, 10, 0.5, tmp_path / "run", tmp_path / "run" / "last.pt",
                           tmp_path / "run" / "best.pt", refer_measure="mi")

    monkeypatch.setattr(pipeline.workflows.train, "train", fake_train)
    monkeypatch.setattr(store, "client", FakeClient)
    args = ["train", "--data", "d", "--model", "batchensemble", "--max-steps", "50", "--set", "model.components=2"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    recorded = (tmp_path / "run" / "settings.toml").read_text()
    assert recorded == CliRunner().invoke(cli.app, [*args, "--print-config"]).output
    assert logged == [("f" * 32, recorded)] and tags == [("f" * 32, "preset", "default")]
    CliRunner().invoke(cli.app, ["train", "--data", "d", "--config", str(tmp_path / "run" / "settings.toml")])
    assert seen[0] == seen[1]


@pytest.mark.parametrize("device, given, preset", [("cuda", [], "gpu"), ("cuda", ["--preset", "default"], "default"),
                                                   ("cuda", ["--preset", "paper"], "paper"), ("cpu", [], "default")])
def test_a_cuda_device_takes_the_cuda_preset_unless_one_is_given(monkeypatch, device, given, preset):
    """train on a CUDA device without --preset takes CUDA_PRESET (here gpu), a given preset stays; the chosen
    one reaches the TrainConfig and the run's settings (what settings.toml records)."""
    import torch

    import pipeline.cli.train
    import pipeline.core.devices
    from pipeline.tasks.mortality.train_config import Preset, TrainConfig

    monkeypatch.setattr(pipeline.cli.train, "CUDA_PRESET", Preset.GPU)
    monkeypatch.setattr(pipeline.core.devices, "resolve_device", lambda name=None: torch.device(device))
    seen = _captured_train(monkeypatch, ["--data", "d", *given, "--set", "lr=0.01"])
    assert seen["cfg"] == TrainConfig.from_preset(preset, lr=0.01)
    assert pipeline.cli.train.device_preset(Preset.DEFAULT, False, device) is Preset(
        "gpu" if device == "cuda" else "default")


# config class -> the commands whose options set its fields
USER_CONFIGS = {
    ("pipeline.data.mimic.extraction.config", "ExtractConfig"): ("extract",),
    ("pipeline.tasks.mortality.train_config", "TrainConfig"): ("train",),
    ("pipeline.tasks.mortality.config", "MortalityConfig"): ("train",),
    ("pipeline.workflows.evaluate_config", "EvalConfig"): ("evaluate",),
    ("pipeline.serving.config", "ScoreConfig"): ("score",),
    ("pipeline.serving.server", "ServeConfig"): ("serve",),
    ("pipeline.bayes.laplace.config", "LaplaceConfig"): ("laplace",),
    ("pipeline.tasks.mortality.baselines.config", "BaselineConfig"): ("train",),
    ("pipeline.tasks.vision.config", "VisionTrainConfig"): ("vision train",),
    ("pipeline.tasks.vision.model_config", "VisionConfig"): ("vision train",),
    ("pipeline.tasks.vision.config", "VisionEvalConfig"): ("vision evaluate",),
    ("pipeline.data.mimic.synth.simulation", "SynthConfig"): ("synth",),
}


def _cli_options() -> dict[str, set[str]]:
    """{command path: every spelling of its options} of cli.py."""
    import typer

    out: dict[str, set[str]] = {}

    def walk(cmd, path: str) -> None:
        if hasattr(cmd, "commands"):  # a group (typer vendors its own click)
            for sub_name, sub in cmd.commands.items():
                walk(sub, f"{path} {sub_name}".strip())
            return
        out[path] = {o.split("/")[0] for p in cmd.params for o in [*p.opts, *p.secondary_opts]}

    walk(typer.main.get_command(cli.app), "")
    return out


@pytest.mark.parametrize("module, name", sorted(USER_CONFIGS))
def test_the_option_named_for_a_config_field_is_the_commands_own(module, name):
    """`names.option(cls, field)`, how an error about the field is said where no settings file or --set gave it,
    is an option of the command that sets the field."""
    import importlib
    from dataclasses import fields

    from pipeline.cli.names import option

    cls, commands = getattr(importlib.import_module(module), name), USER_CONFIGS[(module, name)]
    spelled = _cli_options()
    offered = set().union(*(spelled[c] for c in commands))
    named = {f.name: option(cls, f.name) for f in fields(cls)}
    wrong = {f: o for f, o in named.items() if o.startswith("--") and o not in offered}
    assert not wrong, f"{name}: options named in errors that {commands} do not have: {wrong}"


def test_the_tables_of_names_name_config_fields():
    """Every class and field that pipeline/cli/names.py's tables name exists (they name classes by name)."""
    import ast
    import importlib
    from dataclasses import fields

    from pipeline.cli import names

    classes = {}
    for path in (ROOT / "pipeline").rglob("*.py"):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Config"):
                assert node.name not in classes, f"two config classes named {node.name}"
                classes[node.name] = module
    for table in (names.NOT_CLI, names.OPTION_NAMES, names.CLI_FIELDS):
        for cls_name, named in table.items():
            cls = getattr(importlib.import_module(classes[cls_name]), cls_name)
            assert set(named) <= {f.name for f in fields(cls)}, (cls_name, named)
