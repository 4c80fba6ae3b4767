"""A MEDS 0.4 dataset on disk: its layout detected, every file checked against `meds`' schemas.

Layout (MEDS 0.4): ``data/**/*.parquet`` (the events, ``meds.DataSchema``), ``metadata/dataset.json``
(``DatasetMetadataSchema``), ``metadata/codes.parquet`` (``CodeMetadataSchema``) and
``metadata/subject_splits.parquet`` (``SubjectSplitSchema``). A directory with ``data/`` is taken for a
MEDS dataset; one without ``metadata/`` is refused. Each file is checked before a row is used: its
Parquet schema by ``meds``' validators (a column of the wrong type, a missing required column), then, in one
streaming pass per shard over its subject_id and time columns (``_check_shard``), the non-null columns, each
subject in one shard, and each shard's rows contiguous per subject and sorted by time (the static rows, null
time, first); the pass also gives the subjects, the static rows and the last event's time. A violation is one line
naming the file and the column (or the first row) at fault. Nothing here names a subject id.

The project's own export (``pipeline.data.meds.export``) adds two extension columns that a MEDS dataset may
declare in ``dataset.json``'s ``other_extension_columns``: ``known_time`` (when the event was recorded,
e.g. a chart row's STORETIME) and ``value_time`` (when its value became known, e.g. an infusion's end).
Where every shard has them (timestamp[us]), the extraction applies them as it does to MIMIC.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from pipeline.data.mimic.sources.base import SourceError

DATA_DIR = "data"
METADATA_DIR = "metadata"
DATASET_JSON = "dataset.json"
CODES = "codes.parquet"
SPLITS = "subject_splits.parquet"
EXTENSIONS = ("known_time", "value_time")  # the project's extension columns (module docstring)


class MedsError(SourceError):
    """A MEDS dataset, label file or task config that cannot be used (the message names the file and what)."""


@dataclass
class MedsLayout:
    root: Path  # the dataset's directory
    data_files: list[Path]  # data/**/*.parquet, sorted
    dataset: dict = field(default_factory=dict)  # metadata/dataset.json ({} where absent)
    codes: Path | None = None  # metadata/codes.parquet, where present
    splits: Path | None = None  # metadata/subject_splits.parquet, where present
    extensions: tuple[str, ...] = ()  # EXTENSIONS that every shard has
    columns: dict[Path, tuple[str, ...]] = field(default_factory=dict)  # each shard's columns (``validate``)
    subjects: np.ndarray | None = None  # the subject_ids of the shards, sorted (``validate``)
    static_rows: int = 0  # rows with a null time (``validate``)
    last_time: int | None = None  # the latest event time, epoch microseconds (``validate``; None: no timed row)

    @property
    def name(self) -> str:
        """The dataset's name (``dataset.json``'s ``dataset_name``; the directory's name without one)."""
        return str(self.dataset.get("dataset_name") or self.root.resolve().name)

    def rel(self, path: Path) -> str:
        """``path`` relative to the dataset's root (how messages and quarantine files name a file)."""
        try:
            return Path(path).relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


def is_meds(location: str | Path) -> bool:
    """Whether ``location`` is a directory laid out as a MEDS dataset (it has ``data/``)."""
    path = Path(str(location))
    return path.is_dir() and (path / DATA_DIR).is_dir()


def detect(root: str | Path) -> MedsLayout:
    """The layout of the MEDS dataset at ``root``; ``MedsError`` naming what is missing."""
    root = Path(root)
    if not root.is_dir():
        raise MedsError(f"MEDS dataset {root}: no such directory")
    if not (root / DATA_DIR).is_dir():
        raise MedsError(f"{root}: no {DATA_DIR}/ directory: not a MEDS dataset (events in data/**/*.parquet)")
    meta = root / METADATA_DIR
    if not meta.is_dir():
        raise MedsError(f"{root}: no {METADATA_DIR}/ directory: a MEDS 0.4 dataset keeps {DATASET_JSON}, {CODES} "
                        f"and {SPLITS} there")
    files = sorted(p for p in (root / DATA_DIR).rglob("*.parquet") if p.is_file())
    if not files:
        raise MedsError(f"{root / DATA_DIR}: no Parquet shard (data/**/*.parquet)")
    layout = MedsLayout(root, files, codes=meta / CODES if (meta / CODES).is_file() else None,
                        splits=meta / SPLITS if (meta / SPLITS).is_file() else None)
    if (meta / DATASET_JSON).is_file():
        layout.dataset = _read_dataset_json(meta / DATASET_JSON)
    return layout


def _read_dataset_json(path: Path) -> dict:
    from meds import DatasetMetadataSchema

    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MedsError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise MedsError(f"{path}: not a JSON object")
    try:
        DatasetMetadataSchema.validate(obj)
    except Exception as exc:  # flexible_schema's errors (the cause says which field)
        cause = exc.__cause__ or exc
        raise MedsError(f"{path}: does not follow meds' DatasetMetadataSchema ({_one_line(cause)})") from None
    return obj


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def check_schema(path: Path, schema_cls, what: str, schema: pa.Schema | None = None) -> pa.Schema:
    """``path``'s Parquet schema, checked by ``meds``' ``schema_cls`` (one line naming the file and column)."""
    import pyarrow.parquet as pq

    try:
        schema = schema if schema is not None else pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise MedsError(f"{path}: not a readable Parquet file ({_one_line(exc)})") from None
    try:
        schema_cls.validate(schema)
    except Exception as exc:  # SchemaValidationError: names the columns and types
        raise MedsError(f"{path}: not a MEDS {what} file: {_one_line(exc)}") from None
    return schema


def validate(layout: MedsLayout, con) -> dict:
    """Check every file of ``layout`` (module docstring); returns the rows per shard (path -> rows).
    ``con``: a DuckDB connection (the scans stream under its memory limit)."""
    from meds import CodeMetadataSchema, DataSchema, SubjectSplitSchema

    schemas = {f: check_schema(f, DataSchema, "data") for f in layout.data_files}
    layout.columns = {f: tuple(s.names) for f, s in schemas.items()}
    declared = set(layout.dataset.get("other_extension_columns") or ())
    for ext in EXTENSIONS:
        if ext not in declared:
            continue
        for f, s in schemas.items():
            if ext in s.names and s.field(ext).type != pa.timestamp("us"):
                raise MedsError(f"{f}: extension column {ext!r} has type {s.field(ext).type}, expected timestamp[us]")
        if all(ext in s.names for s in schemas.values()):
            layout.extensions += (ext,)
    if layout.codes is not None:
        check_schema(layout.codes, CodeMetadataSchema, "code metadata")
    if layout.splits is not None:
        check_schema(layout.splits, SubjectSplitSchema, "subject splits")
        _check_no_nulls(con, layout.splits, ("subject_id", "split"))
    rows, seen = {}, []
    for f in layout.data_files:
        rows[f], static, subjects, last = _check_shard(f)
        layout.static_rows += static
        if last is not None:
            layout.last_time = last if layout.last_time is None else max(layout.last_time, last)
        seen.append(subjects)
    _check_one_shard_per_subject(layout, seen)
    return rows


def data_relation(layout: MedsLayout) -> str:
    """Every shard's rows as one relation (a subquery): file (the shard's index in ``layout.data_files``), rn
    (its row in the shard), subject_id, time, code, numeric_value, text_value, known_time, value_time (NULL
    where a shard lacks the column; the extension columns only where ``layout.extensions`` has them)."""
    wanted = {"numeric_value": "FLOAT", "text_value": "VARCHAR", "known_time": "TIMESTAMP", "value_time": "TIMESTAMP"}
    parts = []
    for i, f in enumerate(layout.data_files):
        have = set(layout.columns.get(f, ()))
        cols = [f"{c}" if c in have and (c in ("numeric_value", "text_value") or c in layout.extensions)
                else f"CAST(NULL AS {t}) AS {c}" for c, t in wanted.items()]
        parts.append(f"SELECT {i} AS file, file_row_number AS rn, subject_id, time, code, {', '.join(cols)} "
                     f"FROM {scan(f, row_numbers=True)}")
    return "(" + "\n  UNION ALL ".join(parts) + ")"


def scan(path: Path | list[Path], row_numbers: bool = False) -> str:
    """DuckDB's ``read_parquet`` of one file or several (union by name), optionally with each row's number."""
    paths = path if isinstance(path, list) else [path]
    listed = ", ".join("'" + p.as_posix().replace("'", "''") + "'" for p in paths)
    extra = ", file_row_number = true, filename = true" if row_numbers else ""
    return f"read_parquet([{listed}], union_by_name = true{extra})"


def _check_no_nulls(con, path: Path, columns: tuple[str, ...]) -> None:
    counts = ", ".join(f"count(*) FILTER (WHERE {c} IS NULL)" for c in columns)
    nulls = con.sql(f"SELECT {counts} FROM {scan(path)}").fetchall()[0]
    for col, n in zip(columns, nulls):
        if n:
            raise MedsError(f"{path}: column {col!r} has {n} null value(s); meds' schema requires it non-null")


def _check_shard(path: Path) -> tuple[int, int, np.ndarray, int | None]:
    """(rows, rows with a null time, its subject_ids, its latest time in epoch microseconds or None) of one shard,
    after checking its non-null columns and its
    order: each subject's rows contiguous, sorted by time, the static rows (null time) first. One streaming pass
    over the subject_id and time columns (the code column's nulls from the row groups' statistics where every
    group has them)."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    for col in ("subject_id", "code"):
        nulls = _null_count(pf, path, col)
        if nulls:
            raise MedsError(f"{path}: column {col!r} has {nulls} null value(s); meds' schema requires it non-null")
    runs, static, n, last = [], 0, 0, None
    prev_subject, prev_time, prev_null = None, 0, True
    for batch in pf.iter_batches(batch_size=1 << 20, columns=["subject_id", "time"]):
        subject = batch.column(0).to_numpy()
        t = batch.column(1)
        null = t.is_null().to_numpy(zero_copy_only=False)
        time = t.cast(pa.int64()).fill_null(0).to_numpy()
        if prev_subject is not None:  # the previous batch's last row leads this one
            subject, time, null = (np.r_[prev_subject, subject], np.r_[prev_time, time], np.r_[prev_null, null])
        same = subject[1:] == subject[:-1]
        later = null[1:] & ~null[:-1]  # a static row after a timed one
        back = ~null[1:] & ~null[:-1] & (time[1:] < time[:-1])
        bad = np.flatnonzero(same & (later | back))
        offset = n - (1 if prev_subject is not None else 0)  # the file row of subject[0]
        if bad.size:
            raise MedsError(f"{path}: row {int(bad[0]) + 1 + offset} is out of time order within its subject (MEDS "
                            "shards are sorted by time, static rows with a null time first)")
        starts = np.flatnonzero(np.r_[prev_subject is None, ~same])
        runs.append(subject[starts])
        new = null[1:] if prev_subject is not None else null
        static += int(new.sum())
        if not null.all():
            top = int(time[~null].max())
            last = top if last is None else max(last, top)
        n += batch.num_rows
        prev_subject, prev_time, prev_null = subject[-1], time[-1], null[-1]
    run_ids = np.concatenate(runs) if runs else np.zeros(0, np.int64)
    subjects = np.unique(run_ids)
    if len(subjects) != len(run_ids):
        raise MedsError(f"{path}: a subject's rows are not contiguous ({len(run_ids)} runs of subject_id for "
                        f"{len(subjects)} subjects); MEDS keeps each subject's rows together, sorted by time")
    return n, static, subjects, last


def _null_count(pf, path: Path, col: str) -> int:
    """Nulls of column ``col``: the sum of the row groups' statistics where each has one, else counted."""
    meta = pf.metadata
    index = meta.schema.names.index(col)
    counts = []
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(index).statistics
        if stats is None or not stats.has_null_count:
            import pyarrow.parquet as pq

            return pq.read_table(path, columns=[col]).column(0).null_count
        counts.append(stats.null_count)
    return int(sum(counts))


def _check_one_shard_per_subject(layout: MedsLayout, subjects: list[np.ndarray]) -> None:
    """Each subject in one shard; sets ``layout.subjects`` (every shard's subject_ids, sorted)."""
    every = np.concatenate(subjects) if subjects else np.zeros(0, np.int64)
    layout.subjects = np.unique(every)
    if len(layout.subjects) == len(every):
        return
    counts = np.bincount(np.searchsorted(layout.subjects, every), minlength=len(layout.subjects))
    twice = set(layout.subjects[counts > 1].tolist())
    first = next(f for f, ids in zip(layout.data_files, subjects) if twice & set(ids.tolist()))
    raise MedsError(f"{first}: {len(twice)} subject(s) have rows in more than one shard; MEDS keeps each subject in "
                    "one shard")
