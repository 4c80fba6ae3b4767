"""The engine: what runs any task's model, written once. Random streams and resumable RNG state (``rng``),
distributed training (``distributed``), the training loop (``loop``: ``run_loop``, resume, early stopping),
the Monte Carlo predictor (``predict``) and the checkpoint file (``checkpoints``). It knows tasks only through
``pipeline.tasks.base``. Names load their module on first use (``pipeline.core.lazy``).
"""

from pipeline.core.lazy import lazy

_HOMES = {
    **dict.fromkeys(("LoopState", "TrainingDiverged", "resume_state", "run_loop", "train_step"), "loop"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
