"""``cli.py train``: a mortality model (``workflows.train``) or a classical baseline (``workflows.baselines_run``),
logged to MLflow, its run id printed. Options: ``TrainOptions`` (below), ``TrainConfig`` and ``MortalityConfig``;
a settings file puts them at the top level, in ``[train]`` and in ``[model]`` (``--model`` is ``model.name``).
The effective settings go with the run: ``settings.toml`` beside ``train_config.json`` (``Settings.record``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar

import typer

from pipeline.bayes.referral.config import ReferralConfig
from pipeline.cli.app import command, setup_logging
from pipeline.cli.names import DEVICE_HELP, spell
from pipeline.cli.options import TYPED, SettingsFile, get_current_context, with_config_options
from pipeline.cli.settings import Settings
from pipeline.core.configs import invalid
from pipeline.core.errors import ConfigError
from pipeline.tasks.mortality.baselines.config import BASELINES
from pipeline.tasks.mortality.config import MortalityConfig
from pipeline.tasks.mortality.train_config import CUDA_PRESET, PRESETS, Preset, TrainConfig
from pipeline.tasks.mortality.variants import model_names

MODEL_HELP = ("A model kind or a variant name as `compare` prints it: " + ", ".join(model_names())
              + "; or a classical baseline: " + ", ".join(BASELINES) + " (settings chosen on validation; takes --seed, "
              "--threads, --refer-fraction).")  # --model's help: the names offered
BASELINE_SETTINGS = ("seed", "threads", "refer_fraction", "progress", "calibration_share")  # the TrainConfig fields
    # a baseline takes (and every ReferralConfig field)
NOTE_FIELDS = ("patience", "eval_every", "anneal_steps", "max_steps", "max_epochs", "patience_epochs",
               "max_minutes")  # what training's notes name


@dataclass
class TrainOptions:
    """The options of ``cli.py train`` that are not training or model settings."""

    data: Path  # Features directory written by `extract` (train/val Parquet, vocab.json).
    model: str = field(default="rank1", metadata={"help": MODEL_HELP})  # a model kind, variant or baseline
    out: Path | None = None  # Checkpoint directory (default runs/train/<run id>; without tracking
        # runs/train/<model>-s<seed>).
    preset: Preset = Preset.DEFAULT  # default (minutes on 2 CPU cores; on a CUDA device, unless given: the
        # CUDA preset, CUDA_PRESET) | paper (LSTM 256, 20k steps) | records-research (the authors' MIMIC-III flag
        # defaults: LSTM 256, 10k steps, N(1, 1) prior, random signs, Keras init...) | gpu (1,024 rows a step,
        # budgets in epochs); options below override it.
    resume: bool = field(default=False, metadata={"flags": ["--resume"]})  # Continue from OUT/last.pt (same
        # settings; max-steps may grow).
    experiment: str | None = None  # MLflow experiment [default: mimic-mortality].
    run_name: str | None = None  # MLflow run name.
    tracking: bool = True  # Log the run to MLflow (MLFLOW_TRACKING_URI, default sqlite:///mlflow.db).
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log progress lines and stages.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP})  # the torch device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def run_kwargs(self) -> dict:
        """The run's arguments common to ``workflows.train.train`` and ``train_baseline``."""
        return {"out_dir": self.out, "tracking": self.tracking, "experiment": self.experiment,
                "run_name": self.run_name}


def device_preset(preset: Preset, given: bool, device_type: str) -> Preset:
    """The preset a run takes: ``preset`` where the user gave one (``given``) or the device is not CUDA, else
    ``CUDA_PRESET`` (the default on a CUDA device; docs/experiments/2026-12-04-gpu-preset.md)."""
    return CUDA_PRESET if not given and device_type == "cuda" and preset is Preset.DEFAULT else preset


def use_device_preset(settings: Settings, device: str | None) -> None:
    """Put the preset the run takes into ``settings`` (as given, so the run's settings.toml records it)."""
    o = settings[TrainOptions]
    given = "preset" in settings.given_fields(TrainOptions)
    if given or CUDA_PRESET is Preset.DEFAULT:
        return
    from pipeline.core.devices import resolve_device

    chosen = device_preset(Preset(o["preset"]), given, resolve_device(device).type)
    if chosen is not Preset(o["preset"]):
        o["preset"] = chosen
        settings.given.add((TrainOptions, "preset"))


def preset_notes() -> dict[tuple[type, str], str]:
    """{(TrainConfig or MortalityConfig, field): a note naming the presets other than the default that set
    the field}, said after the field's default in ``train --help``."""
    out: dict[tuple[type, str], list[str]] = {}
    for preset, values in PRESETS.items():
        model = values.get("model", {})
        for cls, keys in ((TrainConfig, [k for k in values if k != "model"]), (MortalityConfig, model)):
            for k in keys:
                out.setdefault((cls, k), []).append(preset.value)
    return {key: f"--preset {', '.join(names)} " + ("sets its own" if len(names) == 1 else "set their own")
            for key, names in out.items()}


def train_config(options: dict, train: dict, model: dict) -> TrainConfig:
    """The ``TrainConfig`` of an LSTM model: ``options``' preset, then the model's (``options["model"]``, a kind or
    variant) settings, then ``train`` and ``model`` (TrainConfig and MortalityConfig fields; ``model`` merged)."""
    from pipeline.tasks.mortality.variants import resolve

    _, variant_settings = resolve(options["model"])
    return TrainConfig.from_preset(options["preset"], **train, model={**variant_settings, **model})


def baseline(settings: Settings) -> dict[type, dict]:
    """The settings beneath the user's (``--print-config``'s commented values): the preset's and the variant's."""
    if settings[TrainOptions]["model"] in BASELINES:
        return {}
    cfg = train_config(settings[TrainOptions], {}, {})
    return {TrainConfig: {f.name: getattr(cfg, f.name) for f in fields(TrainConfig)}, MortalityConfig: cfg.model}


def baseline_config(kind: str, settings: Settings):
    """The ``BaselineConfig`` of ``train --model KIND`` for a classical baseline; a ``ConfigError`` naming (as the
    user gave them) the settings that do not apply to one (anything but ``BASELINE_SETTINGS``, a preset,
    ``--resume``)."""
    from pipeline.tasks.mortality.baselines.config import BaselineConfig

    o, t = settings[TrainOptions], settings[TrainConfig]
    refused = [(TrainConfig, n) for n in sorted(set(t) - set(BASELINE_SETTINGS))]
    refused += [(MortalityConfig, n) for n in sorted(settings[MortalityConfig])]
    refused += [(TrainOptions, n) for n in ("preset", "resume") if o[n] != TrainOptions.__dataclass_fields__[n].default]
    if refused:
        said = ", ".join(settings.typed(c, n) for c, n in refused)
        takes = ", ".join(settings.typed(TrainConfig, n) for n in BASELINE_SETTINGS)
        raise ConfigError(f"{kind} is a classical baseline: {said} do not apply to it (it takes {takes} and the "
                          "referral options)")
    return BaselineConfig(seed=t.get("seed", 0), threads=t.get("threads"))


@command(short_help="Train a model, log it to MLflow, print its run id.")
@with_config_options(TrainOptions, TrainConfig, MortalityConfig, ReferralConfig, notes=preset_notes(),
                     settings_file=SettingsFile(
    sections={TrainConfig: "train", MortalityConfig: "model", ReferralConfig: "referral"},
    keys={(TrainOptions, "model"): "model.name"},
    baseline=baseline, beneath="--preset", example="model.lstm_hidden=128 or train.max_steps=4000"))
def train(settings: Settings | None = None) -> None:
    """Train a risk model of the features' task (in-hospital mortality, or a MEDS task: extract names it;
    torchrun-ready), log it to MLflow and print its run id."""
    o = TrainOptions(**settings[TrainOptions])
    setup_logging(o.verbose)
    if o.model in BASELINES:
        from pipeline.workflows.baselines_run import train_baseline

        cfg = baseline_config(o.model, settings)
        t = settings[TrainConfig]
        r = train_baseline(o.data, o.model, cfg, **o.run_kwargs(),
                           refer_fraction=t.get("refer_fraction", TrainConfig.refer_fraction),
                           calibration_share=t.get("calibration_share", TrainConfig.calibration_share),
                           referral=ReferralConfig(**settings[ReferralConfig]))
        settings.record(r.run_id, r.out_dir)
        return typer.echo(r.summary())
    from pipeline.tasks.mortality.variants import resolve
    from pipeline.workflows.train import train as run_train

    kind, _ = resolve(o.model)
    use_device_preset(settings, o.device)
    cfg = train_config(settings[TrainOptions], settings[TrainConfig], settings[MortalityConfig])
    r = run_train(o.data, kind, cfg, resume=o.resume, device=o.device,
                  referral=ReferralConfig(**settings[ReferralConfig]), **o.run_kwargs())
    typed = get_current_context().meta.get(TYPED, {})
    r.notes = [spell(invalid(TrainConfig, note, *NOTE_FIELDS), typed) for note in r.notes]  # settings as typed
    if r.refer_threshold is not None:  # None: ranks > 0 of a distributed run
        settings.record(r.run_id, r.out_dir)
        if r.run_id:
            from pipeline.runs import store

            store.client().set_tag(r.run_id, "preset", Preset(settings[TrainOptions]["preset"]).value)
        typer.echo(r.summary())
