"""pipeline.data.mimic.sources.stage: staged and unstaged extraction give byte-identical feature files (MIMIC-III demo,
MIMIC-IV demo, a small synthetic world), a corrupted source reaches the quarantine with the same counts
either way, a stale stage is refused in one line, and ``cli.py stage`` reports what it wrote."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from helpers.paths import ROOT
from typer.testing import CliRunner

import cli
from pipeline.data.mimic.extraction import ExtractConfig, extract
from pipeline.data.mimic.sources.base import SourceError
from pipeline.data.mimic.sources.stage import STAGE_FILE, StageConfig, stage_csv

BASE = ["PATIENTS", "ADMISSIONS", "ICUSTAYS", "PRESCRIPTIONS", "MICROBIOLOGYEVENTS", "DATETIMEEVENTS"]


def _iv_demo() -> Path:
    path = Path(os.environ.get("MIMIC4_DEMO_DIR") or ROOT.parent / "shared" / "mimic-iv-demo")
    if not (path / "hosp" / "admissions.csv.gz").exists():
        pytest.fail(f"MIMIC-IV demo not found at {path} (set MIMIC4_DEMO_DIR)", pytrace=False)
    return path


def _synth_world(root: Path) -> Path:
    from pipeline.data.mimic.synth import SynthConfig, generate

    generate(root / "mimic", patients=400, seed=3, config=SynthConfig(density=0.05))
    return root / "mimic"


def _same_outputs(csv_res, staged_res) -> None:
    """Every file both extractions wrote is byte-identical; the manifests differ in `source` only."""
    assert sorted(csv_res.files) == sorted(staged_res.files)
    for name in csv_res.files:
        if name != "manifest":
            assert Path(csv_res.files[name]).read_bytes() == Path(staged_res.files[name]).read_bytes(), name
    assert csv_res.link_file.read_bytes() == staged_res.link_file.read_bytes()
    a, b = dict(csv_res.manifest), dict(staged_res.manifest)
    assert (a.pop("source")["kind"], b.pop("source")["kind"]) == ("csv", "stage")
    assert a == b


@pytest.mark.parametrize("world", ["mimic-iii demo", "mimic-iv demo", "synthetic"])
def test_staged_extraction_is_byte_identical(world, demo_dir, tmp_path):
    source = {"mimic-iii demo": lambda: demo_dir, "mimic-iv demo": _iv_demo,
              "synthetic": lambda: _synth_world(tmp_path)}[world]()
    manifest = stage_csv(source, tmp_path / "stage", StageConfig(row_group_rows=10_000))
    assert manifest["tables"]["admissions"]["source"]["sha256"]
    _same_outputs(extract(source, tmp_path / "csv"), extract(tmp_path / "stage", tmp_path / "staged"))
    if world == "synthetic":  # the true risk is found through the stage, as through the CSV directory
        from pipeline.tasks.mortality.truth import find_truth

        assert find_truth(tmp_path / "staged") == find_truth(tmp_path / "csv") == source / "_truth" / "truth.csv.gz"


@pytest.fixture
def corrupted(demo_dir, tmp_path) -> Path:
    """A small copy of the demo with bad rows: an unparseable ADMITTIME, invalid UTF-8 in a column read and
    in one never read, a line with too many fields and one with too few."""
    out = tmp_path / "src"
    out.mkdir()
    for t in BASE:
        shutil.copy(demo_dir / f"{t}.csv.gz", out / f"{t}.csv.gz")
    adm = pd.read_csv(out / "ADMISSIONS.csv.gz", dtype=str, keep_default_na=False)
    adm.loc[3, "admittime"] = "not a time"
    adm.to_csv(out / "ADMISSIONS.csv.gz", index=False)
    rx = pd.read_csv(out / "PRESCRIPTIONS.csv.gz", dtype=str, keep_default_na=False)
    rx.loc[4, "formulary_drug_cd"] = "BADBYTES1"
    rx.loc[6, "drug"] = "BADBYTES2"
    lines = rx.to_csv(index=False).encode().replace(b"BADBYTES1", b"B\xff\xfeD").replace(
        b"BADBYTES2", b"D\xff\xfeG").split(b"\n")
    lines[10] += b",extra,fields"
    lines[12] = b"1,2,3"
    with gzip.open(out / "PRESCRIPTIONS.csv.gz", "wb") as fh:
        fh.write(b"\n".join(lines))
    return out


def test_corrupted_source_reaches_the_same_quarantine(corrupted, tmp_path):
    stage_csv(corrupted, tmp_path / "stage")
    cfg = ExtractConfig(verify_counts=True)
    csv_res, staged = extract(corrupted, tmp_path / "csv", cfg), extract(tmp_path / "stage", tmp_path / "staged", cfg)
    _same_outputs(csv_res, staged)
    q = pd.read_parquet(staged.out_dir / "quarantine" / "prescriptions.parquet")
    assert sorted(q["line"].dropna().astype(int)) == [6, 11, 13]  # invalid UTF-8 (a column read), 2 malformed
    acc = staged.manifest["tables"]
    assert acc["prescriptions"]["rows_read"] == 10_398 and acc["admissions"]["quarantined"] == 1
    for name, a in acc.items():
        assert a["rows_read"] == a["used"] + a["quarantined"] + a["outside_window"], name


def _stale_error(stage: Path, out: Path) -> str:
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(stage), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    return result.output


@pytest.mark.parametrize("change", ["rows appended", "same size, other bytes", "table added", "table removed"])
def test_stale_stage_is_refused_in_one_line(corrupted, tmp_path, change):
    stage_csv(corrupted, tmp_path / "stage")
    rx = corrupted / "PRESCRIPTIONS.csv.gz"
    if change == "rows appended":
        rx.write_bytes(rx.read_bytes() + gzip.compress(b"1,2,3\n"))
    elif change == "same size, other bytes":
        data = bytearray(rx.read_bytes())
        data[-9] ^= 0xFF  # the gzip trailer's CRC: the size and the header stay, the checksum changes
        rx.write_bytes(bytes(data))
    elif change == "table added":
        shutil.copy(corrupted / "DATETIMEEVENTS.csv.gz", corrupted / "OUTPUTEVENTS.csv.gz")
    else:
        rx.unlink()
    message = _stale_error(tmp_path / "stage", tmp_path / "o")
    assert "stale" in message and "cli.py stage --source" in message


def test_touched_but_unchanged_source_and_a_moved_stage_are_read(corrupted, tmp_path, caplog):
    stage_csv(corrupted, tmp_path / "stage")
    os.utime(corrupted / "PRESCRIPTIONS.csv.gz")  # a new time, the same bytes: the checksum decides
    first = extract(tmp_path / "stage", tmp_path / "a")
    shutil.rmtree(corrupted)  # the source gone: read as it is, with a warning
    second = extract(tmp_path / "stage", tmp_path / "b")
    assert "freshness is unchecked" in caplog.text
    assert (first.out_dir / "train.parquet").read_bytes() == (second.out_dir / "train.parquet").read_bytes()


def test_a_stage_of_other_table_definitions_is_refused(corrupted, tmp_path):
    stage_csv(corrupted, tmp_path / "stage")
    manifest = (tmp_path / "stage" / STAGE_FILE).read_text()
    (tmp_path / "stage" / STAGE_FILE).write_text(manifest.replace('"valuenum": "DOUBLE"', '"valuenum": "VARCHAR"', 1))
    with pytest.raises(SourceError, match="other table definitions"):
        extract(tmp_path / "stage", tmp_path / "o")


def test_out_must_not_be_another_directory(corrupted, tmp_path):
    from pipeline.core.fileio import OutputDirError

    with pytest.raises(OutputDirError, match="holds the source folder"):
        stage_csv(corrupted, corrupted.parent)  # holds src/: replacing it whole would delete the source
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(OutputDirError, match="holds files that are not a stage"):
        stage_csv(corrupted, other)  # neither empty nor a stage
    assert (other / "notes.txt").read_text() == "mine"


def test_cli_stage_reports_each_table_and_progress(corrupted, tmp_path):
    result = CliRunner().invoke(cli.app, ["stage", "--source", str(corrupted), "--out", str(tmp_path / "stage"),
                                          "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "MIMIC-III stage written to" in result.output
    assert "prescriptions" in result.output and "rejected_lines=3" in result.output
    seen = []
    stage_csv(corrupted, tmp_path / "stage", progress=lambda done, total, status: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] > 0 and all(d <= t for d, t in seen)
