"""Issue 36, item 4: what was quarantined and refused is said on the console (rows by table and reason, and where
they are listed), and a source file cut mid-row is called out by name (``extraction.summary``)."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import cli
from pipeline.data.mimic.extraction.summary import cut_mid_row

BASE = ("PATIENTS", "ADMISSIONS", "ICUSTAYS", "DATETIMEEVENTS")


def test_the_demos_quarantine_is_said_by_table_and_reason(demo_dir, tmp_path):
    """The MIMIC-III demo quarantines 3,684 rows; the console says so, by table and reason, and where they are."""
    out = tmp_path / "features"
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(demo_dir), "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert (f"quarantined 3,684 rows of 6 table(s); each is listed with its row id or line and reason in "
            f"{out / 'quarantine'}/<table>.parquet:") in lines
    chart = next(ln for ln in lines if ln.strip().startswith("CHARTEVENTS"))
    assert chart.split() == ["CHARTEVENTS", "717", "ERROR", "flag", "set", "648;", "event", "more", "than", "24", "h",
                             "after", "discharge", "69"]
    assert any(ln.split()[:2] == ["INPUTEVENTS_MV", "2,910"] for ln in lines)
    total = sum(len(pd.read_parquet(f)) for f in (out / "quarantine").glob("*.parquet"))
    assert total == 3684  # what the line says is what the files hold
    assert not any("cut mid-row" in ln or "refused by the CSV reader" in ln for ln in lines)


def _source(demo_dir: Path, tmp_path: Path, cut: int | None) -> Path:
    """The demo's small tables with PRESCRIPTIONS as a plain .csv, its last ``cut`` bytes (before the final
    newline) removed: a file cut mid-row."""
    src = tmp_path / "src"
    src.mkdir()
    for t in BASE:
        shutil.copy(demo_dir / f"{t}.csv.gz", src)
    with gzip.open(demo_dir / "PRESCRIPTIONS.csv.gz", "rb") as fh:
        data = fh.read()
    if cut is not None:
        data = data.rstrip(b"\n")[:-cut]
    (src / "PRESCRIPTIONS.csv").write_bytes(data)
    return src


def test_a_plain_csv_cut_mid_row_is_called_out_by_name(demo_dir, tmp_path):
    """Half of the last row gone: the reader refuses the line, and the file is named as cut short."""
    src = _source(demo_dir, tmp_path, cut=40)
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(src), "--out", str(tmp_path / "f")])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "refused by the CSV reader (malformed lines, quarantined above by line number): PRESCRIPTIONS 1" in lines
    (cut,) = [ln for ln in lines if ln.startswith("cut mid-row:")]
    assert cut == (f"cut mid-row: {src / 'PRESCRIPTIONS.csv'} ends without a newline: the file looks cut short; its "
                   "last line (10,399) was refused (quarantined); copy the file again from its source")
    assert any(ln.split()[0] == "PRESCRIPTIONS" and "MISSING COLUMNS 1" in ln for ln in lines)


def test_a_cut_inside_the_last_value_is_called_out_though_the_row_reads(demo_dir, tmp_path):
    src = _source(demo_dir, tmp_path, cut=1)  # the last value loses its last character: the row still parses
    result = CliRunner().invoke(cli.app, ["extract", "--source", str(src), "--out", str(tmp_path / "f")])
    assert result.exit_code == 0, result.output
    (cut,) = [ln for ln in result.output.splitlines() if ln.startswith("cut mid-row:")]
    assert "its last line (10,399) was read as it is, its last value possibly cut" in cut


def test_whole_files_are_not_called_cut(demo_dir, tmp_path):
    src = _source(demo_dir, tmp_path, cut=None)
    assert cut_mid_row(src / "PRESCRIPTIONS.csv") is None and cut_mid_row(src / "PATIENTS.csv.gz") is None
    (src / "empty.csv").write_bytes(b"")
    assert cut_mid_row(src / "empty.csv") is None
    (src / "no-newline.csv").write_bytes(b"a,b\n1,2\n3,4")
    assert cut_mid_row(src / "no-newline.csv") == 3


@pytest.mark.slow
def test_stage_names_a_cut_file_too(demo_dir, tmp_path):
    src = _source(demo_dir, tmp_path, cut=40)
    result = CliRunner().invoke(cli.app, ["stage", "--source", str(src), "--out", str(tmp_path / "stage")])
    assert result.exit_code == 0, result.output
    assert any(ln.startswith(f"cut mid-row: {src / 'PRESCRIPTIONS.csv'} ends without a newline")
               for ln in result.output.splitlines())
