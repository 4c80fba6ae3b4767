"""Issue 36, item 5: one interruption and error policy for every command (pipeline/cli/app.py).

A table of a user's mistakes walks every command: each gets one line ``error: ...`` naming what the user typed
(an option, a settings key) or the file, table, column or row at fault, exit code 2, no traceback, no internal
name (a library function's argument or a config field as the code spells it: ``out_dir``, ``as_of``), and leaves
no output behind. Ctrl-C, whatever a library makes of it, is ``interrupted`` (and how to go on), exit code 130,
nothing half-written, an MLflow run it started KILLED; a closed stdout ends quietly (exit code 1, no log)."""

from __future__ import annotations

import inspect
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import typing
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path

import pytest
from helpers.paths import ROOT
from typer.testing import CliRunner

import cli

pytestmark = pytest.mark.usefixtures("tracking_store")

NO_RUN = "0" * 32  # a well-formed run id no store holds
BASE = ("PATIENTS", "ADMISSIONS", "ICUSTAYS", "PRESCRIPTIONS")  # a small copy of the demo to point commands at


def internal_names() -> set[str]:
    """What the code calls the things a user sets, where the command line spells them otherwise: the arguments of
    the library functions the commands call and the fields of their configs (with an underscore: ``as_of``,
    ``out_dir``, ``memory_limit``; a user types ``--as-of``, ``--out``, ``--memory-limit``)."""
    import importlib

    from pipeline.bayes.laplace.config import LaplaceConfig
    from pipeline.cli.main import COMMANDS
    from pipeline.data.meds.config import ExportConfig, MedsConfig
    from pipeline.data.meds.export import export_meds
    from pipeline.data.meds.flow import extract_meds
    from pipeline.data.mimic.extraction import ExtractConfig, extract
    from pipeline.data.mimic.sources.stage import StageConfig, stage_csv
    from pipeline.data.mimic.synth import SynthConfig, generate
    from pipeline.reports.compare_vision import compare_all
    from pipeline.serving.config import ScoreConfig
    from pipeline.serving.monitor import monitor
    from pipeline.serving.score import score
    from pipeline.serving.server import ServeConfig, serve
    from pipeline.tasks.mortality.config import MortalityConfig
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.tasks.vision.config import VisionEvalConfig, VisionTrainConfig
    from pipeline.workflows.evaluate import EvalConfig, evaluate_run
    from pipeline.workflows.grid import GridConfig, run_grid
    from pipeline.workflows.laplace_run import fit_laplace_run
    from pipeline.workflows.recertify import RecertifyConfig, recertify_run
    from pipeline.workflows.train import train
    from pipeline.workflows.vision_run import evaluate_vision_run, train_run

    functions = (extract, stage_csv, generate, compare_all, score, serve, evaluate_run, run_grid, fit_laplace_run,
                 train, evaluate_vision_run, train_run, export_meds, extract_meds, recertify_run, monitor)
    own = [c for m in COMMANDS for c in vars(importlib.import_module(f"pipeline.cli.{m}")).values()
           if isinstance(c, type) and getattr(c, "COMMAND_OPTIONS", False)]  # each command's own options
    configs = (ExtractConfig, StageConfig, SynthConfig, ScoreConfig, ServeConfig, TrainConfig, MortalityConfig,
               EvalConfig, GridConfig, LaplaceConfig, VisionTrainConfig, VisionEvalConfig, ExportConfig,
               MedsConfig, RecertifyConfig, *own)
    names = {p for f in functions for p in inspect.signature(f).parameters}
    names |= {f.name for c in configs if is_dataclass(c) for f in fields(c)}
    return {n for n in names if "_" in n}


INTERNAL = internal_names()
INTERNAL_WORD = re.compile(r"(?<![\w./-])(" + "|".join(sorted(map(re.escape, INTERNAL), key=len, reverse=True))
                           + r")(?![\w-])")


@dataclass
class Mistake:
    """One mistake: the command line (``{src}``, ``{out}``, ``{features}``, ``{port}``, ``{demo}`` filled in), what
    its line must name, and the paths it must not leave behind."""

    argv: list[str]
    names: tuple[str, ...]
    leaves: tuple[str, ...] = ()


MISTAKES = {
    "synth: a density out of range": Mistake(["synth", "--out", "{out}", "--patients", "5", "--density", "0"],
                                             ("--density",), ("{out}",)),
    "synth: an unknown option": Mistake(["synth", "--out", "{out}", "--bogus"], ("--bogus",), ("{out}",)),
    "extract: --out is the source": Mistake(["extract", "--source", "{src}", "--out", "{src}"],
                                            ("--out", "--source")),
    "extract: --out inside the source": Mistake(["extract", "--source", "{src}", "--out", "{src}/features"],
                                                ("--out", "--source"), ("{src}/features",)),
    "extract: --out holds the source": Mistake(["extract", "--source", "{src}", "--out", "{src}/.."], ("--out",)),
    "extract: --out holds other files": Mistake(["extract", "--source", "{src}", "--out", "{mine}"], ("--out",)),
    "extract: DuckDB's memory-limit syntax": Mistake(["extract", "--source", "{src}", "--out", "{out}",
                                                      "--memory-limit", "lots"], ("--memory-limit",), ("{out}",)),
    "extract: a source without PATIENTS": Mistake(["extract", "--source", "{nopatients}", "--out", "{out}"],
                                                  ("PATIENTS",), ("{out}",)),
    "stage: --out inside the source": Mistake(["stage", "--source", "{src}", "--out", "{src}/stage"],
                                              ("--out", "--source"), ("{src}/stage",)),
    "stage: DuckDB's memory-limit syntax": Mistake(["stage", "--source", "{src}", "--out", "{out}", "--memory-limit",
                                                    "12 parsecs"], ("--memory-limit",), ("{out}",)),
    "export-meds: a source without PATIENTS": Mistake(["export-meds", "--source", "{nopatients}", "--out", "{out}"],
                                                      ("PATIENTS",), ("{out}",)),
    "export-meds: --subjects-per-shard 0": Mistake(
        ["export-meds", "--source", "{src}", "--out", "{out}", "--subjects-per-shard", "0"], ("--subjects-per-shard",),
        ("{out}",)),
    "load-postgres: no such source": Mistake(["load-postgres", "--source", "{out}", "--dsn",
                                              "postgresql://nobody@127.0.0.1:9/none"], ("{out}",)),
    "train: --resume without --out": Mistake(["train", "--data", "{features}", "--resume"], ("--resume", "--out")),
    "train: no features there": Mistake(["train", "--data", "{out}"], ("{out}",), ("{out}",)),
    "train: --data a folder that does not exist": Mistake(["train", "--data", "{out}/nope"], (
        "--data {out}/nope: no such folder",), ("{out}",)),
    "train: an unknown --model": Mistake(["train", "--data", "{features}", "--model", "foo"],
                                         ("'foo'", "logreg", "gbm")),
    "extract: --memory-limit -1 (no limit)": Mistake(["extract", "--source", "{src}", "--out", "{out}",
                                                      "--memory-limit=-1"], ("--memory-limit '-1' is no limit",),
                                                     ("{out}",)),
    "evaluate: --split vall": Mistake(["evaluate", "--run", NO_RUN, "--split", "vall"],
                                      ("--split", "'vall' is not one of 'val', 'test'")),
    "score: --out the --data folder": Mistake(["score", "--model", NO_RUN, "--data", "{features}", "--out",
                                               "{features}"], ("--out {features} is the source folder (--data",)),
    "train: --max-steps -1": Mistake(["train", "--data", "{features}", "--max-steps", "-1"], ("--max-steps",)),
    "evaluate: an unknown run id": Mistake(["evaluate", "--run", NO_RUN], (NO_RUN, "tracking store")),
    "laplace: an unknown run id": Mistake(["laplace", "--run", NO_RUN], (NO_RUN, "tracking store")),
    "compare: an unknown experiment": Mistake(["compare", "--experiment", "no-such-experiment", "--out", "{out}"],
                                              ("no-such-experiment",), ("{out}",)),
    "compare: a word that is no run id": Mistake(["compare", "bogusword"], ("bogusword",)),
    "score: neither --data nor --source": Mistake(["score", "--model", NO_RUN, "--out", "{out}"],
                                                  ("--data", "--source"), ("{out}",)),
    "score: --as-of with features": Mistake(["score", "--model", NO_RUN, "--data", "{features}", "--out", "{out}",
                                             "--as-of", "2150-01-01 00:00"], ("--as-of", "--data"), ("{out}",)),
    "score: --as-of not a time": Mistake(["score", "--model", NO_RUN, "--source", "{src}", "--out", "{out}",
                                          "--as-of", "yesterday"], ("--as-of",), ("{out}",)),
    "score: --cohort with features": Mistake(["score", "--model", NO_RUN, "--data", "{features}", "--out", "{out}",
                                              "--cohort", "{src}/PATIENTS.csv.gz"], ("--cohort", "--data"), ("{out}",)),
    "score: --out not Parquet": Mistake(["score", "--model", NO_RUN, "--data", "{features}", "--out",
                                         "{out}/scores.csv"], ("--out",), ("{out}",)),
    "score: runs:/ with no run id": Mistake(["score", "--model", "runs:/nope/model", "--data", "{features}", "--out",
                                             "{out}"], ("runs:/nope/model", "'nope' is not a run id"), ("{out}",)),
    "score: an unknown run id": Mistake(["score", "--model", NO_RUN, "--data", "{features}", "--out", "{out}"],
                                        (NO_RUN, "tracking store"), ("{out}",)),
    "recertify: an unknown run id": Mistake(["recertify", "--run", NO_RUN, "--data", "{features}"],
                                            (NO_RUN, "tracking store")),
    "recertify: neither --data nor --source": Mistake(["recertify", "--run", NO_RUN], ("--data", "--source")),
    "recertify: --weighted with --refit-threshold": Mistake(
        ["recertify", "--run", NO_RUN, "--data", "{features}", "--weighted", "--refit-threshold"],
        ("--weighted", "--refit-threshold")),
    "monitor: an unknown run id": Mistake(["monitor", "--run", NO_RUN, "--scores", "{out}/s.parquet", "--outcomes",
                                           "{out}/o.csv"], (NO_RUN, "tracking store"), ("{out}",)),
    "monitor: no run id at all": Mistake(["monitor", "--run", "yesterday", "--scores", "{out}/s.parquet", "--outcomes",
                                          "{out}/o.csv"], ("'yesterday' is not a run id",), ("{out}",)),
    "serve: an unknown run id": Mistake(["serve", "--model", NO_RUN], (NO_RUN, "tracking store")),
    "serve: runs:/ with no run id": Mistake(["serve", "--model", "runs:/nope/model"], ("'nope' is not a run id",)),
    "serve: a taken port": Mistake(["serve", "--model", NO_RUN, "--port", "{port}"], ("--port {port}", "taken")),
    "benchmark-models: --max-steps 0": Mistake(["benchmark-models", "--synth", "{out}", "--out", "{out}",
                                                "--max-steps", "0"], ("--max-steps",), ("{out}",)),
    "vision train: no CIFAR batches there": Mistake(["vision", "train", "--dataset", "cifar10", "--data-dir", "{out}"],
                                                    ("{out}",), ("{out}",)),
    "vision evaluate: an unknown run id": Mistake(["vision", "evaluate", "--run", NO_RUN], (NO_RUN, "tracking store")),
}


@pytest.fixture(scope="module")
def places(demo_dir, demo_features, tmp_path_factory):
    """The paths the mistakes name: a small copy of the demo, one without PATIENTS, a folder of someone's files,
    the demo features, and a port something listens on."""
    root = tmp_path_factory.mktemp("mistakes")
    src, nopatients, mine = root / "src", root / "nopatients", root / "mine"
    for folder, tables in ((src, BASE), (nopatients, BASE[1:])):
        folder.mkdir()
        for t in tables:
            shutil.copy(demo_dir / f"{t}.csv.gz", folder / f"{t}.csv.gz")
    mine.mkdir()
    (mine / "notes.txt").write_text("someone's notes")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    yield {"src": str(src), "nopatients": str(nopatients), "mine": str(mine), "features": str(demo_features.out_dir),
           "port": str(listener.getsockname()[1]), "root": root}
    listener.close()


def test_the_table_walks_every_command():
    commands = {m.argv[0] if m.argv[0] != "vision" else " ".join(m.argv[:2]) for m in MISTAKES.values()}
    registered = {c.name or c.callback.__name__.replace("_", "-") for c in cli.app.registered_commands}
    vision = {f"{g.name} {c.name}" for g in cli.app.registered_groups for c in g.typer_instance.registered_commands}
    assert commands == registered | vision, sorted((registered | vision) - commands)


def test_the_internal_names_are_the_codes_own():
    """The list the messages are checked against holds what the issue saw leak, and no option's spelling."""
    assert {"out_dir", "as_of", "memory_limit", "cross_release", "max_steps"} <= INTERNAL
    assert not [n for n in INTERNAL if n.startswith("-")]


@pytest.mark.parametrize("name", list(MISTAKES))
def test_each_mistake_is_one_line_naming_what_the_user_typed(name, places, tmp_path):
    mistake = MISTAKES[name]
    values = {**{k: v for k, v in places.items() if k != "root"}, "out": str(tmp_path / "made")}

    def fill(text: str) -> str:
        return text.format(**values)

    before = sorted(p.name for p in places["root"].iterdir())
    result = CliRunner().invoke(cli.app, [fill(a) for a in mistake.argv], env={cli.LOG_DIR_ENV: str(tmp_path / "logs")})
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output and not (tmp_path / "logs").exists()
    for said in mistake.names:
        assert fill(said) in lines[0], (said, lines[0])
    leaked = INTERNAL_WORD.findall(lines[0].replace(str(places["root"]), "").replace(str(tmp_path), ""))
    assert not leaked, (leaked, lines[0])
    for path in mistake.leaves:
        assert not Path(fill(path)).exists(), fill(path)
    assert sorted(p.name for p in places["root"].iterdir()) == before  # nothing written beside the inputs
    assert (Path(places["mine"]) / "notes.txt").read_text() == "someone's notes"


def test_a_library_argument_is_said_as_the_user_gave_it(places, tmp_path):
    """A library argument (``as_of``) is said as the user gave it: the option, a settings file's key (with the
    file), ``--set``'s key."""
    settings = tmp_path / "score.toml"
    settings.write_text('as_of = "2150-01-01 00:00"\n')
    common = ["score", "--model", NO_RUN, "--data", places["features"], "--out", str(tmp_path / "s")]
    rest = "applies to a source extraction (--source); features (--data) record their window already"
    for given, said in ((["--as-of", "2150-01-01 00:00"], "--as-of"),
                        (["--config", str(settings)], f"{settings}: as_of"),
                        (["--set", "as_of=2150-01-01 00:00"], "--set as_of")):
        result = CliRunner().invoke(cli.app, [*common, *given])
        assert result.exit_code == 2 and result.output.strip().splitlines() == [f"error: {said} {rest}"], result.output


# ---------------------------------------------------------------------------- interruptions


def test_ctrl_c_that_a_library_turns_into_another_error_is_an_interruption(demo_dir, demo_features, tmp_path,
                                                                             monkeypatch):
    """DuckDB answers Ctrl-C with its own error ("query interrupted"): still `interrupted`, exit 130, no log file,
    and a previous extraction at --out is as it was."""
    from pipeline.core import fileio
    from pipeline.data.mimic.extraction import flow

    out = tmp_path / "features"
    shutil.copytree(demo_features.out_dir, out)
    before = fileio.sha256_file(out / "manifest.json")

    def interrupted_query(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        except KeyboardInterrupt:
            raise RuntimeError("Query interrupted") from None

    monkeypatch.setattr(flow, "_run", interrupted_query)
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(demo_dir), "--out", str(out)],
                                env={cli.LOG_DIR_ENV: str(tmp_path / "logs")})
    assert result.exit_code == 130, result.output
    assert result.output.strip().splitlines() == [
        "interrupted; nothing was written to --out (a previous extraction there is as it was); run the command again"]
    assert not (tmp_path / "logs").exists()
    assert fileio.sha256_file(out / "manifest.json") == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features"]  # no staged folder left beside it


def test_ctrl_c_in_training_says_how_to_resume_and_the_run_ends_killed(demo_features, tmp_path, monkeypatch):
    from pipeline.runs import store
    from pipeline.workflows import train as train_mod

    def interrupted_loop(plan, *, out, **kwargs):
        (Path(out) / "last.pt").write_bytes(b"a checkpoint")  # what the loop writes at a validation
        raise KeyboardInterrupt

    monkeypatch.setattr(train_mod, "run_loop", interrupted_loop)
    out = tmp_path / "run"
    result = CliRunner().invoke(cli.app, ["train", "--data", str(demo_features.out_dir), "--out", str(out),
                                          "--experiment", "interrupted-cli", "--hidden", "8", "--embed-dim", "8"])
    assert result.exit_code == 130, result.output
    (line,) = result.output.strip().splitlines()
    assert line == (f"interrupted; its last checkpoint is {out / 'last.pt'}: the same command with --resume and --out "
                    f"{out} continues it")
    c = store.client()
    runs = c.search_runs([c.get_experiment_by_name("interrupted-cli").experiment_id])
    assert [r.info.status for r in runs] == ["KILLED"]


@pytest.mark.slow
def test_ctrl_c_during_a_real_extraction(demo_dir, tmp_path):
    """SIGINT to `cli.py extract` on the demo once it is extracting (its output folder begun beside --out), early
    and late: `interrupted`, exit 130, nothing at --out. (A signal during Python's own start-up, before the command
    runs, is Python's: the test waits for the extraction, so that a loaded machine's slow start does not decide.)"""
    env = {**os.environ, "PYTHONPATH": str(ROOT), cli.LOG_DIR_ENV: str(tmp_path / "logs")}
    interrupted = 0
    for delay in (0.0, 1.0):
        out = tmp_path / f"features-{delay}"
        p = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "extract", "--source", str(demo_dir), "--out",
                              str(out), "--threads", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
        deadline = time.monotonic() + 120
        while (p.poll() is None and time.monotonic() < deadline
               and not any(q.name.endswith(".partial") for q in tmp_path.iterdir())):
            time.sleep(0.05)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=120)
        if p.returncode == 0 or out.exists():  # finished before the signal came (it may end Python's exit)
            continue
        interrupted += 1
        assert p.returncode == 130, (stdout, stderr, sorted(q.name for q in tmp_path.iterdir()))
        assert stderr.strip().splitlines()[-1].startswith("interrupted; nothing was written to --out")
        assert "Traceback" not in stderr and not out.exists() and not (tmp_path / "logs").exists()
        assert not [q for q in tmp_path.iterdir() if q.name.endswith(".partial")]
    assert interrupted, "the extraction finished before every signal: nothing was interrupted"


# ---------------------------------------------------------------------------- a closed stdout


def test_a_closed_stdout_ends_quietly(tmp_path, monkeypatch):
    """`cli.py compare | head -1`: the reader went away; no message, no log file, exit code 1 (typer's, as for
    --help)."""
    import typer

    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(typer, "echo", closed)
    monkeypatch.setattr("pipeline.reports.compare_vision.compare_all", lambda *a, **k: _Result())
    result = CliRunner().invoke(cli.app, ["compare"], env={cli.LOG_DIR_ENV: str(tmp_path / "logs")})
    assert result.exit_code == 1 and result.output == "", result.output
    assert not (tmp_path / "logs").exists()


class _Result:
    mortality: typing.ClassVar[list] = []
    vision: typing.ClassVar[list] = []
    files: typing.ClassVar[list] = []


@pytest.mark.slow
def test_a_closed_stdout_ends_quietly_in_a_real_pipe(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), cli.LOG_DIR_ENV: str(tmp_path / "logs"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    p = subprocess.Popen([sys.executable, str(ROOT / "cli.py"), "synth", "--out", str(tmp_path / "s"), "--patients",
                          "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    p.stdout.close()  # the reader is gone before the command writes its summary
    stderr = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1 and stderr == "", stderr
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_mistakes_found_later_in_a_run_name_the_options_too(demo_features, tmp_path):
    """A resumed run given other settings, or at its budget already; MIMIC-IV era groups the cohort lacks."""
    out = tmp_path / "run"
    tiny = ["train", "--data", str(demo_features.out_dir), "--out", str(out), "--hidden", "8", "--embed-dim", "8",
            "--score-samples", "2", "--eval-every", "2", "--threads", "1", "--no-progress", "--experiment", "resumes"]
    first = CliRunner().invoke(cli.app, [*tiny, "--max-steps", "2"])
    assert first.exit_code == 0, first.output
    for extra, said in ((["--max-steps", "4", "--lr", "0.01", "--resume"],
                         "training settings differ from the checkpoint's (--lr); only the budget (--max-steps, "
                         "--patience, --max-epochs) may change"),
                        (["--max-steps", "2", "--resume"], "already at step 2 >= --max-steps 2")):
        result = CliRunner().invoke(cli.app, [*tiny, *extra])
        (line,) = result.output.strip().splitlines()
        assert result.exit_code == 2 and line.startswith("error: ") and said in line, result.output
        assert not INTERNAL_WORD.findall(line.replace(str(tmp_path), ""))
    iv = Path(os.environ.get("MIMIC4_DEMO_DIR") or ROOT.parent / "shared" / "mimic-iv-demo")
    if (iv / "hosp").is_dir():
        result = CliRunner().invoke(cli.app, ["extract", "--source", str(iv), "--out", str(tmp_path / "f"), "--split",
                                              "era", "--era-groups", "1999 - 2001", "--era-groups", "2014 - 2016"])
        (line,) = result.output.strip().splitlines()
        assert result.exit_code == 2 and line.startswith("error: --era-groups ['1999 - 2001'] are not"), line
        assert not (tmp_path / "f").exists()


# ---------------------------------------------------------------------------- issue 46: sentences that are true


@pytest.mark.parametrize("argv, line", [
    (["evaluate", "--run", NO_RUN, "--split", "vall"],
     "error: Invalid value for '--split': 'vall' is not one of 'val', 'test' (see cli.py evaluate --help)"),
    (["train", "--data", "x", "--max-steps", "abc"],
     "error: Invalid value for '--max-steps': 'abc' is not an integer (see cli.py train --help)"),
    (["synth", "--out", "x", "--patients", "0"],
     "error: Invalid value for '--patients': '0' is out of range (it must be at least 1) (see cli.py synth --help)"),
])
def test_a_bad_value_says_what_was_typed_and_what_is_accepted(argv, line):
    """Issue 46, item 3: typer's pydantic check said "Value error, 'vall' ..." and "Input should be a valid integer"
    without the value typed."""
    result = CliRunner().invoke(cli.app, argv)
    assert result.exit_code == 2 and result.output.strip().splitlines() == [line], result.output


def test_an_unknown_model_lists_every_name_the_help_lists():
    """Issue 46, item 3: `--model`'s help lists logreg and gbm; the error for an unknown name lists them too."""
    from pipeline.cli.train import MODEL_HELP

    result = CliRunner().invoke(cli.app, ["train", "--data", "x", "--model", "foo"])
    (line,) = result.output.strip().splitlines()
    helped = re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)*", MODEL_HELP.split("prints it:", 1)[1].split("(settings", 1)[0])
    names = [w for w in helped if w not in ("or", "a", "classical", "baseline")]
    assert {"rank1", "deep-ensemble", "logreg", "gbm"} <= set(names)
    assert line == ("error: unknown model 'foo'; choose a model kind or variant (rank1, deterministic, bayes-emb, "
                    "bayes-full, batchensemble, rank1-gaussian, rank1-cauchy, rank1-signs, rank1-symmetric, "
                    "deep-ensemble) or a classical baseline (logreg, gbm)")
    assert all(n in line for n in names)


def test_the_help_names_no_module_and_promises_what_holds():
    """Issue 46, items 3 and 5: `--models`' help named pipeline.tasks.mortality.variants; serve's `--threads` help said
    "None: one per core [default: 1]"; `--memory-limit`'s promised a bounded process while -1 (no limit) passed."""
    def said(*argv: str) -> str:
        return " ".join(CliRunner().invoke(cli.app, [*argv, "--help"], terminal_width=100).output.split())

    models = said("benchmark-models")
    assert "pipeline." not in models and "every LSTM variant (deterministic, bayes-emb," in models
    assert "then the baselines logreg and gbm once per split" in models
    threads = said("serve").split("--threads", 1)[1].split("--max-rows", 1)[0]
    assert "None" not in threads and "one per core" not in threads and "[default: 1]" in threads
    assert "-1 (no limit) is refused" in said("extract")


def test_warnings_carry_no_logger_name(caplog):
    """Issue 46, item 3: a warning line is `warning: ...`, as an error is `error: ...`, without the logger's name."""
    import logging

    from pipeline.core.progress import UserFormatter

    record = logging.LogRecord("pipeline.runs.store", logging.WARNING, __file__, 1, "tracking store: %s", ("x",), None)
    assert UserFormatter().format(record) == "warning: tracking store: x"
