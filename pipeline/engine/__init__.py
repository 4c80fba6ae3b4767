"""The engine: what runs any task's model. The objective, random streams, distributed training, the
training loop, the Monte Carlo predictor and the checkpoint file.

- ``objective``: NLL + annealed KL / N_train + L2, in one forward.
- ``distributed``: torchrun / DDP on CPU.  ``rng``: random streams and resumable RNG state.
- ``loop``: ``train()``, the loop, periodic validation, checkpoints, the run's artifacts.
- ``predict``: logits of every weight draw.  ``checkpoints``: the torch checkpoint file.
Names load their module on first use (``pipeline.core.lazy``).
"""

from pipeline.core.lazy import lazy

_HOMES = {
    **dict.fromkeys(("TrainResult", "TrainingDiverged", "train", "train_step", "validate"), "loop"),
    **dict.fromkeys(("Objective", "kl_weight"), "objective"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
