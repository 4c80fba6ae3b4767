"""Issue 36, item 2: the data owner's files (pseudonym -> HADM_ID links, reports by HADM_ID, a MEDS export, the key
file) never sit untracked and unignored in a git work tree (``pipeline.core.privacy``): writing them there is
refused with one line saying how to allow it, and this repository's ``.gitignore`` ignores them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.paths import ROOT
from typer.testing import CliRunner

import cli
from pipeline.core.privacy import ALLOW_ENV, PrivateFileError, check_private

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    """A fresh git work tree with one commit (its .gitignore ignores nothing of the data owner's)."""
    monkeypatch.delenv(ALLOW_ENV, raising=False)
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q")
    (path / "README").write_text("a project\n")
    git(path, "add", "README")
    git(path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    return path


def test_a_private_folder_where_git_would_take_it_is_refused(repo, monkeypatch):
    with pytest.raises(PrivateFileError) as err:
        check_private(repo / "out" / "_private")
    message = str(err.value)
    assert "\n" not in message and str(repo / "out" / "_private") in message
    assert f"set {ALLOW_ENV}=1" in message and "`git add .`" in message and "add `_private/`" in message
    assert not (repo / "out").exists()


def test_ignored_outside_a_work_tree_or_allowed_it_is_written(repo, tmp_path, monkeypatch):
    check_private(tmp_path / "elsewhere" / "_private")  # no work tree: nothing to protect against
    (repo / ".gitignore").write_text("_private/\n")
    check_private(repo / "deep" / "er" / "_private")  # ignored anywhere
    (repo / ".gitignore").write_text("/runs/\n")
    check_private(repo / "runs" / "features" / "_private")  # under an ignored folder
    with pytest.raises(PrivateFileError):
        check_private(repo / "features" / "_private")
    monkeypatch.setenv(ALLOW_ENV, "1")
    check_private(repo / "features" / "_private")  # the data owner's own repository, by choice


def test_the_key_file_and_a_meds_export_are_checked_too(repo):
    with pytest.raises(PrivateFileError, match="the de-identification key file"):
        check_private(repo / ".deid_key", folder=False, what="the de-identification key file")
    (repo / ".gitignore").write_text(".deid_key\n")
    check_private(repo / ".deid_key", folder=False)


def test_extract_into_a_work_tree_is_refused_before_anything_is_written(repo, demo_dir):
    out = repo / "features"
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(demo_dir), "--out", str(out)])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"error: {out / '_private'}: refused: the data owner's link file") and ALLOW_ENV in line
    assert not out.exists() and git(repo, "status", "--porcelain") == ""


def test_extract_where_git_ignores_private_writes_the_link_file(repo, demo_dir):
    (repo / ".gitignore").write_text("_private/\n/features/\n")
    git(repo, "add", ".gitignore")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "ignore")
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(demo_dir), "--out", str(repo / "features")])
    assert result.exit_code == 0, result.output
    assert (repo / "features" / "_private" / "link.csv").exists() and git(repo, "status", "--porcelain") == ""


def test_score_into_a_work_tree_is_refused_before_the_model_loads(repo, demo_features, tracking_store):
    """The check comes first: the model (here an unknown run id) is never loaded, nothing is written."""
    result = CliRunner().invoke(cli.app, ["score", "--model", "0" * 32, "--data", str(demo_features.out_dir),
                                          "--out", str(repo / "today")])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert f"{repo / 'today' / '_private'}: refused" in line and "reports by HADM_ID" in line
    assert not (repo / "today").exists()
    result = CliRunner().invoke(cli.app, ["score", "--model", "0" * 32, "--data", str(demo_features.out_dir),
                                          "--out", str(repo / "today"), "--no-link"])
    assert "refused" not in result.output  # no data owner's files asked for: on to the model (unknown here)


def test_this_repositorys_gitignore_ignores_the_data_owners_files():
    """`.gitignore` ignores `_private/` anywhere, `runs/` (where the README's commands write), the tracking store,
    the key file, and what the README's commands wrote before they wrote under runs/."""
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse"], capture_output=True).returncode:
        pytest.skip("not a git work tree")
    paths = ["a/b/_private/link.csv", "_private/link.csv", "runs/x/_private/cohort.html", "runs/features/train.parquet",
             ".deid_key", "mlflow.db", "mlruns/1/x", "scores.parquet", "cohort.html", "features/train.parquet",
             "stage/stage.json",
             # issue 46, item 1: what a command run from a subfolder writes (compare from benchmarks/, ...)
             "benchmarks/runs/compare/compare.md", "docs/experiments/runs/eval/x/test/metrics.json",
             "docs/mlruns/1/x", "docs/.deid_key", "docs/mlflow.db"]
    done = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", *paths], capture_output=True,
                          text=True)
    assert sorted(done.stdout.split()) == sorted(paths)
    kept = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "pipeline/core/privacy.py",
                           "docs/architecture.md", "pipeline/runs/store.py", "pipeline/runs/a_new_module.py"],
                          capture_output=True, text=True)
    assert kept.stdout == ""  # the sources stay tracked
