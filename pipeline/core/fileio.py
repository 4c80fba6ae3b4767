"""Atomic file output and content hashes.

Every file the pipeline writes goes to a temporary name in the same directory and is
renamed into place, so a reader never sees a half-written file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: Path | str, mode: int | None = None) -> Iterator[Path]:
    """Yield a temporary path next to `path`; rename it to `path` if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, mode if mode is not None else _default_mode())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def _default_mode() -> int:
    """0666 minus the process umask (what a plain open() would give)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_bytes(path: Path | str, data: bytes, mode: int | None = None) -> Path:
    with atomic_path(path, mode) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: Path | str, text: str, mode: int | None = None) -> Path:
    return write_bytes(path, text.encode("utf-8"), mode)


def write_json(path: Path | str, obj: Any, mode: int | None = None) -> Path:
    """Deterministic JSON (sorted keys, fixed indent, trailing newline)."""
    return write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", mode)


def read_json(path: Path | str) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def sha256_file(path: Path | str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
