"""Extraction from a MEDS dataset: labels (files, or an ACES task) -> de-identified, time-bagged token sequences
in the features format (``contracts.MEDS_FEATURES``), so that train, evaluate, laplace, score and serve read
them unchanged.

Flow (docs/meds.md):
  1. the layout detected and every file checked against ``meds``' schemas (``layout``);
  2. the labels read (``--labels``) or made by an ACES config (``--task``; neither: the shipped config that
     fits ``dataset.json``), cleaned (``labels.clean``: unusable rows quarantined), split by
     ``subject_splits.parquet`` (train / tuning / held_out -> train / val / test) or by subject hash;
  3. each label pseudonymized (HMAC of (subject_id, prediction_time)), its events within [T - lookback, T]
     mapped onto the extraction's event staging shape (sql/meds/10_events_window) and handed to the MIMIC
     extraction's own token, vocabulary and bag SQL (sql/30-45, ``data.mimic.extraction.tokens``): tokens from ``code``
     (bins per code and closed text vocabularies fitted on train only), one OOV token per code group;
  4. written as the MIMIC extraction writes (``data.mimic.extraction.flow``'s assembly and writers), with the labels
     (MEDS label schema) and the pseudonym link in ``_private/`` for the data owner.

A census (``score --source MEDS_DIR``: ``vocab``, a trained model's vocabulary) replaces step 2 by the census's
prediction times (``census``: a times file, or a task without its label window) and reuses the vocabulary, its
code groups and context tokens in steps 3-4: nothing is fitted, every time goes to ``cohort.parquet``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa

from pipeline.core import fileio
from pipeline.core.contracts import FEATURE_VERSION, MEDS_FEATURES
from pipeline.core.errors import naming
from pipeline.core.privacy import check_private
from pipeline.data.meds import context as ctx_mod
from pipeline.data.meds import labels as labels_mod
from pipeline.data.meds import medsdev
from pipeline.data.meds.config import MedsConfig, MedsSplit
from pipeline.data.meds.layout import MedsError, MedsLayout, data_relation, detect, validate
from pipeline.data.mimic import deid
from pipeline.data.mimic.extraction import queries, tokens
from pipeline.data.mimic.extraction.config import ExtractConfig, ExtractResult, SplitMode
from pipeline.data.mimic.extraction.flow import (
    _assemble,
    _connect,
    _remove_empty,
    _stage,
    _write_outputs,
    write_parquet,
)
from pipeline.data.mimic.sources.tables import Release
from pipeline.data.task import from_path, parse_outcome

log = logging.getLogger(__name__)

SPLIT_NAMES = {"train": "train", "tuning": "val", "held_out": "test"}  # MEDS split -> the features' split
CATCH_ALL = "meds"  # the token source of codes without a group, or of a group in too few training subjects
EVENTS_WINDOW = "meds/10_events_window"
CONTEXT = "meds/11_context"
QUARANTINE = pa.schema([("file", pa.string()), ("row", pa.int64()), ("reason", pa.string())])


def pseudonym(key: bytes, subject_id: int, prediction_time_us: int) -> str:
    """HMAC-SHA256(key, (subject_id, prediction_time)) truncated as ``deid.pseudonym``'s (never the raw values)."""
    msg = f"meds:{int(subject_id)}:{int(prediction_time_us)}".encode("ascii")
    return hmac.new(key, msg, hashlib.sha256).hexdigest()[:deid.PSEUDONYM_HEX]


def extract_meds(source: str | Path, out_dir: str | Path, config: MedsConfig | None = None, *,
                 labels: str | Path | None = None, task: str | Path | None = None,
                 vocab: tokens.Vocab | None = None, times: str | Path | None = None,
                 predicates: str | Path | None = None, outcome: str | None = None) -> ExtractResult:
    """Extract the MEDS dataset ``source`` into ``out_dir`` (module docstring); ``labels`` (MEDS label files)
    or ``task`` (an ACES config, or ``meds-dev:<task>``: a MEDS-DEV task by name, ``medsdev``), at most one;
    neither: the shipped config for the dataset's codes. ``predicates``: a predicates file for the task (a MEDS-DEV
    task's, instead of the package's for the dataset ``dataset.json`` names). ``outcome``: the label's outcome in
    words, "NAME" or "SINGULAR|PLURAL" (``data.task.parse_outcome``; default: the task's own words, the config's
    file name). The manifest records the task (``data.task.TaskWords``).

    With ``vocab`` (scoring a census with a trained model's vocabulary): nothing is refitted, no label is read, and
    every prediction time goes to one file, ``cohort.parquet``: those of ``times`` (a file) or of ``task`` (else
    the shipped config) without its label window (``census``); ``ExtractResult.excluded`` lists the times that
    cannot be scored and why."""
    cfg = config or MedsConfig()
    if labels is not None and task is not None:
        raise MedsError("give labels (MEDS label files) or task (an ACES config), not both")
    if vocab is None and times is not None:
        raise MedsError("prediction times without labels (times) are a census: give the model's vocabulary (vocab)")
    if vocab is not None and labels is not None:
        raise MedsError("a census (vocab) is scored at prediction times (times) or a task's (task), not labels")
    words = parse_outcome(outcome)  # before anything is created
    if predicates is not None and task is None:
        raise naming(MedsError("`predicates` applies to a task (`task`: an ACES config or meds-dev:TASK)"),
                     "predicates", "task")
    layout = detect(source)
    if medsdev.is_medsdev(task):
        task = medsdev.resolve(task, layout.dataset.get("dataset_name"), predicates, str(layout.root / "metadata" /
                                                                                          "dataset.json"))
    out = Path(out_dir)
    check_private(out / "_private", what="the data owner's link file")
    made = [p for p in (out, *out.parents) if not p.exists()]
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".tmp"
    tmp.mkdir(exist_ok=True)
    con = result = None
    try:
        con = _connect(cfg, tmp)
        with _stage("meds: validate"):
            rows = validate(layout, con)
        result = _run(layout, rows, con, out, cfg, labels, task, vocab, times, (predicates, words))
    finally:
        if con is not None:
            con.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if result is None:
            _remove_empty(made)
    return result


def _labels(layout: MedsLayout, labels, task, predicates=None, words=None) -> tuple[pd.DataFrame, list[str], dict]:
    """(label rows, their files' names, what the manifest records of the task: its source and its words)."""
    source = f"{Release.meds.value}:{layout.name}"
    if labels is not None:
        frame, names = labels_mod.read_label_files(labels)
        said = from_path(labels, source, f"MEDS label files in {Path(labels).name}", words)
        return frame, names, {"labels": str(Path(labels).resolve()), "files": len(names), **said.to_json()}
    if isinstance(task, medsdev.MedsDevTask):
        path, predicates, extra = task.config, task.predicates, task.record()
        said = task.words(source, words)
    else:
        path = Path(task) if task is not None else labels_mod.shipped_task(layout)
        extra = {"predicates": str(Path(predicates).resolve())} if predicates is not None else {}
        said = from_path(path, source, f"{'the shipped ' if task is None else ''}ACES config {path.name}", words)
    table = labels_mod.run_task(path, layout, predicates=predicates)
    return (labels_mod.labels_frame(table), [f"{path} (ACES output)"],
            {"task": str(path.resolve()), "shipped": task is None, "sha256": fileio.sha256_file(path), **extra,
             **said.to_json()})


def _splits(layout: MedsLayout, cfg: MedsConfig) -> dict[int, str] | None:
    """subject -> MEDS split name of ``subject_splits.parquet`` (None: split by subject hash instead)."""
    import pyarrow.parquet as pq

    if cfg.split is MedsSplit.random:
        return None
    if layout.splits is None:
        log.warning("%s has no metadata/subject_splits.parquet: subjects are split 80/10/10 by hash (--split random)",
                    layout.root)
        return None
    table = pq.read_table(layout.splits, columns=["subject_id", "split"])
    frame = table.to_pandas()
    if frame["subject_id"].duplicated().any():
        raise MedsError(f"{layout.splits}: a subject is listed in more than one row")
    return dict(zip(frame["subject_id"].astype("int64"), frame["split"].astype(str)))


def _assign(cohort: pd.DataFrame, split_of: dict[int, str] | None, cfg: MedsConfig) -> pd.Series:
    if split_of is None:
        from pipeline.data.mimic.extraction.cohort import assign_splits

        hashed = ExtractConfig(split=SplitMode.random, split_seed=cfg.split_seed, train_fraction=cfg.train_fraction,
                               val_fraction=cfg.val_fraction)
        return assign_splits(cohort, hashed)
    return cohort["subject_id"].map(lambda s: SPLIT_NAMES.get(split_of[int(s)], "excluded"))


def _labelled(layout: MedsLayout, cfg: MedsConfig, labels, task, said=(None, None)) -> tuple[pd.DataFrame, dict,
                                                                                                dict]:
    """(the labels to extract: subject_id, prediction_time, label, split; their accounting; the task's record)."""
    with _stage("meds: labels"):
        frame, names, task_info = _labels(layout, labels, task, *said)
    split_of = _splits(layout, cfg)
    kept, quarantine = labels_mod.clean(frame, names, set(layout.subjects.tolist()), split_of)
    cohort = kept.rename(columns={"boolean_value": "label"})[["subject_id", "prediction_time", "label", "file", "row"]]
    cohort["label"] = cohort["label"].astype(bool).astype("int8")
    cohort["split"] = _assign(cohort, split_of, cfg)
    other = cohort["split"] == "excluded"
    quarantine += [(names[int(f)], int(r), f"split {split_of[int(s)]!r} is not train, tuning or held_out")
                   for f, r, s in zip(cohort.loc[other, "file"], cohort.loc[other, "row"],
                                      cohort.loc[other, "subject_id"])]
    cohort = cohort[~other]
    if cohort.empty:
        raise MedsError(f"{layout.root}: no usable label: {len(frame)} label rows, {len(quarantine)} "
                        "quarantined (see the reasons with --labels files fixed, or another task)")
    return cohort, {"rows": len(frame), "quarantine": quarantine}, task_info


def _census(layout: MedsLayout, task, times, predicates=None) -> tuple[pd.DataFrame, dict, dict]:
    """(the census's prediction times to score, split ``cohort``, no label; their accounting; their record)."""
    from pipeline.data.meds import census

    with _stage("meds: census times"):
        cohort, skipped, info = census.prediction_times(layout, task, times, predicates)
    if cohort.empty:
        raise MedsError(f"{layout.root}: no prediction time to score: {info['rows']} given, none usable "
                        f"({', '.join(f'{k} {v}' for k, v in census.counts(skipped).items() if v) or 'none given'})")
    cohort["label"] = None
    cohort["split"] = "cohort"
    return cohort, {"rows": info["rows"], "skipped": skipped}, info


def _run(layout: MedsLayout, rows: dict, con, out: Path, cfg: MedsConfig, labels, task,
         vocab: tokens.Vocab | None = None, times=None, said=(None, None)) -> ExtractResult:
    data = data_relation(layout)
    scoring = vocab is not None
    cohort, read, task_info = (_census(layout, task, times, said[0]) if scoring else
                               _labelled(layout, cfg, labels, task, said))
    key = deid.load_key()
    cohort["key"] = [pseudonym(key, s, t) for s, t in zip(cohort["subject_id"], cohort["prediction_time"])]
    cohort = cohort.sort_values("key").reset_index(drop=True)
    cohort["adm_idx"] = range(len(cohort))
    cohort["sample_id"] = cohort["adm_idx"]
    _register(con, "labels_t", pa.table({"sample_id": pa.array(cohort["sample_id"], pa.int64()),
                                         "subject_id": pa.array(cohort["subject_id"], pa.int64()),
                                         "pred_us": pa.array(cohort["prediction_time"], pa.int64())}))
    _register(con, "adm", pa.table({"hadm_id": pa.array(cohort["sample_id"], pa.int64()),
                                    "subject_id": pa.array(cohort["subject_id"], pa.int64()),
                                    "adm_idx": pa.array(cohort["adm_idx"], pa.int64()),
                                    "split": pa.array(cohort["split"], pa.string())}))

    with _stage("meds: events in windows"):
        con.execute(f"CREATE OR REPLACE TEMP TABLE ev_raw AS "
                    f"{queries.render(EVENTS_WINDOW, data=data, lookback_days=float(cfg.lookback_days))}")
    with _stage("meds: accounting"):
        accounting = _data_accounting(con, layout, rows)
    sources = _vocab_groups(con, vocab) if scoring else _fit_groups(con, cfg.min_patients)
    con.execute("CREATE OR REPLACE TEMP VIEW ev_meds AS SELECT e.hadm_id, "
                f"CASE WHEN g.grp IS NOT NULL THEN e.grp ELSE '{CATCH_ALL}' END AS source, e.item, e.valuenum, "
                "e.valuetext, e.t_hours, e.reason FROM ev_raw e LEFT JOIN groups_t g ON g.grp = e.grp")
    con.execute(f"CREATE OR REPLACE TEMP VIEW events AS {queries.events_union(['ev_meds'])}")

    with _stage("meds: context rows"):
        birth, static = _context_rows(con, data)
    cohort["age"] = ctx_mod.ages(cohort["subject_id"].map(birth), cohort["prediction_time"]).astype("float32")
    raw = ctx_mod.raw_tokens(cohort, static)
    if not scoring:
        with _stage("meds: fit vocabulary"):
            vocab = tokens.fit(con, cfg.n_bins, cfg.min_patients, cfg.max_text_values, cfg.text_max_len,
                               sources=sources)
            vocab.context = ctx_mod.fit(raw, cohort["subject_id"], cohort["split"].eq("train"), cfg.min_patients)
    with _stage("meds: tokenize and bag"):
        tokens.register(con, vocab)
        tokens.tokenize(con, vocab, cfg.text_max_len)
        bags = tokens.bag(con, 0.0, cfg.hourly_hours, cfg.values)  # the time origin is the prediction time
    data_quarantine = con.sql("SELECT file, rn, reason FROM ev_raw WHERE reason IS NOT NULL ORDER BY file, rn"
                              ).fetchall()
    con.close()

    cohort["source"] = f"meds:{layout.name}"
    cohort["observed_hours"] = 0.0
    cohort["before_prediction_time"] = False
    features = _assemble(cohort, None, vocab, bags, table=MEDS_FEATURES, context=ctx_mod.encode(raw, vocab.context))
    files = _write_outputs(out, features, vocab, {}, scoring)
    files["quarantine/data"] = _quarantine(out / "quarantine" / "data.parquet", [
        (layout.rel(layout.data_files[f]), r, why) for f, r, why in data_quarantine])
    if scoring:
        from pipeline.data.meds import census

        accounting["census"] = {"rows_read": read["rows"], "scored": len(cohort), "not_scored": len(read["skipped"]),
                                "not_scored_by": census.counts(read["skipped"])}
    else:
        files["quarantine/labels"] = _quarantine(out / "quarantine" / "labels.parquet", read["quarantine"])
        accounting["labels"] = _label_accounting(read["rows"], len(cohort), read["quarantine"])
    link = _write_private(out / "_private", cohort, labels=not scoring)
    manifest = _manifest(layout, cfg, cohort, accounting, files, vocab, task_info)
    fileio.write_json(out / "manifest.json", manifest)
    files["manifest"] = out / "manifest.json"
    return ExtractResult(out, manifest, link, files, read["skipped"] if scoring else None)


def _register(con, name: str, table: pa.Table) -> None:
    con.register(f"{name}_arrow", table)
    con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {name}_arrow")
    con.unregister(f"{name}_arrow")


def _fit_groups(con, min_patients: int) -> list[str]:
    """The code groups that become token sources: those of at least ``min_patients`` training subjects (the
    rest, and codes without a group, share ``CATCH_ALL``); the list of sources, each with an OOV token."""
    groups = [g for (g,) in con.sql(
        "SELECT e.grp FROM ev_raw e JOIN adm a ON a.hadm_id = e.hadm_id WHERE e.reason IS NULL AND a.split = 'train' "
        f"AND e.grp IS NOT NULL GROUP BY e.grp HAVING count(DISTINCT a.subject_id) >= {int(min_patients)} "
        "ORDER BY e.grp").fetchall() if g != CATCH_ALL]
    _register(con, "groups_t", pa.table({"grp": pa.array(groups, pa.string())}))
    return groups + [CATCH_ALL]


def _vocab_groups(con, vocab: tokens.Vocab) -> list[str]:
    """A trained vocabulary's token sources (its OOV tokens, in order) registered as the code groups (a census)."""
    sources = [t[:-len(":<oov>")] for t in vocab.tokens if t.endswith(":<oov>")]
    _register(con, "groups_t", pa.table({"grp": pa.array([s for s in sources if s != CATCH_ALL], pa.string())}))
    return sources


def _context_rows(con, data: str) -> tuple[dict[int, float], dict[int, list[str]]]:
    """subject -> first MEDS_BIRTH (epoch us) and subject -> its static codes (sorted)."""
    birth: dict[int, float] = {}
    static: dict[int, list[str]] = {}
    for subject, birth_us, code in con.sql(queries.render(CONTEXT, data=data)).fetchall():
        if birth_us is not None:
            birth[int(subject)] = float(birth_us)
        if code is not None:
            static.setdefault(int(subject), []).append(code)
    return birth, static


def _data_accounting(con, layout: MedsLayout, rows: dict) -> dict:
    read, static = int(sum(rows.values())), layout.static_rows
    quarantined, events_used = con.sql(
        "SELECT count(*) FILTER (WHERE reason IS NOT NULL), count(*) FILTER (WHERE reason IS NULL) FROM ev_raw"
    ).fetchall()[0]
    # the source rows used (an event in several labels' windows is one row): counted shard by shard, so that the
    # distinct count's hash table holds one shard's rows (one over every shard's ran out of memory at full scale)
    used = sum(con.sql(f"SELECT count(DISTINCT rn) FROM ev_raw WHERE file = {i} AND reason IS NULL").fetchall()[0][0]
               for i in range(len(layout.data_files)))
    acc = {"rows_read": read, "static_rows": static, "used": int(used), "quarantined": int(quarantined),
           "outside_window": read - static - int(used) - int(quarantined), "events_used": int(events_used)}
    if acc["outside_window"] < 0:
        raise RuntimeError(f"MEDS data: accounting does not add up ({acc})")
    return {"data": acc}


def _label_accounting(read: int, used: int, quarantine: list) -> dict:
    reasons: dict[str, int] = {}
    for _, _, why in quarantine:
        reasons[why] = reasons.get(why, 0) + 1
    return {"rows_read": read, "used": used, "quarantined": len(quarantine),
            "quarantine_reasons": dict(sorted(reasons.items()))}


def _quarantine(path: Path, rows: list[tuple[str, int, str]]) -> Path:
    table = pa.table({"file": pa.array([r[0] for r in rows], pa.string()),
                      "row": pa.array([r[1] for r in rows], pa.int64()),
                      "reason": pa.array([r[2] for r in rows], pa.string())}, schema=QUARANTINE)
    return write_parquet(table, path)


def _write_private(private: Path, cohort: pd.DataFrame, labels: bool = True) -> Path:
    """The data owner's files (directory 0700, files 0600): link.parquet (key -> subject_id, prediction_time)
    and, with ``labels``, labels/labels.parquet (the labels used, in the MEDS label schema)."""
    import pyarrow.parquet as pq

    private.mkdir(parents=True, exist_ok=True)
    private.chmod(0o700)
    if labels:
        (private / "labels").mkdir(exist_ok=True)
        (private / "labels").chmod(0o700)
        labels_mod.write_labels(cohort, private / "labels" / "labels.parquet")
    link = private / "link.parquet"
    table = pa.table({"key": pa.array(cohort["key"], pa.string()),
                      "subject_id": pa.array(cohort["subject_id"], pa.int64()),
                      "prediction_time": pa.array(cohort["prediction_time"], pa.int64()).cast(pa.timestamp("us"))})
    with fileio.atomic_path(link, mode=0o600) as tmp:
        pq.write_table(table.sort_by("key"), tmp)
    return link


def _manifest(layout: MedsLayout, cfg: MedsConfig, cohort: pd.DataFrame, accounting: dict, files: dict,
              vocab: tokens.Vocab, task_info: dict) -> dict:
    """manifest.json; a census (split ``cohort``, no label) records no positives."""
    def counts(part: pd.DataFrame) -> dict:
        n = len(part)
        pos = None if part["label"].isna().all() else int(part["label"].sum())
        return {"admissions": n, "positives": pos, "label_rate": round(pos / n, 6) if n and pos is not None else None}

    splits = {split: {**counts(part), "patients": int(part["subject_id"].nunique())}
              for split, part in sorted(cohort.groupby("split"), key=lambda kv: kv[0])}
    dataset = {k: layout.dataset[k] for k in ("dataset_name", "dataset_version", "etl_name", "etl_version",
                                              "meds_version") if k in layout.dataset}
    return {
        "feature_version": FEATURE_VERSION,
        "release": f"{Release.meds.value}:{layout.name}",
        "time_origin": "prediction_time",
        "source": {"kind": "meds", "location": str(layout.root.resolve()), "dataset": dataset,
                   "shards": len(layout.data_files), "extension_columns": list(layout.extensions)},
        "task": task_info,
        "config": cfg.to_json(),
        "tables": accounting,
        "cohort": {**counts(cohort), "subjects": int(cohort["subject_id"].nunique())},
        "splits": splits,
        "vocab": {"tokens": len(vocab.tokens), "context": len(vocab.context), "binned_items": len(vocab.bins),
                  "text_items": len(vocab.text_items), "sources": sum(t.endswith(":<oov>") for t in vocab.tokens)},
        "sha256": {name: fileio.sha256_file(path) for name, path in sorted(files.items())},
    }
