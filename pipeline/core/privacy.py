"""The data owner's files kept out of git: a folder of them is never written where ``git add .`` would take it.

The link files (pseudonym -> HADM_ID), the reports and lists by HADM_ID (``_private/``), a MEDS export and the
de-identification key file re-identify patients. ``check_private(path)`` refuses, with one line saying how to
allow it, to write such a folder or file inside a git work tree unless git ignores it there (``git
check-ignore``: the repository's ``.gitignore`` ignores ``_private/`` anywhere, ``runs/`` and ``.deid_key``).
Outside a work tree, or where git is not installed, nothing is checked. ``ALLOW_ENV`` = 1 allows it anyway
(the data owner's own, access-controlled repository).
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from pipeline.core.errors import PipelineError

log = logging.getLogger(__name__)

ALLOW_ENV = "MIMIC_ALLOW_UNIGNORED_PRIVATE"  # "1": write the data owner's files where git would take them
PROBE = "link.csv"  # a file name checked inside a folder (git matches "_private/" only on a path under it)


class PrivateFileError(PipelineError, PermissionError):
    """The data owner's files would sit untracked and unignored in a git work tree."""


def check_private(path: Path | str, folder: bool = True, what: str = "the data owner's files") -> None:
    """Raise ``PrivateFileError`` when ``path`` (a folder of ``what``, or with ``folder`` False one file)
    lies in a git work tree whose git would not ignore it (see the module docstring)."""
    if os.environ.get(ALLOW_ENV, "").strip() == "1":
        return
    path = Path(path).absolute()
    root = work_tree(path)
    if root is None:
        return
    probe = path / PROBE if folder else path
    try:
        done = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(probe)], capture_output=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        log.info("git check-ignore failed (%s): %s not checked", exc, path)
        return
    if done.returncode == 1:  # 0: ignored; 1: not ignored; 128: git could not tell
        raise PrivateFileError(
            f"{path}: refused: {what} (they re-identify patients) would sit untracked and unignored in the git "
            f"work tree {root}, where `git add .` commits them; write them outside it or under an ignored folder "
            f"(runs/), ignore them (add `{'_private/' if path.name == '_private' else path.name}` to "
            f"{root / '.gitignore'}), or set {ALLOW_ENV}=1 to allow it")


def work_tree(path: Path) -> Path | None:
    """The top folder of the git work tree that holds ``path`` (which need not exist yet), or None."""
    anchor = path
    while not anchor.exists() and anchor != anchor.parent:
        anchor = anchor.parent
    if anchor.is_file():
        anchor = anchor.parent
    try:
        done = subprocess.run(["git", "-C", str(anchor), "rev-parse", "--show-toplevel"], capture_output=True,
                              text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):  # no git here: nothing to protect against
        return None
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None
