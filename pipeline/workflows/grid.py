"""The benchmark grid: every model variant x seeds x split modes, trained, evaluated and compared.

A workflow over the stages (extraction, training, evaluation), so it sits beside them, not in
any of them: synthetic MIMIC-III (generated when missing) -> one extraction per split mode
(cached) -> ``run_job`` for each (variant, mode, seed) in a pool of worker processes (one torch
thread each; every job a fresh process, so a crash or a leak stays in its job) -> the comparison
tables of ``reports.compare``. The grid's runs are listed in ``<out>/runs.json`` (``grid_runs``);
``grid_config`` makes a ``GridConfig`` of ``cli.py benchmark-models``' settings.
The classical baselines (``logreg``, ``gbm``) are deterministic given the data, so they run once
per split mode (with the first seed), not once per seed; their runs are listed like the others'.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.contracts import DEFAULT_BATCH
from pipeline.core.errors import PipelineError
from pipeline.data.mimic.sources.tables import Release
from pipeline.reports.compare import SPLITS, compare
from pipeline.runs import store
from pipeline.tasks.mortality.baselines.config import BASELINES, BaselineConfig
from pipeline.tasks.mortality.variants import VARIANTS, resolve

MODELS = VARIANTS + BASELINES  # what the grid can train: the LSTM variants, then the classical baselines


RUNS_FILE = "runs.json"  # in the grid's out dir: its runs, oldest first (run_id, variant, split_mode, seed)


class GridError(PipelineError, ValueError):
    """A grid that cannot run (unknown variant) or a job that failed."""


@dataclass
class GridConfig:
    """The benchmark grid (every variant x seed x split mode)."""

    seeds: tuple[int, ...] = (0, 1, 2)  # training seeds
    variants: tuple[str, ...] = MODELS  # model variants (models.variants.VARIANT_SPECS) and baselines (logreg, gbm)
    split_modes: tuple[str, ...] = ("random", "era")  # feature extractions
    max_steps: int = 1000  # training steps per run (about 1 minute per run with 2 parallel jobs on 2 cores)
    eval_every: int = 250  # periodic validation interval
    samples: int | None = None  # evaluation samples per component (None: the model's score_samples)
    eval_batch_size: int = DEFAULT_BATCH  # admissions per forward pass in validation and evaluation
    jobs: int = 2  # worker processes
    patients: int = 2000  # synthetic patients when the source has to be generated
    synth_seed: int = 0  # seed of the synthetic source
    density: float = 1.0  # synthetic event density
    layout: Release = Release.mimic3  # layout of a generated synthetic source: mimic-iii | mimic-iv (era:
        # anchor_year_group)
    experiment: str = "benchmark-models"  # MLflow experiment of the grid
    preset: str = "default"  # training preset of the LSTM variants (training.config.Preset); the settings below win
    train_overrides: dict = field(default_factory=dict)  # extra TrainConfig settings (e.g. batch_size)
    model_overrides: dict = field(default_factory=dict)  # extra MortalityConfig settings (e.g. lstm_hidden)
    device: str | None = None  # torch device of every job's training and evaluation (None: cuda when available)


@dataclass
class GridResult:
    """What the grid produced."""

    run_ids: list[str]  # evaluated runs
    tables: list[Path]  # compare.md, compare.csv
    wall_s: float  # total wall time of the grid
    stage_s: dict[str, float] = field(default_factory=dict)  # wall time per stage

    def summary(self) -> str:
        """The line ``cli.py benchmark-models`` ends with: runs, wall time per stage, tables."""
        stages = ", ".join(f"{k} {v:.0f} s" for k, v in self.stage_s.items())
        return (f"{len(self.run_ids)} runs in {self.wall_s:.0f} s ({stages}); tables: "
                + ", ".join(str(t) for t in self.tables))


def grid_config(*, seeds: list[int] = GridConfig.seeds, variants: list[str] | None = None,
                split_modes: list[str] = GridConfig.split_modes, preset: str = "default", max_steps: int | None = None,
                eval_every: int | None = None, batch_size: int | None = None, train_overrides: dict | None = None,
                model_overrides: dict | None = None, **rest) -> GridConfig:
    """The grid of ``benchmark-models``' settings: ``variants`` (None: every one of ``MODELS``); the preset's step
    budget unless ``max_steps`` / ``eval_every`` are given (a default of 1000 would silently cut records-research's
    10,000), ``eval_every`` at most ``max_steps``; ``train_overrides`` / ``model_overrides``: TrainConfig /
    MortalityConfig settings for every LSTM variant, ``batch_size`` too; ``rest``: GridConfig fields as they are."""
    from pipeline.tasks.mortality.train_config import PRESETS, Preset

    chosen = PRESETS[Preset(preset)]
    max_steps = max_steps or chosen.get("max_steps", GridConfig.max_steps)
    eval_every = eval_every or chosen.get("eval_every", GridConfig.eval_every)
    return GridConfig(seeds=tuple(seeds), variants=tuple(variants or MODELS), split_modes=tuple(split_modes),
                      max_steps=max_steps, eval_every=min(eval_every, max_steps), preset=Preset(preset).value,
                      train_overrides={**(train_overrides or {}), **({"batch_size": batch_size} if batch_size else {})},
                      model_overrides=dict(model_overrides or {}), **rest)


def run_job(features: Path | str, variant: str, mode: str, seed: int, cfg: GridConfig, work: Path | str) -> str:
    """Train one (variant, mode, seed) and evaluate it on val and test, in this process; returns the run id.

    Checkpoints go to ``work/train/<variant>-<mode>-s<seed>``, evaluation outputs to ``work/eval/<run id>``.
    """
    from pipeline.tasks.mortality.train_config import TrainConfig
    from pipeline.workflows.evaluate import EvalConfig, evaluate_run
    from pipeline.workflows.train import train

    name = f"{variant}-{mode}-s{seed}"
    ecfg = EvalConfig(samples=cfg.samples, batch_size=cfg.eval_batch_size, threads=1)
    if variant in BASELINES:
        from pipeline.workflows.baselines_run import train_baseline

        run_id = train_baseline(features, variant, BaselineConfig(seed=seed, threads=1),
                                out_dir=Path(work) / "train" / name, experiment=cfg.experiment, run_name=name).run_id
        for split in SPLITS:
            evaluate_run(run_id, split, ecfg, out_dir=Path(work) / "eval" / run_id / split, device=cfg.device)
        return run_id
    kind, variant_settings = resolve(variant)
    model = {**variant_settings, **cfg.model_overrides}
    # the grid's runs train their fixed --max-steps (comparable across grids) unless --set patience / max_epochs
    settings = {"eval_batch_size": cfg.eval_batch_size, "patience": None, "max_epochs": None, **cfg.train_overrides}
    tcfg = TrainConfig.from_preset(cfg.preset, seed=seed, max_steps=cfg.max_steps, eval_every=cfg.eval_every,
                                   threads=1, progress=False, **settings, model=model)
    result = train(features, kind, tcfg, out_dir=Path(work) / "train" / name, experiment=cfg.experiment,
                   run_name=name, device=cfg.device)
    for split in SPLITS:
        evaluate_run(result.run_id, split, ecfg, out_dir=Path(work) / "eval" / result.run_id / split,
                     device=cfg.device)
    return result.run_id


def grid_jobs(cfg: GridConfig) -> list[tuple[str, str, int]]:
    """(variant, split mode, seed) of every run of the grid; a baseline once per split mode (first seed)."""
    return [(v, mode, s) for mode in cfg.split_modes for v in cfg.variants
            for s in (cfg.seeds[:1] if v in BASELINES else cfg.seeds)]


def record_grid_run(out_dir: Path | str, run_id: str, variant: str, mode: str, seed: int) -> None:
    """Append a finished job to ``out_dir/RUNS_FILE`` (rewritten atomically; a rerun grid appends, so a
    (variant, mode, seed) run again has its latest run last)."""
    path = Path(out_dir) / RUNS_FILE
    runs = fileio.read_json(path) if path.exists() else []
    runs.append({"run_id": run_id, "variant": variant, "split_mode": mode, "seed": seed})
    fileio.write_json(path, runs)


def grid_runs(out_dir: Path | str) -> list[str]:
    """Run ids of the grids written to ``out_dir``, oldest first: those of ``RUNS_FILE``; for a grid that
    predates the file, the finished runs of the tracking store trained on its features (``features-<mode>``)."""
    out = Path(out_dir).resolve()
    path = out / RUNS_FILE
    if path.exists():
        return [r["run_id"] for r in fileio.read_json(path)]
    dirs = [d for d in sorted(out.glob("features-*")) if d.is_dir()]
    # a run's tag holds the resolved path: a features-<mode> link is looked up by its target too
    paths = dict.fromkeys(p for d in dirs for p in (str(d), str(d.resolve())))
    return store.runs_tagged(store.FEATURES_DIR_TAG, list(paths))


def _worker_init(uri: str) -> None:
    """A grid worker: one torch thread and the parent's tracking store (the default one is cwd-relative)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MLFLOW_TRACKING_URI"] = uri


def prepare_features(synth_dir: Path, out_dir: Path, cfg: GridConfig) -> dict[str, Path]:
    """Synthetic source (generated when missing) and one extraction per split mode (cached; with the
    value channel when the grid's models read it: ``--set value_channel=true``)."""
    from pipeline.data.mimic.extraction import ExtractConfig, SplitMode, extract
    from pipeline.data.mimic.sources.csvdir import detect_layout

    if not synth_dir.is_dir() or "admissions" not in detect_layout(synth_dir)[1]:
        from pipeline.data.mimic.synth import SynthConfig, generate

        generate(synth_dir, patients=cfg.patients, seed=cfg.synth_seed, config=SynthConfig(density=cfg.density),
                 layout=cfg.layout)
    feats = {}
    for mode in cfg.split_modes:
        fdir = out_dir / f"features-{mode}"
        if not (fdir / store.MANIFEST).exists():
            values = str(cfg.model_overrides.get("value_channel", False)).lower() in ("true", "1")
            extract(synth_dir, fdir, ExtractConfig(split=SplitMode(mode), values=values))
        feats[mode] = fdir
    return feats


def run_grid(synth_dir: Path | str, out_dir: Path | str, cfg: GridConfig | None = None) -> GridResult:
    """The whole benchmark; tables go to ``out_dir`` (see the module docstring)."""
    cfg = cfg or GridConfig()
    unknown = sorted(set(cfg.variants) - set(MODELS))
    if unknown:
        raise GridError(f"unknown variant(s) {unknown}; choose from {list(MODELS)}")
    if cfg.device is not None:  # a device not here fails before any job starts
        from pipeline.core.devices import resolve_device

        resolve_device(cfg.device)
    out = Path(out_dir).resolve()
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    feats = prepare_features(Path(synth_dir).resolve(), out, cfg)
    t1 = time.perf_counter()
    grid = grid_jobs(cfg)
    store.experiment_id(cfg.experiment)  # created here, not by two jobs racing to create it
    context = multiprocessing.get_context("spawn")  # no torch state inherited from the parent
    with ProcessPoolExecutor(max_workers=max(1, cfg.jobs), mp_context=context, max_tasks_per_child=1,
                             initializer=_worker_init, initargs=(store.tracking_uri(),)) as pool:
        futures = {pool.submit(run_job, feats[mode], v, mode, s, cfg, work): (v, mode, s) for v, mode, s in grid}
        run_ids = []
        for future, (v, mode, s) in futures.items():
            try:
                run_ids.append(future.result())
            except Exception as exc:
                pool.shutdown(wait=False, cancel_futures=True)  # the jobs not started yet do not start
                raise GridError(f"{v} {mode} seed {s} failed: {type(exc).__name__}: {exc}") from exc
            record_grid_run(out, run_ids[-1], v, mode, s)
    t2 = time.perf_counter()
    _, tables = compare(run_ids=run_ids, out_dir=out)
    t3 = time.perf_counter()
    return GridResult(run_ids, tables, t3 - t0, {"data": t1 - t0, "train+evaluate": t2 - t1, "compare": t3 - t2})
