"""``cli.py serve``: a model served over HTTP on 127.0.0.1 (``serving.server.serve``); options: ``ServeConfig``."""

from __future__ import annotations

import typer

from pipeline.cli.app import command, setup_logging
from pipeline.cli.options import at_least, with_config_options
from pipeline.cli.settings import Settings
from pipeline.serving.server import ServeConfig


@command(short_help="Serve a model over HTTP on 127.0.0.1.")
@with_config_options(ServeConfig, flags={"direct": ["--direct/--via-mlflow"]}, limits={
    **at_least(1, "workers", "threads", "max_rows", "timeout_s"), **at_least(0.001, "max_body_mb"),
    "port": {"min": 1, "max": 65535}})
def serve(
    model: str = typer.Option(..., help="MLflow model URI (runs:/<id>/model), run id or model directory."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log MLflow's and uvicorn's debug lines."),
    settings: Settings = None,
) -> None:
    """Serve a model with MLflow's scoring server on 127.0.0.1 (POST /invocations)."""
    setup_logging(verbose)
    from pipeline.serving.server import HOST
    from pipeline.serving.server import serve as run_serve

    cfg = ServeConfig(model=model, **settings[ServeConfig])
    run_serve(cfg, log_level="debug" if verbose else "info",  # the line once the model has loaded
              on_ready=lambda: typer.echo(f"serving {model} on http://{HOST}:{cfg.port}/invocations (Ctrl-C "
                                          "stops)", err=True))
