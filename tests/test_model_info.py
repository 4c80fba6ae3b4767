"""pipeline.runs.info: ModelInfo, the info every model file is loaded with, built once per kind (a task's by its
task, through the registry); the keys
each kind's info had before it existed are all still there, and every kind has the same keys."""

from __future__ import annotations

import pytest

from pipeline.runs.info import ModelFormat, ModelInfo
from pipeline.tasks.base import load_task
from pipeline.tasks.mortality.task import baseline_info_fields

# The keys runs.formats.load_model's info had per kind before ModelInfo (readers script against them).
BEFORE = {
    "mortality": {"model_kind", "model_config", "train_config", "step", "val_nll", "refer_threshold", "refer_measure",
                  "score_samples", "max_bags", "max_tokens", "run_kind", "model_format"},
    "vision": {"run_kind", "model_kind", "model_config", "train_config", "steps", "step", "val_metrics", "val_nll",
               "refer_threshold", "score_samples", "max_bags", "max_tokens", "model_format"},
    "laplace": {"model_kind", "model_label", "model_config", "train_config", "step", "val_nll", "refer_threshold",
                "refer_measure", "score_samples", "max_bags", "max_tokens", "map_kind", "run_kind", "model_format"},
    "baseline": {"model_kind", "model_config", "train_config", "step", "val_nll", "refer_threshold", "refer_measure",
                 "score_samples", "max_bags", "max_tokens", "run_kind", "model_format"},
}

MORTALITY_CKPT = {"model_kind": "rank1", "model_config": {"lstm_hidden": 8},
                  "train_config": {"score_samples": 4, "max_bags": 100, "max_tokens": 30, "seed": 1}, "step": 70,
                  "val_nll": 0.31, "refer_threshold": 0.02, "refer_measure": "sd"}
VISION_CKPT = {"kind": "vision", "model_config": {"method": "deterministic", "depth": 10},
               "train_config": {"eval_samples": 2, "dataset": "digits"}, "steps": 30,
               "val_metrics": {"nll": 1.5, "accuracy": 0.6, "ece": 0.1, "n": 100}}
LAPLACE_CKPT = {"kind": "laplace", "laplace": {"selection": "last-layer", "subnet_size": 65, "param_names": ["w"],
                                               "param_shapes": [[65]]},
                "train_config": {"score_samples": 3, "max_bags": 50}, "step": 30, "val_nll": 1.4,
                "refer_threshold": None, "map_kind": None, "run_kind": "vision"}
BASELINE_META = {"model_config": {"C": 0.1}, "train_config": {"seed": 0}, "val_nll": 0.29, "refer_threshold": 0.4,
                 "refer_measure": "entropy", "rounds": None}


def infos() -> dict[str, dict]:
    """Each kind's info as its loader builds it: a task's checkpoint by its task, a Laplace one by ModelInfo."""
    return {"mortality": ModelInfo(**load_task("mortality").info_fields(MORTALITY_CKPT)).to_dict(),
            "vision": ModelInfo(**load_task("vision").info_fields(VISION_CKPT)).to_dict(),
            "laplace": ModelInfo.laplace(LAPLACE_CKPT, "laplace-last-layer-65").to_dict(),
            "baseline": ModelInfo(**baseline_info_fields("logreg", BASELINE_META)).to_dict()}


@pytest.mark.parametrize("kind", sorted(BEFORE))
def test_every_key_of_before_is_still_there(kind):
    assert BEFORE[kind] <= set(infos()[kind])


def test_every_kind_has_the_same_keys_and_an_image_model_its_steps_too():
    got = infos()
    keys = set(got["mortality"])
    assert set(got["baseline"]) == keys and set(got["vision"]) == set(got["laplace"]) == keys | {"steps"}
    assert got["vision"]["steps"] == got["vision"]["step"] == 30  # a vision checkpoint's steps, under both names
    assert got["laplace"]["steps"] == got["laplace"]["step"] == 30  # a Laplace run of an image model: its MAP's


def test_each_constructor_reads_what_its_file_recorded():
    got = infos()
    m = got["mortality"]
    assert (m["run_kind"], m["model_format"], m["model_kind"], m["step"], m["refer_measure"]) == (
        "mortality", ModelFormat.TORCH.value, "rank1", 70, "sd")
    assert (m["score_samples"], m["max_bags"], m["max_tokens"]) == (4, 100, 30)
    v = got["vision"]
    assert (v["model_kind"], v["score_samples"], v["val_nll"], v["refer_threshold"]) == ("deterministic", 2, 1.5, None)
    assert v["val_metrics"]["accuracy"] == 0.6 and v["max_bags"] is None
    lap = got["laplace"]
    assert lap["model_config"] == {"selection": "last-layer", "subnet_size": 65}  # the parameter layout left out
    assert (lap["run_kind"], lap["model_label"], lap["score_samples"], lap["max_tokens"]) == (
        "vision", "laplace-last-layer-65", 3, None)
    # a Laplace checkpoint written before it recorded its run kind is a mortality one
    assert ModelInfo.laplace({k: v for k, v in LAPLACE_CKPT.items() if k != "run_kind"}, "x").run_kind == "mortality"
    b = got["baseline"]
    assert (b["model_format"], b["model_kind"], b["score_samples"], b["step"], b["refer_measure"]) == (
        ModelFormat.BASELINE.value, "logreg", 1, None, "entropy")
