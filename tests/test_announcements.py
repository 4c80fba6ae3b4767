"""Issue 36, item 7: training says that it stopped early and that its KL anneal did not finish; `make clean` resets
the tracking store it made; a command run from another folder finds the project's store or says where its store is.
(`serve` on a taken port: tests/test_cli_policy.py and tests/test_row_checks.py.)"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.paths import ROOT
from typer.testing import CliRunner

import cli
from pipeline.cli.names import spell
from pipeline.cli.train import NOTE_FIELDS
from pipeline.core.configs import invalid
from pipeline.engine.loop import LoopState, announcements
from pipeline.runs import store
from pipeline.tasks.mortality.train_config import TrainConfig

PLAN = SimpleNamespace(last_step=4390, patience=8, eval_every=250, anneal_steps=1000)


def test_early_stopping_and_an_unfinished_anneal_are_announced():
    state = LoopState(step=2750, best_step=750, stopped_early=True, kl_seen=True)
    assert announcements(PLAN, state) == [
        "early stopping: stopped at step 2750 of 4390, after 8 validations in a row (patience, every eval_every 250 "
        "steps) found no better one; the model is the best checkpoint, step 750"]
    short = LoopState(step=195, best_step=195, kl_seen=True)  # the demo's data-sized budget
    (note,) = announcements(PLAN, short)
    assert note.startswith("KL anneal unfinished: training ended at step 195, where the KL weight was 0.195, short of "
                           "1 at step 1000 (anneal_steps)")
    assert announcements(PLAN, LoopState(step=195, kl_seen=False)) == []  # no KL term (a point model): nothing
    assert announcements(PLAN, LoopState(step=4390, kl_seen=True)) == []  # finished: nothing to say


def test_a_ceiling_that_ends_training_is_announced_and_whether_validation_still_improved():
    plan = SimpleNamespace(**{**vars(PLAN), "ceiling": "max_epochs"})
    improving = LoopState(step=4390, best_step=4250, stopped_by="max_epochs")
    (note,) = announcements(plan, improving)
    assert note == ("budget: training ended at step 4390 by its ceiling max_epochs, while the validation "
                    "NLL was still improving (best at step 4250, 0 of patience's 8 validations before the end): a "
                    "longer budget may give a better model (max_epochs, max_steps, max_minutes; resume continues this "
                    "run)")
    said = spell(invalid(TrainConfig, note, *NOTE_FIELDS), {})
    assert "by its ceiling --max-epochs, while" in said and "(--max-epochs, --max-steps, --max-minutes;" in said
    (undecided,) = announcements(plan, LoopState(step=4390, best_step=3250, stopped_by="max_epochs"))
    assert undecided == ("budget: training ended at step 4390 by its ceiling max_epochs, before early stopping could "
                         "decide: the validation NLL had not improved for 4 validations (best at step 3250; patience "
                         "waits 8); a longer budget would let it decide (max_epochs, max_steps, max_minutes; resume "
                         "continues this run)")
    assert "still improving" not in undecided  # make main's run: best at step 1,250 of 4,390 is no improvement
    (flat,) = announcements(plan, LoopState(step=4390, best_step=1000, stopped_by="max_epochs"))
    assert flat == "budget: training ended at step 4390 by its ceiling max_epochs; the best validation was step 1000"
    patience = LoopState(step=2750, best_step=750, stopped_by="patience", stopped_early=True)
    assert [n[:15] for n in announcements(plan, patience)] == ["early stopping:"]  # the early-stopping line alone


def test_the_command_line_names_the_settings_as_options():
    (note,) = announcements(PLAN, LoopState(step=195, kl_seen=True))
    said = spell(invalid(TrainConfig, note, *NOTE_FIELDS), {})
    assert "(--anneal-steps)" in said and "lower --anneal-steps or train longer (--max-steps, --max-epochs)" in said
    assert "anneal_steps" not in said and "max_steps" not in said


@pytest.mark.slow
def test_train_prints_both_announcements(demo_features, tracking_store):
    """A learning rate too small to move a weight: validation never improves, patience 1 stops the run at the
    second validation, long before the KL weight reaches 1."""
    result = CliRunner().invoke(cli.app, [
        "train", "--data", str(demo_features.out_dir), "--model", "rank1", "--lr", "1e-12", "--patience", "1",
        "--eval-every", "3", "--max-steps", "40", "--hidden", "8", "--embed-dim", "8", "--dense", "8",
        "--score-samples", "2", "--threads", "1", "--no-progress", "--experiment", "announcements"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert ("early stopping: stopped at step 6 of 40, after 1 validations in a row (--patience, every --eval-every 3 "
            "steps) found no better one; the model is the best checkpoint, step 3") in lines
    assert any(ln.startswith("KL anneal unfinished: training ended at step 6, where the KL weight was 0.006") and
               "lower --anneal-steps" in ln for ln in lines)
    assert not any(ln.startswith("budget:") for ln in lines)  # early stopping ended it, not the ceiling
    assert any(ln.startswith("steps=6 best_step=3 best_val_nll=") and " uncertainty_measure=" in ln and
               " uncertainty_cut=" in ln and "refer_threshold" not in ln for ln in lines)  # item 2: one "refer"


def test_the_epoch_ceiling_says_it_bound():
    """Issue 46, item 5: `--max-steps 200` that stops at 195 says that the epoch ceiling bound it (one line, the
    settings as options); early stopping says nothing of it."""
    plan = SimpleNamespace(**{**vars(PLAN), "ceiling": "max_epochs",
                              "ceiling_words": "max_epochs 40 (before max_steps 200)"})
    (note,) = announcements(plan, LoopState(step=195, best_step=194, stopped_by="max_epochs"))
    assert spell(invalid(TrainConfig, note, *NOTE_FIELDS), {}).startswith(
        "budget: training ended at step 195 by its ceiling --max-epochs 40 (before --max-steps 200), while the "
        "validation NLL was still improving")
    assert announcements(plan, LoopState(step=195, best_step=3, stopped_by="patience", stopped_early=True))[0] \
        .startswith("early stopping:")


@pytest.mark.slow
def test_train_says_when_the_epoch_ceiling_ends_it(demo_features, tracking_store):
    result = CliRunner().invoke(cli.app, [
        "train", "--data", str(demo_features.out_dir), "--model", "deterministic", "--max-epochs", "0.5",
        "--max-steps", "200", "--patience", "0", "--eval-every", "2", "--hidden", "8", "--embed-dim", "8",
        "--dense", "8", "--score-samples", "1", "--threads", "1", "--no-progress", "--experiment", "announcements"])
    assert result.exit_code == 0, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("budget:")]
    assert " by its ceiling --max-epochs 0.5 (before --max-steps 200); early stopping is off (--patience)" in line


def test_make_clean_resets_the_tracking_store_it_made(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    made = ["runs/main/features/train.parquet", "mlflow.db", "mlflow.db.init.lock", "mlruns/1/abc/meta.yaml",
            ".pytest_cache/v/x", ".hypothesis/examples/x"]  # issue 46, item 5: hypothesis' cache too
    for name in made:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    (tmp_path / "kept.txt").write_text("mine")
    subprocess.run(["make", "-s", "clean"], cwd=tmp_path, check=True, capture_output=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Makefile", "kept.txt"]


def test_a_command_run_from_a_subfolder_finds_the_projects_store(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (tmp_path / "mlflow.db").write_bytes(b"")
    (tmp_path / "runs" / "main").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "runs" / "main")
    assert store.tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"
    with caplog.at_level(logging.WARNING, logger="pipeline.runs.store"):
        store.announce(store.tracking_uri())
        store.announce(store.tracking_uri())  # once per process
    said = [r.getMessage() for r in caplog.records]
    assert said == [f"tracking store: {tmp_path / 'mlflow.db'} (the nearest mlflow.db above the working directory; "
                    "MLFLOW_TRACKING_URI chooses another)"]
    text = str(store.run_not_found("0" * 32, LookupError("x")))
    assert f"the nearest mlflow.db above the working directory, {tmp_path / 'mlflow.db'}" in text


def test_a_new_store_says_where_it_is(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="pipeline.runs.store"):
        store.announce(store.tracking_uri())
    (said,) = [r.getMessage() for r in caplog.records]
    assert said.startswith(f"tracking store: {tmp_path / 'mlflow.db'}, new (no mlflow.db in the working directory")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{Path(tmp_path) / 'x.db'}")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pipeline.runs.store"):
        store.announce(store.tracking_uri())
    assert caplog.records == []  # a store the user chose is not announced
