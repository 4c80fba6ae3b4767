"""Random streams of a run, torch-free: an independent seed per (run seed, stream, rank).

Each consumer of randomness draws from its own stream (``EVAL_STREAM``: the validation draws, common to
every evaluation of a run; ``TRAIN_STREAM``: the training draws, one per rank; ``AUGMENT_STREAM``: the
training batches' augmentation), so adding draws to one never moves another. The resumable RNG state of
a run (torch, numpy, python) is ``pipeline.engine.rng``'s.
"""

from __future__ import annotations

import numpy as np

EVAL_STREAM = 1  # stream id of the evaluation draws (fixed: common random numbers across evaluations)
TRAIN_STREAM = 2  # stream id of the training draws (one stream per rank)
AUGMENT_STREAM = 3  # stream id of the training batches' augmentation draws (tasks.mortality.augment)


def stream_seed(seed: int, stream: int, rank: int = 0) -> int:
    """Independent 63-bit torch seed for (run seed, stream, rank)."""
    return int(np.random.SeedSequence([seed, stream, rank]).generate_state(2, np.uint64)[0] >> np.uint64(1))
