"""Atomic file output and content hashes.

Every file the pipeline writes goes to a temporary name in the same directory and is
renamed into place, so a reader never sees a half-written file. A folder written as a whole (an
extraction's features, a stage) is written beside its place and swapped in (``staged_dir``): the previous
folder is replaced whole, so no file of it survives, and an interrupted write leaves the old one as it was.
The project's own files that a command finds from any folder of the project (the tracking store ``mlflow.db``, the
de-identification key ``.deid_key``): ``project_file``, the nearest one upward, else a new one at the checkout's
root (never in a subfolder).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from pipeline.core.errors import PipelineError, naming


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
    return 0o666 & ~_umask()


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


@contextlib.contextmanager
def staged_dir(target: Path | str) -> Iterator[Path]:
    """Yield a new empty folder beside ``target``; when the block succeeds it replaces ``target`` whole
    (``swap_dir``: what ``target`` held is gone, nothing of it survives), else it is removed and ``target``
    stays as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # what a plain mkdir would give (mkdtemp's is 0700)
        yield tmp
        swap_dir(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def swap_dir(new: Path | str, target: Path | str) -> None:
    """Put folder ``new`` at ``target``: a rename when ``target`` does not exist; otherwise the two are
    exchanged in one step (Linux ``renameat2(RENAME_EXCHANGE)``; elsewhere two renames) and the old
    folder, now at ``new``, is removed."""
    new, target = Path(new), Path(target)
    if not target.exists():
        os.rename(new, target)
        return
    if not _exchange(new, target):
        aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
        os.rename(target, aside / "old")
        os.rename(new, target)
        os.rename(aside / "old", new)
        aside.rmdir()
    shutil.rmtree(new)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically with ``renameat2`` (True), or False where the system has none."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (38, 22, 95):  # ENOSYS, EINVAL (a file system without it), EOPNOTSUPP
        return False
    raise OSError(err, os.strerror(err), str(b))


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


class OutputDirError(PipelineError, ValueError):
    """An output folder that cannot be written (or replaced) where it was asked for."""


def refuse_inside(out: Path | str, source: Path | str, what: str = "output",
                  names: tuple[str, str] = ("out_dir", "source")) -> None:
    """Refuse (one line naming the arguments ``names``) an output folder ``out`` that is or lies inside the input
    folder ``source``: the ``what`` would mix with the input's files."""
    out_arg, source_arg = names
    target, src = Path(out).resolve(), Path(source).resolve()
    if target == src or src in target.parents:
        where = "is the source folder" if target == src else "lies inside the source folder"
        exc = OutputDirError(f"`{out_arg}` {out} {where} (`{source_arg}` {source}): the {what} would mix with the "
                             "source's files; name a folder outside it")
        raise naming(exc, out_arg, source_arg)


def check_output_dir(out: Path | str, source: Path | str | None = None, *, markers: tuple[str, ...] = (),
                     what: str = "output", names: tuple[str, str] = ("out_dir", "source")) -> None:
    """Refuse, with one line naming the arguments ``names`` (the output folder's and the source's, as the
    function calling this spells them), an output folder ``out`` that is, lies inside or holds the source folder
    ``source`` (None: a database, not checked), and an existing ``out`` that is neither empty nor a previous
    ``what`` (none of ``markers`` in it): it is replaced whole (``staged_dir``), so nothing else may be there."""
    out_arg, source_arg = names
    target = Path(out).resolve()
    if source is not None:
        src = Path(source).resolve()
        refuse_inside(out, source, what, names)
        if target in src.parents:
            exc = OutputDirError(f"`{out_arg}` {out} holds the source folder (`{source_arg}` {source}), and a {what} "
                                 "replaces its folder whole; name a folder beside the source instead")
            raise naming(exc, out_arg, source_arg)
    if target.is_file():
        raise naming(OutputDirError(f"`{out_arg}` {out} is a file; name a folder for the {what}"), out_arg)
    if target.is_dir() and any(target.iterdir()) and not any((target / m).exists() for m in markers):
        exc = OutputDirError(f"`{out_arg}` {out} holds files that are not a {what} (no {' or '.join(markers)}), and a "
                             f"{what} replaces its folder whole; name a new or empty folder, or a previous {what}")
        raise naming(exc, out_arg)


CHECKOUT = Path(__file__).resolve().parents[2]  # the folder of this code's checkout (cli.py beside pipeline/)


def project_file(name: str, here: Path | None = None) -> Path:
    """The file ``name`` of the working directory (``here``) or of the nearest folder above it that has one, else
    where a new one goes (``new_file_folder``)."""
    here = Path.cwd() if here is None else here
    found = next((f / name for f in (here, *here.parents) if (f / name).is_file()), None)
    return found or new_file_folder(here) / name


def new_file_folder(here: Path) -> Path:
    """Where a new project file goes: this checkout's root when ``here`` lies inside it (a command run from
    ``docs/`` makes no ``docs/mlflow.db``), else ``here``."""
    root = CHECKOUT if (CHECKOUT / "cli.py").is_file() else None
    return root if root is not None and (here == root or root in here.parents) else here


def features_folder(fdir: Path | str, error: type[PipelineError] = PipelineError) -> Path:
    """``fdir`` when it is a folder; else ``error`` naming the library argument ``features_dir`` (the command line's
    ``--data``): a folder that does not exist is said so, not as the first of its files that is missing."""
    fdir = Path(fdir)
    if not fdir.is_dir():
        what = "is a file, not a folder" if fdir.exists() else "no such folder"
        raise naming(error(f"`features_dir` {fdir}: {what} (give the features folder that `extract --out` wrote)"),
                     "features_dir")
    return fdir
