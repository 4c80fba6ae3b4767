"""Extraction: MIMIC-III source -> de-identified, time-bagged token sequences (Parquet).

Flow (see README "Data flow"):
  1. source SQL (DuckDB over CSV, or PostgreSQL): classify admissions, build the cohort,
     select each event table's events before the prediction time (sql/, in build order);
  2. local DuckDB + pyarrow: pseudonymize, split by patient, fit bins and vocabulary on the
     training split, tokenize, bag by hour/day, write one Parquet file per split;
  3. accounting: for every table, rows read = used + quarantined + outside the window.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import shutil
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from pipeline import deid, io, sqlgen, tokens
from pipeline.schema import EVENT_TABLES

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
FEATURE_VERSION = 2  # 2: observed_hours and before_prediction_time columns


class SplitMode(str, Enum):
    random = "random"  # 80/10/10 by patient
    era = "era"  # carevue-era stays in train/val, metavision-era stays in test


@dataclass
class ExtractConfig:
    prediction_hours: float = 24.0  # prediction time T = ADMITTIME + this many hours
    lookback_days: float = 30.0  # history used: events in [T - lookback, T)
    hourly_hours: float | None = None  # last N hours before T in hourly bags (None: prediction_hours)
    n_bins: int = 5  # quantile bins per numeric item (fitted on train)
    min_patients: int = 5  # tokens in fewer training patients collapse to per-source OOV
    max_text_values: int = 50  # items with more distinct text values are free text: item token only
    text_max_len: int = 40  # text values are truncated to this many characters
    split: SplitMode = SplitMode.random  # how admissions are split (always by patient)
    split_seed: int = 0  # seed of the deterministic patient hash
    train_fraction: float = 0.8  # fraction of patients in train (random split)
    val_fraction: float = 0.1  # fraction of patients in val (random split)
    memory_limit: str = "3GB"  # DuckDB memory limit (spills to disk beyond it; the process stays under ~4 GB)
    threads: int | None = None  # DuckDB threads (None: all cores)
    verify_counts: bool = False  # also count each event table with a second scan and check the two agree
    scan_workers: int = 2  # event tables scanned at once (CSV sources; 1: one after another)

    @property
    def hourly(self) -> float:
        return self.prediction_hours if self.hourly_hours is None else self.hourly_hours

    def to_json(self) -> dict:
        d = asdict(self)
        d["split"] = self.split.value
        return d


@dataclass
class ExtractResult:
    out_dir: Path
    manifest: dict
    link_file: Path
    files: dict[str, Path] = field(default_factory=dict)


@contextlib.contextmanager
def _stage(name: str):
    """Log the wall time of one extraction stage (INFO; `cli.py extract -v` shows it)."""
    t0 = time.perf_counter()
    yield
    log.info("%-28s %7.2f s", name, time.perf_counter() - t0)


def open_source(source: str | Path, con, schema: str = "mimiciii"):
    text = str(source)
    if text.startswith(("postgresql://", "postgres://")) or " dbname=" in f" {text}":
        from pipeline.pgsource import PostgresSource

        return PostgresSource(text, con, schema=schema)
    from pipeline.sources import CsvSource

    return CsvSource(Path(text), con)


def _connect(cfg: ExtractConfig, tmp_dir: Path):
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET memory_limit = '{cfg.memory_limit}'")
    con.execute(f"SET temp_directory = '{tmp_dir.as_posix()}'")
    con.execute("SET preserve_insertion_order = false")
    # Every join in sql/ and tokens.py is written big-side LEFT, small-side RIGHT (the build
    # side). DuckDB cannot estimate a CSV scan's size and would otherwise flip the build side
    # onto the event scan: 4x the memory (out of memory at MIMIC scale) and slower.
    con.execute("SET disabled_optimizers = 'build_side_probe_side'")
    if cfg.threads:
        con.execute(f"SET threads = {int(cfg.threads)}")
    return con


def _unit_hash(seed: int, subject_id: int) -> float:
    digest = hashlib.sha256(f"split:{seed}:{subject_id}".encode()).hexdigest()
    return int(digest[:15], 16) / 16**15


def assign_splits(cohort: pd.DataFrame, cfg: ExtractConfig) -> pd.Series:
    """Split label per admission; every patient lands in exactly one split.

    era mode: a patient with any metavision stay goes to test, where only the metavision
    stays are kept ('excluded' marks the others); everyone else splits 8:1 into train/val.
    """
    u = cohort["subject_id"].map(lambda s: _unit_hash(cfg.split_seed, int(s)))
    if cfg.split is SplitMode.random:
        cut1, cut2 = cfg.train_fraction, cfg.train_fraction + cfg.val_fraction
        return pd.Series(["train" if x < cut1 else "val" if x < cut2 else "test" for x in u], index=cohort.index)
    mv = cohort["icu_system"].eq("metavision")
    mv_patient = cohort["subject_id"].isin(cohort.loc[mv, "subject_id"])
    out = pd.Series(["train" if x < 8 / 9 else "val" for x in u], index=cohort.index)
    out[mv_patient & mv] = "test"
    out[mv_patient & ~mv] = "excluded"
    return out


def context_tokens(cohort: pd.DataFrame) -> pd.DataFrame:
    """Raw context tokens per admission (age decade, gender, admission type and location)."""
    age = cohort["age"].astype(float)
    decade = (age // 10 * 10).clip(lower=10).astype(int)
    age_tok = ["age:90+" if a >= 90 else ("age:18-29" if d < 30 else f"age:{d}-{d + 9}") for a, d in zip(age, decade)]
    return pd.DataFrame(
        {
            "age": age_tok,
            "gender": "gender:" + cohort["gender"].fillna("<missing>").astype(str),
            "admission_type": "admission_type:" + cohort["admission_type"].fillna("<missing>").astype(str),
            "admission_location": "admission_location:" + cohort["admission_location"].fillna("<missing>").astype(str),
        },
        index=cohort.index,
    )


CONTEXT_FIELDS = ("age", "gender", "admission_type", "admission_location")


def fit_context(ctx: pd.DataFrame, subjects: pd.Series, train: pd.Series, min_patients: int) -> list[str]:
    vocab = [tokens.PAD] + [f"{f}:<other>" for f in CONTEXT_FIELDS]
    for f in CONTEXT_FIELDS:
        counts = pd.DataFrame({"tok": ctx.loc[train, f], "s": subjects[train]}).groupby("tok")["s"].nunique()
        vocab += sorted(t for t, n in counts.items() if n >= min_patients)
    return vocab


def encode_context(ctx: pd.DataFrame, vocab: list[str]) -> list[list[int]]:
    index = {t: i for i, t in enumerate(vocab)}
    cols = []
    for f in CONTEXT_FIELDS:
        other = index[f"{f}:<other>"]
        cols.append([index.get(t, other) for t in ctx[f]])
    return [list(row) for row in zip(*cols)]


def extract(
    source: str | Path,
    out_dir: Path | str,
    config: ExtractConfig | None = None,
    *,
    vocab: tokens.Vocab | None = None,
    schema: str = "mimiciii",
    cohort_filter: str = "TRUE",
    as_of: float | None = None,
) -> ExtractResult:
    """Run the extraction; see the module docstring. With `vocab` given (scoring), nothing is
    refitted and every admission goes to one file, `cohort.parquet`.

    ``as_of`` (scoring only; epoch seconds on the source's clock) is when the source's data ends:
    an open admission whose prediction time T is later has only ``observed_hours`` of its window
    and is flagged ``before_prediction_time``. Default: the newest ADMITTIME or DISCHTIME in
    ADMISSIONS. It may not be earlier than that (the source holds records after it)."""
    cfg = config or ExtractConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".tmp"
    tmp.mkdir(exist_ok=True)
    started = time.perf_counter()
    con = _connect(cfg, tmp)
    src = open_source(source, con, schema=schema)
    try:
        result = _run(src, con, out, cfg, vocab, cohort_filter, as_of)
    finally:
        src.close()
        con.close()
        shutil.rmtree(tmp, ignore_errors=True)
    log.info("extract finished in %.1f s", time.perf_counter() - started)
    return result


def _run(src, con, out: Path, cfg: ExtractConfig, vocab: tokens.Vocab | None, cohort_filter: str,
         as_of: float | None = None) -> ExtractResult:
    rel = src.relations()
    params = dict(prediction_hours=float(cfg.prediction_hours), lookback_days=float(cfg.lookback_days))
    scoring = vocab is not None  # a census with the training vocabulary (no splits, no refit)
    open_admissions = "TRUE" if scoring else "FALSE"  # scoring a census: no DISCHTIME = still in hospital
    src.materialize(sqlgen.render(sqlgen.ADMISSIONS_CLASSIFIED, **rel, **params, open_admissions=open_admissions),
                    "admissions_classified", "ADMISSIONS")
    src.materialize(
        sqlgen.render(sqlgen.COHORT, **params, cohort_filter=cohort_filter), "cohort", "cohort (ADMISSIONS, PATIENTS)"
    )
    src.materialize("SELECT DISTINCT subject_id, dob_epoch FROM cohort", "cohort_subjects", "cohort subjects")
    cohort = src.fetch_arrow("SELECT * FROM cohort ORDER BY hadm_id", "cohort").to_pandas()
    accounting, quarantine = _table_accounting(src)
    if cohort.empty:
        from pipeline.sources import SourceError

        eligible = src.fetch_arrow("SELECT count(*) AS n FROM admissions_classified WHERE exclusion IS NULL",
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
        raise ValueError("as_of applies to scoring a census (an extraction with the training vocabulary)")
    data_end = _as_of(src, as_of) if scoring else None  # checked before the event scans
    key = deid.load_key()
    cohort["key"] = deid.pseudonyms(key, cohort["hadm_id"].astype("int64"))
    cohort["split"] = "cohort" if scoring else assign_splits(cohort, cfg)
    excluded_era = int((cohort["split"] == "excluded").sum())
    cohort = cohort[cohort["split"] != "excluded"].sort_values("key").reset_index(drop=True)
    cohort["adm_idx"] = range(len(cohort))
    con.register("adm_arrow", pa.Table.from_pandas(cohort[["hadm_id", "subject_id", "adm_idx", "split"]]))
    con.execute("CREATE OR REPLACE TEMP TABLE adm AS SELECT * FROM adm_arrow")
    con.unregister("adm_arrow")

    present = [t for t in EVENT_TABLES if t in src.tables]  # largest first
    with _stage("events (all tables)"):
        for table, counted in _scan_all_events(src, present, rel, cfg.verify_counts, cfg.scan_workers):
            accounting[table], quarantine[table] = _event_accounting(con, table, counted)
    union = " UNION ALL ".join(
        f"SELECT hadm_id, source, item, valuenum, valuetext, t_hours FROM ev_{t} WHERE reason IS NULL" for t in present
    ) or "SELECT NULL::BIGINT AS hadm_id, NULL AS source, NULL AS item, NULL::DOUBLE AS valuenum, NULL AS valuetext, NULL::DOUBLE AS t_hours WHERE FALSE"
    with _stage("union events"):
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE events AS
            SELECT a.adm_idx, a.split, a.subject_id AS subject_key, e.source, e.item, e.valuenum, e.valuetext, e.t_hours
            FROM ({union}) e JOIN adm a ON a.hadm_id = e.hadm_id"""
        )
    for table in present:
        con.execute(f"DROP TABLE ev_{table}")
    last_event = None
    if scoring:  # an event used shows the data reaches at least its time
        last = dict(con.sql("SELECT adm_idx, max(t_hours) FROM events GROUP BY adm_idx").fetchall())
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
    with _stage("tokenize"):
        tokens.register(con, vocab)
        tokens.tokenize(con, vocab, cfg.text_max_len)
        con.execute("DROP TABLE events")
    with _stage("bag"):
        bags = tokens.bag(con, cfg.prediction_hours, cfg.hourly).to_pandas()
        con.execute("DROP TABLE tokenized")
    with _stage("assemble"):
        features = _assemble(cohort, ctx, vocab, bags)
    with _stage("write"):
        files = _write_outputs(out, features, vocab, quarantine, scoring)
    link = deid.write_link_file(out / "_private" / "link.csv", cohort["key"].tolist(), cohort["hadm_id"].astype("int64").tolist())
    manifest = _manifest(src, cfg, cohort, accounting, files, vocab, excluded_era, cohort_filter != "TRUE")
    io.write_json(out / "manifest.json", manifest)
    files["manifest"] = out / "manifest.json"
    return ExtractResult(out, manifest, link, files)


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
    from pipeline.sources import SourceError

    row = src.fetch_arrow(
        "SELECT max(admit_epoch) AS admit, max(disch_epoch) AS disch FROM admissions_classified "
        "WHERE exclusion IS NULL OR exclusion NOT LIKE 'quarantine:%'", "ADMISSIONS (newest time)").to_pylist()[0]
    newest = max((float(v) for v in row.values() if v is not None), default=None)
    if as_of is None:
        if newest is None:
            raise SourceError("ADMISSIONS: no usable ADMITTIME, so the data's end (--as-of) cannot be inferred")
        return newest
    if newest is not None and float(as_of) < newest:  # the gap is not shown: with --as-of it would date a record
        raise SourceError("--as-of is before the newest ADMITTIME or DISCHTIME in ADMISSIONS: the source holds "
                          "records after it, and scoring as of a past time (cutting every table there) is not supported")
    return float(as_of)


def _assemble(cohort: pd.DataFrame, ctx: pd.DataFrame, vocab: tokens.Vocab, bags: pd.DataFrame) -> pd.DataFrame:
    frame = cohort[["adm_idx", "key", "split", "label", "age", "gender", "admission_type", "admission_location", "icu_system",
                    "observed_hours", "before_prediction_time"]].copy()
    frame["context"] = encode_context(ctx, vocab.context)
    frame = frame.merge(bags, on="adm_idx", how="left")
    empty = frame["n_events"].isna()
    frame.loc[empty, "n_events"] = 0
    frame["bag_hours"] = [[] if e else list(v) for e, v in zip(empty, frame["bag_hours"])]
    frame["bags"] = [[] if e else [list(b) for b in v] for e, v in zip(empty, frame["bags"])]
    return frame.sort_values("key").reset_index(drop=True)


FEATURE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("label", pa.int8()),
        ("age", pa.float32()),
        ("gender", pa.string()),
        ("admission_type", pa.string()),
        ("admission_location", pa.string()),
        ("icu_system", pa.string()),
        ("context", pa.list_(pa.int32())),
        ("bag_hours", pa.list_(pa.float32())),
        ("bags", pa.list_(pa.list_(pa.int32()))),
        ("n_events", pa.int32()),
        ("observed_hours", pa.float32()),  # hours of [ADMITTIME, T) the data covers (< the window: T not reached)
        ("before_prediction_time", pa.bool_()),  # the data ends before T: a partial window (open admissions only)
    ]
)


def write_parquet(table: pa.Table, path: Path) -> Path:
    with io.atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd", row_group_size=8192)
    return path


def _write_outputs(out: Path, features: pd.DataFrame, vocab: tokens.Vocab, quarantine: dict, scoring: bool) -> dict:
    files: dict[str, Path] = {}
    names = ["cohort"] if scoring else list(SPLITS)
    for split in names:
        part = features[features["split"] == split]
        cols = {f.name: part[f.name].tolist() for f in FEATURE_SCHEMA}
        files[split] = write_parquet(pa.table(cols, schema=FEATURE_SCHEMA), out / f"{split}.parquet")
    if not scoring:
        files["vocab"] = io.write_json(out / "vocab.json", vocab.to_json())
    qschema = pa.schema([("table", pa.string()), ("row_id", pa.int64()), ("line", pa.int64()), ("reason", pa.string())])
    for table, rows in sorted(quarantine.items()):
        frame = pd.DataFrame(rows, columns=["row_id", "line", "reason"]) if rows else pd.DataFrame(columns=["row_id", "line", "reason"])
        frame.insert(0, "table", table.upper())
        files[f"quarantine/{table}"] = write_parquet(
            pa.Table.from_pandas(frame, schema=qschema, preserve_index=False), out / "quarantine" / f"{table}.parquet"
        )
    return files


def _table_accounting(src) -> tuple[dict, dict]:
    """Accounting and quarantine for ADMISSIONS, PATIENTS and ICUSTAYS."""
    acc, quar = {}, {}
    read, rejects = _rows_read(src.count_rows("admissions"), src.scan_rejects("admissions"))
    rows = src.fetch_arrow(
        "SELECT exclusion, count(*) AS n FROM admissions_classified GROUP BY exclusion", "ADMISSIONS"
    ).to_pylist()
    by = {r["exclusion"]: int(r["n"]) for r in rows}
    q_rows = src.fetch_arrow(
        "SELECT row_id, exclusion FROM admissions_classified WHERE exclusion LIKE 'quarantine:%' ORDER BY row_id",
        "ADMISSIONS",
    ).to_pylist()
    quar["admissions"] = [(r["row_id"], None, r["exclusion"].removeprefix("quarantine:")) for r in q_rows] + [
        (None, line, why) for line, why in rejects
    ]
    used = by.get(None, 0)
    quarantined = len(quar["admissions"])
    acc["admissions"] = {
        "rows_read": read,
        "used": used,
        "quarantined": quarantined,
        "outside_window": read - used - quarantined,
        "excluded_by": {k: v for k, v in sorted(by.items(), key=lambda kv: str(kv[0])) if k and not k.startswith("quarantine:")},
    }
    for table, used_sql in (
        ("patients", "SELECT count(*) FROM {rel} p WHERE p._error IS NULL AND p.subject_id IN (SELECT subject_id FROM cohort)"),
        ("icustays", "SELECT count(*) FROM {rel} i WHERE i._error IS NULL AND i.hadm_id IN (SELECT hadm_id FROM cohort)"),
    ):
        if table not in src.tables:
            continue
        rel = src.relation(table)
        read, rejects = _rows_read(src.count_rows(table), src.scan_rejects(table))
        used = int(src.fetch_arrow(used_sql.format(rel=rel), table.upper()).column(0)[0].as_py())
        bad = src.fetch_arrow(f"SELECT q.row_id, q._error FROM {rel} q WHERE q._error IS NOT NULL ORDER BY q.row_id", table.upper()).to_pylist()
        quar[table] = [(r["row_id"], None, r["_error"]) for r in bad] + [(None, line, why) for line, why in rejects]
        acc[table] = {
            "rows_read": read,
            "used": used,
            "quarantined": len(quar[table]),
            "outside_window": read - used - len(quar[table]),
        }
    return acc, quar


def _scan_all_events(src, tables: list[str], rel: dict, verify: bool, workers: int):
    """Yield (table, (rows read, rejected lines)) after materializing each ``ev_<table>``;
    ``workers`` scans at a time where the source allows it, started in the order given."""
    jobs = [(t, sqlgen.events_sql(t, rel)) for t in tables]
    if workers <= 1 or not getattr(src, "concurrent_scans", False):
        for table, sql in jobs:
            yield table, _scan_events(src, table, sql, verify)
        return
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [(table, pool.submit(_scan_events, src, table, sql, verify)) for table, sql in jobs]
        pending = {f for _, f in futures}
        done = False
        try:
            for table, future in futures:
                while not future.done():  # a failure elsewhere is raised at once, not after this scan
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in finished:
                        if f.exception() is not None:
                            f.result()
                yield table, future.result()
            done = True
        finally:
            if not done:  # an error, Ctrl-C or an abandoned loop: stop the other scans now
                for _, future in futures:
                    future.cancel()
                src.interrupt_scans()


def _scan_events(src, table: str, sql: str, verify: bool) -> tuple[int, list]:
    """Materialize ``ev_<table>`` and count the table's rows: (rows read, rejected lines).

    A CSV source counts in the same scan (the profiler's rows parsed, plus the lines it
    rejected); otherwise, or when the plan hides the count, a bare count(*) runs after it.
    ``verify`` runs the bare count as well and stops if the two disagree."""
    what = src.tables[table].location
    started = time.perf_counter()
    scanned, rejects = src.into_local_counted(sql, f"ev_{table}", what, table)
    if scanned is None or verify:
        # bare count: malformed lines are not counted; a line whose only fault is a bad value
        # (e.g. invalid UTF-8 in a column) is counted there and rejected by the events scan
        bare = _rows_read(src.count_rows(table), rejects)
    counted = bare if scanned is None else (scanned + len(rejects), rejects)
    if verify and scanned is not None and bare[0] != counted[0]:
        raise RuntimeError(
            f"{what}: the events scan parsed {scanned} rows and rejected {len(rejects)} lines, "
            f"but a separate count finds {bare[0]} rows"
        )
    log.info("  events %-23s %6.2f s", table, time.perf_counter() - started)
    return counted


def _rows_read(counted: tuple[int, list], scan_rejects: list) -> tuple[int, list]:
    """(rows read, rejected lines) from a bare count (rows, malformed lines) and the lines a scan
    rejected: count + malformed lines; every rejected line once."""
    from pipeline.sources import merge_rejects

    n, malformed = counted
    return n + len(malformed), merge_rejects(malformed, scan_rejects)


def _event_accounting(con, table: str, counted: tuple[int, list]) -> tuple[dict, list]:
    total, rejects = counted  # rows read, every rejected line
    used, events_used = con.sql(
        f"SELECT count(DISTINCT row_id) FILTER (WHERE reason IS NULL), count(*) FILTER (WHERE reason IS NULL) FROM ev_{table}"
    ).fetchall()[0]  # source rows used; events used (a lab row can serve several admissions)
    q_rows = con.sql(f"SELECT row_id, reason FROM ev_{table} WHERE reason IS NOT NULL ORDER BY row_id, reason").fetchall()
    quarantine = [(r, None, why) for r, why in q_rows] + [(None, line, why) for line, why in rejects]
    acc = {
        "rows_read": total,
        "used": int(used),
        "quarantined": len(quarantine),
        "outside_window": total - int(used) - len(quarantine),
        "events_used": int(events_used),
    }
    reasons: dict[str, int] = {}
    for _, _, why in quarantine:
        reasons[why] = reasons.get(why, 0) + 1
    acc["quarantine_reasons"] = dict(sorted(reasons.items()))
    if acc["outside_window"] < 0:
        raise RuntimeError(f"{table}: accounting does not add up ({acc})")
    return acc, quarantine


def _manifest(src, cfg, cohort, accounting, files, vocab, excluded_era, filtered) -> dict:
    splits = {}
    for split in sorted(cohort["split"].unique()):
        part = cohort[cohort["split"] == split]
        n, pos = len(part), int(part["label"].sum())
        splits[split] = {"admissions": n, "patients": int(part["subject_id"].nunique()), "positives": pos, "label_rate": round(pos / n, 6) if n else None}
    hashes = {name: io.sha256_file(path) for name, path in sorted(files.items())}
    return {
        "feature_version": FEATURE_VERSION,
        "source": {"kind": src.kind, "location": src.description, "tables": {t: i.location for t, i in sorted(src.tables.items())}},
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
        "vocab": {"tokens": len(vocab.tokens), "context": len(vocab.context), "binned_items": len(vocab.bins), "text_items": len(vocab.text_items)},
        "sha256": hashes,
    }
