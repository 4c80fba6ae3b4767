"""De-identification: scan every output for raw identifiers and calendar dates."""

from __future__ import annotations

import json
import stat

import pandas as pd
import pytest
from helpers.privacy_scan import check_string, scan
from helpers.raw_ids import raw_ids_of

from pipeline.core import fileio
from pipeline.data.mimic import deid


@pytest.fixture(scope="session")
def demo_ids(demo_dir):
    ids = raw_ids_of(demo_dir)
    assert len(ids) > 300  # 100 subjects + 129 admissions + 136 ICU stays
    return ids


def test_demo_outputs_pass_the_scan(demo_features, demo_ids):
    findings = scan([demo_features.out_dir], demo_ids)
    assert findings == [], "\n".join(map(str, findings[:20]))


def test_scan_catches_planted_identifiers_and_dates(demo_features, demo_ids, tmp_path):
    some_id = sorted(demo_ids)[0]
    (tmp_path / "leak.json").write_text(json.dumps({"note": f"patient {some_id}", "when": "2150-03-04 10:00:00"}))
    frame = pd.read_parquet(demo_features.out_dir / "train.parquet")
    frame.loc[0, "gender"] = f"M {some_id}"
    frame.to_parquet(tmp_path / "leak.parquet")
    problems = {(f.path.split("/")[-1], f.problem.split()[0]) for f in scan([tmp_path], demo_ids)}
    assert ("leak.json", "raw") in problems and ("leak.json", "calendar") in problems
    assert ("leak.parquet", "raw") in problems


def test_token_item_codes_are_not_identifiers():
    ids = {"220045", "10006"}
    assert check_string("chart:220045:q3", ids) is None  # item code, not an ICU stay id
    assert check_string("chart:211:t:10006", ids) == "raw identifier 10006"


def test_link_file_and_key_file_are_private(demo_features, tmp_path, monkeypatch):
    link = pd.read_csv(demo_features.link_file)
    assert len(link) == demo_features.manifest["cohort"]["admissions"]
    assert stat.S_IMODE(demo_features.link_file.stat().st_mode) == 0o600
    monkeypatch.delenv(deid.KEY_ENV, raising=False)
    monkeypatch.setenv(deid.KEY_FILE_ENV, str(tmp_path / "k" / "deid.key"))
    key = deid.load_key()
    assert stat.S_IMODE((tmp_path / "k" / "deid.key").stat().st_mode) == 0o600
    assert deid.load_key() == key  # stable across calls
    assert deid.pseudonym(key, 100001) != deid.pseudonym(b"other", 100001)
    (tmp_path / "k" / "deid.key").chmod(0o644)
    with pytest.raises(deid.DeidError, match="readable by others"):
        deid.load_key()


def test_key_never_written_to_outputs(demo_features):
    key = deid.load_key().decode()
    for path in demo_features.out_dir.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path
    assert fileio.read_json(demo_features.out_dir / "manifest.json")["source"]["kind"] == "csv"
