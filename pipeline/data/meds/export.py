"""MIMIC-III or MIMIC-IV (a CSV directory, a Parquet stage or PostgreSQL) as a MEDS 0.4 dataset (docs/meds.md).

Read through the extraction's own sources and SQL: the source's relations (``pipeline.data.mimic.sources``), the
release's staging SQL (admissions with their quarantine reasons, ``sql/<release>/1x_events_<table>`` for
the events), then the export's SQL (``sql/meds/5x_export_*``) maps them onto MEDS events, in a DuckDB file
database under the output's temporary directory (it spills to disk: memory stays under ``memory_limit``).
Writes ``data/<k>.parquet`` (``subjects_per_shard`` subjects each, by subject_id, each subject's rows sorted
by time with its static rows first), ``metadata/codes.parquet`` (descriptions from the dictionary tables),
``metadata/subject_splits.parquet`` (the extraction's random split by subject hash: train / tuning /
held_out), ``metadata/dataset.json`` (source, release, versions), and beside them ``export.json`` (every
table's rows read = exported + quarantined) and ``quarantine/<table>.parquet`` (each unusable row and why).
Every file is checked by ``meds``' validators as it is written.

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
    _local(src, queries.render(EXPORT_SQL["admissions"], staged=staged), "x_admissions", "ADMISSIONS")
    bad = src.fetch_arrow("SELECT row_id, exclusion FROM admissions_classified WHERE exclusion LIKE 'quarantine:%' "
                          "ORDER BY row_id, exclusion", "ADMISSIONS").to_pylist()
    quarantine["admissions"] = [(r["row_id"], None, r["exclusion"].removeprefix("quarantine:")) for r in bad] + [
        (None, line, why) for line, why in src.scan_rejects("admissions")]
    _local(src, queries.render(EXPORT_SQL["patients"][prefix], **rel), "x_patients", "PATIENTS")
    quarantine["patients"] = [tuple(r) for r in con.sql(
        "SELECT row_id, NULL, reason FROM x_patients WHERE reason IS NOT NULL ORDER BY row_id, reason").fetchall()]
    quarantine["patients"] += [(None, line, why) for line, why in src.scan_rejects("patients")]
    structural = ["admissions", "patients"]
    if "icustays" in src.tables:
        _local(src, queries.render(EXPORT_SQL["icustays"], **rel), "x_icustays", "ICUSTAYS")
        quarantine["icustays"] = [(None, None, r) for (r,) in con.sql(
            "SELECT reason FROM x_icustays WHERE reason IS NOT NULL ORDER BY reason").fetchall()]
        structural.append("icustays")
    for table in structural:
        counted, malformed = src.count_rows(table)
        read = counted + len(malformed)
        tables[table] = {"rows_read": read, "quarantined": len(quarantine[table]),
                         "exported": read - len(quarantine[table])}
    events = [t for t in event_tables_of(release) if t in src.tables]
    for table in events:
        sql = queries.render(queries.EVENTS_BY_RELEASE[release][table], **rel)
        scanned, rejects = src.into_local_counted(strip_comments(sql), f"s_{table}", src.tables[table].location,
                                                  table)
        if scanned is None:
            counted, malformed = src.count_rows(table)
            scanned, rejects = counted, malformed
        con.execute(f"CREATE OR REPLACE TABLE x_{table} AS "
                    f"{queries.render(EXPORT_SQL['events'], events=f's_{table}')}")
        con.execute(f"DROP TABLE s_{table}")
        quarantine[table] = [tuple(r) for r in con.sql(
            f"SELECT row_id, NULL, reason FROM x_{table} WHERE reason IS NOT NULL ORDER BY row_id, reason").fetchall()]
        quarantine[table] += [(None, line, why) for line, why in rejects]
        exported = con.sql(f"SELECT count(*) FROM x_{table} WHERE reason IS NULL").fetchall()[0][0]
        tables[table] = {"rows_read": int(scanned) + len(rejects), "exported": int(exported),
                         "quarantined": len(quarantine[table])}
    _rows(con, events, "icustays" in src.tables)
    shards, subjects, rows = _write_shards(con, out / "data", cfg)
    items = con.sql("SELECT DISTINCT code, source, item FROM (" + " UNION ALL ".join(
        f"SELECT code, source, item FROM x_{t} WHERE reason IS NULL" for t in events) + ")" if events else
        "SELECT NULL AS code, NULL AS source, NULL AS item WHERE FALSE").to_df()
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


def _rows(con, events: list[str], icu: bool) -> None:
    """meds_structural (patients, admissions, deaths, ICU stays) and meds_rows (those and every event exported),
    as MEDS columns plus hadm_id, known_time, value_time."""
    ts = US.format
    parts = [
        "SELECT subject_id, CAST(NULL AS TIMESTAMP) AS time, 'GENDER//' || gender AS code, "
        "CAST(NULL AS BIGINT) AS hadm_id FROM x_patients WHERE reason IS NULL AND gender IS NOT NULL",
        f"SELECT subject_id, {ts(x='birth_epoch')}, 'MEDS_BIRTH', NULL FROM x_patients "
        "WHERE reason IS NULL AND birth_epoch IS NOT NULL",
        f"SELECT subject_id, {ts(x='admit_epoch')}, 'HOSPITAL_ADMISSION//' || coalesce(admission_type, 'UNK') || '//' "
        "|| coalesce(admission_location, 'UNK'), hadm_id FROM x_admissions",
        f"SELECT subject_id, {ts(x='disch_epoch')}, CASE WHEN death_epoch IS NOT NULL THEN 'HOSPITAL_DISCHARGE//DIED' "
        "ELSE 'HOSPITAL_DISCHARGE//UNK' END, hadm_id FROM x_admissions WHERE disch_epoch IS NOT NULL",
        f"SELECT subject_id, {ts(x='min(death_epoch)')}, 'MEDS_DEATH', NULL FROM x_admissions "
        "WHERE death_epoch IS NOT NULL GROUP BY subject_id",
    ]
    if icu:
        parts.append(f"SELECT subject_id, {ts(x='intime_epoch')}, 'ICU_ADMISSION//UNK', hadm_id FROM x_icustays "
                     "WHERE reason IS NULL")
    con.execute("CREATE OR REPLACE TABLE meds_structural AS " + " UNION ALL ".join(parts))
    ev = [f"SELECT subject_id, {ts(x='event_epoch')} AS time, code, CAST(valuenum AS FLOAT) AS numeric_value, "
          f"valuetext AS text_value, hadm_id, {ts(x='known_epoch')} AS known_time, {ts(x='value_epoch')} AS value_time "
          f"FROM x_{t} WHERE reason IS NULL" for t in events]
    con.execute("CREATE OR REPLACE TABLE meds_rows AS SELECT subject_id, time, code, CAST(NULL AS FLOAT) AS "
                "numeric_value, CAST(NULL AS VARCHAR) AS text_value, hadm_id, CAST(NULL AS TIMESTAMP) AS known_time, "
                "CAST(NULL AS TIMESTAMP) AS value_time FROM meds_structural" + "".join(f" UNION ALL {q}" for q in ev))


DATA_SCHEMA = pa.schema([("subject_id", pa.int64()), ("time", pa.timestamp("us")), ("code", pa.string()),
                         ("numeric_value", pa.float32()), ("text_value", pa.large_string()), ("hadm_id", pa.int64()),
                         *((c, pa.timestamp("us")) for c in EXTENSIONS)])


def _write_shards(con, data: Path, cfg: ExportConfig) -> tuple[int, list[int], int]:
    """data/<k>.parquet: ``subjects_per_shard`` subjects each, sorted by (subject_id, time: static first, code,
    value), streamed from DuckDB's sort (it spills) into a Parquet writer; (shards, subjects, rows)."""
    from meds import DataSchema

    subjects = [int(s) for (s,) in con.sql("SELECT DISTINCT subject_id FROM meds_rows ORDER BY 1").fetchall()]
    data.mkdir(parents=True, exist_ok=True)
    n, total = cfg.subjects_per_shard, 0
    shards = max(1, -(-len(subjects) // n))
    for k in range(shards):
        part = subjects[k * n:(k + 1) * n]
        lo, hi = (part[0], part[-1]) if part else (0, -1)
        reader = con.sql(
            f"SELECT * FROM meds_rows WHERE subject_id BETWEEN {lo} AND {hi} ORDER BY subject_id, time NULLS FIRST, "
            "code, numeric_value NULLS FIRST, text_value NULLS FIRST, hadm_id NULLS FIRST, known_time NULLS FIRST, "
            "value_time NULLS FIRST").to_arrow_reader(cfg.row_group_rows)
        path = data / f"{k}.parquet"
        with fileio.atomic_path(path, mode=0o600) as tmp:
            with pq.ParquetWriter(tmp, DATA_SCHEMA, compression="zstd") as writer:
                for batch in reader:
                    table = pa.Table.from_batches([batch]).cast(DATA_SCHEMA)
                    DataSchema.validate(table)
                    writer.write_table(table, row_group_size=cfg.row_group_rows)
                    total += table.num_rows
        DataSchema.validate(pq.read_schema(path))
    return shards, subjects, total


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
