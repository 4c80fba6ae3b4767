"""``cli.py synth``: a synthetic MIMIC-III or MIMIC-IV with a known true risk (``data.mimic.synth.generate``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.data.mimic.sources.tables import Release
from pipeline.data.mimic.synth.limits import MAX_DENSITY, MAX_PATIENTS


class Layout(str, Enum):
    """The MIMIC releases synth writes (``Release`` has ``meds`` too, which synth does not write)."""

    mimic3 = Release.mimic3.value
    mimic4 = Release.mimic4.value


@command(short_help="Generate a synthetic MIMIC-III or MIMIC-IV with a known true risk.",
         on_interrupt="each table is written whole or not at all; run the command again")
def synth(
    out: Path = typer.Option(..., help="Directory for the synthetic MIMIC tables (TABLE.csv.gz)."),
    patients: int = typer.Option(2000, min=1, max=MAX_PATIENTS, help="Number of patients."),
    seed: int = typer.Option(0, min=0, help="Random seed."),
    density: float = typer.Option(1.0, min=0.001, max=MAX_DENSITY, help="Event density scale (1.0 = about 5,400 "
                                                                        "CHARTEVENTS rows per ICU stay)."),
    layout: Layout = typer.Option(Layout.mimic3, help="mimic-iii: the MIMIC-III v1.4 layout; mimic-iv: MIMIC-IV's "
                                                       "hosp/ and icu/ modules (the same synthetic world)."),
    workers: int = typer.Option(1, min=1, help="Processes generating and compressing chunks (the same bytes as 1)."),
    proportions: Layout = typer.Option(Layout.mimic3, help="The world's proportions: mimic-iii (every admission "
                                                            "with an ICU stay) or mimic-iv (17% with one, no "
                                                            "newborns or children, more readmissions)."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log each stage."),
) -> None:
    """Generate a synthetic MIMIC-III or MIMIC-IV (full-release layout) with a known true risk per admission."""
    setup_logging(verbose)
    from pipeline.core.progress import Progress
    from pipeline.data.mimic.synth import SynthConfig, generate
    from pipeline.data.mimic.synth.simulation import MIMIC4_PROPORTIONS

    layout = Release(layout.value)
    config = SynthConfig(density=density, **(MIMIC4_PROPORTIONS if proportions is Layout.mimic4 else {}))
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
