"""A trained run's model as an MLflow pyfunc: a request table in, its task's output table out.

``log_model`` stores the best checkpoint, ``vocab.json``, ``model_info.json`` and, when the
features' ``manifest.json`` sits next to ``vocab.json``, ``extraction.json`` (the extraction settings
only: no counts, no identifiers; ``score --source`` re-extracts a census with them) and, where the run keeps
one beside ``model_info.json``, its shift check's reference (``SHIFT_REFERENCE``, read by ``runs.load``) as
artifacts, a copy of the ``pipeline`` package's sources as ``code_paths`` (so the model loads
where the repository is absent) and a signature: input = the features table columns,
output = the risk table (``contracts.RISK``), params = ``samples``, ``batch_size`` and ``seed``.
The model is logged from code (``pyfunc_code.py``, MLflow's models-from-code): loading it runs
that file, no pickled object.

    mlflow.pyfunc.load_model("runs:/<run_id>/model").predict(features_df, params={"samples": 50})

Loading reads the run back as ``runs.load.Run`` and asks its task (``pipeline.tasks.base``, by the key its
checkpoint records) for the run's scorer (``Task.scorer``): the task reads a request and scores it (the
mortality task: ``tasks.mortality.request``, ``tasks.mortality.scorer``). A bad request raises
``RequestError``, one line naming the column and the row (its index in the request), never a value of a row.
Each call draws its weights from its own generator seeded with ``seed`` (default 0): the same request gives
the same answer whatever else the process runs.

This module imports mlflow at import time; the CLI never imports it at startup.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd

from pipeline.core.contracts import DEFAULT_BATCH, FEATURES, PYFUNC_OPTIONAL, Use
from pipeline.runs.store import EXTRACTION, MANIFEST, MODEL_ARTIFACT, SHIFT_REFERENCE
from pipeline.tasks.base import RequestError  # noqa: F401  (its home; imported from here too)

log = logging.getLogger(__name__)

INPUT_REQUIRED = FEATURES.names(Use.REQUIRED)  # the columns a request must hold
# Other columns of the features table that a request may carry and the model ignores (a features
# file passed whole): in the signature as optional columns of any type, so MLflow neither warns
# about them nor casts them.
INPUT_IGNORED = tuple(c for c in FEATURES.names() if c not in (*INPUT_REQUIRED, *PYFUNC_OPTIONAL))
MODEL_CODE = Path(__file__).with_name("pyfunc_code.py")  # the models-from-code file (set_model)


class MortalityRiskModel(mlflow.pyfunc.PythonModel):
    """Loads the run once; ``predict`` returns its scorer's table of a request (the risk table of a features
    DataFrame). The name is the one every logged model's ``pyfunc_code.py`` imports.

    The loaded model is only read by ``predict`` (evaluation mode, no gradients, sampling mode
    and generator passed per call), so one instance serves concurrent requests."""

    def load_context(self, context) -> None:
        from pipeline.core import fileio
        from pipeline.runs.formats import load_model
        from pipeline.runs.load import Run

        model, info = load_model(context.artifacts["checkpoint"])  # best.pt or baseline.npz (formats)
        if hasattr(model, "requires_grad_"):  # a torch model: inference only; no global autograd switch
            model.eval().requires_grad_(False)  # (the host process may train)
        extraction = fileio.read_json(context.artifacts["extraction"]) if "extraction" in context.artifacts else None
        self.run = Run(model, info, None, vocab=fileio.read_json(context.artifacts["vocab"]), manifest=extraction,
                       model_info=fileio.read_json(context.artifacts["model_info"]))
        self.scorer = self.run.scorer()  # the task's, by the key the checkpoint records
        self.scorer.prepare_requests()

    @property
    def model(self):
        return self.run.model

    def to_device(self, device) -> None:
        """Move a torch model to ``device`` (``serve --device``); a classical baseline stays as it is."""
        if hasattr(self.run.model, "to"):
            self.run.model.to(device)  # in place: the scorer holds the same module

    def check_request(self, model_input, params: dict | None = None) -> None:
        """Raise ``RequestError`` (one line) unless ``predict`` can score this request (the server's
        guard asks before MLflow parses a request)."""
        self.scorer.check_request(model_input, params)

    def predict(self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """The output table (one row per input row, same order) of a request."""
        return self.scorer.predict_request(model_input, params)


def signature(default_samples: int):
    """Input = the features columns a model reads (``contracts.FEATURES``; the others optional and
    ignored), output = the risk table (``contracts.RISK``), params = samples / batch_size / seed."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import AnyType, ColSpec, ParamSchema, ParamSpec, Schema

    from pipeline.core.contracts import RISK, mlflow_type

    # List columns are AnyType: read_request checks them (MLflow's own check of a list column refuses
    # whole numbers in a float list, and its message quotes the rows).
    inputs = Schema([ColSpec(AnyType() if "list<" in FEATURES.column(c).type else mlflow_type(FEATURES.column(c).type),
                             c, required=c not in PYFUNC_OPTIONAL) for c in (*INPUT_REQUIRED, *PYFUNC_OPTIONAL)]
                    + [ColSpec(AnyType(), c, required=False) for c in INPUT_IGNORED])
    outputs = Schema([ColSpec(mlflow_type(c.type), c.name) for c in RISK.columns])
    params = ParamSchema([
        ParamSpec("samples", "long", int(default_samples)),
        ParamSpec("batch_size", "long", DEFAULT_BATCH),
        ParamSpec("seed", "long", 0),
    ])
    return ModelSignature(inputs=inputs, outputs=outputs, params=params)


def requirements() -> list[str]:
    """Pinned pip requirements of the loaded model (no inference subprocess)."""
    from importlib.metadata import version

    pins = [f"{name}=={version(name).split('+')[0]}" for name in ("torch", "numpy", "pandas", "pyarrow", "mlflow")]
    return pins


def code_copy(dest: Path) -> Path:
    """Copy the ``pipeline`` package's ``.py`` files (no caches) to ``dest/pipeline``."""
    src = Path(__file__).resolve().parents[1]  # pipeline/runs/pyfunc.py -> pipeline/
    out = dest / "pipeline"
    shutil.copytree(src, out, ignore=lambda d, names: [n for n in names if n == "__pycache__" or
                                                       (Path(d, n).is_file() and not n.endswith(".py"))])
    return out


def log_model(checkpoint: Path | str, vocab: Path | str, model_info: Path | str, default_samples: int):
    """Log the pyfunc into the active MLflow run under ``MODEL_ARTIFACT``; returns ModelInfo."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # MLflow's advice to add an input example: the signature is explicit and an input example
        # would copy admissions into the model directory.
        warnings.simplefilter("ignore", UserWarning)
        code = code_copy(Path(tmp))
        artifacts = {"checkpoint": str(checkpoint), "vocab": str(vocab), "model_info": str(model_info)}
        if (Path(model_info).parent / SHIFT_REFERENCE).exists():  # the shift check's reference travels with it
            artifacts["shift_reference"] = str(Path(model_info).parent / SHIFT_REFERENCE)
        manifest = Path(vocab).parent / MANIFEST
        if manifest.exists():
            from pipeline.core import fileio
            from pipeline.data.mimic.sources.tables import LEGACY, release_of

            saved = fileio.read_json(manifest)
            kept = {k: saved[k] for k in ("feature_version", "config") if k in saved}
            if release_of(saved) is not LEGACY:  # a model recording no release is MIMIC-III's
                kept["release"] = saved["release"]
            fileio.write_json(Path(tmp) / EXTRACTION, kept)
            artifacts["extraction"] = str(Path(tmp) / EXTRACTION)
        return mlflow.pyfunc.log_model(
            name=MODEL_ARTIFACT,
            python_model=str(MODEL_CODE),
            artifacts=artifacts,
            code_paths=[str(code)],
            signature=signature(default_samples),
            pip_requirements=requirements(),
        )
