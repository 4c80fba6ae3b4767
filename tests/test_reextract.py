"""Issue 36, item 3: ``extract`` and ``stage`` never write into their source, and into a used folder they replace
the previous output whole (``core.fileio.staged_dir``): nothing stale survives, and a run that fails or is
interrupted leaves the previous output as it was."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.paths import ROOT
from typer.testing import CliRunner

import cli
from pipeline.core import fileio
from pipeline.core.fileio import OutputDirError, check_output_dir, staged_dir
from pipeline.data.mimic.extraction import extract
from pipeline.data.mimic.sources.stage import stage_csv


def mimic4_demo() -> Path:
    path = Path(os.environ.get("MIMIC4_DEMO_DIR") or ROOT.parent / "shared" / "mimic-iv-demo")
    if not (path / "hosp").is_dir():
        pytest.skip(f"MIMIC-IV demo not found at {path}")
    return path


def files_of(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_a_staged_folder_replaces_the_old_one_whole(tmp_path, monkeypatch):
    target = tmp_path / "out"
    with staged_dir(target) as new:
        (new / "a").write_text("1")
        (new / "sub").mkdir()
        (new / "sub" / "b").write_text("2")
    with staged_dir(target) as new:
        (new / "c").write_text("3")
    assert files_of(target) == {"c"} and [p.name for p in tmp_path.iterdir()] == ["out"]
    monkeypatch.setattr(fileio, "_exchange", lambda a, b: False)  # a system without renameat2: two renames
    with staged_dir(target) as new:
        (new / "d").write_text("4")
    assert files_of(target) == {"d"} and [p.name for p in tmp_path.iterdir()] == ["out"]
    with pytest.raises(KeyboardInterrupt), staged_dir(target) as new:
        (new / "e").write_text("5")
        raise KeyboardInterrupt
    assert files_of(target) == {"d"} and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_an_output_folder_is_checked_against_its_source(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for out, said in ((src, "is the source folder"), (src / "f", "lies inside the source folder"),
                      (tmp_path, "holds the source folder")):
        with pytest.raises(OutputDirError, match=said) as err:
            check_output_dir(out, src, markers=("manifest.json",), what="features folder")
        assert err.value.arguments[0] == "out_dir" and str(err.value).startswith(f"`out_dir` {out} ")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("x")
    with pytest.raises(OutputDirError, match="holds files that are not a features folder"):
        check_output_dir(mine, src, markers=("manifest.json",), what="features folder")
    (mine / "manifest.json").write_text("{}")
    check_output_dir(mine, src, markers=("manifest.json",), what="features folder")  # a previous output: replaced
    check_output_dir(tmp_path / "new", None)  # a database source: nothing to compare


def test_the_mimic_iv_demo_extracted_into_the_mimic_iii_demos_folder_leaves_nothing_of_it(demo_dir, tmp_path):
    """The issue's case: MIMIC-III's quarantine/chartevents.parquet, inputevents_mv, procedureevents_mv stayed."""
    out = tmp_path / "runs" / "demo"
    first = extract(demo_dir, out)
    assert {"quarantine/chartevents.parquet", "quarantine/inputevents_mv.parquet"} <= files_of(out)
    second = extract(mimic4_demo(), out)
    assert second.manifest["release"] == "mimic-iv" and second.out_dir == out and second.files["train"].parent == out
    written = {Path(p).relative_to(out).as_posix() for p in second.files.values()}
    assert files_of(out) == written | {"_private/link.csv"}  # the manifest lists every file there, nothing else
    assert not {"quarantine/chartevents.parquet", "quarantine/inputevents_mv.parquet",
                "quarantine/procedureevents_mv.parquet"} & files_of(out)
    for name, digest in second.manifest["sha256"].items():
        assert fileio.sha256_file(second.files[name]) == digest
    assert first.manifest["sha256"] != second.manifest["sha256"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo"]  # no staged folder left beside it


def test_a_failed_reextraction_leaves_the_previous_one_as_it_was(demo_dir, tmp_path):
    out = tmp_path / "features"
    extract(demo_dir, out)
    before = {f: fileio.sha256_file(out / f) for f in files_of(out)}
    broken = tmp_path / "broken"
    broken.mkdir()
    for t in ("ADMISSIONS", "ICUSTAYS"):  # no PATIENTS
        shutil.copy(demo_dir / f"{t}.csv.gz", broken)
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(broken), "--out", str(out)])
    assert result.exit_code == 2 and "PATIENTS" in result.output
    assert {f: fileio.sha256_file(out / f) for f in files_of(out)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken", "features"]


def test_extract_refuses_its_source_as_out(demo_dir, tmp_path):
    src = tmp_path / "src"
    shutil.copytree(demo_dir, src)
    before = files_of(src)
    for out in (src, src / "features"):
        result = CliRunner().invoke(cli.app, ["extract", "--source", str(src), "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == [
            f"error: --out {out} {'is the source folder' if out == src else 'lies inside the source folder'} "
            f"(--source {src}): the features folder would mix with the source's files; name a folder outside it"]
    assert files_of(src) == before


def test_a_stage_into_a_used_folder_keeps_no_table_of_the_previous_one(demo_dir, tmp_path):
    full, small = tmp_path / "full", tmp_path / "small"
    for folder, tables in ((full, ("PATIENTS", "ADMISSIONS", "ICUSTAYS", "PRESCRIPTIONS", "DATETIMEEVENTS")),
                           (small, ("PATIENTS", "ADMISSIONS", "ICUSTAYS"))):
        folder.mkdir()
        for t in tables:
            shutil.copy(demo_dir / f"{t}.csv.gz", folder)
    out = tmp_path / "stage"
    stage_csv(full, out)
    assert {"prescriptions.parquet", "datetimeevents.parquet"} <= files_of(out)
    manifest = stage_csv(small, out)
    assert files_of(out) == {t["file"] for t in manifest["tables"].values()} | {"stage.json"}
    with pytest.raises(OutputDirError, match="lies inside the source folder"):
        stage_csv(small, small / "stage")
    assert not (small / "stage").exists()
