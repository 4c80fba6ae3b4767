"""De-identification: keyed pseudonyms for admissions and the data owner's link file.

The admission key in every output is HMAC-SHA256(secret, HADM_ID) (hex, truncated to
128 bits). The secret comes from the environment variable ``MIMIC_DEID_KEY`` or from a key
file (``MIMIC_DEID_KEY_FILE``, default ``.deid_key`` in the working directory or the nearest folder above it, as the
tracking store is found: ``core.fileio.project_file``) created with mode 0600 on first use, at the checkout's root
when the command runs inside it, and announced (a warning line: later scoring of the same data needs the same key).
The secret is never logged or written anywhere else.
The link file (pseudonym -> HADM_ID, mode 0600) lets the data owner re-identify.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
from pathlib import Path
from typing import Iterable

import pandas as pd

from pipeline.core import fileio
from pipeline.core.errors import PipelineError
from pipeline.core.privacy import check_private

KEY_ENV = "MIMIC_DEID_KEY"
KEY_FILE_ENV = "MIMIC_DEID_KEY_FILE"
DEFAULT_KEY_FILE = ".deid_key"
PSEUDONYM_HEX = 32  # 128 bits: collisions are negligible for any hospital


class DeidError(PipelineError, RuntimeError):
    pass


log = logging.getLogger(__name__)


def key_file_path() -> Path:
    """``MIMIC_DEID_KEY_FILE``, else the nearest ``.deid_key`` upward (a new one: at the checkout's root when the
    working directory lies inside it, else in the working directory)."""
    chosen = os.environ.get(KEY_FILE_ENV)
    return Path(chosen) if chosen else fileio.project_file(DEFAULT_KEY_FILE)


def load_key(create: bool = True) -> bytes:
    """Return the secret key bytes (environment first, then the key file)."""
    env = os.environ.get(KEY_ENV)
    if env:
        return env.encode("utf-8")
    path = key_file_path()
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            raise DeidError(f"key file {path} is readable by others (mode {mode:o}); chmod 600 it")
        data = path.read_bytes().strip()
        if not data:
            raise DeidError(f"key file {path} is empty")
        return data
    if not create:
        raise DeidError(f"no de-identification key: set {KEY_ENV} or create {path}")
    check_private(path, folder=False, what="the de-identification key file")
    key = secrets.token_hex(32).encode("ascii")
    fileio.write_bytes(path, key + b"\n", mode=0o600)
    log.warning("created the de-identification key file %s (a new secret, mode 0600): the pseudonyms follow it, so "
                "scoring or re-extracting this data later needs this same key; keep it and never commit it (%s "
                "gives a key instead)", path, KEY_ENV)
    return key


def pseudonym(key: bytes, hadm_id: int | str) -> str:
    return hmac.new(key, str(int(hadm_id)).encode("ascii"), hashlib.sha256).hexdigest()[:PSEUDONYM_HEX]


def pseudonyms(key: bytes, hadm_ids: Iterable[int]) -> list[str]:
    return [pseudonym(key, h) for h in hadm_ids]


def write_link_file(path: Path, keys: list[str], hadm_ids: list[int]) -> Path:
    """pseudonym -> HADM_ID, readable by the owner only (mode 0600, directory 0700)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    frame = pd.DataFrame({"key": keys, "hadm_id": hadm_ids}).sort_values("key")
    fileio.write_text(path, frame.to_csv(index=False), mode=0o600)
    return path


def read_link_file(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise DeidError(f"link file {path} not found")
    return pd.read_csv(path, dtype={"key": str, "hadm_id": "int64"})
