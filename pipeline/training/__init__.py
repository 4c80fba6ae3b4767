"""Training of the mortality models (see ``loop`` for the recipe, resume and distributed training).

- ``config``: ``TrainConfig`` (torch-free: the CLI and MLproject derive their options from it), presets.
- ``objective``: NLL + annealed KL / N_train + L2, in one forward.
- ``distributed``: torchrun / DDP on CPU.  ``rng``: random streams and resumable RNG state.
- ``loop``: ``train()``, the loop, periodic validation, checkpoints, the run's artifacts.
Names load their module on first use (``pipeline.lazy``).
"""

from pipeline.lazy import lazy

_HOMES = {
    **dict.fromkeys(("NllMode", "Preset", "PRESETS", "TrainConfig"), "config"),
    **dict.fromkeys(("TrainResult", "TrainingDiverged", "train", "train_step", "validate"), "loop"),
    **dict.fromkeys(("Objective", "kl_weight"), "objective"),
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
