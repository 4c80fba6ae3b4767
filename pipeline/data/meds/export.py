"""MIMIC-III or MIMIC-IV (a CSV directory, a Parquet stage or PostgreSQL) as a MEDS 0.4 dataset (docs/meds.md).

Read through the extraction's own sources and SQL: the source's relations (``pipeline.data.mimic.sources``), the
release's staging SQL (admissions with their quarantine reasons, ``sql/<release>/1x_events_<table>`` for
the events), then the export's SQL (``sql/meds/5x_export_*``) maps them onto MEDS events, in a DuckDB file
database under the output's temporary directory (it spills to disk: memory stays under ``memory_limit``).
Each event table is read once into Parquet parts partitioned by shard (``_write_parts``; from a stage straight
from its scan, ``_direct_parts``), then each shard's parts are sorted and written (``_write_shards``).
Writes ``data/<k>.parquet`` (``subjects_per_shard`` subjects each, by subject_id, each subject's rows sorted
by time with its static rows first), ``metadata/codes.parquet`` (descriptions from the dictionary tables),
``metadata/subject_splits.parquet`` (the extraction's random split by subject hash: train / tuning /
held_out), ``metadata/dataset.json`` (source, release, versions), and beside them ``export.json`` (every
table's rows read = exported + quarantined) and ``quarantine/<table>.parquet`` (each unusable row and why).
Every file is checked by ``meds``' validators as it is written (a shard: once written).

The export holds subject ids, HADM_IDs and real (shifted) dates: it is the data owner's, written like the
extraction's ``_private/`` files (directories 0700, files 0600), into a temporary directory renamed into
place at the end (an earlier export at ``out`` is replaced then; nothing half-written is ever at ``out``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.core import fileio
from pipeline.core.contracts import COHORT_COLUMNS
from pipeline.core.privacy import check_private
from pipeline.data.meds import codes as codes_mod
from pipeline.data.meds.config import ExportConfig
from pipeline.data.meds.labels import ETL_NAME
from pipeline.data.meds.layout import EXTENSIONS, MedsError
from pipeline.data.mimic.extraction import queries
from pipeline.data.mimic.extraction.cohort import assign_splits
from pipeline.data.mimic.extraction.config import ExtractConfig, SplitMode
from pipeline.data.mimic.sources import open_source
from pipeline.data.mimic.sources.base import set_memory_limit
from pipeline.data.mimic.sources.dialect import strip_comments
from pipeline.data.mimic.sources.tables import Release, event_tables_of

log = logging.getLogger(__name__)

EXPORT_SQL = {  # sql/meds/ files of the export, in the order it runs them (after the release's staging SQL)
    "admissions": "meds/50_export_admissions",
    "patients": {"mimic3": "meds/mimic3/51_export_patients", "mimic4": "meds/mimic4/51_export_patients"},
    "icustays": "meds/52_export_icustays",
    "events": "meds/53_export_events",
    "structural": "meds/54_export_structural",
}

MEDS_SPLITS = {"train": "train", "val": "tuning", "test": "held_out"}
DATASET_NAMES = {Release.mimic3: "MIMIC-III", Release.mimic4: "MIMIC-IV"}
US = "make_timestamp(CAST(round({x} * 1000000.0) AS BIGINT))"  # epoch seconds -> TIMESTAMP (microseconds)


@dataclass
class ExportResult:
    out: Path  # the MEDS dataset
    manifest: dict  # export.json: accounting, shards, subjects, rows

    def summary(self) -> str:
        m = self.manifest
        return (f"MEDS dataset written to {self.out} (data owner's: identifiers and dates): {m['subjects']} subjects, "
                f"{m['rows']} rows in {m['shards']} shards, {m['codes']} codes; quarantined "
                f"{sum(t['quarantined'] for t in m['tables'].values())} rows (quarantine/)")


def export_meds(source: str | Path, out: str | Path, config: ExportConfig | None = None,
                schema: str | None = None) -> ExportResult:
    """Export the MIMIC source ``source`` as a MEDS dataset at ``out`` (module docstring)."""
    import duckdb

    cfg = config or ExportConfig()
    out = Path(out)
    _check_target(out)
    check_private(out, what="a MEDS export (subject ids, HADM_IDs, dates)")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.export-", dir=out.parent))
    os.chmod(work, 0o700)
    staging = work / "dataset"
    con = src = None
    try:
        con = duckdb.connect(str(work / "export.duckdb"))
        set_memory_limit(con, cfg)
        con.execute(f"SET temp_directory = '{(work / 'spill').as_posix()}'")
        con.execute("SET preserve_insertion_order = false")
        if cfg.threads:
            con.execute(f"SET threads = {int(cfg.threads)}")
        src = open_source(source, con, schema=schema)
        if src.release not in DATASET_NAMES:
            raise MedsError(f"{source}: not a MIMIC-III or MIMIC-IV source")
        manifest = _export(src, con, staging, cfg)
        src.close()
        src = None
        con.close()
        con = None
        _chmod_tree(staging)
        _replace(staging, out)
        return ExportResult(out, manifest)
    finally:
        if src is not None:
            src.close()
        if con is not None:
            con.close()
        shutil.rmtree(work, ignore_errors=True)


def _check_target(out: Path) -> None:
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not _is_export(out))):
        raise MedsError(f"--out {out}: exists and is not an export of this project (give a new or empty directory, "
                        "or an earlier export to replace)")


def _is_export(path: Path) -> bool:
    try:
        return fileio.read_json(path / "metadata" / "dataset.json").get("etl_name") == ETL_NAME
    except (OSError, ValueError, AttributeError):
        return False


def _replace(staging: Path, out: Path) -> None:
    """``staging`` renamed to ``out``; an earlier export there is moved aside first and removed after."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.replaced-{os.getpid()}")
        os.replace(out, old)
    os.replace(staging, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _chmod_tree(root: Path) -> None:
    for dirpath, _, names in os.walk(root):
        os.chmod(dirpath, 0o700)
        for n in names:
            os.chmod(Path(dirpath) / n, 0o600)


def _local(src, sql: str, table: str, what: str) -> None:
    """``sql`` (DuckDB dialect, over the source's relations) into the local table ``table``."""
    src.into_local(strip_comments(sql), table, what)


def _export(src, con, out: Path, cfg: ExportConfig) -> dict:
    rel, release = src.relations(), src.release
    prefix = "mimic3" if release is Release.mimic3 else "mimic4"
    tables: dict[str, dict] = {}
    quarantine: dict[str, list] = {}
    params = dict(prediction_hours=24.0, lookback_days=30.0, census_columns=", ".join(COHORT_COLUMNS),
                  open_admissions="FALSE")
    src.materialize(queries.admissions_classified(rel, release, **params), "admissions_classified", "ADMISSIONS")
    staged = strip_comments(queries.render(queries.STAGED[release], **rel))
    _local(src, queries.render(EXPORT_SQL["admissions"], staged=staged, **rel), "x_admissions", "ADMISSIONS")
    bad = src.fetch_arrow("SELECT row_id, exclusion FROM admissions_classified WHERE exclusion LIKE 'quarantine:%' "
                          "ORDER BY row_id, exclusion", "ADMISSIONS").to_pylist()
    quarantine["admissions"] = [(r["row_id"], None, r["exclusion"].removeprefix("quarantine:")) for r in bad] + [
        (None, line, why) for line, why in src.scan_rejects("admissions")]
    _local(src, queries.render(EXPORT_SQL["patients"][prefix], **rel), "x_patients", "PATIENTS")
    quarantine["patients"] = [tuple(r) for r in con.sql(
        "SELECT row_id, NULL, reason FROM x_patients WHERE reason IS NOT NULL ORDER BY row_id, reason").fetchall()]
    quarantine["patients"] += [(None, line, why) for line, why in src.scan_rejects("patients")]
    structural = ["admissions", "patients"]
    _local(src, queries.render(EXPORT_SQL["icustays"], **rel), "x_icustays", "ICUSTAYS")  # none: an empty relation
    if "icustays" in src.tables:
        quarantine["icustays"] = [(None, None, r) for (r,) in con.sql(
            "SELECT reason FROM x_icustays WHERE reason IS NOT NULL ORDER BY reason").fetchall()]
        structural.append("icustays")
    for table in structural:
        counted, malformed = src.count_rows(table)
        read = counted + len(malformed)
        tables[table] = {"rows_read": read, "quarantined": len(quarantine[table]),
                         "exported": read - len(quarantine[table])}
    parts = out.parent / "parts"
    stage = _stage_timer()
    _structural(con)
    _shard_map(con, cfg.subjects_per_shard, "icustays" in src.tables)
    _write_parts(con, "SELECT *, CAST(NULL AS VARCHAR) AS reason FROM meds_structural", parts / "structural")
    stage("export: admissions, patients, ICU stays")
    events = [t for t in event_tables_of(release) if t in src.tables]
    items = []
    for table in events:
        sql = strip_comments(queries.render(queries.EVENTS_BY_RELEASE[release][table], **rel))
        folded = queries.render(EXPORT_SQL["events"], events=f"({sql})")
        if src.kind == "stage":  # rows as staged: the scan, its staging and the export's SQL straight into the parts
            scanned, rejects = src.count_rows(table)
            exported, quarantine[table], found = _direct_parts(con, folded, parts / table, table)
            items.append(found)
        else:
            if src.kind == "postgres":  # the staging SQL runs in the server; the export's SQL here
                scanned, rejects = src.into_local_counted(sql, f"s_{table}", src.tables[table].location, table)
                con.execute(f"CREATE OR REPLACE TABLE x_{table} AS "
                            f"{queries.render(EXPORT_SQL['events'], events=f's_{table}')}")
                con.execute(f"DROP TABLE s_{table}")
            else:  # a CSV directory: one statement, materialized once (its scan counts the rows it parsed)
                scanned, rejects = src.into_local_counted(folded, f"x_{table}", src.tables[table].location, table)
            if scanned is None:
                scanned, rejects = src.count_rows(table)
            quarantine[table] = [tuple(r) for r in con.sql(
                f"SELECT row_id, NULL, reason FROM x_{table} WHERE reason IS NOT NULL ORDER BY row_id, reason"
            ).fetchall()]
            items.append(con.sql(f"SELECT DISTINCT code, source, item FROM x_{table} WHERE reason IS NULL").to_df())
            exported = _write_parts(con, _event_rows(f"x_{table}", ", reason") + " WHERE reason IS NULL", parts / table)
            con.execute(f"DROP TABLE x_{table}")
        quarantine[table] += [(None, line, why) for line, why in rejects]
        tables[table] = {"rows_read": int(scanned) + len(rejects), "exported": int(exported),
                         "quarantined": len(quarantine[table])}
        stage(f"export: {table} ({exported} rows)")
    shards, subjects, rows = _write_shards(con, parts, out / "data", cfg)
    shutil.rmtree(parts, ignore_errors=True)
    stage(f"export: {shards} shards sorted and written")
    items = pd.concat(items).drop_duplicates() if items else pd.DataFrame(columns=["code", "source", "item"])
    structural_codes = [c for (c,) in con.sql("SELECT DISTINCT code FROM meds_structural").fetchall()]
    codes = codes_mod.codes_table(items, structural_codes, codes_mod.read_dictionaries(src))
    _write_checked(codes, out / "metadata" / "codes.parquet", "CodeMetadataSchema")
    _write_checked(_splits(subjects, cfg), out / "metadata" / "subject_splits.parquet", "SubjectSplitSchema")
    _write_quarantine(out / "quarantine", quarantine)
    dataset = _dataset_json(src)
    fileio.write_json(out / "metadata" / "dataset.json", dataset)
    manifest = {"source": src.description, "release": release.value, "dataset": dataset, "tables": tables,
                "shards": shards, "subjects": len(subjects), "rows": rows, "codes": codes.num_rows,
                "config": {k: v for k, v in vars(cfg).items()}}
    fileio.write_json(out / "export.json", manifest)
    return manifest


def _stage_timer():
    """A function that logs (INFO; ``export-meds -v``) the wall and CPU time since its last call, and the RSS."""
    import time

    from pipeline.data.mimic.extraction.flow import cpu_s, rss_mb

    last = [time.perf_counter(), cpu_s()]

    def lap(what: str) -> None:
        now, cpu = time.perf_counter(), cpu_s()
        log.info("%-44s %7.2f s  CPU %7.2f s  RSS %6.0f MB", what, now - last[0], cpu - last[1], rss_mb() or 0)
        last[:] = [now, cpu]

    return lap


def _structural(con) -> None:
    """meds_structural: the rows of patients, admissions, deaths, emergency-department visits and ICU stays
    (sql/meds/54_export_structural.sql), as MEDS columns plus hadm_id, known_time (a date of death's end of day),
    value_time (NULL)."""
    rows = strip_comments(queries.render(EXPORT_SQL["structural"]))
    con.execute("CREATE OR REPLACE TABLE meds_structural AS SELECT subject_id, "
                f"{US.format(x='t')} AS time, code, CAST(NULL AS FLOAT) AS numeric_value, "
                f"CAST(NULL AS VARCHAR) AS text_value, hadm_id, {US.format(x='known')} AS known_time, "
                f"CAST(NULL AS TIMESTAMP) AS value_time FROM ({rows})")


def _shard_map(con, per_shard: int, icu: bool) -> None:
    """shard_map (subject_id -> shard): the subjects of the usable PATIENTS, ADMISSIONS and ICUSTAYS rows, sorted,
    in runs of ``per_shard``. An event of a subject outside it is quarantined (sql/meds/53_export_events.sql)."""
    icustays = " UNION SELECT subject_id FROM x_icustays WHERE reason IS NULL" if icu else ""
    con.execute("CREATE OR REPLACE TABLE shard_map AS SELECT subject_id, CAST((row_number() OVER (ORDER BY "
                f"subject_id) - 1) // {int(per_shard)} AS INTEGER) AS shard FROM (SELECT subject_id FROM x_patients "
                f"WHERE reason IS NULL UNION SELECT subject_id FROM x_admissions{icustays})")


def _event_rows(relation: str, extra: str = "") -> str:
    """The rows of ``relation`` (sql/meds/53_export_events.sql's columns) as MEDS columns plus hadm_id, known_time,
    value_time (and ``extra`` columns)."""
    ts = US.format
    return (f"SELECT subject_id, {ts(x='event_epoch')} AS time, code, CAST(valuenum AS FLOAT) AS numeric_value, "
            f"valuetext AS text_value, hadm_id, {ts(x='known_epoch')} AS known_time, "
            f"{ts(x='value_epoch')} AS value_time{extra} FROM {relation}")


def _write_parts(con, rows: str, folder: Path, how: str = "JOIN") -> int:
    """``rows`` (MEDS columns and ``reason``, of subjects in shard_map) written to ``folder`` as Parquet partitioned by
    shard (``folder/shard=K/*.parquet``, unsorted: ``_write_shards`` sorts each shard's rows without a reason); the
    rows written. ``how``: the join on shard_map (a LEFT JOIN keeps rows of no shard, in ``shard=NULL``)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    (n,), = con.execute(f"COPY (SELECT m.shard, r.* FROM ({rows}) r {how} shard_map m ON m.subject_id = r.subject_id) "
                        f"TO '{_quote(folder)}' (FORMAT parquet, PARTITION_BY (shard), COMPRESSION lz4)").fetchall()
    return int(n)


def _direct_parts(con, folded: str, folder: Path, table: str) -> tuple[int, list, pd.DataFrame]:
    """Every row of ``folded`` (a source scan through the staging and the export's SQL) written once to the parts,
    with its reason (a quarantined row: in the parts, never in a shard); (rows exported, quarantined rows as
    (row_id, line, reason), the exported (code, source, item)), read back from the parts' columns."""
    import duckdb

    try:
        total = _write_parts(con, _event_rows(f"({folded})", ", reason, row_id, source, item"), folder, "LEFT JOIN")
        files = f"read_parquet('{_quote(folder)}/*/*.parquet', hive_partitioning = false)"
        bad = [tuple(r) for r in con.sql(f"SELECT row_id, NULL, reason FROM {files} WHERE reason IS NOT NULL "
                                         "ORDER BY row_id, reason").fetchall()]
        items = con.sql(f"SELECT DISTINCT code, source, item FROM {files} WHERE reason IS NULL").to_df()
    except duckdb.Error as exc:
        raise MedsError(f"{table.upper()}: {' '.join(str(exc).split())[:300]}") from None
    return total - len(bad), bad, items


def _quote(path: Path) -> str:
    return path.as_posix().replace("'", "''")


DATA_SCHEMA = pa.schema([("subject_id", pa.int64()), ("time", pa.timestamp("us")), ("code", pa.string()),
                         ("numeric_value", pa.float32()), ("text_value", pa.large_string()), ("hadm_id", pa.int64()),
                         *((c, pa.timestamp("us")) for c in EXTENSIONS)])
ORDER = ("subject_id, time NULLS FIRST, code, numeric_value NULLS FIRST, text_value NULLS FIRST, hadm_id NULLS FIRST, "
         "known_time NULLS FIRST, value_time NULLS FIRST")  # a shard's rows: every column, so the bytes are the same


def _write_shards(con, parts: Path, data: Path, cfg: ExportConfig) -> tuple[int, list[int], int]:
    """data/<k>.parquet from each shard's parts, sorted (``ORDER``: by subject_id, then time, static rows first),
    by DuckDB's sort and Parquet writer (it spills; the file carries the Arrow schema ``DATA_SCHEMA``, so readers
    see ``text_value`` as MEDS' large_string); each file is checked against ``meds.DataSchema`` and for null ids
    and codes. Returns (shards, subjects, rows)."""
    import base64

    from meds import DataSchema

    shards = [k for (k,) in con.sql("SELECT DISTINCT shard FROM shard_map ORDER BY 1").fetchall()]
    data.mkdir(parents=True, exist_ok=True)
    arrow_schema = base64.b64encode(DATA_SCHEMA.serialize().to_pybytes()).decode("ascii")
    con.execute("SET preserve_insertion_order = true")  # the sorted order reaches the file
    subjects, total = [], 0
    for k in shards:
        files = f"{_quote(parts)}/*/shard={k}/*.parquet"
        path = data / f"{k}.parquet"
        with fileio.atomic_path(path, mode=0o600) as tmp:
            con.execute(f"COPY (SELECT {', '.join(DATA_SCHEMA.names)} FROM read_parquet('{files}', "
                        f"hive_partitioning = false, union_by_name = true) WHERE reason IS NULL ORDER BY {ORDER}) "
                        f"TO '{_quote(Path(tmp))}' (FORMAT parquet, "
                        f"COMPRESSION zstd, COMPRESSION_LEVEL 1, ROW_GROUP_SIZE {int(cfg.row_group_rows)}, "
                        f"KV_METADATA {{'ARROW:schema': '{arrow_schema}'}})")
            DataSchema.validate(pq.read_schema(tmp))
            nulls, rows = con.sql(f"SELECT count(*) FILTER (WHERE subject_id IS NULL OR code IS NULL), count(*) "
                                  f"FROM read_parquet('{_quote(Path(tmp))}')").fetchall()[0]
            if nulls:
                raise MedsError(f"{path}: {nulls} row(s) without subject_id or code (an export bug: nothing written)")
            subjects += [s for (s,) in con.sql(f"SELECT DISTINCT subject_id FROM read_parquet('{_quote(Path(tmp))}') "
                                               "ORDER BY 1").fetchall()]
            total += int(rows)
    con.execute("SET preserve_insertion_order = false")
    return len(shards), subjects, total


def _write_checked(table: pa.Table, path: Path, schema_name: str) -> None:
    import meds

    getattr(meds, schema_name).validate(table)
    with fileio.atomic_path(path, mode=0o600) as tmp:
        pq.write_table(table, tmp)


def _splits(subjects: list[int], cfg: ExportConfig) -> pa.Table:
    frame = pd.DataFrame({"subject_id": pd.Series(subjects, dtype="int64")})
    hashed = ExtractConfig(split=SplitMode.random, split_seed=cfg.split_seed, train_fraction=cfg.train_fraction,
                           val_fraction=cfg.val_fraction)
    split = assign_splits(frame, hashed).map(MEDS_SPLITS) if len(frame) else pd.Series([], dtype=str)
    return pa.table({"subject_id": pa.array(frame["subject_id"], pa.int64()), "split": pa.array(split, pa.string())})


def _write_quarantine(folder: Path, quarantine: dict[str, list]) -> None:
    qschema = pa.schema([("table", pa.string()), ("row_id", pa.int64()), ("line", pa.int64()), ("reason", pa.string())])
    for table, rows in sorted(quarantine.items()):
        arrays = [pa.array([table.upper()] * len(rows), pa.string()),
                  pa.array([r[0] for r in rows], pa.int64()), pa.array([r[1] for r in rows], pa.int64()),
                  pa.array([r[2] for r in rows], pa.string())]
        with fileio.atomic_path(folder / f"{table}.parquet", mode=0o600) as tmp:
            pq.write_table(pa.table(arrays, schema=qschema), tmp)


def _dataset_json(src) -> dict:
    import importlib.metadata

    import meds

    try:
        version = importlib.metadata.version("mimic-rank1")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    dataset = {"dataset_name": DATASET_NAMES[src.release], "dataset_version": src.release.value,
               "etl_name": ETL_NAME, "etl_version": version, "meds_version": meds.__version__,
               "created_at": datetime.now(timezone.utc).replace(tzinfo=None).isoformat(),
               "location_uri": src.description, "raw_source_id_columns": ["hadm_id"],
               "other_extension_columns": list(EXTENSIONS)}
    meds.DatasetMetadataSchema.validate(dataset)
    return dataset


__all__ = ["ExportResult", "export_meds"]
