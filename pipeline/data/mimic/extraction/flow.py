"""Extraction: a MIMIC-III or MIMIC-IV source -> de-identified, time-bagged token sequences (Parquet).

Flow (docs/cohort-and-features.md, "Data flow"):
  1. source SQL (DuckDB over CSV, or PostgreSQL): map the release onto the staging shape,
     classify admissions, build the cohort, select each event table's events before the
     prediction time (sql/, in build order);
  2. local DuckDB + pyarrow: pseudonymize, split by patient, fit bins and vocabulary on the
     training split, tokenize, bag by hour/day, write one Parquet file per split;
  3. accounting: for every table, rows read = used + quarantined + outside the window.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import shutil
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.core import fileio
from pipeline.core.contracts import COHORT_COLUMNS, FEATURE_VERSION, FEATURES, MANIFEST_FILE
from pipeline.core.errors import ConfigError, naming
from pipeline.core.fileio import check_output_dir
from pipeline.core.privacy import check_private
from pipeline.data.mimic import deid
from pipeline.data.mimic.extraction import queries, tokens
from pipeline.data.mimic.extraction.accounting import event_accounting, scan_all_events, table_accounting
from pipeline.data.mimic.extraction.cohort import assign_splits, context_tokens, encode_context, fit_context
from pipeline.data.mimic.extraction.config import ExtractConfig, ExtractResult
from pipeline.data.mimic.sources import is_dsn, open_source
from pipeline.data.mimic.sources.base import CrossReleaseError, SourceError, set_memory_limit, short_error
from pipeline.data.mimic.sources.tables import Release, event_tables_of
from pipeline.data.task import mimic_mortality

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")


def rss_mb() -> float | None:
    """This process's resident memory now, in MB (None where /proc is not available)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


def cpu_s() -> float:
    """CPU seconds this process has used so far (every thread, user + system): on a shared machine,
    the load-robust measure of a stage's cost."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def _stage(name: str):
    """Log the wall time of one extraction stage, its CPU time and the memory at its end (INFO; `cli.py extract -v`)."""
    t0, c0 = time.perf_counter(), cpu_s()
    yield
    rss = rss_mb()
    log.info("%-28s %7.2f s  CPU %7.2f s%s", name, time.perf_counter() - t0, cpu_s() - c0,
             f"  RSS {rss:6.0f} MB" if rss is not None else "")


def _remove_empty(made: list[Path]) -> None:
    """After a failed extraction: the folders it created (``made``, innermost first), while empty."""
    for folder in made:
        try:
            folder.rmdir()
        except OSError:  # not empty (something else wrote there), or already gone
            return


def _connect(cfg: ExtractConfig, tmp_dir: Path):
    import duckdb

    con = duckdb.connect()
    set_memory_limit(con, cfg)
    con.execute(f"SET temp_directory = '{tmp_dir.as_posix()}'")
    con.execute("SET preserve_insertion_order = false")
    # Every join in sql/ is written big-side LEFT, small-side RIGHT (the build
    # side). DuckDB cannot estimate a CSV scan's size and would otherwise flip the build side
    # onto the event scan: 4x the memory (out of memory at MIMIC scale) and slower.
    con.execute("SET disabled_optimizers = 'build_side_probe_side'")
    if cfg.threads:
        con.execute(f"SET threads = {int(cfg.threads)}")
    return con


def extract(
    source: str | Path,
    out_dir: Path | str,
    config: ExtractConfig | None = None,
    *,
    vocab: tokens.Vocab | None = None,
    schema: str | None = None,
    cohort_filter: str = "TRUE",
    as_of: float | None = None,
    release: str | None = None,
) -> ExtractResult:
    """Run the extraction; see the module docstring. With `vocab` given (scoring), nothing is
    refitted and every admission goes to one file, `cohort.parquet`.

    ``schema`` (PostgreSQL): see ``PostgresSource`` (None: ``mimiciii``, else mimic-code's MIMIC-IV
    schemas). ``release`` ("mimic-iii" / "mimic-iv"): the release the source must be (a model's),
    checked before anything is read; None accepts either.

    ``as_of`` (scoring only; epoch seconds on the source's clock) is when the source's data ends:
    an open admission whose prediction time T is later has only ``observed_hours`` of its window
    and is flagged ``before_prediction_time``. Default: the newest ADMITTIME or DISCHTIME in
    ADMISSIONS. It may not be earlier than that (the source holds records after it)."""
    import duckdb

    cfg = config or ExtractConfig()
    final = Path(out_dir)
    check_output_dir(final, None if is_dsn(source) else source, markers=(MANIFEST_FILE,), what="features folder")
    check_private(final / "_private", what="the data owner's link file")
    made = [p for p in (final.parent, *final.parent.parents) if not p.exists()]  # the folders this call creates
    started, cpu0 = time.perf_counter(), cpu_s()
    result = None
    try:  # whatever fails (the source included), the staged folder goes, and the folders this call made
        with fileio.staged_dir(final) as out:  # written beside --out, swapped in whole at the end
            tmp = out / ".tmp"
            tmp.mkdir()
            con = src = None
            try:
                con = _connect(cfg, tmp)
                src = open_source(source, con, schema=schema)
                _check_release(src, release)
                try:
                    staged = _run(src, con, out, cfg, vocab, cohort_filter, as_of)
                except duckdb.OutOfMemoryException as exc:  # a query of the extraction's own (the sources' name
                    # theirs)
                    raise SourceError(f"extraction: {short_error(exc)}") from None
            finally:
                if src is not None:
                    src.close()
                if con is not None:
                    con.close()
                shutil.rmtree(tmp, ignore_errors=True)
        result = _moved(staged, out, final)
    finally:
        if result is None:
            _remove_empty(made)
    log.info("extract finished in %.1f s (CPU %.1f s)", time.perf_counter() - started, cpu_s() - cpu0)
    return result


def _check_release(src, release: str | None) -> None:
    """Refuse a source of another release than ``release`` (a model's), before anything is read."""
    if release is not None and Release(release) is not src.release:
        expected, found = Release(release), src.release
        raise CrossReleaseError(f"the source is {found.title} but {expected.title} was expected (the model was "
                                f"trained on {expected.title} features): refused; score across releases only "
                                "when asked explicitly (--cross-release; the share of out-of-vocabulary tokens "
                                "is then reported)",
                                expected, found)


def _moved(result: ExtractResult, staged: Path, final: Path) -> ExtractResult:
    """``result`` with its paths in the staged folder moved to the folder it was swapped into."""
    def at(path: Path) -> Path:
        return final / Path(path).relative_to(staged)

    return replace(result, out_dir=final, link_file=at(result.link_file),
                   files={k: at(v) for k, v in result.files.items()})


def _run(src, con, out: Path, cfg: ExtractConfig, vocab: tokens.Vocab | None, cohort_filter: str,
         as_of: float | None = None) -> ExtractResult:
    rel = src.relations()
    params = dict(prediction_hours=float(cfg.prediction_hours), lookback_days=float(cfg.lookback_days),
                  census_columns=", ".join(COHORT_COLUMNS))  # what a census condition sees: no outcome
    scoring = vocab is not None  # a census with the training vocabulary (no splits, no refit)
    open_admissions = "TRUE" if scoring else "FALSE"  # scoring a census: no DISCHTIME = still in hospital
    with _stage("cohort"):
        src.materialize(queries.admissions_classified(rel, src.release, **params, open_admissions=open_admissions),
                        "admissions_classified", "ADMISSIONS")
        src.materialize(
            queries.render(queries.COHORT, **params, cohort_filter=cohort_filter), "cohort",
            "cohort (ADMISSIONS, PATIENTS)"
        )
        src.materialize(queries.render(queries.COHORT_SUBJECTS), "cohort_subjects", "cohort subjects")
        cohort = src.fetch_arrow(queries.render(queries.COHORT_ROWS), "cohort").to_pandas()
        accounting, quarantine = table_accounting(src)
    if cohort.empty:
        eligible = src.fetch_arrow(queries.render(queries.COHORT_ELIGIBLE),
                                   "admissions_classified").column("n")[0].as_py()
        filtered = f", and the cohort condition kept none of the {eligible} eligible" if cohort_filter != "TRUE" else ""
        raise SourceError(
            f"the cohort is empty: of {accounting['admissions']['rows_read']} ADMISSIONS rows, "
            f"{accounting['admissions']['quarantined']} were quarantined, "
            f"{sum(accounting['admissions']['excluded_by'].values())} excluded "
            f"({accounting['admissions']['excluded_by']}){filtered}"
        )

    if scoring and cohort["disch_epoch"].isna().any():
        log.info("%d admissions have no DISCHTIME (still in hospital): scored from their events before T",
                 int(cohort["disch_epoch"].isna().sum()))
    if as_of is not None and not scoring:
        raise naming(ConfigError("`as_of` applies to scoring a census (an extraction with the training "
                                 "vocabulary)"), "as_of")
    data_end = _as_of(src, as_of) if scoring else None  # checked before the event scans
    key = deid.load_key()
    cohort["key"] = deid.pseudonyms(key, cohort["hadm_id"].astype("int64"))
    cohort["split"] = "cohort" if scoring else assign_splits(cohort, cfg, src.release)
    excluded_era = int((cohort["split"] == "excluded").sum())
    cohort = cohort[cohort["split"] != "excluded"].sort_values("key").reset_index(drop=True)
    cohort["adm_idx"] = range(len(cohort))
    con.register("adm_arrow", pa.Table.from_pandas(cohort[["hadm_id", "subject_id", "adm_idx", "split"]]))
    con.execute("CREATE OR REPLACE TEMP TABLE adm AS SELECT * FROM adm_arrow")
    con.unregister("adm_arrow")

    present = [t for t in event_tables_of(src.release) if t in src.tables]  # largest first
    with _stage("events (all tables)"):
        for table, counted in scan_all_events(src, present, rel, cfg.verify_counts, cfg.scan_workers):
            accounting[table], quarantine[table] = event_accounting(con, table, counted,
                                                                    src.specs[table].row_id is not None)
    with _stage("union events"):  # a view, not a copy: the windows' rows are read in place until bagged
        con.execute(f"CREATE OR REPLACE TEMP VIEW events AS {queries.events_union([f'ev_{t}' for t in present])}")
    last_event = None
    if scoring:  # an event used shows the data reaches at least its time
        last = dict(con.sql(queries.render(queries.LAST_EVENT)).fetchall())
        last_event = cohort["adm_idx"].map(last).astype("float64")
    cohort["observed_hours"] = observed_hours(cohort, cfg.prediction_hours, data_end, last_event)
    cohort["before_prediction_time"] = cohort["observed_hours"] < cfg.prediction_hours
    if cohort["before_prediction_time"].any():
        log.warning("%d admissions are still before their prediction time (%g h after admission) in this data: "
                    "scored from the hours observed so far, flagged before_prediction_time",
                    int(cohort["before_prediction_time"].sum()), cfg.prediction_hours)

    ctx = context_tokens(cohort)
    if vocab is None:
        with _stage("fit vocabulary"):
            vocab = tokens.fit(con, cfg.n_bins, cfg.min_patients, cfg.max_text_values, cfg.text_max_len)
            vocab.context = fit_context(ctx, cohort["subject_id"], cohort["split"].eq("train"), cfg.min_patients)
    with _stage("tokenize"):  # the vocabulary's tables and the tokenized view (its ids are computed by the bags)
        tokens.register(con, vocab)
        tokens.tokenize(con, vocab, cfg.text_max_len)
    with _stage("bag"):
        bags = tokens.bag(con, cfg.prediction_hours, cfg.hourly, cfg.values)
        # why the other admissions get no score (serving's _private/unscored.csv); read before a CSV
        # source's connection (the local one) closes
        excluded = (src.fetch_arrow(queries.render(queries.COHORT_EXCLUSIONS, **params),
                                    "ADMISSIONS (exclusions)").to_pandas()
                    if scoring else None)
        con.close()  # the local DuckDB is done (ev_<table>, events, tokenized): closing it hands its memory back
    with _stage("assemble"):
        features = _assemble(cohort, ctx, vocab, bags)
    with _stage("write"):
        files = _write_outputs(out, features, vocab, quarantine, scoring)
    link = deid.write_link_file(out / "_private" / "link.csv", cohort["key"].tolist(),
                                cohort["hadm_id"].astype("int64").tolist())
    manifest = _manifest(src, cfg, cohort, accounting, files, vocab, excluded_era, cohort_filter != "TRUE")
    fileio.write_json(out / "manifest.json", manifest)
    files["manifest"] = out / "manifest.json"
    return ExtractResult(out, manifest, link, files, excluded)


def observed_hours(cohort: pd.DataFrame, window_hours: float, as_of: float | None,
                   last_event_hours: pd.Series | None = None) -> pd.Series:
    """Hours of each admission's window [ADMITTIME, T) that the data covers, within [0, window_hours]:
    (min(T, as_of) - ADMITTIME) / 3600, raised to the admission's last event used (hours after
    ADMITTIME; NaN: none), which the data evidently reaches. The whole window where ``as_of`` is
    None (a training extraction: every cohort admission was still in hospital after T)."""
    if as_of is None:
        return pd.Series(float(window_hours), index=cohort.index)
    end = np.minimum(cohort["pred_epoch"].to_numpy(dtype=np.float64), float(as_of))
    hours = (end - cohort["admit_epoch"].to_numpy(dtype=np.float64)) / 3600.0
    if last_event_hours is not None:
        hours = np.fmax(hours, last_event_hours.to_numpy(dtype=np.float64))  # fmax: NaN (no events) ignored
    return pd.Series(np.clip(hours, 0.0, float(window_hours)), index=cohort.index)


def _as_of(src, as_of: float | None) -> float:
    """The data's end (epoch s): ``as_of`` checked against the newest ADMISSIONS time, or that time."""
    row = src.fetch_arrow(queries.render(queries.DATA_END), "ADMISSIONS (newest time)").to_pylist()[0]
    newest = max((float(v) for v in row.values() if v is not None), default=None)
    if as_of is None:
        if newest is None:
            raise naming(SourceError("ADMISSIONS: no usable ADMITTIME, so the data's end (`as_of`) cannot be "
                                     "inferred"), "as_of")
        return newest
    if newest is not None and float(as_of) < newest:  # the gap is not shown: with --as-of it would date a record
        raise naming(SourceError("`as_of` is before the newest ADMITTIME or DISCHTIME in ADMISSIONS: the source "
                                 "holds records after it, and scoring as of a past time (cutting every table there) "
                                 "is not supported"), "as_of")
    return float(as_of)


def _assemble(cohort: pd.DataFrame, ctx: pd.DataFrame, vocab: tokens.Vocab, bags: pa.Table,
              table=FEATURES, context: list[list[int]] | None = None) -> pa.Table:
    """Every admission in key order (the cohort's order: adm_idx numbers it), as the columns of ``table``
    (``contracts.FEATURES``; a MEDS source's ``MEDS_FEATURES``; ``bag_values`` where ``bags`` has it:
    ``extract --values``) plus ``split``. The bags stay Arrow arrays (a few bytes per token, never Python
    lists); an admission without events (absent from ``bags``) has zero bags. ``context``: the context ids
    per admission (None: ``ctx`` encoded with the vocabulary's context tokens)."""
    values = "bag_values" in bags.column_names
    schema = table.arrow_schema(tuple(c for c in table.names() if values or c != "bag_values"))
    n = len(cohort)
    hours, lists = bags.column("bag_hours").combine_chunks(), bags.column("bags").combine_chunks()
    present = bags.column("adm_idx").to_numpy()
    n_bags = np.zeros(n, np.int64)
    n_bags[present] = pc.list_value_length(hours).to_numpy(zero_copy_only=False)
    offsets = pa.array(np.r_[0, np.cumsum(n_bags)].astype(np.int32), pa.int32())
    n_events = np.zeros(n, np.int32)
    n_events[present] = bags.column("n_events").to_numpy()
    built = ("context", "bag_hours", "bags", "bag_values", "n_events")  # from the vocabulary and the bags;
        # the rest from the cohort
    cols = {name: pa.array(cohort[name].tolist(), schema.field(name).type) for name in schema.names
            if name not in built}
    cols["context"] = pa.array(encode_context(ctx, vocab.context) if context is None else context,
                               schema.field("context").type)
    cols["bag_hours"] = pa.ListArray.from_arrays(offsets, hours.flatten()).cast(schema.field("bag_hours").type)
    cols["bags"] = pa.ListArray.from_arrays(offsets, lists.flatten()).cast(schema.field("bags").type)
    if values:
        channel = bags.column("bag_values").combine_chunks()
        cols["bag_values"] = pa.ListArray.from_arrays(offsets, channel.flatten()).cast(schema.field("bag_values").type)
    cols["n_events"] = pa.array(n_events, pa.int32())
    table = pa.table([cols[name] for name in schema.names], schema=schema)
    return table.append_column("split", pa.array(cohort["split"].tolist(), pa.string()))


def write_parquet(table: pa.Table, path: Path) -> Path:
    with fileio.atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=8192)
    return path


def _write_outputs(out: Path, features: pa.Table, vocab: tokens.Vocab, quarantine: dict, scoring: bool) -> dict:
    files: dict[str, Path] = {}
    names = ["cohort"] if scoring else list(SPLITS)
    for split in names:
        part = features.filter(pc.equal(features.column("split"), split)).drop_columns(["split"])
        files[split] = write_parquet(part.combine_chunks(), out / f"{split}.parquet")
    if not scoring:
        files["vocab"] = fileio.write_json(out / "vocab.json", vocab.to_json())
    qschema = pa.schema([("table", pa.string()), ("row_id", pa.int64()), ("line", pa.int64()), ("reason", pa.string())])
    for table, rows in sorted(quarantine.items()):
        frame = (pd.DataFrame(rows, columns=["row_id", "line", "reason"]) if rows
                 else pd.DataFrame(columns=["row_id", "line", "reason"]))
        frame.insert(0, "table", table.upper())
        files[f"quarantine/{table}"] = write_parquet(
            pa.Table.from_pandas(frame, schema=qschema, preserve_index=False), out / "quarantine" / f"{table}.parquet"
        )
    return files


def _manifest(src, cfg, cohort, accounting, files, vocab, excluded_era, filtered) -> dict:
    splits = {}
    for split in sorted(cohort["split"].unique()):
        part = cohort[cohort["split"] == split]
        n, pos = len(part), int(part["label"].sum())
        splits[split] = {"admissions": n, "patients": int(part["subject_id"].nunique()), "positives": pos,
                         "label_rate": round(pos / n, 6) if n else None}
    hashes = {name: fileio.sha256_file(path) for name, path in sorted(files.items())}
    out = {
        "feature_version": FEATURE_VERSION,
        "release": src.release.value,
        "task": mimic_mortality(cfg.prediction_hours, src.release.title).to_json(),  # the outcome in words
        "source": {"kind": src.kind, "location": src.description,
                   "tables": {t: i.location for t, i in sorted(src.tables.items())}},
        "config": cfg.to_json(),
        "cohort_filter_applied": filtered,
        "tables": accounting,
        "cohort": {
            "admissions": int(len(cohort)),
            "positives": int(cohort["label"].sum()),
            "label_rate": round(float(cohort["label"].mean()), 6) if len(cohort) else None,
            "excluded_era_overlap": excluded_era,
            "icu_system": {k: int(v) for k, v in sorted(cohort["icu_system"].value_counts().items())},
        },
        "splits": splits,
        "vocab": {"tokens": len(vocab.tokens), "context": len(vocab.context), "binned_items": len(vocab.bins),
                  "text_items": len(vocab.text_items)},
        "sha256": hashes,
    }
    if src.release is Release.mimic4:  # the era split's groups: patients per anchor_year_group and split
        eras = cohort.groupby(["era", "split"])["subject_id"].nunique()
        out["cohort"]["anchor_year_group"] = {str(g): {str(s): int(n) for s, n in eras[g].items()}
                                              for g in sorted(eras.index.get_level_values(0).unique())}
    return out
