"""pipeline.data.mimic.deid: the key (environment, or a 0600 key file created on first use; a key file others can
read is refused), keyed pseudonyms (HMAC-SHA256 of the HADM_ID, 128 bits), the owner's link file."""

from __future__ import annotations

import hashlib
import hmac
import os
import stat

import pandas as pd
import pytest

from pipeline.core.errors import PipelineError
from pipeline.data.mimic import deid


@pytest.fixture
def key_file(tmp_path, monkeypatch):
    """No key in the environment; the key file is tmp_path/keys/deid.key (not yet there)."""
    monkeypatch.delenv(deid.KEY_ENV, raising=False)
    path = tmp_path / "keys" / "deid.key"
    monkeypatch.setenv(deid.KEY_FILE_ENV, str(path))
    return path


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_key_from_the_environment_wins_over_any_key_file(key_file, monkeypatch):
    key_file.parent.mkdir()
    key_file.write_text("file-key\n")
    key_file.chmod(0o644)  # would be refused: the environment is read first
    monkeypatch.setenv(deid.KEY_ENV, "env-key")
    assert deid.load_key() == b"env-key"
    monkeypatch.setenv(deid.KEY_ENV, "")  # empty: as if unset
    with pytest.raises(deid.DeidError, match="readable by others"):
        deid.load_key()


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_key_file_is_created_once_with_mode_0600(key_file, umask):
    old = os.umask(umask)
    try:
        key = deid.load_key()
    finally:
        os.umask(old)
    assert _mode(key_file) == 0o600  # whatever the umask
    assert key_file.read_bytes() == key + b"\n"
    assert len(key) == 64 and int(key, 16) >= 0  # 32 random bytes as hex
    assert deid.load_key() == key  # read back, not created again
    assert list(key_file.parent.iterdir()) == [key_file]  # no temporary file left beside it


def test_default_key_file_is_in_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.delenv(deid.KEY_ENV, raising=False)
    monkeypatch.delenv(deid.KEY_FILE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert deid.key_file_path() == tmp_path / ".deid_key"
    key = deid.load_key()
    assert (tmp_path / ".deid_key").read_bytes().strip() == key and _mode(tmp_path / ".deid_key") == 0o600


def test_a_new_key_file_is_announced_and_found_from_a_subfolder(tmp_path, monkeypatch, caplog):
    """Issue 46, items 1 and 5: the key a later scoring depends on is not made without a word, and a command run
    from a subfolder of the project uses the project's key (a new one: at the checkout's root), as the store."""
    from pipeline.core import fileio

    monkeypatch.delenv(deid.KEY_ENV, raising=False)
    monkeypatch.delenv(deid.KEY_FILE_ENV, raising=False)
    (tmp_path / "cli.py").write_text("")
    (tmp_path / "docs" / "experiments").mkdir(parents=True)
    monkeypatch.setattr(fileio, "CHECKOUT", tmp_path)
    monkeypatch.chdir(tmp_path / "docs" / "experiments")
    with caplog.at_level("WARNING", logger=deid.__name__):
        key = deid.load_key()
    (said,) = [r.getMessage() for r in caplog.records]
    assert said == (f"created the de-identification key file {tmp_path / '.deid_key'} (a new secret, mode 0600): the "
                    "pseudonyms follow it, so scoring or re-extracting this data later needs this same key; keep it "
                    "and never commit it (MIMIC_DEID_KEY gives a key instead)")
    assert (tmp_path / ".deid_key").read_bytes().strip() == key
    caplog.clear()
    monkeypatch.chdir(tmp_path / "docs")
    with caplog.at_level("WARNING", logger=deid.__name__):
        assert deid.load_key() == key  # found upward, read, not announced again
    assert caplog.records == []


@pytest.mark.parametrize("mode, refused", [(0o600, False), (0o400, False), (0o640, True), (0o604, True),
                                           (0o660, True), (0o610, True)])
def test_key_file_readable_by_group_or_others_is_refused(key_file, mode, refused):
    key_file.parent.mkdir()
    key_file.write_bytes(b"  my-secret-key \n")
    key_file.chmod(mode)
    if refused:
        with pytest.raises(deid.DeidError, match=rf"key file {key_file} is readable by others \(mode {mode:o}\); "
                                                 "chmod 600 it") as exc:
            deid.load_key()
        assert "my-secret-key" not in str(exc.value)
        assert isinstance(exc.value, PipelineError)
    else:
        assert deid.load_key() == b"my-secret-key"  # surrounding whitespace stripped


def test_empty_or_missing_key_file_is_an_error(key_file):
    with pytest.raises(deid.DeidError, match=rf"no de-identification key: set MIMIC_DEID_KEY or create {key_file}"):
        deid.load_key(create=False)
    assert not key_file.exists()  # create=False never writes
    key_file.parent.mkdir()
    key_file.write_bytes(b"\n \n")
    key_file.chmod(0o600)
    with pytest.raises(deid.DeidError, match="is empty"):
        deid.load_key()


def test_pseudonym_is_the_truncated_hmac_of_the_hadm_id():
    key = b"k1"
    expected = hmac.new(key, b"100001", hashlib.sha256).hexdigest()[:32]
    assert deid.pseudonym(key, 100001) == expected
    assert deid.pseudonym(key, "100001") == deid.pseudonym(key, " 100001") == expected  # the number, not the text
    assert len(expected) == deid.PSEUDONYM_HEX == 32 and expected == expected.lower()
    assert deid.pseudonym(key, 100001) == deid.pseudonym(bytes(key), 100001)  # deterministic
    assert deid.pseudonym(b"k2", 100001) != expected  # keyed
    ids = list(range(100000, 102000))
    keys = deid.pseudonyms(key, ids)
    assert keys == [deid.pseudonym(key, h) for h in ids] and len(set(keys)) == len(ids)
    with pytest.raises(ValueError):
        deid.pseudonym(key, "12a")


def test_link_file_is_private_sorted_and_reads_back(tmp_path):
    key = b"k"
    ids = [100003, 100001, 100002]
    keys = deid.pseudonyms(key, ids)
    path = deid.write_link_file(tmp_path / "out" / "_private" / "link.csv", keys, ids)
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
    lines = path.read_text().splitlines()
    pairs = sorted(zip(keys, ids))
    assert lines == ["key,hadm_id"] + [f"{k},{h}" for k, h in pairs]
    back = deid.read_link_file(path)
    assert back["key"].tolist() == [k for k, _ in pairs] and back["hadm_id"].tolist() == [h for _, h in pairs]
    assert back["hadm_id"].dtype == "int64" and back["key"].map(type).eq(str).all()
    assert list(path.parent.iterdir()) == [path]  # written atomically: no temporary file left
    with pytest.raises(deid.DeidError, match="link file .*nope.csv not found"):
        deid.read_link_file(tmp_path / "nope.csv")


def test_link_file_keeps_keys_that_look_like_numbers(tmp_path):
    """A pseudonym of digits only (possible: it is hex) must read back as the same string."""
    path = deid.write_link_file(tmp_path / "link.csv", ["00000000000000000000000000000123", "0e5"], [1, 2])
    assert deid.read_link_file(path)["key"].tolist() == ["00000000000000000000000000000123", "0e5"]
    assert pd.read_csv(path)["key"].tolist() != ["00000000000000000000000000000123", "0e5"]  # why dtype=str matters
