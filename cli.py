"""Command line of the MIMIC-III / MIMIC-IV mortality-risk pipeline.

Each command is a thin typed wrapper over a library function in `pipeline/` that returns data; the
long option lists come from the config dataclasses (`pipeline.cli.options.with_config_options`). Heavy
libraries (torch, mlflow, duckdb, pandas) are imported inside the commands so that `--help` answers
at once. A library error (`pipeline.core.errors.PipelineError`) prints as one line (exit code 2); any other
exception is a bug or an environment problem: one line too, its traceback in a log file (exit code 3).
Run it as `python cli.py` or, installed, as `mimic-risk`.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import typing
from pathlib import Path
from typing import Callable, Optional

import typer

from pipeline.bayes.laplace.options import LaplaceOptions
from pipeline.cli import options
from pipeline.cli.grid_options import GridOptions
from pipeline.cli.options import ALIASES, at_least, config_options, with_config_options
from pipeline.cli.train_options import TrainOptions
from pipeline.core.contracts import SAMPLES_SHOWN
from pipeline.core.errors import PipelineError
from pipeline.data.mimic.extraction.config import ExtractConfig
from pipeline.data.mimic.sources.stage import StageConfig
from pipeline.data.mimic.sources.tables import Release
from pipeline.data.mimic.synth.limits import MAX_DENSITY, MAX_PATIENTS
from pipeline.serving.config import ScoreConfig, ScoreOptions
from pipeline.serving.server import ServeConfig
from pipeline.tasks.mortality.baselines.config import BASELINES
from pipeline.tasks.mortality.config import MortalityConfig
from pipeline.tasks.mortality.train_config import TrainConfig, preset_notes
from pipeline.tasks.vision.config import DATASET_MODEL_DEFAULTS, Dataset, VisionEvalOptions, VisionTrainConfig
from pipeline.tasks.vision.model_config import VisionConfig
from pipeline.workflows.evaluate_config import EvalConfig, EvalOptions

__all__ = ["ALIASES", "app", "config_options", "main"]  # ALIASES, config_options: mlflow/render_mlproject.py's

app = typer.Typer(cls=options.WholeWordsGroup, add_completion=False, no_args_is_help=True, help=__doc__.splitlines()[0],
                  rich_markup_mode=None, context_settings={"max_content_width": 100})
LOG_DIR_ENV = "PIPELINE_LOG_DIR"  # where an unexpected error's traceback goes (default runs/logs)


def command(*args, on: typer.Typer | None = None, **kwargs) -> Callable:
    """``app.command`` (``on``: a sub-app's) whose function reports a ``PipelineError`` as one line
    ``error: ...`` (exit 2) and any other exception as one line pointing to a log file with its
    traceback (exit 3)."""

    def register(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*a, **kw):
            try:
                return fn(*a, **kw)
            except PipelineError as exc:
                _fail(str(exc))
            except (typer.Exit, typer.Abort, options.ClickException):
                raise
            except KeyboardInterrupt:
                typer.secho("interrupted", err=True, fg=typer.colors.RED)
                raise typer.Exit(code=130) from None
            except Exception as exc:  # a bug or an environment problem: never a raw traceback on the screen
                _unexpected(fn.__name__, exc)

        return (on or app).command(*args, cls=options.WholeWordsCommand, **kwargs)(run)

    return register


def _fail(message: str) -> typing.NoReturn:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(code=2)


def _unexpected(name: str, exc: BaseException) -> typing.NoReturn:
    """One line naming the exception and the log file that holds its traceback; exit code 3."""
    import tempfile
    import traceback

    first = (str(exc).strip().splitlines() or [""])[0][:200]
    try:
        folder = Path(os.environ.get(LOG_DIR_ENV) or Path("runs") / "logs")
        folder.mkdir(parents=True, exist_ok=True)
        fd, path = tempfile.mkstemp(prefix=f"{name}-error-", suffix=".log", dir=folder)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"cli.py {' '.join(sys.argv[1:2])}: unexpected {type(exc).__name__}\n")
            traceback.print_exception(exc, file=fh)
        where = f"the traceback is in {path}"
    except OSError as err:
        where = f"the traceback could not be written ({type(err).__name__}); run with PYTHONFAULTHANDLER or a debugger"
    typer.secho(f"error: unexpected {type(exc).__name__} in `{name.replace('_', '-')}`: {first} ({where})",
                err=True, fg=typer.colors.RED)
    raise typer.Exit(code=3)


def _setup_logging(verbose: bool) -> None:
    level = logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    for handler in logging.getLogger().handlers:
        handler.setLevel(level)  # a logger lowered for a status line (progress.LogStatus) does not print more


# ---------------------------------------------------------------------------- commands


@command(short_help="Generate a synthetic MIMIC-III or MIMIC-IV with a known true risk.")
def synth(
    out: Path = typer.Option(..., help="Directory for the synthetic MIMIC tables (TABLE.csv.gz)."),
    patients: int = typer.Option(2000, min=1, max=MAX_PATIENTS, help="Number of patients."),
    seed: int = typer.Option(0, min=0, help="Random seed."),
    density: float = typer.Option(1.0, min=0.001, max=MAX_DENSITY, help="Event density scale (1.0 = about 5,400 "
                                                                        "CHARTEVENTS rows per ICU stay)."),
    layout: Release = typer.Option(Release.mimic3, help="mimic-iii: the MIMIC-III v1.4 layout; mimic-iv: MIMIC-IV's "
                                                        "hosp/ and icu/ modules (the same synthetic world)."),
    workers: int = typer.Option(1, min=1, help="Processes generating and compressing chunks (the same bytes as 1)."),
    proportions: Release = typer.Option(Release.mimic3, help="The world's proportions: mimic-iii (every admission "
                                                             "with an ICU stay) or mimic-iv (17% with one, no "
                                                             "newborns or children, more readmissions)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage."),
) -> None:
    """Generate a synthetic MIMIC-III or MIMIC-IV (full-release layout) with a known true risk per admission."""
    _setup_logging(verbose)
    from pipeline.core.progress import Progress
    from pipeline.data.mimic.synth import SynthConfig, generate
    from pipeline.data.mimic.synth.simulation import MIMIC4_PROPORTIONS

    config = SynthConfig(density=density, **(MIMIC4_PROPORTIONS if proportions is Release.mimic4 else {}))
    with Progress("synth: patients", patients, plain=False) as bar:  # a bar on a terminal only
        s = generate(out, patients=patients, seed=seed, config=config, layout=layout, progress=bar.update,
                     workers=workers)
    typer.echo(
        f"synthetic {layout.title} written to {s.out_dir}: {s.patients} patients, {s.admissions} admissions, "
        f"{s.icustays} ICU stays, {s.rows.get('CHARTEVENTS', s.rows.get('chartevents', 0)):,} CHARTEVENTS rows"
    )
    typer.echo(f"  cohort admissions {s.cohort_admissions}, base rate {s.base_rate:.4f}, mean true risk "
               f"{s.mean_true_risk:.4f}")
    typer.echo(f"  true risk per admission (never read by extract): {s.paths.get('truth')}")


@command(short_help="Extract de-identified features from MIMIC-III or MIMIC-IV.")
@with_config_options(ExtractConfig, limits={
    **at_least(1, "scan_workers", "threads", "n_bins", "max_text_values", "text_max_len"),
    **dict.fromkeys(("train_fraction", "val_fraction"), {"min": 0.0, "max": 1.0})})
def extract(
    source: str = typer.Option(..., help="MIMIC-III or MIMIC-IV CSV directory (MIMIC-IV: hosp/ and icu/), a stage "
                                          "written by `stage` (recommended for real data), or a postgresql:// DSN."),
    out: Path = typer.Option(..., help="Output directory for the features."),
    schema: str = typer.Option("mimiciii", help="PostgreSQL schema holding the MIMIC-III tables; when it has none, "
                                                "MIMIC-IV's mimiciv_hosp and mimiciv_icu. For MIMIC-IV: a prefix P "
                                                "(P_hosp, P_icu) or 'HOSP,ICU'."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage's time."),
    settings: dict = None,
) -> None:
    """Extract de-identified, time-bagged token sequences (one Parquet file per split)."""
    _setup_logging(verbose)
    from pipeline.core.progress import LogStatus
    from pipeline.data.mimic.extraction import extract as run_extract

    cfg = ExtractConfig(**settings[ExtractConfig])
    with LogStatus("extract", "pipeline.data.mimic.extraction"):  # on a terminal: the stage that just finished
        result = run_extract(source, out, cfg, schema=schema)
    m = result.manifest
    typer.echo(f"features written to {result.out_dir} (link file: {result.link_file}); release {m['release']}")
    for name, s in m["splits"].items():
        typer.echo(f"  {name:6s} admissions={s['admissions']:6d} positives={s['positives']:5d} "
                   f"label_rate={s['label_rate']}")
    typer.echo(json.dumps({"cohort": m["cohort"], "vocab": m["vocab"]}))


@command(short_help="Stage a MIMIC CSV directory as Parquet: re-extract in seconds.")
@with_config_options(StageConfig, limits=at_least(1, "row_group_rows", "workers", "threads"))
def stage(
    source: Path = typer.Option(..., help="MIMIC-III or MIMIC-IV CSV directory (TABLE.csv or TABLE.csv.gz; MIMIC-IV: "
                                           "hosp/ and icu/)."),
    out: Path = typer.Option(..., help="Stage directory (Parquet per table, stage.json); give it to `extract "
                                       "--source`."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each table's conversion."),
    settings: dict = None,
) -> None:
    """Convert each table the extraction reads, typed as it types it, to Parquet once (with a manifest of the
    source files' sizes and checksums); `extract --source STAGE_DIR` then gives the same features, faster."""
    _setup_logging(verbose)
    from pipeline.core.progress import Progress
    from pipeline.data.mimic.sources.stage import stage_csv

    with Progress("stage: per mille of the source bytes", 1000, plain=False) as bar:  # a bar on a terminal only
        m = stage_csv(source, out, StageConfig(**settings[StageConfig]),
                      progress=lambda done, total, status: bar.update(1000 * done // total, status))
    typer.echo(f"{Release(m['release']).title} stage written to {out}: {len(m['tables'])} tables")
    for name, t in m["tables"].items():
        typer.echo(f"  {name:20s} rows={t['rows']:12,d} rejected_lines={len(t['rejects'])}")


@command("load-postgres", short_help="Load MIMIC-III or MIMIC-IV CSV files into PostgreSQL.")
def load_postgres(
    source: Path = typer.Option(..., help="MIMIC-III CSV directory (TABLE.csv or TABLE.csv.gz), or MIMIC-IV's "
                                           "(hosp/, icu/)."),
    dsn: str = typer.Option(..., envvar="MIMIC_PG_DSN", help="PostgreSQL DSN (password better in PGPASSWORD or "
                                                             "~/.pgpass)."),
    schema: Optional[str] = typer.Option(None, help="Target schema (mimic-code layout) [default: mimiciii; for "
                                                    "MIMIC-IV the prefix of P_hosp and P_icu, mimiciv]."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each table's load."),
) -> None:
    """Load a MIMIC-III or MIMIC-IV CSV directory into PostgreSQL with mimic-code's table definitions."""
    _setup_logging(verbose)
    from pipeline.data.mimic.sources.pgload import load_mimic_csv, source_release, target_schema

    release = source_release(source)
    for table, n in load_mimic_csv(dsn, source, schema=schema).items():
        typer.echo(f"{target_schema(table, release, schema)}.{table}: {n} rows")


@command(short_help="Train a model, log it to MLflow, print its run id.")
@with_config_options(TrainOptions, TrainConfig, MortalityConfig, notes=preset_notes())
def train(settings: dict | None = None) -> None:
    """Train a mortality model (torchrun-ready), log it to MLflow and print its run id."""
    o = TrainOptions(**settings[TrainOptions])
    _setup_logging(o.verbose)
    if o.model in BASELINES:
        from pipeline.tasks.mortality.baselines.config import BaselineConfig
        from pipeline.workflows.baselines_run import train_baseline

        t = settings[TrainConfig]
        cfg = BaselineConfig.from_train_settings(o.model, t, settings[MortalityConfig], preset=o.preset,
                                                 resume=o.resume)
        return typer.echo(train_baseline(o.data, o.model, cfg, **o.run_kwargs(), refer_fraction=t.get(
            "refer_fraction", TrainConfig.refer_fraction)).summary())
    from pipeline.tasks.mortality.variants import resolve
    from pipeline.workflows.train import train as run_train

    kind, variant_settings = resolve(o.model)
    cfg = TrainConfig.from_preset(o.preset, **settings[TrainConfig],
                                  model={**variant_settings, **settings[MortalityConfig]})
    r = run_train(o.data, kind, cfg, resume=o.resume, device=o.device, **o.run_kwargs())
    if r.refer_threshold is not None:  # None: ranks > 0 of a distributed run
        typer.echo(r.summary())


@command(short_help="Evaluate a run: NLL, AUC-PR, ECE, intervals, plots.")
@with_config_options(EvalOptions, EvalConfig, rename={"log_to_run": "log_run"},
                     flags={"log_to_run": ["--log/--no-log"]}, shown={"samples": SAMPLES_SHOWN},
                     limits={**at_least(1, "samples", "batch_size", "threads"), **at_least(0, "n_bootstrap")})
def evaluate(settings: dict = None) -> None:
    """Evaluate a trained run: NLL, AUC-PR, AUC-ROC, ECE, Brier, uncertainty, 95% CIs, plots."""
    o = EvalOptions(**settings[EvalOptions])
    _setup_logging(o.verbose)
    from pipeline.workflows.evaluate import evaluate_run

    cfg = EvalConfig(**settings[EvalConfig])
    for s in o.split:
        typer.echo(evaluate_run(o.run, s.value, cfg, data=o.data, truth=o.truth, json_path=o.json_path,
                                out_dir=(o.out / s.value) if o.out else None, device=o.device).summary())


_EXTRA = {"allow_extra_args": True}


@command(short_help="Subnetwork Laplace on a trained deterministic run.")
@with_config_options(LaplaceOptions)
def laplace(settings: dict = None) -> None:
    """Subnetwork linearized Laplace on a trained deterministic run, logged as a new run (Daxberger et al. 2021)."""
    o = LaplaceOptions(**settings[LaplaceOptions])
    _setup_logging(o.verbose)
    from pipeline.bayes.laplace.config import LaplaceConfig
    from pipeline.workflows.laplace_run import fit_laplace_run

    result = fit_laplace_run(o.run, LaplaceConfig(**o.settings()), **o.run_kwargs())
    if result.report.warning:
        typer.echo(f"warning: {result.report.warning}", err=True)
    typer.echo(result.summary())


@command(context_settings=_EXTRA, options_metavar="[OPTIONS] [RUN_ID]...",
         short_help="Compare evaluated runs: mean ± sd over seeds.")
def compare(
    ctx: typer.Context,
    experiment: Optional[str] = typer.Option(None, help="MLflow experiment whose evaluated runs are compared "
                                                        "(default: mimic-mortality, and vision when present)."),
    runs: Optional[list[str]] = typer.Option(None, "--runs", metavar="<run id>", help="Run ids to compare "
                                             "(repeatable; instead of --experiment); bare run ids after the options "
                                             "count too."),
    out: Path = typer.Option(Path("runs/compare"), help="Directory for compare.md and compare.csv."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log which runs are read."),
) -> None:
    """Models x (val, test) x (NLL, AUC-PR, ECE): mean ± sd over seeds, with the true-risk reference.

    RUN_ID...: run ids to compare (as --runs); none: every evaluated run of the experiment. Runs
    trained on different feature sets are compared within their own feature set (one table section
    and one true-risk row each). Vision runs get their own section per dataset: methods x (clean,
    severities 1..5) x (NLL, accuracy, ECE) (vision.md, vision.csv, vision_<dataset>.png); without
    --experiment and run ids, the mimic-mortality and vision experiments.
    """
    _setup_logging(verbose)
    from pipeline.cli.options import refuse_words, spread
    from pipeline.reports.compare import to_markdown
    from pipeline.reports.compare_vision import compare_all, vision_markdown
    from pipeline.runs.store import RUN_ID

    refuse_words(ctx.args, lambda w: w if RUN_ID.match(w) else None, hint="; run ids are 32 hex digits")
    result = compare_all(experiment, spread(runs, True, ctx.args, lambda w: w) or None, out)
    if result.mortality:
        typer.echo(to_markdown(result.mortality))
    if result.vision:
        typer.echo(vision_markdown(result.vision))
    typer.echo("tables: " + ", ".join(str(f) for f in result.files))


@command(short_help="Score a census: risk, interval, refer flag, report.")
@with_config_options(ScoreOptions, ScoreConfig, limits=at_least(1, "samples", "batch_size", "chunk_rows", "threads"),
                     shown={"samples": SAMPLES_SHOWN})
def score(settings: dict = None) -> None:
    """Score a census: risk mean/sd/p05/p95, mutual information, refer flag per admission."""
    o = ScoreOptions(**settings[ScoreOptions])
    _setup_logging(o.verbose)
    from pipeline.serving.score import score as run_score

    s = run_score(o.model, o.out, cfg=ScoreConfig(**settings[ScoreConfig]), **o.score_kwargs())
    typer.echo(s.summary(o.cross_release))


@command(short_help="Serve a model over HTTP on 127.0.0.1.")
@with_config_options(ServeConfig, flags={"direct": ["--direct/--via-mlflow"]}, limits={
    **at_least(1, "workers", "threads", "max_rows", "timeout_s"), **at_least(0.001, "max_body_mb"),
    "port": {"min": 1, "max": 65535}})
def serve(
    model: str = typer.Option(..., help="MLflow model URI (runs:/<id>/model), run id or model directory."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log MLflow's and uvicorn's debug lines."),
    settings: dict = None,
) -> None:
    """Serve a model with MLflow's scoring server on 127.0.0.1 (POST /invocations)."""
    _setup_logging(verbose)
    from pipeline.serving.server import HOST
    from pipeline.serving.server import serve as run_serve

    cfg = ServeConfig(model=model, **settings[ServeConfig])
    run_serve(cfg, log_level="debug" if verbose else "info",  # the line once the model has loaded
              on_ready=lambda: typer.echo(f"serving {model} on http://{HOST}:{cfg.port}/invocations (Ctrl-C "
                                          "stops)", err=True))


@command("benchmark-models", context_settings=_EXTRA, short_help="Train and evaluate every variant, then compare.")
@with_config_options(GridOptions)
def benchmark_models(ctx: typer.Context, settings: dict = None) -> None:
    """Train and evaluate every model variant x seeds x split modes, then write the comparison."""
    o = GridOptions(**settings[GridOptions])
    _setup_logging(o.verbose)
    from pipeline.workflows.grid import run_grid

    given = {n for n in ("seeds", "splits") if ctx.get_parameter_source(n).name != "DEFAULT"}
    result = run_grid(o.synth_dir, o.out, o.config(ctx.args, given))
    typer.echo((o.out / "compare.md").read_text())
    typer.echo(result.summary())


# ---------------------------------------------------------------------------- image benchmarks

vision_app = typer.Typer(cls=options.WholeWordsGroup, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                         help="Image benchmarks (issue 14): rank-1 WRN / ResNet-50 on digits, CIFAR-10/100 and "
                              "corruptions, tracked in MLflow.", context_settings={"max_content_width": 100})
app.add_typer(vision_app, name="vision", short_help="Image benchmarks: train and evaluate WRN / ResNet-50.")
DIGITS_MODEL_DEFAULTS = DATASET_MODEL_DEFAULTS[Dataset.DIGITS]  # said in the help of --depth / --width


@command("train", on=vision_app, short_help="Train an image model, log it to MLflow, print its run id.")
@with_config_options(VisionTrainConfig, VisionConfig,
                     notes={(VisionConfig, k): f"digits: {v}" for k, v in DIGITS_MODEL_DEFAULTS.items()})
def vision_train(
    out: Optional[Path] = typer.Option(None, help="Directory of model.pt and model_info.json (default "
                                                  "runs/vision/<run id>)."),
    experiment: Optional[str] = typer.Option(None, help="MLflow experiment [default: vision]."),
    run_name: Optional[str] = typer.Option(None, help="MLflow run name [default: <method>-<dataset>-s<seed>]."),
    tracking: bool = typer.Option(True, "--tracking/--no-tracking", help="Log the run to MLflow "
                                                                         "(MLFLOW_TRACKING_URI, default "
                                                                         "sqlite:///mlflow.db)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage."),
    settings: dict | None = None,
) -> None:
    """Train an image model (WRN or ResNet-50; deterministic, BatchEnsemble, rank-1 or deep ensemble) with the
    published recipe, log it to MLflow and print its run id. Defaults per dataset: digits the digits
    benchmark's settings (WRN-10-1 at 16x16, 20 epochs, 64 tiled rows: minutes on a CPU), cifar10/cifar100
    the published CIFAR ones (WRN-28-10, 250 epochs, 512 rows); per method uncertainty-baselines' recipe
    (L2, learning-rate decays, BatchEnsemble's N(1, 0.5) fast weights at half the learning rate). Progress
    on stderr: a bar on a terminal, a plain line every 5% otherwise (docs/vision.md)."""
    _setup_logging(verbose)
    from pipeline.workflows.vision_run import train_run

    cfg = VisionTrainConfig(**settings[VisionTrainConfig], model=settings[VisionConfig])
    r = train_run(cfg, out_dir=out, tracking=tracking, experiment=experiment, run_name=run_name)
    res, val = r.result, r.result.val_metrics
    typer.echo(f"{r.label} on {cfg.dataset.value}: steps={res.steps} ({res.seconds:.0f} s) val_nll={val['nll']:.4f} "
               f"val_accuracy={val['accuracy']:.4f} val_ece={val['ece']:.4f} checkpoint={res.checkpoint}")
    typer.echo(f"run_id: {r.run_id}" if r.run_id else "run_id: none (tracking off)")


@command("evaluate", on=vision_app, short_help="Evaluate a vision run on clean and corrupted test images.")
@with_config_options(VisionEvalOptions)
def vision_evaluate(settings: dict = None) -> None:
    """Evaluate a vision run: NLL of the mixture over S·K draws, accuracy, top-label ECE, diversity and MI on
    the clean test split and (with --corruptions) five corruptions x five severities, with a PNG of each
    metric against the severity."""
    o = VisionEvalOptions(**settings[VisionEvalOptions])
    _setup_logging(o.verbose)
    from pipeline.workflows.vision_run import evaluate_vision_run, format_report

    result = evaluate_vision_run(o.run, o.config(), data_dir=o.data_dir, out_dir=o.out)
    typer.echo(format_report(result.report))
    typer.echo(f"metrics: {result.json_path}" + (f"\nplot: {result.plot}" if result.plot else ""))


def main() -> None:
    """The console script's entry point (``mimic-risk``, pyproject's [project.scripts]): the app."""
    app()


if __name__ == "__main__":
    main()
