"""Command line of the MIMIC-III mortality-risk pipeline.

Each command is a thin typed wrapper over a library function in `pipeline/` that returns data;
heavy libraries (torch, mlflow, duckdb, pandas) are imported inside the commands so that
`python cli.py --help` answers at once. Every library error is a `pipeline.errors.PipelineError`:
the commands let it through and `command` prints it as one line (exit code 2).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import sys
import typing
from dataclasses import MISSING, fields
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from pipeline.configs import field_help
from pipeline.errors import PipelineError
from pipeline.models.config import MortalityConfig
from pipeline.training.config import TrainConfig

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0], rich_markup_mode=None,
                  context_settings={"max_content_width": 100})


def command(*args, **kwargs) -> Callable:
    """``app.command`` whose function reports a ``PipelineError`` as one line ``error: ...`` (exit 2)."""

    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*a, **kw):
            try:
                return fn(*a, **kw)
            except PipelineError as exc:
                _fail(str(exc))

        return app.command(*args, **kwargs)(run)

    return register


def _fail(message: str) -> typing.NoReturn:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code=2)


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


class SplitChoice(str, Enum):
    random = "random"
    era = "era"


class EvalSplit(str, Enum):
    val = "val"
    test = "test"


# ---------------------------------------------------------------------------- options from config fields

# Config fields that `train` does not offer as options (set by the code, not by a user).
NOT_OPTIONS = {"model", "token_vocab", "context_vocab", "sampling"}
# Older, shorter option names kept beside the field names (scripts and the MLproject use them).
ALIASES = {"lstm_hidden": "hidden", "embedding_dim": "embed_dim", "lstm_layers": "layers", "dense_units": "dense"}


def config_options(*classes: type) -> list[tuple[type, str, Any, Any, str]]:
    """(config class, field, annotation, default, help) of every field offered as an option."""
    out = []
    for cls in classes:
        hints = typing.get_type_hints(cls)
        docs = field_help(cls)
        for f in fields(cls):
            if f.name in NOT_OPTIONS:
                continue
            default = f.default if f.default is not MISSING else None
            out.append((cls, f.name, hints[f.name], default, docs.get(f.name, "")))
    return out


def _flags(name: str, annotation) -> list[str]:
    """``--field-name`` (``--x/--no-x`` for a boolean) and its alias."""
    names = [ALIASES[name], name] if name in ALIASES else [name]
    dashed = [f"--{n.replace('_', '-')}" for n in names]
    if annotation is bool:
        return [f"{d}/--no-{d[2:]}" for d in dashed]
    return dashed


def _shown(default) -> str:
    return str(default.value if isinstance(default, Enum) else default)


def with_config_options(*classes: type) -> Callable:
    """Add one ``Optional`` option per config field to a command: the function receives the fields the
    user set as ``settings`` ({field: value}); an unset option is None and keeps the config's (or the
    preset's) default, shown in its help."""

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        base = [p for p in sig.parameters.values() if p.name != "settings"]
        extra, owner = [], {}
        for cls, name, annotation, default, doc in config_options(*classes):
            inner = typing.get_args(annotation)
            typ = next((a for a in inner if a is not type(None)), annotation) if inner else annotation
            doc = doc[:1].upper() + doc[1:]
            help_text = doc if default is None else f"{doc} [default: {_shown(default)}]".strip()
            option = typer.Option(None, *_flags(name, typ), help=help_text, show_default=False)
            extra.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                           annotation=Optional[typ]))
            owner[name] = cls

        @functools.wraps(fn)
        def run(*args, **kwargs):
            settings = {n: kwargs.pop(n) for n in owner if kwargs.get(n) is not None}
            for n in owner:
                kwargs.pop(n, None)
            return fn(*args, settings={c: {n: v for n, v in settings.items() if owner[n] is c} for c in classes},
                      **kwargs)

        run.__signature__ = sig.replace(parameters=[*base, *extra])
        run.__annotations__ = {**{p.name: p.annotation for p in base}, **{p.name: p.annotation for p in extra}}
        run.__wrapped__ = None  # typer must read __signature__, not the wrapped function's
        del run.__wrapped__
        return run

    return decorate


# ---------------------------------------------------------------------------- commands


@command()
def synth(
    out: Path = typer.Option(..., help="Directory for the synthetic MIMIC-III tables (TABLE.csv.gz)."),
    patients: int = typer.Option(2000, min=1, help="Number of patients."),
    seed: int = typer.Option(0, help="Random seed."),
    density: float = typer.Option(1.0, min=0.001, help="Event density scale (1.0 = about 5,400 CHARTEVENTS rows "
                                                       "per ICU stay)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage."),
) -> None:
    """Generate a synthetic MIMIC-III (full-release layout) with a known true risk per admission."""
    _setup_logging(verbose)
    from pipeline.synth import SynthConfig, generate

    s = generate(out, patients=patients, seed=seed, config=SynthConfig(density=density))
    typer.echo(
        f"synthetic MIMIC-III written to {s.out_dir}: {s.patients} patients, {s.admissions} admissions, "
        f"{s.icustays} ICU stays, {s.rows.get('CHARTEVENTS', 0):,} CHARTEVENTS rows"
    )
    typer.echo(f"  cohort admissions {s.cohort_admissions}, base rate {s.base_rate:.4f}, mean true risk "
               f"{s.mean_true_risk:.4f}")
    typer.echo(f"  true risk per admission (never read by extract): {s.paths.get('truth')}")


@command()
def extract(
    source: str = typer.Option(..., help="MIMIC-III CSV directory, or a postgresql:// DSN."),
    out: Path = typer.Option(..., help="Output directory for the features."),
    schema: str = typer.Option("mimiciii", help="PostgreSQL schema holding the MIMIC-III tables."),
    prediction_hours: float = typer.Option(24.0, help="Prediction time, hours after ADMITTIME."),
    lookback_days: float = typer.Option(30.0, help="History used before the prediction time, in days."),
    hourly_hours: Optional[float] = typer.Option(None, help="Hours before the prediction time bagged hourly "
                                                            "(default: prediction hours); older history daily."),
    min_patients: int = typer.Option(5, help="Tokens seen in fewer training patients become out-of-vocabulary."),
    bins: int = typer.Option(5, help="Quantile bins per numeric item."),
    split: SplitChoice = typer.Option(SplitChoice.random, help="random: 80/10/10 by patient; era: carevue "
                                                               "train/val, metavision test."),
    split_seed: int = typer.Option(0, help="Seed of the patient split."),
    memory_limit: str = typer.Option("3GB", help="DuckDB memory limit (spills to disk beyond it)."),
    verify_counts: bool = typer.Option(False, help="Also count every event table with a second scan and stop if "
                                                   "it disagrees with the single-pass count (slower)."),
    scan_workers: int = typer.Option(2, min=1, help="Event tables scanned at once (CSV sources)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage's time."),
) -> None:
    """Extract de-identified, time-bagged token sequences (one Parquet file per split)."""
    _setup_logging(verbose)
    from pipeline.extraction import ExtractConfig, SplitMode, extract as run_extract

    cfg = ExtractConfig(prediction_hours=prediction_hours, lookback_days=lookback_days, hourly_hours=hourly_hours,
                        min_patients=min_patients, n_bins=bins, split=SplitMode(split.value), split_seed=split_seed,
                        memory_limit=memory_limit, verify_counts=verify_counts, scan_workers=scan_workers)
    result = run_extract(source, out, cfg, schema=schema)
    m = result.manifest
    typer.echo(f"features written to {result.out_dir} (link file: {result.link_file})")
    for name, s in m["splits"].items():
        typer.echo(f"  {name:6s} admissions={s['admissions']:6d} positives={s['positives']:5d} "
                   f"label_rate={s['label_rate']}")
    typer.echo(json.dumps({"cohort": m["cohort"], "vocab": m["vocab"]}))


@command("load-postgres")
def load_postgres(
    source: Path = typer.Option(..., help="MIMIC-III CSV directory (TABLE.csv or TABLE.csv.gz)."),
    dsn: str = typer.Option(..., envvar="MIMIC_PG_DSN", help="PostgreSQL DSN (password better in PGPASSWORD or "
                                                             "~/.pgpass)."),
    schema: str = typer.Option("mimiciii", help="Target schema (mimic-code layout)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each table's load."),
) -> None:
    """Load a MIMIC-III CSV directory into PostgreSQL with mimic-code's table definitions."""
    _setup_logging(verbose)
    from pipeline.sources.pgload import load_mimic_csv

    for table, n in load_mimic_csv(dsn, source, schema=schema).items():
        typer.echo(f"{schema}.{table}: {n} rows")


@command()
@with_config_options(TrainConfig, MortalityConfig)
def train(
    data: Path = typer.Option(..., help="Features directory written by `extract` (train/val Parquet, vocab.json)."),
    model: str = typer.Option("rank1", help="A model kind (deterministic, bayes-emb, bayes-full, batchensemble, "
                                            "rank1, deep-ensemble), a variant name of `compare` (rank1-gaussian, "
                                            "rank1-cauchy, ...) or a classical baseline (logreg, gbm: settings "
                                            "chosen on validation; takes --seed, --threads, --refer-fraction)."),
    out: Optional[Path] = typer.Option(None, help="Checkpoint directory (default runs/train/<run id>; without "
                                                  "tracking runs/train/<model>-s<seed>)."),
    preset: str = typer.Option("default", help="default (minutes on 2 CPU cores) | paper (LSTM 256, 20k steps) | "
                                               "records-research (the authors' MIMIC-III flag defaults: LSTM 256, "
                                               "10k steps, N(1, 1) prior, random signs, Keras init...); options "
                                               "below override it."),
    resume: bool = typer.Option(False, "--resume", help="Continue from OUT/last.pt (same settings; max-steps may "
                                                        "grow)."),
    experiment: Optional[str] = typer.Option(None, help="MLflow experiment [default: mimic-mortality]."),
    run_name: Optional[str] = typer.Option(None, help="MLflow run name."),
    tracking: bool = typer.Option(True, "--tracking/--no-tracking", help="Log the run to MLflow "
                                                                         "(MLFLOW_TRACKING_URI, default "
                                                                         "sqlite:///mlflow.db)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress lines and stages."),
    settings: dict | None = None,
) -> None:
    """Train a mortality model (torchrun-ready), log it to MLflow and print its run id."""
    _setup_logging(verbose)
    from pipeline.baselines.config import BASELINES

    if model in BASELINES:
        _train_baseline(data, model, out, preset, resume, experiment, run_name, tracking, settings)
        return
    from pipeline.models.variants import resolve
    from pipeline.training import train as run_train

    kind, variant_settings = resolve(model)
    cfg = TrainConfig.from_preset(preset, **settings[TrainConfig],
                                  model={**variant_settings, **settings[MortalityConfig]})
    result = run_train(data, kind, cfg, out_dir=out, resume=resume, tracking=tracking, experiment=experiment,
                       run_name=run_name)
    if result.refer_threshold is None:  # ranks > 0 of a distributed run
        return
    typer.echo(f"steps={result.steps} best_step={result.best_step} best_val_nll={result.best_val_nll:.6f} "
               f"refer_threshold={result.refer_threshold:.6g} checkpoint={result.best_checkpoint}")
    typer.echo(f"run_id: {result.run_id}" if result.run_id else "run_id: none (tracking off)")


BASELINE_TRAIN_OPTIONS = ("seed", "threads", "refer_fraction", "progress")  # train options a baseline takes


def _train_baseline(data: Path, model: str, out: Optional[Path], preset: str, resume: bool,
                    experiment: Optional[str], run_name: Optional[str], tracking: bool, settings: dict) -> None:
    """`train --model logreg|gbm`: a classical baseline, every choice made on validation."""
    from pipeline.baselines.config import BaselineConfig
    from pipeline.training.baselines import train_baseline

    def flags(names) -> str:
        return ", ".join("--" + n.replace("_", "-") for n in names)

    refused = sorted(set(settings[TrainConfig]) - set(BASELINE_TRAIN_OPTIONS)) + sorted(settings[MortalityConfig])
    refused += (["preset"] if preset != "default" else []) + (["resume"] if resume else [])
    if refused:
        _fail(f"{model} is a classical baseline: {flags(refused)} do not apply to it (it takes "
              f"{flags(BASELINE_TRAIN_OPTIONS)})")
    train_settings = settings[TrainConfig]
    cfg = BaselineConfig(seed=train_settings.get("seed", 0), threads=train_settings.get("threads"))
    r = train_baseline(data, model, cfg, out_dir=out, tracking=tracking, experiment=experiment, run_name=run_name,
                       refer_fraction=train_settings.get("refer_fraction", TrainConfig.refer_fraction))
    chosen = " ".join(f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.chosen.items()
                      if k != "val_nll")
    typer.echo(f"{r.kind}: {chosen} best_val_nll={r.val_nll:.6f} refer_threshold={r.refer_threshold:.6g} "
               f"checkpoint={r.model_file}")
    typer.echo(f"run_id: {r.run_id}" if r.run_id else "run_id: none (tracking off)")


@command()
def evaluate(
    run: str = typer.Option(..., help="MLflow run id (or runs:/<id>/model)."),
    split: list[EvalSplit] = typer.Option([EvalSplit.test], help="Split(s) to evaluate: val | test (repeatable)."),
    samples: Optional[int] = typer.Option(None, min=1, help="Monte Carlo samples per mixture component (S·K draws "
                                                            "in all) [default: the model's score_samples, 25]."),
    data: Optional[Path] = typer.Option(None, help="Features directory (default: the one the run was trained on)."),
    truth: Optional[Path] = typer.Option(None, help="True risk CSV (HADM_ID, TRUE_RISK) (default: "
                                                    "SOURCE/_truth/truth.csv.gz when present)."),
    json_path: Optional[Path] = typer.Option(None, "--json", help="Metrics JSON (one split only) (default: "
                                                                  "OUT/<split>/metrics.json)."),
    out: Optional[Path] = typer.Option(None, help="Directory for JSON and plots (default: runs/eval/<run id>)."),
    batch_size: int = typer.Option(128, min=1, help="Admissions per forward pass (memory grows with it)."),
    bootstrap: int = typer.Option(1000, min=0, help="Bootstrap resamples for the 95% intervals."),
    seed: int = typer.Option(0, help="Seed of the weight draws and the bootstrap."),
    threads: Optional[int] = typer.Option(None, min=1, help="Torch intra-op threads."),
    log_run: bool = typer.Option(True, "--log/--no-log", help="Log metrics and plots to the MLflow run."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage."),
) -> None:
    """Evaluate a trained run: NLL, AUC-PR, AUC-ROC, ECE, Brier, uncertainty, 95% CIs, plots."""
    _setup_logging(verbose)
    from pipeline.evaluation.evaluate import EvalConfig, evaluate_run, format_table

    if json_path is not None and len(split) > 1:
        _fail("--json names one file: give a single --split")
    cfg = EvalConfig(samples=samples, batch_size=batch_size, n_bootstrap=bootstrap, seed=seed, threads=threads,
                     log_to_run=log_run)
    for s in dict.fromkeys(split):
        result = evaluate_run(run, s.value, cfg, data=data, truth=truth, json_path=json_path,
                              out_dir=(out / s.value) if out else None)
        typer.echo(format_table(result.report))
        typer.echo(f"metrics: {result.json_path}")


def _spread(values: list, extras: list[str], accept) -> list:
    """Values of a repeatable option plus the bare words after it (``--runs A B`` = ``--runs A --runs B``)."""
    taken = [accept(w) for w in extras if accept(w) is not None]
    return list(values or []) + taken


def _int_or_none(word: str):
    return int(word) if word.lstrip("-").isdigit() else None


_EXTRA = {"allow_extra_args": True}


@command(context_settings=_EXTRA)
def compare(
    ctx: typer.Context,
    experiment: Optional[str] = typer.Option(None, help="MLflow experiment whose evaluated runs are compared "
                                                        "(default: mimic-mortality)."),
    runs: Optional[list[str]] = typer.Option(None, "--runs", help="Run ids to compare (repeatable; instead of "
                                                                  "--experiment); bare run ids after the options "
                                                                  "count too."),
    out: Path = typer.Option(Path("runs/compare"), help="Directory for compare.md and compare.csv."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log which runs are read."),
) -> None:
    """Models x (val, test) x (NLL, AUC-PR, ECE): mean ± sd over seeds, with the true-risk reference."""
    _setup_logging(verbose)
    from pipeline.evaluation.compare import compare as run_compare, to_markdown
    from pipeline.runs.store import RUN_ID

    bad = [w for w in ctx.args if not RUN_ID.match(w)]
    if bad:
        _fail(f"unexpected argument(s) {bad}; run ids are 32 hex digits")
    runs = _spread(runs, ctx.args, lambda w: w)
    summary, files = run_compare(experiment, runs or None, out)
    typer.echo(to_markdown(summary))
    typer.echo("tables: " + ", ".join(str(f) for f in files))


@command()
def score(
    model: str = typer.Option(..., help="MLflow model URI (runs:/<id>/model) or run id."),
    out: Path = typer.Option(..., help="Scores Parquet file (one row per admission)."),
    data: Optional[Path] = typer.Option(None, help="Features Parquet file or directory (written by `extract`)."),
    source: Optional[str] = typer.Option(None, help="MIMIC-III CSV directory or postgresql:// DSN (extracted with "
                                                    "the training vocabulary)."),
    cohort: Optional[Path] = typer.Option(None, help="With --source: HADM_IDs (one per line) or a SQL condition on "
                                                     "the cohort columns."),
    schema: str = typer.Option("mimiciii", help="PostgreSQL schema of --source."),
    samples: Optional[int] = typer.Option(None, min=1, help="Monte Carlo samples per mixture component [default: "
                                                            "the model's score_samples, 25]."),
    batch_size: int = typer.Option(128, min=1, help="Admissions per forward pass (memory grows with it)."),
    chunk_rows: int = typer.Option(4096, min=1, help="Admissions read at a time (bounds memory; batches are formed "
                                                     "by length within a chunk, so a rank-1 model's Monte Carlo "
                                                     "draws per admission depend on it)."),
    seed: int = typer.Option(0, help="Seed of the weight draws."),
    threads: Optional[int] = typer.Option(None, min=1, help="Torch intra-op threads."),
    as_of: Optional[str] = typer.Option(None, help="With --source: when its data ends, 'YYYY-MM-DD HH:MM[:SS]' on "
                                                   "its clock (default: the newest ADMITTIME/DISCHTIME). Open "
                                                   "admissions whose prediction time is later are flagged "
                                                   "before_prediction_time."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage."),
) -> None:
    """Score a census: risk mean/sd/p05/p95, mutual information, refer flag per admission."""
    _setup_logging(verbose)
    from pipeline.serving.score import ScoreConfig, score as run_score

    cfg = ScoreConfig(samples=samples, batch_size=batch_size, chunk_rows=chunk_rows, seed=seed, threads=threads)
    s = run_score(model, out, data=data, source=source, cohort=cohort, cfg=cfg, schema=schema, as_of=as_of)
    typer.echo(f"scores written to {s.out}: {s.admissions} admissions, {s.referred} referred, "
               f"{s.no_events} without events, {s.samples}x{s.components} draws"
               + (f", {s.before_prediction_time} before their prediction time (partial window)"
                  if s.before_prediction_time else "")
               + (f"; {s.not_scored} cohort HADM_IDs not scored (see the log)" if s.not_scored else ""))


def _settings(pairs: list[str]) -> tuple[dict, dict]:
    """``FIELD=VALUE`` words -> (TrainConfig settings, MortalityConfig settings); values read as JSON
    where they parse (numbers, true/false, null), else as text."""
    train_fields = {f.name for f in fields(TrainConfig)} - NOT_OPTIONS
    model_fields = {f.name for f in fields(MortalityConfig)} - NOT_OPTIONS
    out: tuple[dict, dict] = ({}, {})
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in train_fields | model_fields:
            _fail(f"--set {pair!r}: expected FIELD=VALUE with FIELD one of {sorted(train_fields | model_fields)}")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        out[0 if name in train_fields else 1][name] = value
    return out


@command("benchmark-models", context_settings=_EXTRA)
def benchmark_models(
    ctx: typer.Context,
    synth_dir: Path = typer.Option(..., "--synth", help="Synthetic MIMIC-III directory (generated when missing)."),
    out: Path = typer.Option(..., help="Output directory (features, work dirs, compare.md/csv)."),
    seeds: list[int] = typer.Option([0, 1, 2], help="Training seeds (repeatable)."),
    models: Optional[list[str]] = typer.Option(None, "--models", help="Variants (repeatable) (default: every "
                                                                      "variant of pipeline.models.variants, then "
                                                                      "the baselines logreg and gbm, once per "
                                                                      "split)."),
    splits: list[str] = typer.Option(["random", "era"], help="Feature split modes (repeatable)."),
    max_steps: int = typer.Option(1000, min=1, help="Training steps per run (about 1 minute per run with --jobs 2 "
                                                    "on 2 cores)."),
    eval_every: int = typer.Option(250, min=1, help="Periodic validation interval."),
    samples: Optional[int] = typer.Option(None, min=1, help="Evaluation samples per component [default: the "
                                                            "model's score_samples, 25]."),
    jobs: int = typer.Option(2, min=1, help="Parallel worker processes (one torch thread each)."),
    patients: int = typer.Option(2000, min=1, help="Synthetic patients if the source is generated."),
    experiment: str = typer.Option("benchmark-models", help="MLflow experiment of the grid."),
    batch_size: Optional[int] = typer.Option(None, min=1, help="Training rows per step for every variant "
                                                               "(ensembles: distinct admissions = rows / K) "
                                                               "[default: 64]."),
    preset: str = typer.Option("default", help="Training preset of the LSTM variants (default | paper | "
                                               "records-research); --max-steps, --eval-every and --set win."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="A training or model setting for every LSTM "
                                                                 "variant, FIELD=VALUE (repeatable; the fields of "
                                                                 "`train`'s options: lstm_hidden=128, "
                                                                 "anneal_steps=500, ...)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each job."),
) -> None:
    """Train and evaluate every model variant x seeds x split modes, then write the comparison."""
    _setup_logging(verbose)
    from pipeline.grid import MODELS, GridConfig, run_grid

    modes = ("random", "era")
    bad = [w for w in ctx.args if _int_or_none(w) is None and w not in MODELS and w not in modes]
    if bad:
        _fail(f"unexpected argument(s) {bad}")
    given = {n for n in ("seeds", "splits") if ctx.get_parameter_source(n).name != "DEFAULT"}
    seeds = _spread(seeds if "seeds" in given else [], ctx.args, _int_or_none) if any(
        _int_or_none(w) is not None for w in ctx.args) else seeds
    models = _spread(models, ctx.args, lambda w: w if w in MODELS else None)
    splits = _spread(splits if "splits" in given else [], ctx.args, lambda w: w if w in modes else None) if any(
        w in modes for w in ctx.args) else splits
    train_set, model_set = _settings(set_ or [])
    cfg = GridConfig(seeds=tuple(seeds), variants=tuple(models or MODELS), split_modes=tuple(splits),
                     max_steps=max_steps, eval_every=min(eval_every, max_steps), samples=samples, jobs=jobs,
                     patients=patients, experiment=experiment, preset=preset,
                     train_overrides={**train_set, **({"batch_size": batch_size} if batch_size else {})},
                     model_overrides=model_set)
    result = run_grid(synth_dir, out, cfg)
    typer.echo((out / "compare.md").read_text())
    stages = ", ".join(f"{k} {v:.0f} s" for k, v in result.stage_s.items())
    typer.echo(f"{len(result.run_ids)} runs in {result.wall_s:.0f} s ({stages}); tables: "
               + ", ".join(str(t) for t in result.tables))


if __name__ == "__main__":
    app()
