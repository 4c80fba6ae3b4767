"""Batch scoring of a census: features (or a MIMIC-III source) -> one risk row per admission.

Input is a features Parquet file / directory written by ``cli.py extract``, or a MIMIC-III
source extracted on the fly with the training vocabulary and bins (nothing refitted; the
de-identification key must be the training one for keys to match). A cohort file restricts
the source: a list of HADM_IDs (one per line, optional header) or a SQL condition on the
columns of ``sql/02_cohort.sql``. Features stream through in chunks (``data.iter_parquet``),
so memory is bounded by ``chunk_rows`` and ``batch_size``·S·K, and the output Parquet
(``predict.RISK_COLUMNS``) is written atomically.
"""

from __future__ import annotations

import logging
import re
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

import pyarrow as pa

from pipeline import io
from pipeline.predict import RISK_COLUMNS

log = logging.getLogger(__name__)

SPLIT_FILES = ("cohort", "train", "val", "test")  # files scored in a features directory (cohort alone if present)
OUTPUT_SCHEMA = pa.schema([("key", pa.string()), *((c, pa.float64()) for c in RISK_COLUMNS[1:6]),
                           ("refer", pa.bool_()), ("n_events", pa.int64()), ("no_events", pa.bool_()),
                           ("observed_hours", pa.float64()), ("before_prediction_time", pa.bool_())])
COHORT_COLUMNS = ("hadm_id", "subject_id", "admit_epoch", "pred_epoch", "dob_epoch", "disch_epoch",
                  "window_start_epoch", "age", "gender", "admission_type", "admission_location", "icu_system",
                  "label")  # columns a cohort condition may use (sql/02_cohort.sql)
_INT = re.compile(r"^\s*\d+\s*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COHORT_SQL_ERROR = re.compile(r"^cohort \(ADMISSIONS, PATIENTS\)(?: \(PostgreSQL\))?: (?:(\w+(?: \w+)? Error)\b)?")
_COLUMNS = re.compile(r"^\s*[\"']?\d+[\"']?(\s*[,;\t]\s*[\"']?[^,;\t]*[\"']?)+$")
_TOKEN = re.compile(r"^[\"']?\w+[\"']?\s*[,;]?$")


class ScoreError(ValueError):
    """Bad scoring input; the message names the file (and column or line)."""


@dataclass
class ScoreConfig:
    """Settings of one scoring run."""

    samples: int | None = 25  # Monte Carlo samples per component (None: the model's score_samples)
    batch_size: int = 128  # admissions per forward pass (memory grows with batch_size·S·K; 128: ~0.5 GB peak at 25x4)
    chunk_rows: int = 4096  # admissions read from Parquet at a time (each chunk is batched by length on its own)
    seed: int = 0  # torch seed of the weight draws (same seed, rows, chunk_rows and batch_size -> same scores)
    threads: int | None = None  # torch intra-op threads (None: torch's default)

    def __post_init__(self) -> None:
        for name in ("batch_size", "chunk_rows"):
            if getattr(self, name) < 1:
                raise ValueError(f"ScoreConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.samples is not None and self.samples < 1:
            raise ValueError(f"ScoreConfig.samples must be >= 1, got {self.samples}")


@dataclass
class ScoreSummary:
    """What a scoring run wrote."""

    out: Path  # the scores Parquet file
    admissions: int  # rows written
    referred: int  # rows with refer = True
    no_events: int  # rows whose admission had no events (scored on context alone)
    samples: int  # samples per component used
    components: int  # K of the model
    inputs: list[Path] = field(default_factory=list)  # feature files scored
    not_scored: int = 0  # HADM_IDs of an id-list cohort file with no score (absent, quarantined or excluded)
    before_prediction_time: int = 0  # rows whose data ended before the prediction time (partial window)


# ---------------------------------------------------------------------------- inputs


def read_cohort_file(path: Path | str) -> str:
    """SQL condition for ``extract(cohort_filter=...)`` from a cohort file.

    An id list (``_ids_of``) -> ``hadm_id IN (...)``; anything else is taken as a SQL condition
    on the cohort columns. ``#`` comment lines are ignored in both forms; a byte-order mark is
    ignored. A header with no ids is an empty census: an error, never "everyone".
    """
    return _read_cohort(Path(path))[0]


def _read_cohort(path: Path) -> tuple[str, list[int] | None]:
    """(SQL condition, HADM_IDs or None) of a cohort file, read and parsed once."""
    lines = _cohort_lines(path)
    ids = _ids_of(path, lines)
    if ids is not None:
        return f"hadm_id IN ({', '.join(str(i) for i in ids)})", ids
    condition = " ".join(ln for _, ln in lines)
    if ";" in condition:
        raise ScoreError(f"{path}: a cohort condition is one SQL expression (no ';'); columns: {list(COHORT_COLUMNS)}")
    return condition, None


def _ids_of(path: Path, lines: list[tuple[int, str]]) -> list[int] | None:
    """The sorted distinct HADM_IDs of an id-list cohort file, or None if it is a SQL condition;
    ``lines`` are its (line number, text) lines.

    An id list is one of: integers one per line (quotes and a trailing ``,``/``;`` allowed) or
    several per line separated by white space; or a table export whose header line names the
    columns (comma, tab or semicolon separated, one of them ``HADM_ID``), whose HADM_ID column is
    read. A line that does not fit is an error naming its number (never its contents).
    """
    column, sep = _header(lines[0][1])
    if column is not None:
        body = lines[1:]
        if not body:
            raise ScoreError(f"{path}: the cohort file has a HADM_ID header and no HADM_IDs (an empty census)")
        ids = []
        for i, ln in body:
            fields = [_unquote(f) for f in ln.split(sep)] if sep else [_unquote(ln)]
            if column >= len(fields) or not _INT.match(fields[column]):
                raise ScoreError(f"{path}: line {i} has no HADM_ID in column {column + 1} (the header's HADM_ID)")
            ids.append(int(fields[column]))
        return sorted(set(ids))
    parsed = [(i, _id_tokens(ln)) for i, ln in lines]
    good = [i for i, toks in parsed if toks is not None]
    if len(good) == len(parsed):
        return sorted({t for _, toks in parsed for t in toks})
    bad = [i for i, toks in parsed if toks is None]
    if all(_COLUMNS.match(ln) for i, ln in lines if i in bad):  # rows of numbers: a table export without header
        raise ScoreError(f"{path}: line {bad[0]} has several columns and the file has no header; add a first line "
                         "naming the columns (one of them HADM_ID)")
    single = all(_TOKEN.match(ln) for i, ln in lines if i in bad)  # a lone word, not SQL (no operator or bracket)
    if single and (len(good) > len(parsed) / 2 or (len(parsed) > 2 and bad == [parsed[0][0]])):
        # mostly ids (or ids under a stray first line): a typo, not a condition; the line is not echoed
        i = bad[0]
        raise ScoreError(f"{path}: line {i} is not a HADM_ID list (expected integers, one per line or separated "
                         "by spaces, optionally under a header naming the HADM_ID column)")
    return None


def _unquote(text: str) -> str:
    return text.strip().strip("\"'").strip()


def _header(line: str) -> tuple[int | None, str | None]:
    """(index of the HADM_ID column, separator) if ``line`` is a header naming HADM_ID, else (None, None)."""
    sep = next((c for c in (",", "\t", ";") if c in line), None)
    names = [_unquote(f) for f in line.split(sep)] if sep else [_unquote(line)]
    names = [n for n in names if n] if sep in (",", ";") and line.rstrip().endswith(sep) else names
    if not all(_IDENT.match(n) for n in names):
        return None, None
    lower = [n.lower() for n in names]
    return (lower.index("hadm_id"), sep) if "hadm_id" in lower else (None, None)


def _id_tokens(line: str) -> list[int] | None:
    """The integers of an id line (white-space separated, or one with quotes / a trailing , or ;), else None."""
    text = line.strip().rstrip(",;").strip()
    toks = [_unquote(t) for t in text.split()]
    if toks and all(_INT.match(t) for t in toks):
        return [int(t) for t in toks]
    return None


def _cohort_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, stripped text) of the non-blank, non-comment lines; error if there are none."""
    if not path.exists():
        raise ScoreError(f"{path}: cohort file not found")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ScoreError(f"{path}: the cohort file is not UTF-8 text (byte {exc.start})") from None
    lines = [(i + 1, ln.strip()) for i, ln in enumerate(text.splitlines())]
    lines = [(i, ln) for i, ln in lines if ln and not ln.startswith("#")]
    if not lines:
        raise ScoreError(f"{path}: empty cohort file (expected HADM_IDs, one per line, or a SQL condition)")
    return lines


def feature_files(data: Path | str) -> list[Path]:
    """The Parquet file itself, or a directory's ``cohort.parquet`` (else its train/val/test files)."""
    path = Path(data)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ScoreError(f"{path}: no such features file or directory")
    if (path / "cohort.parquet").exists():
        return [path / "cohort.parquet"]
    files = [path / f"{s}.parquet" for s in SPLIT_FILES[1:] if (path / f"{s}.parquet").exists()]
    if not files:
        raise ScoreError(f"{path}: no cohort.parquet or train/val/test.parquet in this directory")
    return files


def check_schema(path: Path) -> None:
    """Raise ``ScoreError`` naming the file and column unless it is a readable features file."""
    import pyarrow.parquet as pq

    from pipeline.data import REQUIRED

    try:
        schema = pq.read_schema(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ScoreError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [c for c in REQUIRED if c not in schema.names]
    if missing:
        raise ScoreError(f"{path}: missing column(s) {missing}; expected the features written by `cli.py extract`")
    checks = {"key": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
              "n_events": pa.types.is_integer,
              "context": lambda t: _is_list_of(t, pa.types.is_integer),
              "bag_hours": lambda t: _is_list_of(t, lambda v: pa.types.is_floating(v) or pa.types.is_integer(v)),
              "bags": lambda t: _is_list_of(t, lambda v: _is_list_of(v, pa.types.is_integer))}
    for name, ok in checks.items():
        typ = schema.field(name).type
        if not ok(typ):
            raise ScoreError(f"{path}: column {name!r} has type {typ}, expected {_EXPECTED[name]}")


_EXPECTED = {"key": "string", "n_events": "integer", "context": "list<int32>", "bag_hours": "list<float>",
             "bags": "list<list<int32>>"}


def _is_list_of(typ, inner) -> bool:
    return (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and inner(typ.value_type)


def extract_cohort(source: str | Path, manifest: dict, vocab: dict, out_dir: Path, cohort_filter: str = "TRUE",
                   schema: str = "mimiciii", as_of: float | None = None) -> Path:
    """Extract ``source`` with the training configuration and vocabulary; returns ``cohort.parquet``
    (``as_of``: see ``extract.extract``)."""
    from pipeline.extract import ExtractConfig, SplitMode, extract
    from pipeline.tokens import Vocab

    saved = dict((manifest or {}).get("config") or {})
    if not saved:
        raise ScoreError("the model's run has no features/manifest.json with the extraction settings; "
                         "extract the census with `cli.py extract` and score it with --data")
    known = {f.name for f in fields(ExtractConfig)}
    if set(saved) - known:
        log.warning("extraction settings %s of the training run are unknown to this version; ignored",
                    sorted(set(saved) - known))
    cfg = ExtractConfig(**{k: v for k, v in saved.items() if k in known})
    cfg.split = SplitMode(cfg.split)
    result = extract(source, out_dir, cfg, vocab=Vocab.from_json(vocab), schema=schema, cohort_filter=cohort_filter,
                     as_of=as_of)
    return result.files["cohort"]


# ---------------------------------------------------------------------------- scoring


def score_files(run, files: list[Path], out: Path | str, cfg: ScoreConfig) -> ScoreSummary:
    """Score Parquet feature ``files`` with a loaded ``RunModel`` chunk by chunk into ``out``."""
    import pyarrow.parquet as pq
    import torch

    from pipeline import predict

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    samples = int(cfg.samples or run.info.get("score_samples") or 25)
    refer = run.info.get("refer_threshold")
    chosen_at = run.info.get("score_samples")
    if chosen_at and int(chosen_at) != samples:
        log.warning("the refer threshold was chosen on validation with %d samples per component; scoring with %d "
                    "changes the mutual information's Monte Carlo noise, so the referred fraction can differ",
                    int(chosen_at), samples)
    if refer is None:
        raise ScoreError("the model has no refer threshold (best.pt of an unfinished training run)")
    sizes = (len(run.vocab["tokens"]), len(run.vocab["context"]))
    for f in files:
        check_schema(f)
        _check_vocab_file(f, run.vocab)
    total = referred = empty = early = 0
    out = Path(out)
    with io.atomic_path(out) as tmp, torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        with pq.ParquetWriter(tmp, OUTPUT_SCHEMA, compression="zstd") as writer:
            for f in files:
                for fs in _chunks(f, cfg.chunk_rows):
                    fs.check_vocab(*sizes)
                    table = predict.score_features(run.model, fs, samples, refer, cfg.batch_size,
                                                   run.info.get("max_bags"), run.info.get("max_tokens"))
                    writer.write_table(pa.Table.from_pandas(table, schema=OUTPUT_SCHEMA, preserve_index=False))
                    total += len(table)
                    referred += int(table["refer"].sum())
                    empty += int(table["no_events"].sum())
                    early += int(table["before_prediction_time"].sum())
    return ScoreSummary(out, total, referred, empty, samples, predict.components_of(run.model), list(files),
                        before_prediction_time=early)


def _chunks(path: Path, chunk_rows: int):
    """``data.iter_parquet`` with Arrow read errors turned into ``ScoreError`` naming the file."""
    from pipeline import data

    it = data.iter_parquet(path, chunk_rows)
    while True:
        try:
            fs = next(it)
        except StopIteration:
            return
        except (pa.ArrowInvalid, OSError) as exc:
            raise ScoreError(f"{path}: cannot read the Parquet data ({exc})") from None
        yield fs


def _check_vocab_file(path: Path, vocab: dict) -> None:
    """A vocab.json next to the features must be the model's (else ids mean other tokens)."""
    vf = path.parent / "vocab.json"
    if vf.exists() and io.read_json(vf) != vocab:
        raise ScoreError(f"{path}: the features were extracted with {vf}, which is not the model's vocabulary; "
                         "re-extract with --source (the training vocabulary) instead")


def score(model_uri: str, out: Path | str, *, data: Path | str | None = None, source: str | None = None,
          cohort: Path | str | None = None, cfg: ScoreConfig | None = None, schema: str = "mimiciii",
          as_of: str | None = None) -> ScoreSummary:
    """Score ``data`` (features) or ``source`` (MIMIC-III, optionally restricted by ``cohort``) into ``out``.

    ``as_of`` (with ``source``): when the source's data ends, a timestamp on its clock
    ("YYYY-MM-DD HH:MM[:SS]"); default the newest ADMITTIME or DISCHTIME in ADMISSIONS. Open
    admissions whose prediction time is later are scored on the hours observed and flagged.
    """
    from pipeline.evaluate import load_run_model

    cfg = cfg or ScoreConfig()
    if (data is None) == (source is None):
        raise ScoreError("give exactly one of --data (features) or --source (MIMIC-III)")
    if cohort is not None and source is None:
        raise ScoreError("--cohort restricts a --source extraction; with --data, filter the features instead")
    if as_of is not None and source is None:
        raise ScoreError("--as-of applies to a --source extraction; features record their window already")
    as_of_epoch = parse_as_of(as_of) if as_of is not None else None
    with tempfile.TemporaryDirectory(prefix="score-") as tmp:
        run = load_run_model(model_uri, Path(tmp) / "model")
        if data is not None:
            return score_files(run, feature_files(data), out, cfg)
        condition, ids = _read_cohort(Path(cohort)) if cohort is not None else ("TRUE", None)
        from pipeline.sources import SourceError

        try:
            path = extract_cohort(source, run.manifest, run.vocab, Path(tmp) / "features", condition, schema,
                                  as_of_epoch)
        except SourceError as exc:
            m = _COHORT_SQL_ERROR.match(str(exc))
            if cohort is None or not m:
                raise
            # the database's message can quote the condition's values (HADM_IDs): only its kind is shown
            kind = m.group(1) or "rejected by the database"
            raise ScoreError(f"{cohort}: the cohort condition could not be run ({kind}); it must be one SQL "
                             f"expression over the columns {list(COHORT_COLUMNS)}, or the file a list of HADM_IDs; "
                             "the database's message is not shown (it can quote the file's values)") from None
        summary = score_files(run, [path], out, cfg)
        if ids:
            summary.not_scored = _not_scored(ids, path)
            if summary.not_scored:
                log.warning("%d of the %d HADM_IDs of %s have no score: not in ADMISSIONS, quarantined, or outside "
                            "the cohort criteria (the extraction log counts each reason)", summary.not_scored,
                            len(ids), cohort)
        return summary


def parse_as_of(text: str) -> float:
    """Epoch seconds of a naive timestamp "YYYY-MM-DD HH:MM[:SS]" (the source's clock, as its tables)."""
    from datetime import datetime, timezone

    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=timezone.utc).timestamp()
        except ValueError:
            continue
    raise ScoreError("--as-of must be a timestamp YYYY-MM-DD HH:MM[:SS] on the source's clock")


def _not_scored(ids: list[int], cohort_parquet: Path) -> int:
    """How many of the requested HADM_IDs are missing from the extracted cohort (compared by pseudonym)."""
    import pyarrow.parquet as pq

    from pipeline import deid

    scored = set(pq.read_table(cohort_parquet, columns=["key"]).column("key").to_pylist())
    return sum(k not in scored for k in deid.pseudonyms(deid.load_key(), ids))
