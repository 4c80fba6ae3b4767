"""pipeline.workflows.grid: finding a grid's runs (its runs.json, else the tracking store's runs on its features)."""

from __future__ import annotations

import json

import pytest

from pipeline.core.errors import ConfigError
from pipeline.runs import store
from pipeline.workflows import grid

pytestmark = pytest.mark.usefixtures("tracking_store")


def _finished_run(features_dir: str) -> str:
    c = store.client(create=True)  # a writer: makes the store when this test runs first
    experiment = c.get_experiment_by_name("grid-tests") or c.get_experiment(c.create_experiment("grid-tests"))
    run = c.create_run(experiment.experiment_id, tags={store.FEATURES_DIR_TAG: features_dir})
    c.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id


def test_runs_json_is_read_first(tmp_path):
    (tmp_path / grid.RUNS_FILE).write_text(json.dumps([{"run_id": "a" * 32}, {"run_id": "b" * 32}]))
    assert grid.grid_runs(tmp_path) == ["a" * 32, "b" * 32]


def test_a_grid_without_runs_json_finds_its_runs_through_linked_features(tmp_path):
    """A run's features_dir tag is the resolved path; a grid whose features-<mode> is a link finds it too."""
    data = tmp_path / "data" / "features-random"
    data.mkdir(parents=True)
    own = tmp_path / "own"
    (own / "features-era").mkdir(parents=True)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / "features-random").symlink_to(data, target_is_directory=True)
    on_data, on_own = _finished_run(str(data.resolve())), _finished_run(str((own / "features-era").resolve()))
    assert grid.grid_runs(linked) == [on_data]
    assert grid.grid_runs(own) == [on_own]
    (tmp_path / "empty").mkdir()
    assert grid.grid_runs(tmp_path / "empty") == []  # no features-<mode> folder under it


@pytest.mark.parametrize("overrides, has_values", [({}, False), ({"value_channel": True}, True)])
@pytest.mark.slow
def test_grid_features_carry_the_value_channel_when_its_models_read_it(demo_dir, tmp_path, overrides, has_values):
    """benchmark-models --set value_channel=true extracts with --values (its models refuse features without)."""
    import pyarrow.parquet as pq

    cfg = grid.GridConfig(split_modes=("random",), model_overrides=overrides)
    feats = grid.prepare_features(demo_dir, tmp_path, cfg)
    assert ("bag_values" in pq.read_schema(feats["random"] / "train.parquet").names) is has_values


def test_grid_config_of_the_settings():
    """The preset's step budget unless given (validation at most every max_steps); the LSTM variants'
    training and model overrides, batch_size among the training ones."""
    cfg = grid.grid_config(seeds=[3], variants=["gbm"], split_modes=["era"])
    assert (cfg.seeds, cfg.variants, cfg.split_modes) == ((3,), ("gbm",), ("era",))
    assert grid.grid_config().variants == grid.MODELS
    cfg = grid.grid_config(preset="records-research", train_overrides={"lr": 0.1}, model_overrides={"lstm_hidden": 8},
                           batch_size=32, jobs=1)
    assert (cfg.max_steps, cfg.eval_every, cfg.preset, cfg.jobs) == (10_000, 250, "records-research", 1)
    assert cfg.train_overrides == {"lr": 0.1, "batch_size": 32} and cfg.model_overrides == {"lstm_hidden": 8}
    cfg = grid.grid_config(preset="paper", max_steps=300, eval_every=500)
    assert (cfg.max_steps, cfg.eval_every) == (300, 300)  # validation at most every max_steps


def test_grid_options_read_into_a_grid_config_and_the_result_summary():
    """benchmark-models' options: bare words join the lists they belong to (replacing a default), anything
    else is refused; the [train] / [model] settings go to every LSTM variant."""
    from pathlib import Path

    from pipeline.cli.benchmark_models import GridOptions

    o = GridOptions(Path("s"), Path("o"), seeds=(1,), models=("logreg",), splits=("era",), batch_size=16)
    cfg = o.config(["2"], given={"seeds"}, train={"lr": 0.1}, model={"lstm_hidden": 8})
    assert cfg.seeds == (1, 2) and cfg.variants == ("logreg",) and cfg.split_modes == ("era",)
    assert cfg.train_overrides == {"lr": 0.1, "batch_size": 16} and cfg.model_overrides == {"lstm_hidden": 8}
    assert GridOptions(Path("s"), Path("o")).config(["2"], given=set()).seeds == (2,)  # the words replace a default
    cfg = GridOptions(Path("s"), Path("o")).config(["3", "gbm", "era"], given=set())
    assert (cfg.seeds, cfg.variants, cfg.split_modes) == ((3,), ("gbm",), ("era",))
    with pytest.raises(ConfigError, match=r"unexpected argument\(s\) \['bogus'\]"):
        GridOptions(Path("s"), Path("o")).config(["1", "bogus"], given=set())
    r = grid.GridResult(["a", "b"], [Path("t/compare.md")], 12.4, {"extract": 3.0, "train": 9.4})
    assert r.summary() == "2 runs in 12 s (extract 3 s, train 9 s); tables: t/compare.md"
