"""A directory of MIMIC CSV / CSV.gz files, read by embedded DuckDB.

A source exposes each table as a SQL relation in the DuckDB dialect with the lowercase
columns of `pipeline.data.mimic.sources.tables` plus `_error` (NULL, or why the row cannot be used, such as an
unparseable timestamp). Layout is detected, not configured: MIMIC-III's tables in the directory
itself, MIMIC-IV's in its module subdirectories `hosp/` and `icu/` (and v1.0's `core/`);
`TABLE.csv` or `TABLE.csv.gz`, UPPERCASE or lowercase file names and headers.
"""

from __future__ import annotations

import csv
import gzip
import io as _io
import json
import logging
import threading
import zlib
from pathlib import Path

from pipeline.data.mimic.sources.base import EmptyTable, SourceError, TableInfo, empty_relation, short_error
from pipeline.data.mimic.sources.tables import FLOAT, MIMIC3_ONLY, TABLES, TEXT, Release, TableSpec, tables_of

log = logging.getLogger(__name__)

# Explicit CSV dialect: MIMIC-III exports are RFC 4180 (auto-detection can guess wrong).
# No sniffing (a truncated or malformed file must not break detection): the header is read
# by us and every column is declared VARCHAR, then typed with TRY_CAST in the view.
CSV_OPTIONS = "header=true, auto_detect=false, delim=',', quote='\"', escape='\"', store_rejects=true"


def read_header(path: Path) -> list[str]:
    """Column names of a CSV/CSV.gz file's first line, as written (BOM and quoting handled)."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            line = fh.readline(1 << 16)
    except (OSError, EOFError, zlib.error) as exc:
        raise SourceError(f"{path}: cannot read the header ({exc})") from None
    if not line.strip():
        raise EmptyTable(f"{path}: empty file (no header line)")
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: header is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    return next(csv.reader(_io.StringIO(text)))


def require_dir(directory: Path | str) -> Path:
    """``directory`` as a Path, or a SourceError saying what it is instead (a file, or nothing)."""
    directory = Path(directory)
    if directory.is_dir():
        return directory
    if directory.exists():
        raise SourceError(f"source {directory} is a file, not a directory: give the directory that holds the MIMIC "
                          f"tables (TABLE.csv or TABLE.csv.gz; MIMIC-IV: hosp/ and icu/), e.g. {directory.parent}")
    raise SourceError(f"source directory {directory} does not exist")


def find_tables(directory: Path, strict: bool = False) -> dict[str, Path]:
    """Map lowercase table names to their `TABLE.csv[.gz]` file (any name case).

    When a table has both files, `.csv.gz` is read with a warning, or with `strict` it is an error."""
    directory = require_dir(directory)
    found: dict[str, Path] = {}
    for path in sorted(directory.iterdir()):
        lower = path.name.lower()
        suffix = next((x for x in (".csv.gz", ".csv") if lower.endswith(x)), None)
        if suffix is None or not path.is_file():
            continue
        name = lower[: -len(suffix)]
        if name in found:
            if strict:
                raise SourceError(f"{directory}: table {name} has two files, {found[name].name} and {path.name}")
            gz, other = (found[name], path) if found[name].name.lower().endswith(".gz") else (path, found[name])
            log.warning("%s: both %s and %s exist; reading %s", name, gz.name, other.name, gz.name)
            found[name] = gz
            continue
        found[name] = path
    return found


MODULE_DIRS = ("core", "hosp", "icu")  # MIMIC-IV modules (v1.0 had core/; v2 moved it into hosp/)


def module_dirs(directory: Path) -> dict[str, Path]:
    """The MIMIC-IV module subdirectories of ``directory`` (lowercase name -> path); empty for MIMIC-III."""
    return {p.name.lower(): p for p in sorted(Path(directory).iterdir())
            if p.is_dir() and p.name.lower() in MODULE_DIRS}


def detect_layout(directory: Path | str, strict: bool = False) -> tuple[Release, dict[str, Path]]:
    """The release of a CSV directory and its table files (lowercase name -> file).

    MIMIC-IV when it has module subdirectories (``hosp/``, ``icu/``), which must both be there, with
    no MIMIC-III table beside or inside them; else MIMIC-III (tables in the directory itself)."""
    directory = require_dir(directory)
    modules = module_dirs(directory)
    if not modules:
        return Release.mimic3, find_tables(directory, strict)
    if "icu" not in modules or not ({"hosp", "core"} & set(modules)):
        found, missing = ", ".join(f"{m}/" for m in modules), "icu/" if "icu" not in modules else "hosp/"
        raise SourceError(f"{directory}: found {found} but no {missing}: a MIMIC-IV source needs both modules, "
                          "hosp/ and icu/")
    beside = {n: p for n, p in find_tables(directory).items() if n in TABLES or n in MIMIC3_ONLY}
    if beside:
        name = sorted(beside)[0]
        raise SourceError(f"{beside[name]}: a MIMIC-III table beside hosp/ and icu/ (MIMIC-IV keeps its tables in "
                          "the modules); remove it, or give the MIMIC-III directory on its own")
    files: dict[str, Path] = {}
    for module, path in modules.items():
        for name, file in find_tables(path, strict).items():
            if name in MIMIC3_ONLY:
                raise SourceError(f"{file}: {name.upper()} is a MIMIC-III table, not a MIMIC-IV one: a MIMIC-III "
                                  f"file in a MIMIC-IV folder ({module}/)")
            if name in files:
                raise SourceError(f"{directory}: table {name} is in two modules, {files[name]} and {file}")
            files[name] = file
    return Release.mimic4, files


def _typed(col: str, typ: str) -> tuple[str, str | None]:
    """(typed expression, error check) for a raw VARCHAR CSV column."""
    q = f'"{col}"'
    if typ == TEXT:
        return q, None
    cast = f"TRY_CAST({q} AS {typ})"
    check = f"WHEN {q} IS NOT NULL AND {cast} IS NULL THEN 'unparseable {col.upper()}'"
    if typ == FLOAT:
        check += f" WHEN {cast} IS NOT NULL AND NOT isfinite({cast}) THEN 'non-finite {col.upper()}'"
    return cast, check


class CsvSource:
    """A MIMIC-III or MIMIC-IV directory of CSV files (``detect_layout``), exposed as DuckDB views on `con`."""

    kind = "csv"

    def __init__(self, directory: Path | str, con) -> None:
        self.directory = Path(directory)
        self.con = con
        self.description = f"csv:{self.directory.resolve()}"
        self._running: set = set()  # cursors of scans in flight (``interrupt_scans``)
        self._lock = threading.Lock()
        self.tables: dict[str, TableInfo] = {}
        self.release, files = detect_layout(self.directory)
        self.specs = tables_of(self.release)
        for name, spec in self.specs.items():
            if name not in files:
                where = self.directory / spec.module if spec.module else self.directory
                shown = name if spec.module else name.upper()
                if spec.required:
                    raise SourceError(
                        f"required table {name.upper()} not found in {where} "
                        f"(expected {shown}.csv or {shown}.csv.gz; {self.release.title} layout)"
                    )
                log.warning("optional table %s not found in %s: its events are skipped", name.upper(), where)
                continue
            try:
                self.tables[name] = self._register(spec, files[name])
            except EmptyTable as exc:
                if spec.required:
                    raise SourceError(str(exc)) from None
                log.warning("%s: its events are skipped", exc)

    def _register(self, spec: TableSpec, path: Path) -> TableInfo:
        header = read_header(path)
        by_lower = {h.strip().lower(): h for h in header}
        if spec.module and "row_id" in by_lower:
            raise SourceError(f"{path}: has a ROW_ID column, which MIMIC-IV tables do not: a MIMIC-III "
                              f"{spec.name.upper()} file in a MIMIC-IV folder")
        info = TableInfo(spec.name, str(path))
        select, checks = [], []
        for col, typ in spec.columns.items():
            if col not in by_lower:
                if col in spec.optional_columns:
                    info.missing_optional.append(col)
                    select.append(f"CAST(NULL AS {typ}) AS {col}")
                    continue
                raise SourceError(f"{path}: table {spec.name.upper()} has no column {col.upper()} (required)")
            info.columns[col] = by_lower[col]
            expr, check = _typed(by_lower[col], typ)
            select.append(f"{expr} AS {col}")
            if check:
                checks.append(check)
        error = f"CASE {' '.join(checks)} END" if checks else "CAST(NULL AS VARCHAR)"
        path_sql = str(path).replace("'", "''")
        declared = ", ".join(f"'{h.replace(chr(39), chr(39) * 2)}': 'VARCHAR'" for h in header)
        try:
            self.con.execute(
                f"CREATE OR REPLACE VIEW src_{spec.name} AS SELECT {', '.join(select)}, {error} AS _error "
                f"FROM read_csv('{path_sql}', {CSV_OPTIONS}, columns={{{declared}}}, "
                f"rejects_table='rej_{spec.name}', rejects_scan='rejscan_{spec.name}')"
            )
        except Exception as exc:
            raise SourceError(f"{path}: {short_error(exc)}") from None
        return info

    def relation(self, name: str) -> str:
        if name in self.tables:
            return f"src_{name}"
        return empty_relation(self.specs[name])

    def relations(self) -> dict[str, str]:
        return {name: self.relation(name) for name in self.specs}

    def execute(self, sql: str, what: str) -> None:
        """Run a statement in the source (DuckDB dialect); errors name `what`."""
        try:
            self.con.execute(sql)
        except Exception as exc:  # duckdb raises several classes; all become one clear error
            raise SourceError(f"{what}: {short_error(exc)}") from None

    def materialize(self, sql: str, table: str, what: str) -> None:
        """Create table `table` from a query (DuckDB dialect). Not TEMP: the in-memory
        database's tables are seen by every cursor, so event scans can run side by side."""
        self.execute(f"CREATE OR REPLACE TABLE {table} AS {sql}", what)

    def into_local(self, sql: str, table: str, what: str) -> None:
        """Materialize the query result as table `table` in the local DuckDB (same database)."""
        self.materialize(sql, table, what)

    # Event scans may run concurrently, each on its own cursor (a gzip CSV is read by one
    # thread: two files in flight keep both cores busy).
    concurrent_scans = True

    def into_local_counted(self, sql: str, table: str, what: str, name: str) -> tuple[int | None, list]:
        """``into_local`` on a cursor of its own, returning (rows parsed, rejected lines) of
        source table `name`, read by the query's one CSV scan.

        DuckDB's profiler reports each operator's rows; the READ_CSV scan's ``rows_scanned``
        is every row parsed from the file (rejected lines excluded: they come back as the
        second item), so the accounting needs no second pass over the file. Rows parsed is
        None when the plan does not hold exactly one CSV scan (the caller then counts with
        ``count_rows``)."""
        cur = self._cursor()
        try:
            cur.execute("SET profiling_coverage = 'ALL'")
            cur.execute("SET enable_profiling = 'no_output'")
            cur.execute(f"CREATE OR REPLACE TABLE {table} AS {sql}")
            profile = json.loads(cur.get_profiling_information(format="json"))
            rejects = _rejects(cur, name)
        except Exception as exc:  # duckdb raises several classes; all become one clear error
            raise SourceError(f"{what}: {short_error(exc)}") from None
        finally:
            self._release(cur)
        scans = [op for op in _operators(profile.get("operator", [])) if op.get("name") == "READ_CSV"]
        if len(scans) != 1 or "rows_scanned" not in scans[0]:
            return None, rejects
        return int(scans[0]["rows_scanned"]), rejects

    def fetch_arrow(self, sql: str, what: str):
        """Run a query in the source and return a pyarrow Table."""
        try:
            return self.con.sql(sql).to_arrow_table()
        except Exception as exc:
            raise SourceError(f"{what}: {short_error(exc)}") from None

    def count_rows(self, name: str) -> tuple[int, list[tuple[int, str]]]:
        """Rows of a table as a bare count(*): (rows, [(line, reason)] of malformed lines).

        count(*) parses the CSV structure but converts no column, so lines with too many
        or too few fields are rejected here and not counted, while a line whose only fault
        is invalid UTF-8 in a column is counted here and rejected by the events scan
        (`scan_rejects`). rows read = count + malformed lines."""
        info = self.tables[name]
        cur = self._cursor()
        try:
            n = cur.sql(f"SELECT count(*) FROM src_{name}").fetchall()[0][0]
            rejects = _rejects(cur, name)
        except Exception as exc:
            raise SourceError(f"{info.location}: {short_error(exc)}") from None
        finally:
            self._release(cur)
        return int(n), rejects

    def _cursor(self):
        cur = self.con.cursor()
        with self._lock:
            self._running.add(cur)
        return cur

    def _release(self, cur) -> None:
        with self._lock:
            self._running.discard(cur)
        cur.close()

    def interrupt_scans(self) -> None:
        """Stop the queries running on other threads' cursors (an error or Ctrl-C must not
        wait for a scan of CHARTEVENTS to finish); each raises SourceError in its thread."""
        with self._lock:
            running = list(self._running)
        for cur in running:
            cur.interrupt()

    def scan_rejects(self, name: str) -> list[tuple[int, str]]:
        """Lines rejected by the scans of this table on the main connection so far."""
        return _rejects(self.con, name)

    def close(self) -> None:
        pass


def _operators(nodes: list[dict]):
    """Every operator of a DuckDB JSON profile tree, depth first."""
    for node in nodes:
        yield node
        yield from _operators(node.get("children", []))


def _rejects(con, name: str) -> list[tuple[int, str]]:
    """Distinct rejected lines recorded by DuckDB's store_rejects for table `name`."""
    exists = con.sql(
        f"SELECT count(*) FROM duckdb_tables() WHERE table_name = 'rej_{name}' AND temporary"
    ).fetchall()[0][0]
    if not exists:
        return []
    rows = con.sql(
        f"SELECT line, min(error_type || ': ' || error_message) FROM rej_{name} GROUP BY line ORDER BY line"
    ).fetchall()
    return [(int(line), str(msg).splitlines()[0][:200]) for line, msg in rows]








