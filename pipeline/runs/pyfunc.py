"""The trained model as an MLflow pyfunc: features DataFrame in, risk table out.

``log_model`` stores the best checkpoint, ``vocab.json``, ``model_info.json`` and, when the
features' ``manifest.json`` sits next to ``vocab.json``, ``extraction.json`` (the extraction settings
only: no counts, no identifiers; ``score --source`` re-extracts a census with them) as
artifacts, a copy of the ``pipeline`` package's sources as ``code_paths`` (so the model loads
where the repository is absent) and a signature: input = the features table columns,
output = ``pipeline.predict.RISK_COLUMNS``, params = ``samples`` and ``batch_size``.

    mlflow.pyfunc.load_model("runs:/<run_id>/model").predict(features_df, params={"samples": 25})

This module imports mlflow at import time; the CLI never imports it at startup.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import mlflow.pyfunc

from pipeline.runs.store import EXTRACTION, MANIFEST, MODEL_ARTIFACT

DEFAULT_BATCH = 256  # admissions per forward pass


class MortalityRiskModel(mlflow.pyfunc.PythonModel):
    """Loads the checkpoint once; ``predict`` returns the risk table of a features DataFrame."""

    def load_context(self, context) -> None:
        from pipeline import fileio
        from pipeline.runs.formats import load_model

        self.model, self.info = load_model(context.artifacts["checkpoint"])  # best.pt or baseline.npz (formats)
        if hasattr(self.model, "requires_grad_"):  # a torch model: inference only; no global autograd switch
            self.model.requires_grad_(False)  # (the host process may train)
        self.vocab_sizes = fileio.read_json(context.artifacts["model_info"])["vocab_sizes"]
        extraction = fileio.read_json(context.artifacts["extraction"]) if "extraction" in context.artifacts else {}
        self.window_hours = (extraction.get("config") or {}).get("prediction_hours")  # None: not logged
        if self.window_hours is None:
            import logging

            logging.getLogger(__name__).warning(
                "the model was logged without its extraction settings: before_prediction_time cannot be derived "
                "from an input's observed_hours and stays False")

    def predict(self, context, model_input, params=None):
        """Risk table (one row per input row, same order) of a pandas features DataFrame."""
        import torch

        from pipeline import features, predict

        params = dict(params or {})
        samples = predict.score_samples(params.get("samples"), self.info)
        batch = int(params.get("batch_size") or DEFAULT_BATCH)
        fs = features.from_pandas(model_input, source="pyfunc input")
        fs.check_vocab(self.vocab_sizes["tokens"], self.vocab_sizes["context"])
        if fs.before_prediction_time is None and fs.observed_hours is not None and self.window_hours is not None:
            fs.before_prediction_time = fs.observed_hours < float(self.window_hours)  # nan (not recorded) -> False
        seed = params.get("seed")
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(int(seed))
            return predict.score_features(self.model, fs, samples, self.info["refer_threshold"], batch,
                                          self.info.get("max_bags"), self.info.get("max_tokens"))


def signature(default_samples: int):
    """Input = the features columns a model reads (``contracts.FEATURES``), output = the risk table
    (``contracts.RISK``), params = samples / batch_size / seed."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import ColSpec, ParamSchema, ParamSpec, Schema

    from pipeline.contracts import FEATURES, PYFUNC_OPTIONAL, RISK, Use, mlflow_type

    inputs = Schema([ColSpec(mlflow_type(FEATURES.column(c).type), c, required=c not in PYFUNC_OPTIONAL)
                     for c in (*FEATURES.names(Use.REQUIRED), *PYFUNC_OPTIONAL)])
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
    """Log the pyfunc into the active MLflow run under ``ARTIFACT_PATH``; returns ModelInfo."""
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # MLflow's advice to add predict() type hints / an input example: the signature is explicit
        # and an input example would copy admissions into the model directory.
        warnings.simplefilter("ignore", UserWarning)
        code = code_copy(Path(tmp))
        artifacts = {"checkpoint": str(checkpoint), "vocab": str(vocab), "model_info": str(model_info)}
        manifest = Path(vocab).parent / MANIFEST
        if manifest.exists():
            from pipeline import fileio

            saved = fileio.read_json(manifest)
            fileio.write_json(Path(tmp) / EXTRACTION, {k: saved[k] for k in ("feature_version", "config") if k in saved})
            artifacts["extraction"] = str(Path(tmp) / EXTRACTION)
        return mlflow.pyfunc.log_model(
            name=MODEL_ARTIFACT,
            python_model=MortalityRiskModel(),
            artifacts=artifacts,
            code_paths=[str(code)],
            signature=signature(default_samples),
            pip_requirements=requirements(),
        )
