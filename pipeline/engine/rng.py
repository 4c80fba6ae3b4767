"""Random streams of a run: independent seeds per (run seed, stream, rank), and the RNG state a
resumable checkpoint holds (torch CPU, numpy global, python)."""

from __future__ import annotations

import random

import numpy as np
import torch

EVAL_STREAM = 1  # stream id of the evaluation draws (fixed: common random numbers across evaluations)
TRAIN_STREAM = 2  # stream id of the training draws (one stream per rank)


def stream_seed(seed: int, stream: int, rank: int = 0) -> int:
    """Independent 63-bit torch seed for (run seed, stream, rank)."""
    return int(np.random.SeedSequence([seed, stream, rank]).generate_state(2, np.uint64)[0] >> np.uint64(1))


def rng_state() -> dict:
    """Every RNG the run touches (torch CPU, numpy global, python)."""
    np_state = np.random.get_state(legacy=False)
    np_state = {**np_state, "state": {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                      for k, v in np_state["state"].items()}}
    return {"torch": torch.get_rng_state(), "numpy": np_state, "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np_state = dict(state["numpy"])
    np_state["state"] = {k: (np.asarray(v, dtype=np.uint32) if isinstance(v, list) else v)
                         for k, v in np_state["state"].items()}
    np.random.set_state(np_state)
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
