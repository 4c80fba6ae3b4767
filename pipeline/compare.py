"""Comparison of evaluated runs across seeds, and the benchmark grid that produces them.

``collect`` reads every evaluated run (the ``eval/<split>/metrics.json`` artifacts that
``pipeline.evaluate`` logs) of an experiment or a list of run ids into one row per run.
``summarize`` groups the rows by model (kind, plus the prior for rank-1) and feature split
mode (``random``, or ``era``: carevue-era train, metavision-era test) and gives mean ± sd
over seeds of NLL, AUC-PR and ECE on val and test, the test NLL gap to the true risk, and a
true-risk reference row per split mode. ``write_tables`` writes Markdown and CSV atomically.

``run_grid`` is the benchmark: synthetic MIMIC-III (cached) -> random and era extractions ->
every model variant x seeds as parallel subprocesses (``python -m pipeline.compare``, one
torch thread each: ``train.train`` then ``evaluate.evaluate_run`` on val and test) -> the
comparison tables.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline import io

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("val", "test")  # evaluated splits in the table
TABLE_METRICS = ("nll", "auc_pr", "ece")  # metrics in the table
GAP = "test_nll_gap"  # model NLL - true-risk NLL (the true-risk row's own is 0)
PARTIAL_NA = ("test_ece_floor",)  # n/a unless every run of the row has it (older evaluations lack it)
# model variants of the benchmark, in table order: name -> (model kind, MortalityConfig settings)
VARIANT_SPECS: dict[str, tuple[str, dict]] = {
    "deterministic": ("deterministic", {}),
    "bayes-emb": ("bayes-emb", {}),
    "bayes-full": ("bayes-full", {}),
    "batchensemble": ("batchensemble", {}),
    "rank1-gaussian": ("rank1", {"prior": "gaussian"}),
    "rank1-cauchy": ("rank1", {"prior": "cauchy"}),
    # rank-1 with BatchEnsemble's random-sign factor start under a prior wide enough not to undo it
    # (N(1, 1): a -1 start costs 2 nats, not the 200 of N(1, 0.1)); README "Comparison"
    "rank1-signs": ("rank1", {"prior": "gaussian", "factor_init": "random_sign", "prior_stddev": 1.0}),
    # the same start under a sign-symmetric prior, ½N(1, 0.1) + ½N(-1, 0.1): a sign costs nothing
    "rank1-symmetric": ("rank1", {"prior": "gaussian", "factor_init": "random_sign", "prior_signs": True}),
    "deep-ensemble": ("deep-ensemble", {}),
}
VARIANTS = tuple(VARIANT_SPECS)
TRUE_RISK = "true risk"  # model label of the Bayes-optimal reference row


class CompareError(ValueError):
    """No evaluated runs, or a run that cannot be read."""


# ---------------------------------------------------------------------------- collecting runs


def model_label(kind: str | None, prior: str | None) -> str:
    """``rank1-<prior>`` for rank-1 models, the kind otherwise."""
    return f"rank1-{prior or 'gaussian'}" if kind == "rank1" else str(kind)


def _canon(value) -> str:
    """A setting's value as text, numbers written one way ("1", "1.0" and 1 -> "1")."""
    text = str(value)
    try:
        f = float(text)
    except ValueError:
        return text
    return str(int(f)) if f.is_integer() else repr(f)


def setting_defaults() -> dict[str, str]:
    """``model.<field>`` and ``train.<field>`` defaults of MortalityConfig and TrainConfig, as text: a
    setting a run does not record (it predates the setting) had this value."""
    from dataclasses import MISSING, fields
    from enum import Enum

    from pipeline.models import MortalityConfig
    from pipeline.train import TrainConfig

    out = {}
    for prefix, cls in (("model", MortalityConfig), ("train", TrainConfig)):
        for f in fields(cls):
            if f.default is not MISSING:
                out[f"{prefix}.{f.name}"] = str(f.default.value if isinstance(f.default, Enum) else f.default)
    return out


def variant_label(kind: str | None, model_config: dict, defaults: dict[str, str] | None = None) -> str:
    """The benchmark variant ``model_config`` is: the one whose settings it has, and the defaults for
    every setting that another variant of the same kind changes; else ``model_label``. Values compare
    as text or numbers (MLflow params are strings); a setting missing from ``model_config`` counts
    as its default."""
    defaults = setting_defaults() if defaults is None else defaults
    keys = {key for k, settings in VARIANT_SPECS.values() if k == kind for key in settings}

    def value(cfg: dict, key: str):
        return cfg.get(key, defaults.get(f"model.{key}"))

    for name, (k, settings) in VARIANT_SPECS.items():
        if k == kind and all(_canon(value(model_config, key)) == _canon(value(settings, key)) for key in keys):
            return name
    return model_label(kind, model_config.get("prior"))


def _reports(client, run_id: str, tmp: Path) -> dict[str, dict]:
    out = {}
    for split in SPLITS:
        try:
            path = client.download_artifacts(run_id, f"eval/{split}/metrics.json", str(tmp / run_id))
        except Exception:  # not evaluated on this split
            continue
        out[split] = io.read_json(path)
    return out


def collect(experiment: str | None = None, run_ids: list[str] | None = None) -> list[dict]:
    """One row per evaluated run: model, split_mode, seed and ``<split>_<metric>`` values."""
    from mlflow.tracking import MlflowClient

    from pipeline.tracking import DEFAULT_EXPERIMENT, tracking_uri

    client = MlflowClient(tracking_uri())
    if run_ids:
        runs = []
        for r in run_ids:
            try:
                runs.append(client.get_run(r))
            except Exception as exc:  # noqa: BLE001 - MlflowException and store errors alike
                raise CompareError(f"run {r} not found in {tracking_uri()} ({type(exc).__name__})") from None
    else:
        name = experiment or DEFAULT_EXPERIMENT
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise CompareError(f"experiment {name!r} not found in {tracking_uri()}")
        runs = client.search_runs([exp.experiment_id], "attributes.status = 'FINISHED'", max_results=10_000)
    rows, defaults = [], setting_defaults()
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        for run in runs:
            reports = _reports(client, run.info.run_id, Path(tmp))
            if not reports:
                continue
            rows.append(_row(run, reports, defaults))
    if not rows:
        raise CompareError("no evaluated runs (run `cli.py evaluate --run ID --split val --split test` first)")
    return rows


# run params that do not define a variant: seeds make the spread, the rest are logistics
_NOT_SETTINGS = {"train.seed", "train.progress", "train.threads", "train.log_every", "train.eval_every",
                 "train.eval_batch_size", "model.token_vocab", "n_train", "n_val", "world_size"}


def settings_of(params: dict, reports: dict[str, dict]) -> dict[str, str]:
    """What defines a run's variant beyond its model label: the model and training params (seed and
    logistics excluded), the features it was trained on, and the samples of each evaluation."""
    out = {k: str(v) for k, v in params.items()
           if (k.startswith(("model.", "train.")) or k in ("features", "distinct_per_step")) and k not in _NOT_SETTINGS}
    out.update({f"eval.{split}.samples": str(rep.get("samples")) for split, rep in reports.items()})
    return out


def _row(run, reports: dict[str, dict], defaults: dict[str, str]) -> dict:
    first = next(iter(reports.values()))
    params = run.data.params
    model_config = {k.removeprefix("model."): v for k, v in params.items() if k.startswith("model.")}
    row = {"run_id": run.info.run_id, "model": variant_label(first.get("model_kind"),
                                                             model_config or {"prior": first.get("prior")}, defaults),
           "split_mode": first.get("split_mode") or run.data.tags.get("split_mode", "unknown"),
           "seed": int(params.get("train.seed", -1)), "start_time": int(run.info.start_time or 0),
           "settings": settings_of(params, reports)}
    for split, rep in reports.items():
        ref = rep.get("true_risk") or {}
        for m in (*TABLE_METRICS, "ece_floor"):
            row[f"{split}_{m}"] = rep.get(m)
            row[f"{split}_true_{m}"] = ref.get(m)
        for m in TABLE_METRICS:
            row[f"{split}_{m}_gap"] = rep.get(f"{m}_gap")
    return row


# ---------------------------------------------------------------------------- summary tables


def _mean_sd(values: list) -> tuple[float, float, int]:
    v = [float(x) for x in values if x is not None and math.isfinite(float(x))]
    if not v:
        return math.nan, math.nan, 0
    mean = sum(v) / len(v)
    sd = math.sqrt(sum((x - mean) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else math.nan
    return mean, sd, len(v)


def summary_columns() -> list[str]:
    """Metric columns of the summary: ``<split>_<metric>``, ``test_nll_gap`` and ``test_ece_floor``."""
    return [f"{s}_{m}" for s in SPLITS for m in TABLE_METRICS] + [GAP, "test_ece_floor"]


def label_variants(rows: list[dict], defaults: dict[str, str] | None = None) -> list[dict]:
    """Rows whose settings differ within one (split_mode, model) become separate variants, labelled
    by the differing settings (``rank1-gaussian [model.lstm_hidden=256]``); a setting a run does not
    record counts as its default (``setting_defaults``: older runs predate it). Within a variant, a
    seed evaluated by several runs counts once (the latest run), never twice."""
    defaults = setting_defaults() if defaults is None else defaults
    by_model: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by_model.setdefault((r["split_mode"], r["model"]), []).append(r)
    out = []
    for (mode, model), g in by_model.items():
        keys = sorted({k for r in g for k in r.get("settings", {})})

        def value(r: dict, k: str) -> str:
            return _canon(r.get("settings", {}).get(k, defaults.get(k, "None")))

        differ = [k for k in keys if len({value(r, k) for r in g}) > 1]
        latest: dict[tuple, dict] = {}
        for n, r in enumerate(sorted(g, key=lambda r: r.get("start_time", 0))):
            tag = tuple((k, value(r, k)) for k in differ)
            seed = r["seed"] if r["seed"] >= 0 else f"unknown-{n}"  # runs without a recorded seed never merge
            if (tag, seed) in latest:
                log.warning("%s (%s): seed %s evaluated by more than one run; the latest (%s) is used",
                            model, mode, seed, r["run_id"])
            latest[(tag, seed)] = r
        for (tag, _), r in latest.items():
            label = f"{model} [{', '.join(f'{k}={v}' for k, v in tag)}]" if tag else model
            out.append({**r, "model": label})
    return out


def summarize(rows: list[dict]) -> list[dict]:
    """Mean and sd over seeds per (split_mode, model variant), plus a true-risk row per split mode."""
    order = {v: i for i, v in enumerate(VARIANTS)}
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in label_variants(rows):
        groups.setdefault((r["split_mode"], r["model"]), []).append(r)
    out = []
    for mode in sorted({k[0] for k in groups}):
        models = sorted((m for md, m in groups if md == mode),
                        key=lambda m: (order.get(m.split(" [")[0], len(order)), m))
        for model in models:
            g = groups[(mode, model)]
            rec = {"split_mode": mode, "model": model, "seeds": len(g)}
            for col in summary_columns():
                rec[f"{col}_mean"], rec[f"{col}_sd"], n = _mean_sd([r.get(col) for r in g])
                if col in PARTIAL_NA and 0 < n < len(g):  # runs evaluated before it existed: not the same runs
                    rec[f"{col}_mean"] = rec[f"{col}_sd"] = math.nan
            out.append(rec)
        runs = [r for (md, _), g in groups.items() if md == mode for r in g]
        truth = {"split_mode": mode, "model": TRUE_RISK, "seeds": 0, f"{GAP}_mean": 0.0,
                 f"{GAP}_sd": math.nan}  # the reference's gap to itself
        own = [c for c in summary_columns() if c != GAP]
        for col in own:  # val_nll -> val_true_nll, ...
            truth[f"{col}_mean"], truth[f"{col}_sd"], _ = _mean_sd([r.get(col.replace("_", "_true_", 1))
                                                                    for r in runs])
        if any(math.isfinite(truth[f"{c}_mean"]) for c in own):
            out.append(truth)
    return out


def _cell(mean: float, sd: float) -> str:
    if not math.isfinite(mean):
        return "n/a"
    return f"{mean:.4f} ± {sd:.4f}" if math.isfinite(sd) else f"{mean:.4f}"


def to_markdown(summary: list[dict]) -> str:
    """Markdown table (mean ± sd over seeds; a single seed shows the value alone)."""
    cols = summary_columns()
    head = ["split", "model", "seeds"] + [c.replace("_", " ", 1).replace("_", "-") for c in cols]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in summary:
        cells = [r["split_mode"], r["model"], str(r["seeds"] or "")]
        cells += [_cell(r[f"{c}_mean"], r[f"{c}_sd"]) for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    note = ("\nsplit: `random` = 80/10/10 by patient; `era` = carevue-era train/val, metavision-era test "
            "(distribution shift). NLL in nats; ECE with 15 equal-width bins; test nll-gap = model NLL - "
            "true-risk NLL on the same admissions; test ece-floor = the mean test ECE of a perfectly calibrated "
            "predictor making the same predictions (labels drawn from them): a test ECE near its floor is "
            "within chance at this test size.\n")
    return "\n".join(lines) + "\n" + note


def to_csv(summary: list[dict]) -> str:
    """CSV with separate mean and sd columns (empty cells for n/a)."""
    import csv
    import io as _io

    cols = ["split_mode", "model", "seeds"] + [f"{c}_{s}" for c in summary_columns() for s in ("mean", "sd")]
    buf = _io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for r in summary:
        w.writerow([("" if isinstance(r[c], float) and not math.isfinite(r[c]) else
                     (f"{r[c]:.6g}" if isinstance(r[c], float) else r[c])) for c in cols])
    return buf.getvalue()


def write_tables(summary: list[dict], out_dir: Path | str) -> tuple[Path, Path]:
    """``compare.md`` and ``compare.csv`` in ``out_dir`` (atomic writes)."""
    out = Path(out_dir)
    return io.write_text(out / "compare.md", to_markdown(summary)), io.write_text(out / "compare.csv", to_csv(summary))


def compare(experiment: str | None = None, run_ids: list[str] | None = None,
            out_dir: Path | str | None = None) -> tuple[list[dict], list[Path]]:
    """Collect, summarize and (with ``out_dir``) write the tables; returns (summary, files)."""
    summary = summarize(collect(experiment, run_ids))
    files = list(write_tables(summary, out_dir)) if out_dir is not None else []
    return summary, files


# ---------------------------------------------------------------------------- the benchmark grid


@dataclass
class GridConfig:
    """The benchmark grid (every variant x seed x split mode)."""

    seeds: tuple[int, ...] = (0, 1, 2)  # training seeds
    variants: tuple[str, ...] = VARIANTS  # model variants (names of VARIANT_SPECS)
    split_modes: tuple[str, ...] = ("random", "era")  # feature extractions
    max_steps: int = 1000  # training steps per run (about 1 minute per run with 2 parallel jobs on 2 cores)
    eval_every: int = 250  # periodic validation interval
    samples: int = 25  # evaluation samples per component
    eval_batch_size: int = 128  # admissions per 25-sample forward pass (peak memory about 0.5 GB per job)
    jobs: int = 2  # parallel training subprocesses
    patients: int = 2000  # synthetic patients when the source has to be generated
    synth_seed: int = 0  # seed of the synthetic source
    density: float = 1.0  # synthetic event density
    experiment: str = "benchmark-models"  # MLflow experiment of the grid
    train_overrides: dict = field(default_factory=dict)  # extra TrainConfig settings (e.g. batch_size)
    model_overrides: dict = field(default_factory=dict)  # extra MortalityConfig settings (e.g. lstm_hidden)
    timeout_s: float = 3600.0  # limit per job (train + evaluate)


@dataclass
class GridResult:
    """What the grid produced."""

    run_ids: list[str]  # evaluated runs
    tables: list[Path]  # compare.md, compare.csv
    wall_s: float  # total wall time of the grid
    stage_s: dict[str, float] = field(default_factory=dict)  # wall time per stage


def run_job(features: Path | str, variant: str, mode: str, seed: int, cfg: GridConfig) -> str:
    """Train one (variant, mode, seed) and evaluate it on val and test, in this process; returns the run id."""
    from pipeline.evaluate import EvalConfig, evaluate_run
    from pipeline.train import TrainConfig, train

    kind, variant_settings = VARIANT_SPECS[variant]
    model = {**variant_settings, **cfg.model_overrides}
    settings = {"eval_batch_size": cfg.eval_batch_size, **cfg.train_overrides}
    tcfg = TrainConfig.from_preset("default", seed=seed, max_steps=cfg.max_steps, eval_every=cfg.eval_every,
                                   threads=1, progress=False, **settings, model=model)
    result = train(features, kind, tcfg, experiment=cfg.experiment, run_name=f"{variant}-{mode}-s{seed}")
    ecfg = EvalConfig(samples=cfg.samples, batch_size=cfg.eval_batch_size, threads=1)
    for split in SPLITS:
        evaluate_run(result.run_id, split, ecfg, out_dir=Path("eval") / result.run_id / split)
    return result.run_id


def _job(features: Path, variant: str, mode: str, seed: int, cfg: GridConfig, work: Path) -> str:
    """``run_job`` in a subprocess (one torch thread; a crash stays in its job)."""
    spec = {"features": str(features), "variant": variant, "mode": mode, "seed": seed, "config": asdict(cfg)}
    from pipeline.tracking import tracking_uri

    # the job's cwd is its work dir: pin the parent's store (the default one is cwd-relative)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MLFLOW_TRACKING_URI": tracking_uri()}
    proc = subprocess.run([sys.executable, "-m", "pipeline.compare", json.dumps(spec)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=cfg.timeout_s)
    m = re.search(r"^run_id: ([0-9a-f]{32})$", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or not m:
        raise CompareError(f"{variant} {mode} seed {seed} failed: {proc.stderr[-2000:]}")
    return m.group(1)


def prepare_features(synth_dir: Path, out_dir: Path, cfg: GridConfig) -> dict[str, Path]:
    """Synthetic source (generated when missing) and one extraction per split mode (cached)."""
    from pipeline.extract import ExtractConfig, SplitMode, extract

    if not (synth_dir / "ADMISSIONS.csv.gz").exists():
        from pipeline.synth import SynthConfig, generate

        generate(synth_dir, patients=cfg.patients, seed=cfg.synth_seed, config=SynthConfig(density=cfg.density))
    feats = {}
    for mode in cfg.split_modes:
        fdir = out_dir / f"features-{mode}"
        if not (fdir / "manifest.json").exists():
            extract(synth_dir, fdir, ExtractConfig(split=SplitMode(mode)))
        feats[mode] = fdir
    return feats


def run_grid(synth_dir: Path | str, out_dir: Path | str, cfg: GridConfig | None = None) -> GridResult:
    """The whole benchmark; tables go to ``out_dir`` (see the module docstring)."""
    cfg = cfg or GridConfig()
    unknown = sorted(set(cfg.variants) - set(VARIANTS))
    if unknown:
        raise CompareError(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    out = Path(out_dir).resolve()  # jobs run with their own working directory
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    feats = prepare_features(Path(synth_dir).resolve(), out, cfg)
    t1 = time.perf_counter()
    grid = [(v, mode, s) for mode in cfg.split_modes for v in cfg.variants for s in cfg.seeds]
    from pipeline.tracking import experiment_id

    experiment_id(cfg.experiment)  # created here, not by two jobs racing to create it
    with ThreadPoolExecutor(max_workers=max(1, cfg.jobs)) as pool:
        futures = [pool.submit(_job, feats[mode], v, mode, s, cfg, work) for v, mode, s in grid]
        run_ids = [f.result() for f in futures]
    t2 = time.perf_counter()
    _, tables = compare(run_ids=run_ids, out_dir=out)
    t3 = time.perf_counter()
    return GridResult(run_ids, tables, t3 - t0, {"data": t1 - t0, "train+evaluate": t2 - t1, "compare": t3 - t2})


def _main(argv: list[str]) -> None:
    """``python -m pipeline.compare SPEC_JSON``: one grid job (used by ``run_grid``)."""
    spec = json.loads(argv[0])
    c = spec["config"]
    cfg = GridConfig(**{**c, "seeds": tuple(c["seeds"]), "variants": tuple(c["variants"]),
                        "split_modes": tuple(c["split_modes"])})
    print(f"run_id: {run_job(spec['features'], spec['variant'], spec['mode'], spec['seed'], cfg)}", flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
