"""A Parquet stage of a MIMIC CSV directory: converted once, re-extracted in seconds.

``stage_csv(source, out)`` reads each table the extraction reads through ``CsvSource``'s typed views
(the same columns, types and per-row ``_error``) and writes it to ``out/<table>.parquet``; the lines
DuckDB rejects (malformed or invalid UTF-8) are kept in ``stage.json`` by line number, with the rows
written, so the quarantine counts them exactly as the CSV path does. ``stage.json`` also records each
source file's size, modification time and SHA-256, and the columns and types staged.

``StageSource`` reads a stage as a source (``open_source`` detects ``stage.json``): the same relations
as ``CsvSource`` over Parquet, whose scans are parallel (row groups) and typed once. A stage whose
source files changed since (size, or a checksum where the time differs), whose table set differs, or
that was written for other table definitions is refused with one line. Where the source directory is
gone, the stage is read as it is (a warning says its freshness is unchecked).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pipeline.core import fileio
from pipeline.data.mimic.sources.base import SourceError, TableInfo, set_memory_limit, short_error
from pipeline.data.mimic.sources.csvdir import CsvSource, _rejects, detect_layout
from pipeline.data.mimic.sources.tables import Release, tables_of

log = logging.getLogger(__name__)

STAGE_FILE = "stage.json"  # the stage's manifest (its presence makes a directory a stage)
STAGE_VERSION = 1  # bumped when the stage's files change meaning


@dataclass
class StageConfig:
    row_group_rows: int = 122_880  # rows per Parquet row group (each group is one unit of a parallel scan)
    workers: int = 2  # tables converted at once (a gzip CSV is inflated by one thread)
    threads: int | None = None  # DuckDB threads (unset: all cores)
    memory_limit: str = "3GB"  # DuckDB memory limit (spills to disk beyond it)


def is_stage(directory: Path | str) -> bool:
    """Whether ``directory`` holds a stage (its ``stage.json``)."""
    return (Path(directory) / STAGE_FILE).is_file()


def _spec_json(release: Release) -> dict:
    return {name: dict(spec.columns) for name, spec in tables_of(release).items()}


def _file_facts(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def stage_csv(source: Path | str, out: Path | str, config: StageConfig | None = None, progress=None) -> dict:
    """Convert the tables of the CSV directory ``source`` to a stage in ``out``; returns its manifest.

    ``progress(done_bytes, total_bytes, status)``, where given, is called as the conversion advances
    (source bytes of the tables finished, plus DuckDB's progress on those in flight)."""
    cfg = config or StageConfig()
    source, out = Path(source), Path(out)
    fileio.check_output_dir(out, source, markers=(STAGE_FILE,), what="stage", names=("out", "source"))
    with fileio.staged_dir(out) as work:  # written beside out, swapped in whole: no table of a previous stage stays
        return _stage_into(source, work, cfg, progress)


def _stage_into(source: Path, out: Path, cfg: StageConfig, progress) -> dict:
    """``stage_csv``'s conversion into the (new, empty) folder ``out``."""
    import duckdb

    tmp = out / ".tmp"
    tmp.mkdir(exist_ok=True)
    con = duckdb.connect()
    try:
        set_memory_limit(con, cfg)
        con.execute(f"SET temp_directory = '{tmp.as_posix()}'")
        if cfg.threads:
            con.execute(f"SET threads = {int(cfg.threads)}")
        src = CsvSource(source, con)
        files = {name: Path(info.location) for name, info in src.tables.items()}
        sizes = {name: path.stat().st_size for name, path in files.items()}
        order = sorted(files, key=lambda n: -sizes[n])  # largest first: the longest conversion starts at once
        total = max(sum(sizes.values()), 1)
        done, running, lock = [0], {}, threading.Lock()

        def convert(name: str) -> dict:
            cur = con.cursor()
            with lock:
                running[name] = cur
            target = out / f"{name}.parquet"
            started = time.perf_counter()
            try:
                with fileio.atomic_path(target) as part:
                    cur.execute(f"COPY (SELECT * FROM src_{name}) TO '{part.as_posix()}' "
                                f"(FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {int(cfg.row_group_rows)})")
                    rows = int(cur.sql(f"SELECT count(*) FROM read_parquet('{part.as_posix()}')").fetchall()[0][0])
                    rejects = _rejects(cur, name)
            except Exception as exc:  # duckdb raises several classes; all become one clear error naming the file
                raise SourceError(f"{files[name]}: {short_error(exc)}") from None
            finally:
                with lock:
                    running.pop(name, None)
                    done[0] += sizes[name]
                cur.close()
            log.info("  staged %-18s %12d rows, %d rejected lines, %6.2f s", name, rows, len(rejects),
                     time.perf_counter() - started)
            info = src.tables[name]
            return {"file": target.name, "rows": rows, "rejects": [[line, why] for line, why in rejects],
                    "columns": info.columns, "missing_optional": info.missing_optional,
                    "source": {"path": files[name].relative_to(source).as_posix(), **_file_facts(files[name]),
                               "sha256": fileio.sha256_file(files[name])}}

        tables: dict[str, dict] = {}
        with ThreadPoolExecutor(max_workers=max(1, cfg.workers)) as pool:
            futures = {name: pool.submit(convert, name) for name in order}
            while not all(f.done() for f in futures.values()):
                if progress is not None:
                    with lock:
                        flight = sum(sizes[n] * max(0.0, c.query_progress()) / 100.0 for n, c in running.items())
                        names = ", ".join(sorted(running))
                    progress(min(done[0] + int(flight), total), total, names)
                time.sleep(0.2)
            for name in order:
                tables[name] = futures[name].result()
        if progress is not None:
            progress(total, total, "")
        manifest = {"stage_version": STAGE_VERSION, "release": src.release.value,
                    "source": str(source.resolve()), "spec": _spec_json(src.release),
                    "tables": dict(sorted(tables.items())), "absent": sorted(set(src.specs) - set(tables))}
        fileio.write_json(out / STAGE_FILE, manifest)
        return manifest
    finally:
        con.close()
        shutil.rmtree(tmp, ignore_errors=True)


def check_fresh(stage: Path, manifest: dict) -> None:
    """Raise a one-line SourceError when the stage's source changed since it was staged."""
    again = f"stage it again (cli.py stage --source {manifest.get('source')} --out {stage})"
    if manifest.get("stage_version") != STAGE_VERSION:
        raise SourceError(f"{stage}: a stage of version {manifest.get('stage_version')}, this pipeline reads "
                          f"version {STAGE_VERSION}: {again}")
    release = Release(manifest["release"])
    if manifest.get("spec") != _spec_json(release):
        raise SourceError(f"{stage}: staged for other table definitions than this pipeline's: {again}")
    source = Path(manifest["source"])
    if not source.is_dir():
        log.warning("%s: its source %s is not here; the stage is read as it is (its freshness is unchecked)",
                    stage, source)
        return
    try:
        found, files = detect_layout(source)
    except SourceError as exc:
        raise SourceError(f"{stage}: its source changed since it was staged ({exc}): {again}") from None
    staged = {name: t["source"]["path"] for name, t in manifest["tables"].items()}
    now = {name: path.relative_to(source).as_posix() for name, path in files.items()
           if name in staged or name in manifest.get("absent", [])}
    if found is not release or now != staged:
        added = sorted(set(now) - set(staged)) or sorted(set(staged) - set(now)) or sorted(
            n for n in now if now[n] != staged[n])
        raise SourceError(f"{stage}: stale: the source's tables changed since it was staged "
                          f"({', '.join(added) or 'layout'}): {again}")
    for name, t in manifest["tables"].items():
        path, facts = source / t["source"]["path"], t["source"]
        now_facts = _file_facts(path)
        if now_facts["size"] != facts["size"] or (
                now_facts["mtime_ns"] != facts["mtime_ns"] and fileio.sha256_file(path) != facts["sha256"]):
            raise SourceError(f"{stage}: stale: {path} changed since it was staged: {again}")


class StageSource(CsvSource):
    """A stage (``stage_csv``) as a source: ``CsvSource``'s relations over the staged Parquet files."""

    kind = "stage"

    def __init__(self, directory: Path | str, con) -> None:
        self.directory = Path(directory)
        self.con = con
        self.description = f"stage:{self.directory.resolve()}"
        self._running: set = set()
        self._lock = threading.Lock()
        try:
            self.manifest = fileio.read_json(self.directory / STAGE_FILE)
            self.release = Release(self.manifest["release"])
        except (OSError, ValueError, KeyError) as exc:
            raise SourceError(f"{self.directory / STAGE_FILE}: not a readable stage manifest ({exc})") from None
        check_fresh(self.directory, self.manifest)
        self.specs = tables_of(self.release)
        self.tables: dict[str, TableInfo] = {}
        self._staged = self.manifest["tables"]
        for name in self.manifest.get("absent", []):
            if self.specs[name].required:  # cannot happen for a stage written by stage_csv
                raise SourceError(f"{self.directory}: required table {name.upper()} is not in the stage")
            log.warning("optional table %s is not in the stage %s: its events are skipped", name.upper(),
                        self.directory)
        for name, t in self._staged.items():
            path = self.directory / t["file"]
            if not path.is_file():
                raise SourceError(f"{path}: missing from the stage: stage it again")
            info = TableInfo(name, str(path), dict(t["columns"]), list(t["missing_optional"]))
            self.execute(f"CREATE OR REPLACE VIEW src_{name} AS SELECT * FROM read_parquet('{path.as_posix()}')",
                         str(path))
            self.tables[name] = info

    def _counted(self, name: str) -> tuple[int, list[tuple[int, str]]]:
        t = self._staged[name]
        return int(t["rows"]), [(int(line), str(why)) for line, why in t["rejects"]]

    def into_local_counted(self, sql: str, table: str, what: str, name: str) -> tuple[int | None, list]:
        """``into_local`` on a cursor of its own; (rows, rejected lines) as staged (no count needed)."""
        cur = self._cursor()
        try:
            cur.execute(f"CREATE OR REPLACE TABLE {table} AS {sql}")
        except Exception as exc:  # duckdb raises several classes; all become one clear error
            raise SourceError(f"{what}: {short_error(exc)}") from None
        finally:
            self._release(cur)
        return self._counted(name)

    def count_rows(self, name: str) -> tuple[int, list[tuple[int, str]]]:
        """(rows staged, rejected lines): rows read = their sum, as for the CSV file."""
        return self._counted(name)

    def scan_rejects(self, name: str) -> list[tuple[int, str]]:
        return self._counted(name)[1] if name in self._staged else []


__all__ = ["STAGE_FILE", "StageConfig", "StageSource", "check_fresh", "is_stage", "stage_csv"]
