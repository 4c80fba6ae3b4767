"""Issue 36, item 2's must-show: `git status` stays clean after every command of the README.

The repository's files (tracked, and new ones not ignored) are committed to a fresh git work tree; the README's
command table, its real-data commands that run here (the stage, the demo), `make main` and `make test` then run
there one after another, at toy sizes (what a command writes does not depend on the sizes), with no tracking URI
and no de-identification key set (so the default store and the key file are made there too), and after each one
`git status --porcelain` must be empty. Only `load-postgres` is left out: it writes into a PostgreSQL server.
Issue 46, item 1: the command table and the real-data commands then run again from a nested subfolder
(`docs/experiments`, as `python ../../cli.py ...`), reading the runs trained at the root: `git status` stays clean
there too, and the subfolder holds no tracking store of its own."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers.paths import ROOT, demo_path
from helpers.serving import free_port

TINY_TRAIN = ["--max-steps", "6", "--eval-every", "3", "--hidden", "8", "--embed-dim", "8", "--dense", "8",
              "--score-samples", "2", "--threads", "1", "--no-progress"]
EXTRA = {  # each command's toy sizes, by its first words
    "synth": ["--density", "0.05"],
    "train": TINY_TRAIN,
    "evaluate": ["--samples", "2", "--bootstrap", "10", "--threads", "1"],
    "score": ["--samples", "2", "--threads", "1"],
    "laplace": ["--samples", "2", "--max-train", "40", "--subnet-size", "20", "--threads", "1"],
    "vision train": ["--epochs", "0.05", "--threads", "1", "--no-progress", "--ensemble-size", "2"],
    "vision evaluate": ["--samples", "1", "--clean-only"],
    "benchmark-models": ["--patients", "150", "--seeds", "0", "--models", "deterministic", "--splits", "random",
                         "--max-steps", "4", "--eval-every", "2", "--samples", "2", "--jobs", "1"],
}
LEFT_OUT = ("load-postgres",)  # writes into a PostgreSQL server, nothing here
SUBFOLDER = "docs/experiments"  # the second pass's working directory (a tracked folder, two levels down)


def readme_commands() -> list[str]:
    """The `python cli.py ...` commands of the README's command table (a bare `vision evaluate` is one too)."""
    text = (ROOT / "README.md").read_text()
    table = text.split("| stage | command | docs |", 1)[1].split("\n\n", 1)[0]
    found = re.findall(r"`(python cli\.py [^`]+|vision evaluate [^`]+)`", table)
    return [c if c.startswith("python cli.py") else f"python cli.py {c}" for c in found]


def real_data_commands() -> list[str]:
    """The README's real-data commands that run here: the stage (of the demo) and the demo's extraction."""
    text = (ROOT / "README.md").read_text().split("## Real data", 1)[1].split("## Results", 1)[0]
    return [c for c in re.findall(r"`(python cli\.py (?:stage|extract) --source (?:/data/mimic-iii-1\.4|runs/stage|"
                                  r"\.\./shared/mimic-iii-demo) [^`]*)`", text)]


def test_the_readme_commands_are_found():
    commands = readme_commands()
    assert [c.split()[2] for c in commands] == ["synth", "load-postgres", "extract", "train", "evaluate", "compare",
                                                "score", "serve", "laplace", "vision", "vision", "benchmark-models"]
    assert all(" --out " not in c or re.search(r"--out runs/", c) for c in commands + real_data_commands())
    assert len(real_data_commands()) == 4  # CSV directory, stage, extract from the stage, the demo


def _clone(tmp_path: Path) -> Path:
    """The repository's files (tracked, and new ones git does not ignore) in a fresh work tree, committed."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            check=True, capture_output=True).stdout.decode().split("\0")
    clone = tmp_path / "clone"
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "clone"]):
        subprocess.run(["git", "-C", str(clone), *args], check=True, capture_output=True)
    return clone


@pytest.mark.slow
def test_git_status_stays_clean_after_every_readme_command(tmp_path):
    if shutil.which("git") is None or subprocess.run(["git", "-C", str(ROOT), "rev-parse"],
                                                     capture_output=True).returncode:
        pytest.skip("needs git and a git work tree")
    clone = _clone(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "MIMIC_DEID_KEY", "PYTHONPATH")}
    ran, ids = [], {}

    def run(command: str, background: bool = False, where: str = ".") -> str:
        said = command
        for placeholder in sorted(ids, key=len, reverse=True):  # "<id of a deterministic run>" before "<id>"
            if placeholder.startswith("<") and not (placeholder == "<id>" and " vision evaluate " in command):
                said = said.replace(placeholder, ids[placeholder])
        words = said.split()[2:]
        key = " ".join(words[:2]) if words[0] == "vision" else words[0]
        demo = str(demo_path())
        words = [w.replace("../shared/mimic-iii-demo", demo).replace("/data/mimic-iii-1.4", demo) for w in words]
        words = ["300" if w == "2000" and key == "synth" else w for w in words]
        words = [ids["vision"] if w == "<id>" else w for w in words] + EXTRA.get(key, [])  # vision evaluate's run
        if background:  # serve: until it answers /ping, then Ctrl-C
            port = str(free_port())
            words = [port if w == "5000" else w for w in words]
            proc = subprocess.Popen([sys.executable, cli(where), *words], cwd=clone / where, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2):
                        break
                except OSError:
                    assert proc.poll() is None, proc.stdout.read().decode()
                    time.sleep(1)
            proc.send_signal(signal.SIGINT)
            out = proc.communicate(timeout=60)[0].decode()
        else:
            done = subprocess.run([sys.executable, cli(where), *words], cwd=clone / where, env=env,
                                  capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
            out = done.stdout
        status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, text=True)
        assert status.stdout == "", (where, command, status.stdout)
        ran.append(command)
        return out

    def cli(where: str) -> str:  # cli.py as typed from `where`: python ../../cli.py ...
        return str(Path(*[".."] * len(Path(where).parts), "cli.py")) if where != "." else "cli.py"

    def run_id(out: str) -> str:
        return next(ln.split()[1] for ln in out.splitlines() if ln.startswith("run_id: "))

    for command in readme_commands():
        if any(f"cli.py {name}" in command for name in LEFT_OUT):
            continue
        if " laplace " in command:  # a deterministic run to put the Laplace approximation on
            ids["<id of a deterministic run>"] = run_id(run("python cli.py train --data runs/features --model "
                                                            "deterministic"))
        out = run(command, background=" serve " in command)
        if " train " in command and "vision" not in command:
            ids["<id>"] = run_id(out)
        if "vision train" in command:
            ids["vision"] = run_id(out)
    for command in readme_commands():  # again from a subfolder, the runs trained at the root read from there
        if not any(f"cli.py {name}" in command for name in LEFT_OUT):  # (before the real-data commands' extraction
            run(command, background=" serve " in command, where=SUBFOLDER)  # replaces the root's runs/features)
    for where in (".", SUBFOLDER):
        for command in real_data_commands():
            run(command, where=where)
    assert len(ran) == 2 * (len(readme_commands()) - len(LEFT_OUT) + len(real_data_commands())) + 1
    sub = clone / SUBFOLDER
    assert not [p for p in ("mlflow.db", "mlflow.db.init.lock", "mlruns") if (sub / p).exists()]
    assert (sub / "runs" / "compare" / "compare.md").is_file()  # outputs go where the user is, ignored there
    venv = Path(sys.executable).parents[1]  # this interpreter's: nothing is installed (both stamps taken as made)
    make = ["make", "-o", f"{venv}/.installed", "-o", f"{venv}/.installed-core", "-o", f"{venv}/bin/python",
            f"VENV={venv}"]
    for target in (["main", "PATIENTS=200", "DENSITY=0.05"], ["test", "PYTEST_ARGS=tests/test_fileio.py -q"]):
        done = subprocess.run([*make, *target], cwd=clone, env=env, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, (target, done.stdout[-3000:], done.stderr[-3000:])
        status = subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True, text=True)
        assert status.stdout == "", (target, status.stdout)
    assert (clone / "mlflow.db").exists() and (clone / ".deid_key").exists()  # made there, and ignored
    assert list((clone / "runs").rglob("_private")), "the data owner's files were written (under runs/, ignored)"
