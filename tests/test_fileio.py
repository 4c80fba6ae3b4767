"""pipeline.core.fileio: atomic writes (all or nothing, no temporary file left), file modes, deterministic
JSON, sha256 of a file."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from pipeline.core import fileio


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_atomic_path_writes_next_to_the_target_and_renames(tmp_path):
    target = tmp_path / "a" / "b" / "out.bin"  # parents are created
    with fileio.atomic_path(target) as tmp:
        assert tmp.parent == target.parent and tmp.name.startswith(".out.bin.") and tmp.suffix == ".tmp"
        tmp.write_bytes(b"new")
        assert not target.exists()  # a reader never sees a half-written file
    assert target.read_bytes() == b"new" and list(target.parent.iterdir()) == [target]


def test_atomic_path_failure_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="boom"):
        with fileio.atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert target.read_text() == "old" and list(tmp_path.iterdir()) == [target]
    with pytest.raises(KeyboardInterrupt):  # also on an interrupt
        with fileio.atomic_path(tmp_path / "new.txt") as tmp:
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_default_mode_follows_the_umask_like_open(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        path = fileio.write_text(tmp_path / "f.txt", "x")
        with open(tmp_path / "plain.txt", "w") as fh:
            fh.write("x")
    finally:
        os.umask(old)
    assert _mode(path) == expected == _mode(tmp_path / "plain.txt")  # mkstemp's 0600 does not leak through


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_explicit_mode_whatever_the_umask(tmp_path, mode):
    old = os.umask(0o077)
    try:
        path = fileio.write_bytes(tmp_path / "f.bin", b"x", mode=mode)
    finally:
        os.umask(old)
    assert _mode(path) == mode


def test_write_json_is_deterministic(tmp_path):
    a = fileio.write_json(tmp_path / "a.json", {"b": [1, 2.5, None], "a": {"z": True, "y": "é"}, "p": Path("/x")})
    b = fileio.write_json(tmp_path / "b.json", {"p": Path("/x"), "a": {"y": "é", "z": True}, "b": [1, 2.5, None]})
    assert a.read_bytes() == b.read_bytes()  # key order of the dict does not matter
    assert a.read_text(encoding="utf-8") == (
        '{\n  "a": {\n    "y": "\\u00e9",\n    "z": true\n  },\n  "b": [\n    1,\n    2.5,\n    null\n  ],\n'
        '  "p": "/x"\n}\n'
    )
    assert fileio.read_json(a) == {"a": {"y": "é", "z": True}, "b": [1, 2.5, None], "p": "/x"}


def test_write_text_is_utf8(tmp_path):
    path = fileio.write_text(tmp_path / "t.txt", "ü\n")
    assert path.read_bytes() == b"\xc3\xbc\n"


@pytest.mark.parametrize("size, chunk", [(0, 1 << 20), (1, 1), (1000, 7), (1000, 1000), (5000, 1 << 20)])
def test_sha256_file_in_chunks(tmp_path, size, chunk):
    data = os.urandom(size)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    assert fileio.sha256_file(path, chunk=chunk) == hashlib.sha256(data).hexdigest()

