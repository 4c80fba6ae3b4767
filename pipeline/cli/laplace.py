"""``cli.py laplace``: subnetwork linearized Laplace on a trained deterministic run, logged as a new run
(``workflows.laplace_run.fit_laplace_run``). Options: ``LaplaceOptions`` (below), read as ``LaplaceConfig``
settings; a settings file holds them at its top level, and the new run records its own (``settings.toml``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import typer

from pipeline.bayes.laplace.options import (
    HessianKind,
    PriorMethod,
    Selection,
    prior_precision_value,
    subnet_size_for,
)
from pipeline.bayes.referral.config import ReferralConfig
from pipeline.cli.app import command, setup_logging
from pipeline.cli.names import DEVICE_HELP
from pipeline.cli.options import with_config_options
from pipeline.cli.settings import Settings


@dataclass
class LaplaceOptions:
    """The options of ``cli.py laplace`` (each comment its help): ``settings()`` is its ``LaplaceConfig``,
    ``run_kwargs()`` the rest of ``fit_laplace_run``'s arguments."""

    run: str  # The trained MAP run (run id, runs:/<id>/model or another model URI) of a deterministic model; a
        # vision run (or its model.pt) is fitted on its images.
    subnet_size: int | None = field(default=None, metadata={"flags": ["--subnet-size"], "min": 1})  # S, the weights
        # with a full-covariance posterior [default: 1000; last-layer: the output layer's size; ignored by
        # --hessian diag].
    selection: Selection = Selection.WASSERSTEIN  # wasserstein: largest diagonal-Laplace variance; random,
        # magnitude: the paper's baselines; last-layer: the output layer; predictive: largest share of the
        # training predictive variance; swag: largest diagonal-SWAG variance (SGD from the MAP).
    exclude: tuple[str, ...] = ()  # Weights no rule may select (repeatable): embeddings (every embedding table)
        # or a parameter-name prefix, e.g. lstm.
    prior_precision: str = "auto"  # auto (chosen by --prior-method) or a value for the full network (λ_S = λ·S/D).
    prior_method: PriorMethod = PriorMethod.MARGLIK  # How auto chooses λ: marglik (the Laplace marginal
        # likelihood of the training data) or val-nll (the validation NLL over a grid, widened once at an edge).
    hessian: HessianKind = HessianKind.FULL  # full: the subnetwork's full covariance; diag: diagonal Laplace over
        # every weight (no subnetwork).
    samples: int | None = field(default=None, metadata={"min": 1})  # Monte Carlo draws of the linearized model
        # per admission (the run's score_samples); default: the probit approximation, one draw.
    data: Path | None = None  # Features directory (default: the one the MAP run was trained on); for a vision
        # run its CIFAR directory.
    max_train: int | None = field(default=None, metadata={"min": 1})  # GGN from at most this many training
        # admissions (a seeded subsample, scaled) [default: all].
    seed: int = 0  # Seed of the random selection, the subsample and the validation draws.
    threads: int | None = field(default=None, metadata={"min": 1})  # Torch intra-op threads.
    out: Path | None = None  # Directory of the run's files (default runs/laplace/<run id>).
    experiment: str | None = None  # MLflow experiment [default: laplace].
    tracking: bool = True  # Log the run to MLflow.
    verbose: bool = field(default=False, metadata={"flags": ["--verbose", "-v"]})  # Log each stage.
    device: str | None = field(default=None, metadata={"help": DEVICE_HELP})  # the device
    COMMAND_OPTIONS: ClassVar[bool] = True  # offered as declared (pipeline.cli.options.command_option)

    def settings(self) -> dict:
        """The ``LaplaceConfig`` settings these options give."""
        return {"selection": self.selection, "subnet_size": subnet_size_for(self.selection, self.hessian,
                                                                            self.subnet_size),
                "hessian": self.hessian, "prior_precision": prior_precision_value(self.prior_precision),
                "prior_method": self.prior_method, "exclude": tuple(self.exclude), "max_train": self.max_train,
                "seed": self.seed}

    def run_kwargs(self) -> dict:
        """``fit_laplace_run``'s keyword arguments besides the config."""
        return {"data": self.data, "samples": self.samples, "out_dir": self.out, "tracking": self.tracking,
                "experiment": self.experiment, "device": self.device, "threads": self.threads}


@command(short_help="Subnetwork Laplace on a trained deterministic run.",
         on_interrupt="the run it started is marked KILLED; run the command again")
@with_config_options(LaplaceOptions, ReferralConfig)
def laplace(settings: Settings = None) -> None:
    """Subnetwork linearized Laplace on a trained deterministic run, logged as a new run (Daxberger et al. 2021)."""
    o = LaplaceOptions(**settings[LaplaceOptions])
    setup_logging(o.verbose)
    from pipeline.bayes.laplace.config import LaplaceConfig
    from pipeline.workflows.laplace_run import fit_laplace_run

    result = fit_laplace_run(o.run, LaplaceConfig(**o.settings()), referral=ReferralConfig(**settings[ReferralConfig]),
                             **o.run_kwargs())
    settings.record(result.run_id, result.out_dir)
    if result.report.warning:
        typer.echo(f"warning: {result.report.warning}", err=True)
    typer.echo(result.summary())
