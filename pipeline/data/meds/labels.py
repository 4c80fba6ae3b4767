"""The labels of a MEDS task: MEDS label files (``--labels``), or an ACES task config run by es-aces (``--task``),
or with neither the shipped config that fits the dataset (``dataset.json``), said so in the log.

Label files follow ``meds.LabelSchema`` (``subject_id``, ``prediction_time``, ``boolean_value``, ...): every
``*.parquet`` under the labels directory (or the one file given) is checked against it. An ACES config runs
shard by shard (each subject is in one shard, so a shard's query is exact), with es-aces' own predicate and
query code; a shard is read whole by it, so memory follows the largest shard. Its output (``index_timestamp``,
``label``) becomes the label schema as ACES's own command line writes it.

``clean`` then keeps the rows a binary task can use: a row without ``boolean_value``, with a
(subject_id, prediction_time) given twice, or of a subject in no split is quarantined with its reason (file
and row number, never the subject id); a row of a subject that is neither in the data nor in the splits is
an error (the labels belong to another dataset).
"""

from __future__ import annotations

import logging
from importlib.resources import files
from pathlib import Path

import pandas as pd
import pyarrow as pa

from pipeline.data.meds.layout import MedsError, MedsLayout, check_schema

log = logging.getLogger(__name__)

TASKS = files("pipeline.data.meds") / "tasks"  # the shipped ACES configs
ETL_NAME = "mimic-rank1 export-meds"  # dataset.json etl_name of this project's export (pipeline.data.meds.export)
# dataset.json -> the shipped config for its codes: (field, value it must contain, config file)
SHIPPED = (
    ("etl_name", ETL_NAME, "in_hospital_mortality_24h_mimic_export.yaml"),
    ("etl_name", "MIMIC_IV_MEDS", "in_hospital_mortality_24h_mimic_iv_meds.yaml"),
    ("dataset_name", "MIMIC-IV", "in_hospital_mortality_24h_mimic_iv_meds.yaml"),
)
LABEL_COLUMNS = ("subject_id", "prediction_time", "boolean_value")


def shipped_task(layout: MedsLayout) -> Path:
    """The shipped ACES config that fits the dataset's codes (``SHIPPED``, by its ``dataset.json``)."""
    for key, value, name in SHIPPED:
        if value.lower() in str(layout.dataset.get(key) or "").lower():
            path = Path(str(TASKS / name))
            log.warning("no --labels or --task given: the task is the shipped ACES config %s (%s %r of %s)",
                        name, key, layout.dataset.get(key), layout.root / "metadata" / "dataset.json")
            return path
    raise MedsError(f"{layout.root}: no --labels or --task given, and no shipped task config fits this dataset "
                    f"(dataset.json: dataset_name {layout.dataset.get('dataset_name')!r}, etl_name "
                    f"{layout.dataset.get('etl_name')!r}); give MEDS label files (--labels) or an ACES config (--task)")


def read_label_files(location: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """Every label file at ``location`` (a file, or a directory's ``**/*.parquet``), checked against
    ``meds.LabelSchema``: a frame of subject_id, prediction_time, boolean_value, file (its index into the
    returned list of file names) and row (its row in that file)."""
    import pyarrow.parquet as pq
    from meds import LabelSchema

    path = Path(location)
    if not path.exists():
        raise MedsError(f"labels {path}: no such file or directory")
    found = [path] if path.is_file() else sorted(p for p in path.rglob("*.parquet") if p.is_file())
    if not found:
        raise MedsError(f"labels {path}: no Parquet label file (**/*.parquet)")
    frames = []
    for i, f in enumerate(found):
        check_schema(f, LabelSchema, "label")
        table = pq.read_table(f)
        if "boolean_value" not in table.column_names:
            raise MedsError(f"{f}: no column 'boolean_value': this extraction reads binary tasks")
        for col in ("subject_id", "prediction_time"):
            nulls = table.column(col).null_count
            if nulls:
                raise MedsError(f"{f}: column {col!r} has {nulls} null value(s); meds' label schema requires it "
                                "non-null")
        frames.append(_frame(table, i))
    return pd.concat(frames, ignore_index=True), [str(f) for f in found]


def _frame(table: pa.Table, file_index: int) -> pd.DataFrame:
    frame = pd.DataFrame({
        "subject_id": table.column("subject_id").to_numpy(zero_copy_only=False).astype("int64"),
        "prediction_time": table.column("prediction_time").cast(pa.int64()).to_numpy(zero_copy_only=False),
        "boolean_value": table.column("boolean_value").to_pandas().astype("boolean"),
    })
    frame["file"] = file_index
    frame["row"] = range(len(frame))
    return frame


def run_task(task: str | Path, layout: MedsLayout, census: bool = False, predicates: str | Path | None = None
             ) -> pa.Table:
    """Run the ACES task config ``task`` on every shard of ``layout``: the labels, in ``meds.LabelSchema``.
    ``census``: the prediction times alone (subject_id, prediction_time), from the config without its label window
    (``census_config``), so that no outcome is needed and a stay still open is found too. ``predicates``: a
    predicates file whose predicates replace the config's of the same name (es-aces' ``predicates_path``: a
    MEDS-DEV dataset's).

    es-aces reads each shard it is given whole (every column), so each shard is first cut down to what its query
    can tell apart (``aces_input``), with the config's own predicate expressions: the same labels from a file a
    fraction of the shard's size."""
    import tempfile

    overrides = predicates  # the name is es-aces' module's below
    try:
        import polars as pl
        from aces import config as aces_config
        from aces import predicates, query
        from omegaconf import DictConfig
    except ImportError as exc:
        raise MedsError(f"--task needs es-aces (pip install -e '.[meds-tasks]', which make setup does): "
                        f"{exc}") from None
    from meds import LabelSchema

    task = Path(task)
    if not task.is_file():
        raise MedsError(f"task config {task}: no such file")
    with tempfile.TemporaryDirectory(prefix="aces-") as folder:
        path = census_config(task, Path(folder)) if census else task

        def load():  # read anew for each shard: es-aces 0.7.3's query changes the config it is given
            return aces_config.TaskExtractorConfig.load(config_path=path, predicates_path=overrides)

        try:
            cfg = load()
        except Exception as exc:  # yaml, omegaconf and ACES's own checks raise many kinds; all one line
            raise MedsError(f"{task}: not a valid ACES task config ({type(exc).__name__}: "
                            f"{' '.join(str(exc).split())[:300]})") from None
        if cfg.index_timestamp_window is None or (cfg.label_window is None and not census):
            raise MedsError(f"{task}: the task config needs a window with `label:` and one with `index_timestamp:` "
                            "(the prediction time); this extraction reads binary labels at a prediction time")
        parts = []
        for i, shard in enumerate(layout.data_files):
            try:
                cfg = load()
                slim = aces_input(shard, cfg, Path(folder) / f"{i}.parquet")
                frame = predicates.get_predicates_df(cfg, DictConfig({"standard": "meds", "path": str(slim)}))
                result = query.query(cfg, frame)
            except Exception as exc:  # ACES raises ValueError, polars errors, ...
                raise MedsError(f"{task} on {shard}: ACES failed ({type(exc).__name__}: "
                                f"{' '.join(str(exc).split())[:300]})") from None
            result = result.filter(pl.col("index_timestamp").is_not_null())  # a shard with none: one null row
            if result.is_empty():
                continue
            columns = [pl.col("subject_id").cast(pl.Int64),
                       pl.col("index_timestamp").cast(pl.Datetime("us")).alias("prediction_time")]
            if not census:
                columns.append((pl.col("label") > 0).alias("boolean_value"))
            parts.append(result.select(*columns).to_arrow())
    fields = [("subject_id", pa.int64()), ("prediction_time", pa.timestamp("us"))]
    schema = pa.schema(fields if census else [*fields, ("boolean_value", pa.bool_())])
    table = pa.concat_tables([t.cast(schema) for t in parts]) if parts else schema.empty_table()
    return LabelSchema.align(table.sort_by([("subject_id", "ascending"), ("prediction_time", "ascending")]))


SPECIAL = ("_ANY_EVENT", "_RECORD_START", "_RECORD_END")  # ACES's predicates that every event's time takes part in


def aces_input(shard: Path, cfg, out: Path) -> Path:
    """``shard`` cut down to what an ACES query over it can tell apart, as a Parquet file at ``out``: the rows that
    one of the config's plain predicates matches (by ACES's own expression: code, value bounds, other columns),
    with the columns those read. ACES counts each predicate per (subject_id, time) and draws every window and label
    from those counts, where a time at which no predicate holds adds nothing; only its special predicates
    (``SPECIAL``: any event, a record's start and end) see every time, so a config that uses one gets one row more
    per other (subject_id, time), with a null code."""
    import polars as pl

    plain = list(cfg.plain_predicates.values())
    schema = pl.scan_parquet(shard).collect_schema()
    extra = sorted({c for p in plain for c in (p.other_cols or {})} - {"subject_id", "time", "code"})
    cols = ["subject_id", "time", "code", *(c for c in ("numeric_value", *extra) if c in schema and c != "code")]
    lf = pl.scan_parquet(shard).select(cols).with_columns(pl.col("code").cast(pl.Utf8))
    hit = pl.any_horizontal([p.MEDS_eval_expr().fill_null(False) for p in plain]) if plain else pl.lit(False)
    kept = lf.filter(hit)
    used = {cfg.trigger.predicate} | {p for w in cfg.windows.values()
                                      for p in (*w.referenced_predicates, *w.constraint_predicates)}
    if used & set(SPECIAL):
        times = lf.filter(~hit).select("subject_id", "time").unique().with_columns(
            *(pl.lit(None, dtype=pl.Utf8 if c == "code" else schema[c]).alias(c) for c in cols[2:]))
        kept = pl.concat([kept, times.select(cols)])
    kept.sink_parquet(out)
    return out


def census_config(task: Path, folder: Path) -> Path:
    """The ACES config ``task`` without its label window, written to ``folder``: the windows defined from the label
    window (through ``<window>.start`` / ``.end``) go with it, except the one holding the prediction time, which
    stays without its label (the label window itself, when it holds ``index_timestamp``). What is left finds the
    prediction times of the trigger's events whose windows up to the prediction time hold (no outcome needed)."""
    import re

    import yaml

    try:
        doc = yaml.safe_load(task.read_text(encoding="utf-8"))
        windows = dict(doc["windows"])
        label = next(n for n, w in windows.items() if isinstance(w, dict) and "label" in w)
        index = next(n for n, w in windows.items() if isinstance(w, dict) and "index_timestamp" in w)
    except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration) as exc:
        raise MedsError(f"{task}: not a valid ACES task config with a label and an index_timestamp window "
                        f"({type(exc).__name__})") from None

    def refs(w: dict) -> set[str]:
        return {m.group(1) for k in ("start", "end") for m in re.finditer(r"\b(\w+)\.(?:start|end)\b", str(w.get(k)))}

    dropped = {label}
    while True:
        more = {n for n, w in windows.items() if n not in dropped and refs(w) & dropped}
        if not more:
            break
        dropped |= more
    if index in dropped - {label}:
        raise MedsError(f"{task}: the prediction time (window {index!r}) is defined from the label window {label!r}; "
                        "a census needs it without the outcome: give the prediction times (--times)")
    kept = {n: w for n, w in windows.items() if n not in dropped or n == index}
    if index == label:
        kept[index] = {k: v for k, v in windows[index].items() if k != "label"}
    path = folder / f"census-{task.name}"
    path.write_text(yaml.safe_dump({**doc, "windows": kept}, sort_keys=False), encoding="utf-8")
    return path


def labels_frame(table: pa.Table) -> pd.DataFrame:
    """An ACES result (``run_task``) as ``read_label_files``'s frame (file 0: the task's output)."""
    return _frame(table, 0)


def clean(labels: pd.DataFrame, names: list[str], subjects_with_data: set[int], split_of: dict[int, str] | None
          ) -> tuple[pd.DataFrame, list[tuple[str, int, str]]]:
    """The usable label rows, and the quarantined ones as (file, row, reason) (module docstring).
    ``split_of``: subject -> split name of ``subject_splits.parquet`` (None: no splits file, every
    subject is split by hash later)."""
    known = subjects_with_data | set(split_of or ())
    unknown = ~labels["subject_id"].isin(known)
    if unknown.any():
        first = labels[unknown].iloc[0]
        raise MedsError(f"{names[int(first['file'])]}: row {int(first['row'])}: a label for a subject that is neither "
                        f"in the dataset's data/ nor in its subject_splits.parquet ({int(unknown.sum())} such "
                        "rows): labels of another dataset?")
    reason = pd.Series(None, index=labels.index, dtype=object)
    reason[labels["boolean_value"].isna()] = "no boolean_value"
    dup = labels.duplicated(["subject_id", "prediction_time"], keep=False)
    reason[reason.isna() & dup] = "duplicate (subject_id, prediction_time)"
    if split_of is not None:
        no_split = ~labels["subject_id"].isin(split_of.keys())
        reason[reason.isna() & no_split] = "subject in no split of subject_splits.parquet"
    bad = reason.notna()
    quarantine = [(names[int(f)], int(r), str(why)) for f, r, why in
                  zip(labels.loc[bad, "file"], labels.loc[bad, "row"], reason[bad])]
    return labels[~bad].reset_index(drop=True), quarantine


def write_labels(cohort: pd.DataFrame, path: Path) -> Path:
    """The labels an extraction used, in ``meds.LabelSchema`` (subject_id, prediction_time, boolean_value),
    sorted; the data owner's file (subject ids and times: mode 0600)."""
    import pyarrow.parquet as pq
    from meds import LabelSchema

    from pipeline.core import fileio

    frame = cohort.sort_values(["subject_id", "prediction_time"])
    table = pa.table({
        "subject_id": pa.array(frame["subject_id"].astype("int64").to_numpy(), pa.int64()),
        "prediction_time": pa.array(frame["prediction_time"].astype("int64").to_numpy(), pa.int64()).cast(
            pa.timestamp("us")),
        "boolean_value": pa.array(frame["label"].astype(bool).to_numpy(), pa.bool_()),
    })
    LabelSchema.validate(table)
    with fileio.atomic_path(path, mode=0o600) as tmp:
        pq.write_table(table, tmp)
    return path
