"""Issue 36, item 1: a feature set's identity is its content (``runs.identity``: the manifest's digests of its files
and its source), never its folder's name. ``compare`` groups runs by it, heads each section with its release and
source, never sets a true risk beside a run of other data, reads every run kind of its experiments (Laplace
included), and says how runs written before the identity was recorded were grouped. The newcomer's case: the main
job and a MIMIC-IV demo run, both under folders named ``features``, are two feature sets."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from helpers.paths import ROOT
from typer.testing import CliRunner

import cli
from pipeline.core import fileio
from pipeline.reports import compare as cp
from pipeline.runs import identity, store

MANIFEST = {"release": "mimic-iii", "source": {"kind": "csv", "location": "csv:/data/2024-01-05/mimic"},
            "sha256": {"train": "a" * 64, "val": "b" * 64, "test": "c" * 64, "vocab": "d" * 64}}


def test_the_identity_is_the_content_not_the_folder(tmp_path):
    for folder in ("one/features", "two/features", "elsewhere/anything"):
        fileio.write_json(tmp_path / folder / "manifest.json", MANIFEST)
    ids = {identity.features_id(tmp_path / f) for f in ("one/features", "two/features", "elsewhere/anything")}
    assert len(ids) == 1 and len(next(iter(ids))) == identity.ID_HEX
    other_file = {**MANIFEST, "sha256": {**MANIFEST["sha256"], "test": "e" * 64}}
    other_source = {**MANIFEST, "source": {"kind": "csv", "location": "csv:/data/other"}}
    assert len({identity.features_identity(m) for m in (MANIFEST, other_file, other_source)}) == 3
    redacted = {**MANIFEST, "source": {"kind": "csv", "location": "csv:/data/<date>/mimic"}}
    assert identity.features_identity(redacted) == identity.features_identity(MANIFEST)  # a run's logged copy
    assert identity.features_identity(None) is None and identity.features_identity({"release": "x"}) is None
    assert identity.features_id(tmp_path / "none") is None
    assert identity.label("mimic-iv", "csv:/d", "abc") == "MIMIC-IV from csv:/d (abc)"


# ---------------------------------------------------------------------------- compare over recorded runs


@pytest.fixture
def store_here(tmp_path, monkeypatch):
    """A tracking store of this test's own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    return store.client(create=True)


def _report(nll: float, features_id: str | None, label: str | None = None, truth: float | None = 0.2) -> dict:
    rep = {"model_kind": "rank1", "prior": "gaussian", "split_mode": "random", "nll": nll, "auc_pr": 0.5, "ece": 0.1,
           "nll_gap": None if truth is None else nll - truth, "auc_pr_gap": None, "ece_gap": None}
    if truth is not None:
        rep["true_risk"] = {"nll": truth, "auc_pr": 0.6, "ece": 0.01}
    if features_id is not None:
        rep.update(features_id=features_id, features_label=label)
    return rep


def _run(client, experiment: str, tmp: Path, *, seed: int, tags: dict, reports: dict, manifest: dict | None = None,
         label: str | None = None) -> str:
    exp = store.experiment_id(experiment)
    rid = client.create_run(exp).info.run_id
    client.log_param(rid, "train.seed", str(seed))
    for k, v in tags.items():
        client.set_tag(rid, k, v)
    if label:
        client.set_tag(rid, store.LABEL_TAG, label)
    if manifest is not None:
        fileio.write_json(tmp / rid / "manifest.json", manifest)
        client.log_artifact(rid, str(tmp / rid / "manifest.json"), store.FEATURES_ARTIFACTS)
    for split, rep in reports.items():
        fileio.write_json(tmp / rid / split / "metrics.json", rep)
        client.log_artifact(rid, str(tmp / rid / split / "metrics.json"), f"eval/{split}")
    client.set_terminated(rid)
    return rid


def test_compare_groups_by_content_and_says_how_older_runs_were_grouped(store_here, tmp_path):
    client, exp = store_here, f"sets-{uuid.uuid4().hex[:6]}"
    x = identity.features_identity(MANIFEST)
    label_x = identity.label("mimic-iii", identity.source_of(MANIFEST), x)
    tagged = {identity.FEATURES_ID_TAG: x, identity.FEATURES_SOURCE_TAG: identity.source_of(MANIFEST),
              store.RELEASE_TAG: "mimic-iii", store.FEATURES_DIR_TAG: "/one/features"}
    both = {"val": _report(0.30, x, label_x), "test": _report(0.31, x, label_x)}
    run_new = _run(client, exp, tmp_path, seed=0, tags=tagged, reports=both)
    run_old = _run(client, exp, tmp_path, seed=1, tags={store.FEATURES_DIR_TAG: "/two/features",
                                                          store.RELEASE_TAG: "mimic-iii"},
                   reports={"val": _report(0.32, None), "test": _report(0.33, None)}, manifest=MANIFEST)
    run_bare = _run(client, exp, tmp_path, seed=0, tags={store.FEATURES_DIR_TAG: "/three/features",
                                                           store.RELEASE_TAG: "mimic-iv"},
                    reports={"val": _report(0.50, None, truth=None), "test": _report(0.51, None, truth=None)})
    y = "f" * 12
    run_mixed = _run(client, exp, tmp_path, seed=2, tags=tagged,
                     reports={"val": _report(0.34, x, label_x), "test": _report(0.90, y, "MIMIC-IV from csv:/y (f)",
                                                                                    truth=0.7)})
    run_other = _run(client, exp, tmp_path, seed=0, tags=tagged,
                     reports={"val": _report(0.60, y, "MIMIC-IV from csv:/y (fff)", truth=0.5),
                              "test": _report(0.61, y, "MIMIC-IV from csv:/y (fff)", truth=0.5)})
    rows = {r["run_id"]: r for r in cp.collect(experiment=exp)}
    assert rows[run_new]["features"] == rows[run_old]["features"] == rows[run_mixed]["features"] == x
    assert rows[run_old]["identified_by"] == "manifest" and rows[run_new]["identified_by"] == "content"
    assert rows[run_bare]["features"] == "source:/three/features|mimic-iv"
    assert rows[run_bare]["features_label"] == "MIMIC-IV from the features folder /three/features"
    assert rows[run_mixed].get("test_nll") is None and rows[run_mixed].get("test_true_nll") is None  # left out
    assert rows[run_other]["features"] == y and rows[run_other]["model"] == f"rank1-gaussian [trained on {x}]"
    summary = cp.summarize(list(rows.values()))
    truth_rows = [r for r in summary if r["model"] == cp.TRUE_RISK]
    assert sorted(r["features"] for r in truth_rows) == sorted([x, y])  # the bare runs have no truth
    truth_x = next(r for r in truth_rows if r["features"] == x)
    assert truth_x["test_nll_mean"] == pytest.approx(0.2)  # never the other data's 0.7
    model_x = next(r for r in summary if r["features"] == x and r["model"] != cp.TRUE_RISK)
    assert model_x["seeds"] == 3 and model_x["test_nll_mean"] == pytest.approx((0.31 + 0.33) / 2)
    assert model_x["identified_by"] == "manifest"
    md = cp.to_markdown(summary)
    assert f"## Feature set: {label_x}" in md and "## Feature set: MIMIC-IV from the features folder /three/" in md
    assert f"| random | rank1-gaussian [trained on {x}] | 1 |" in md
    assert f"identified from the manifest each logged: {label_x}" in md
    assert "grouped by their recorded source (the features folder and release" in md
    assert "seed 0 evaluated by more than one run" not in md


def test_compare_reads_every_run_kind_of_the_default_experiments(store_here, tmp_path):
    """Laplace runs (experiment `laplace`) are compared with the runs they came from, unless told otherwise."""
    from pipeline.reports.compare_vision import DEFAULT_EXPERIMENTS, compare_all

    client = store_here
    x = identity.features_identity(MANIFEST)
    tags = {identity.FEATURES_ID_TAG: x, store.RELEASE_TAG: "mimic-iii"}
    reports = {"val": _report(0.3, x, "L"), "test": _report(0.3, x, "L")}
    _run(client, store.DEFAULT_EXPERIMENT, tmp_path, seed=0, tags=tags, reports=reports)
    lap = {s: {**r, "model_label": "laplace-last-layer", "model_kind": "laplace"} for s, r in reports.items()}
    _run(client, store.LAPLACE_EXPERIMENT, tmp_path, seed=0, tags=tags, reports=lap)
    assert store.LAPLACE_EXPERIMENT in DEFAULT_EXPERIMENTS
    models = {r["model"] for r in compare_all().mortality}
    assert models == {"rank1-gaussian", "laplace-last-layer", cp.TRUE_RISK}
    only = {r["model"] for r in compare_all(experiment=store.DEFAULT_EXPERIMENT).mortality}
    assert "laplace-last-layer" not in only  # told otherwise
    result = CliRunner().invoke(cli.app, ["compare", "--experiment", store.DEFAULT_EXPERIMENT, "--experiment",
                                          store.LAPLACE_EXPERIMENT, "--out", str(tmp_path / "tables")])
    assert result.exit_code == 0 and "laplace-last-layer" in result.output


# ---------------------------------------------------------------------------- the newcomer's case


def _mimic4_demo() -> Path:
    path = Path(os.environ.get("MIMIC4_DEMO_DIR") or ROOT.parent / "shared" / "mimic-iv-demo").resolve()  # as recorded
    if not (path / "hosp").is_dir():
        pytest.skip(f"MIMIC-IV demo not found at {path}")
    return path


@pytest.mark.slow
def test_the_main_job_and_a_mimic_iv_demo_run_under_features_folders_are_two_feature_sets(tmp_path, monkeypatch):
    """The README's paths all end in `features`: the main job (runs/main/features) and a MIMIC-IV demo run
    (runs/iv/features) appear as two feature sets, each with its own rows; the true risk only beside the main job's
    run, which keeps its own figures (before: one section, the demo's figures beside the main job's truth)."""
    import mlflow

    uri, previous = f"sqlite:///{tmp_path / 'mlflow.db'}", mlflow.get_tracking_uri()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)  # mlflow's own global too, as a fresh process has it (conftest's tracking_store)
    try:
        _newcomer(tmp_path)
    finally:
        mlflow.set_tracking_uri(previous)


def _newcomer(tmp_path: Path) -> None:
    run = CliRunner()

    def ok(*args: str) -> str:
        result = run.invoke(cli.app, list(args))
        assert result.exit_code == 0, (args, result.output)
        return result.output

    ok("synth", "--out", "runs/main/mimic", "--patients", "400", "--density", "0.05")
    ok("extract", "--source", "runs/main/mimic", "--out", "runs/main/features")
    ok("extract", "--source", str(_mimic4_demo()), "--out", "runs/iv/features")
    tiny = ["--model", "rank1", "--max-steps", "12", "--eval-every", "6", "--hidden", "8", "--embed-dim", "8",
            "--dense", "8", "--score-samples", "2", "--threads", "1", "--no-progress"]
    ids = {}
    for name in ("main", "iv"):
        out = ok("train", "--data", f"runs/{name}/features", *tiny)
        ids[name] = next(ln.split()[1] for ln in out.splitlines() if ln.startswith("run_id: "))
        ok("evaluate", "--run", ids[name], "--split", "val", "--split", "test", "--samples", "2", "--threads", "1",
           "--bootstrap", "10")
    md = ok("compare")
    sections = [ln for ln in md.splitlines() if ln.startswith("## Feature set: ")]
    main_id = identity.features_id(tmp_path / "runs/main/features")
    iv_id = identity.features_id(tmp_path / "runs/iv/features")
    assert main_id != iv_id
    assert sorted(sections) == sorted([
        f"## Feature set: MIMIC-III from csv:{tmp_path / 'runs/main/mimic'} ({main_id})",
        f"## Feature set: MIMIC-IV from csv:{_mimic4_demo()} ({iv_id})"])
    first, second = (md.split(s)[1].split("## Feature set")[0] for s in sections)
    blocks = {("MIMIC-III" in s): b for s, b in zip(sections, (first, second))}
    assert "| random | rank1-gaussian | 1 |" in blocks[True] and "| random | true risk |" in blocks[True]
    assert "| random | rank1-gaussian | 1 |" in blocks[False] and "true risk" not in blocks[False]
    rows = cp.collect(run_ids=list(ids.values()))
    assert {r["run_id"]: r["features"] for r in rows} == {ids["main"]: main_id, ids["iv"]: iv_id}
