"""The RNG state a resumable checkpoint holds (torch CPU, numpy global, python); the streams' seeds are
``pipeline.core.seeds``'s (re-exported here for the loop)."""

from __future__ import annotations

import random

import numpy as np
import torch

from pipeline.core.seeds import EVAL_STREAM, TRAIN_STREAM, stream_seed

__all__ = ["EVAL_STREAM", "TRAIN_STREAM", "rng_state", "set_rng_state", "stream_seed"]


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
