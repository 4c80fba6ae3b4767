"""benchmarks.device_mortality's new parts (training recipes, resident scoring, the full-scale run) at toy sizes
on the CPU, the merge of single-part runs and its rendering; benchmarks/gpu_run.sh parses and its limits keep
the whole GPU run within 7 minutes. (Figures are the GPU's: nothing here is timed.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import device_mortality, device_training
from pipeline.core import fileio

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_run.sh"
TOY = ["--device", "cpu", "--train-steps", "4", "--train-n", "60", "--gpu-rows", "32", "--score-n", "90",
       "--cpu-score-n", "30", "--samples", "2", "--score-batch", "16", "--score-batch", "64", "--check-n", "40",
       "--full-train", "80", "--full-val", "20", "--full-epochs", "1"]


def test_the_script_parses_and_its_limits_fit_seven_minutes():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    text = SCRIPT.read_text()
    limits = [int(n) for n in re.findall(r"^part \w+ (\d+)", text, re.M)]
    assert len(limits) == 6 and sum(limits) + 5 + 10 + len(limits) <= 420  # env, merge, kill grace
    assert set(re.findall(r"^part (\w+) \d+ \$DM", text, re.M)) == set(device_mortality.PARTS)


def test_shaped_features_have_the_benchmarks_shape(tmp_path):
    from pipeline.data import features

    fdir = device_training.shaped_features(tmp_path, 400, 50, seed=2)
    fs, val = features.load_split(fdir / "train.parquet"), features.load_split(fdir / "val.parquet")
    assert (len(fs), len(val)) == (400, 50) and 20 < fs.n_bags.mean() < 26 and fs.n_bags.min() >= 2
    per_bag = fs.token_offsets[1:] - fs.token_offsets[:-1]
    assert 25 < per_bag.mean() < 35 and per_bag.min() >= 1 and fs.tokens.min() >= 1 and fs.tokens.max() < 833
    fs.check_vocab(device_training.N_TOKENS, device_training.N_CONTEXT)
    for b in range(0, 2000, 97):  # every bag sorted and unique, as the extraction writes them
        ids = fs.tokens[fs.token_offsets[b]:fs.token_offsets[b + 1]]
        assert (ids[1:] > ids[:-1]).all()


@pytest.mark.slow
def test_the_new_parts_run_merge_and_render_on_the_cpu(tmp_path, monkeypatch):
    for part in ("train", "score", "fullscale"):
        monkeypatch.setattr(sys, "argv", ["device_mortality", *TOY, "--parts", part,
                                          "--json", str(tmp_path / f"dm_{part}.json")])
        device_mortality.main()
    monkeypatch.setattr(sys, "argv", ["device_mortality", "--merge", *map(str, sorted(tmp_path.glob("dm_*.json"))),
                                      str(tmp_path / "missing.json"), "--json", str(tmp_path / "all.json")])
    device_mortality.main()
    r = fileio.read_json(tmp_path / "all.json")
    assert {k for k in device_mortality.PARTS if k in r} == {"train", "score", "fullscale"} and len(r["commands"]) == 3
    assert all("result" in r[k] for k in ("train", "score", "fullscale")), r
    rows = r["train"]["result"]["rows"]
    assert r["train"]["result"]["check"] == {"steps": 20, "distinct": 32, "equal": True}
    recipes = {(p, "device" if res else "collate") for p, res, precision in device_training.RECIPES
               if precision == "highest"}  # TF32: on CUDA only
    assert {(x["kind"], x["preset"], x["data_path"]) for x in rows} == {
        (k, *recipe) for k in ("deterministic", "rank1") for recipe in recipes}
    assert {x["distinct"] for x in rows if x["preset"] == "gpu"} == {32, 8}  # 32 rows: K = 1 and K = 4
    check = r["score"]["result"]["resident"]["check"]
    assert check["max_abs_risk_diff"] == 0.0 and check["refer_equal"]  # the same batches: the same risk table
    full = r["fullscale"]["result"]
    assert full["steps"] == -(-80 // 8) and full["train"] == 80  # one epoch of 80 admissions, 8 a step
    text = device_mortality.render(r)
    for title in ("**2. Training step**", "**3. Scoring**", "**5. Full scale**", "**1. LSTM layer**: not run"):
        assert title in text, text
