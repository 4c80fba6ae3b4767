"""What the benchmarks share: where they cache, how a child process is measured, the cached synthetic
worlds, and how a time grows with its input.

- ``CACHE`` (``benchmarks/.cache/``, ignored by git) holds what a benchmark makes once and reuses:
  synthetic worlds, their features, trained MAP runs. ``cached(path, make)`` makes a directory once;
  an unfinished one (no ``.complete`` file) is made again.
- ``run_child(argv)`` runs a child process from the repository root and returns its wall time, CPU time
  (user + system, every thread) and peak RSS (``wait4``: the child's own), with its output;
  ``run_module`` runs ``python -m MODULE`` that way (a benchmark measuring itself in a fresh process).
- ``synth_world`` is a synthetic MIMIC-III or MIMIC-IV under ``CACHE``, generated once in a child.
- ``growth_exponent`` (least-squares slope of log time on log size) and ``extrapolate`` (the largest
  measured scale carried to a full release with it, never below linear), for the extraction benchmarks.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache"
PY = sys.executable


@dataclass
class Child:
    """A finished child process, measured."""

    wall_s: float  # wall seconds from start to exit
    cpu_s: float  # user + system seconds of the child, every thread
    peak_rss_mb: float  # the child's own peak resident memory (wait4's ru_maxrss), MB
    stdout: str  # everything it printed
    stderr: str  # everything it logged

    def last_json(self):
        """The JSON object on the last line of its output (how a benchmark's child hands back figures)."""
        return json.loads(self.stdout.strip().splitlines()[-1])


def run_child(argv: list[str], env: dict | None = None) -> Child:
    """Run ``argv`` from the repository root and measure it; a failure raises, naming the command and
    quoting the end of its stderr."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=err, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if os.waitstatus_to_exitcode(status) != 0:
        shown = shlex.join(argv[:4]) + (" ..." if len(argv) > 4 else "")
        raise RuntimeError(f"{shown} failed:\n{stderr[-3000:]}")
    return Child(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, stdout, stderr)


def run_module(module: str, *args: str, env: dict | None = None) -> Child:
    """``python -m MODULE ARGS`` as a measured child (``run_child``)."""
    return run_child([PY, "-m", module, *args], env)


def cached(path: Path, make: Callable[[Path], object]) -> Path:
    """``path``, made by ``make(path)`` unless a finished one is there; ``path/.complete`` marks it finished
    (and holds the seconds it took), so an interrupted one is removed and made again."""
    if (path / ".complete").exists():
        return path
    shutil.rmtree(path, ignore_errors=True)
    t0 = time.perf_counter()
    make(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / ".complete").write_text(f"{time.perf_counter() - t0:.1f} s\n")
    return path


_SYNTH = ("import json, sys; from pipeline.data.mimic.synth import SynthConfig, generate; "
          "cfg = {k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(sys.argv[3]).items()}; "
          "generate(sys.argv[1], int(sys.argv[2]), seed=int(sys.argv[4]), config=SynthConfig(**cfg), "
          "layout=sys.argv[5])")  # the child's code: OUT PATIENTS CONFIG SEED LAYOUT


def synth_world(name: str, patients: int, seed: int = 0, layout: str = "mimic-iii", **config) -> Path:
    """``CACHE/name``: a synthetic world (``pipeline.data.mimic.synth.generate`` with ``SynthConfig(**config)``, in a
    child
    process so that the benchmark's own peak memory is not the generator's), generated once."""
    def make(path: Path) -> None:
        subprocess.run([PY, "-c", _SYNTH, str(path), str(patients), json.dumps(config), str(seed), layout],
                       cwd=ROOT, check=True, stdout=subprocess.DEVNULL)

    return cached(CACHE / name, make)


def growth_exponent(sizes: list[float], times: list[float]) -> float:
    """Least-squares slope of log(times) on log(sizes) (1.0 with fewer than two points)."""
    if len(sizes) < 2:
        return 1.0
    xs, ys = [math.log(s) for s in sizes], [math.log(t) for t in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def extrapolate(time: float, size: float, full_size: float, exponent: float) -> float:
    """``time`` measured at ``size`` carried to ``full_size`` with ``exponent`` (at least 1: linear)."""
    return time * (full_size / size) ** max(exponent, 1.0)
