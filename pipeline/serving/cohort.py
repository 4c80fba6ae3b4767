"""Census cohort files for ``score --source``: a list of HADM_IDs, or a SQL condition on the cohort.

An id list is one id per line, ids separated by white space, or a table export whose header
names a HADM_ID column; anything else is one SQL condition over ``contracts.COHORT_COLUMNS``.
A line that does not fit is an error naming its number, never its contents (it may hold ids).
Who is scored today cannot depend on what happens after the prediction time: the condition is run
on a projection of the census columns only (sql/02_cohort.sql), so no form of it reaches an
outcome; one that names an outcome column (``contracts.OUTCOME_COLUMNS``) is refused with one line
saying so, and one that holds a subquery (which could read another table) is refused too.
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.core.contracts import COHORT_COLUMNS, OUTCOME_COLUMNS
from pipeline.core.errors import PipelineError


class CohortError(PipelineError, ValueError):
    """A cohort file that cannot be read as an id list or a condition; names the file and line."""


_INT = re.compile(r"^\s*\d+\s*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COLUMNS = re.compile(r"^\s*[\"']?\d+[\"']?(\s*[,;\t]\s*[\"']?[^,;\t]*[\"']?)+$")
_TOKEN = re.compile(r"^[\"']?\w+[\"']?\s*[,;]?$")


def read_cohort_file(path: Path | str) -> str:
    """SQL condition for ``extract(cohort_filter=...)`` from a cohort file.

    An id list (``_ids_of``) -> ``hadm_id IN (...)``; anything else is taken as a SQL condition
    on the cohort columns. ``#`` comment lines are ignored in both forms; a byte-order mark is
    ignored. A header with no ids is an empty census: an error, never "everyone".
    """
    return read_cohort(Path(path))[0]


def read_cohort(path: Path) -> tuple[str, list[int] | None]:
    """(SQL condition, HADM_IDs or None) of a cohort file, read and parsed once."""
    lines = _cohort_lines(path)
    ids = _ids_of(path, lines)
    if ids is not None:
        return f"hadm_id IN ({', '.join(str(i) for i in ids)})", ids
    condition = " ".join(ln for _, ln in lines)
    if ";" in condition:
        raise CohortError(f"{path}: a cohort condition is one SQL expression (no ';'); columns: {list(COHORT_COLUMNS)}")
    names, query = _tokens(condition)
    outcome = sorted(set(names) & set(OUTCOME_COLUMNS))
    if outcome:
        raise CohortError(f"{path}: the cohort condition uses the outcome column(s) {outcome}, known only after the "
                          f"prediction time; a census is chosen by the columns {list(COHORT_COLUMNS)}")
    if query:
        raise CohortError(f"{path}: the cohort condition holds a subquery ({query.upper()}); it is one expression "
                          f"over the columns {list(COHORT_COLUMNS)}")
    return condition, None


_QUERY_WORDS = ("SELECT", "FROM", "WITH", "TABLE")  # sqlglot token types that start or name a subquery


def column_names(condition: str) -> list[str]:
    """The lower-cased names (bare or quoted identifiers) in a SQL condition, strings and comments
    excluded; [] when the text does not tokenize (the database then reports it)."""
    return _tokens(condition)[0]


def _tokens(condition: str) -> tuple[list[str], str | None]:
    """(the lower-cased names of ``column_names``, the first subquery keyword or None) of a condition."""
    from sqlglot.dialects.duckdb import DuckDB
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = DuckDB().tokenize(condition)
    except TokenError:
        return [], None
    names = [t.text.lower() for t in tokens if t.token_type in (TokenType.VAR, TokenType.IDENTIFIER)]
    query = next((t.text for t in tokens if t.token_type.name in _QUERY_WORDS), None)
    return names, query


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
            raise CohortError(f"{path}: the cohort file has a HADM_ID header and no HADM_IDs (an empty census)")
        ids = []
        for i, ln in body:
            fields = [_unquote(f) for f in ln.split(sep)] if sep else [_unquote(ln)]
            if column >= len(fields) or not _INT.match(fields[column]):
                raise CohortError(f"{path}: line {i} has no HADM_ID in column {column + 1} (the header's HADM_ID)")
            ids.append(int(fields[column]))
        return sorted(set(ids))
    parsed = [(i, _id_tokens(ln)) for i, ln in lines]
    good = [i for i, toks in parsed if toks is not None]
    if len(good) == len(parsed):
        return sorted({t for _, toks in parsed for t in toks})
    bad = [i for i, toks in parsed if toks is None]
    if all(_COLUMNS.match(ln) for i, ln in lines if i in bad):  # rows of numbers: a table export without header
        raise CohortError(f"{path}: line {bad[0]} has several columns and the file has no header; add a first line "
                         "naming the columns (one of them HADM_ID)")
    single = all(_TOKEN.match(ln) for i, ln in lines if i in bad)  # a lone word, not SQL (no operator or bracket)
    if single and (len(good) > len(parsed) / 2 or (len(parsed) > 2 and bad == [parsed[0][0]])):
        # mostly ids (or ids under a stray first line): a typo, not a condition; the line is not echoed
        i = bad[0]
        raise CohortError(f"{path}: line {i} is not a HADM_ID list (expected integers, one per line or separated "
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
        raise CohortError(f"{path}: cohort file not found")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CohortError(f"{path}: the cohort file is not UTF-8 text (byte {exc.start})") from None
    lines = [(i + 1, ln.strip()) for i, ln in enumerate(text.splitlines())]
    lines = [(i, ln) for i, ln in lines if ln and not ln.startswith("#")]
    if not lines:
        raise CohortError(f"{path}: empty cohort file (expected HADM_IDs, one per line, or a SQL condition)")
    return lines


# ---------------------------------------------------------------------------- admissions without a score

ABSENT = "absent"
QUARANTINED = "quarantined"
OUTSIDE = "outside the cohort criteria"
BEFORE_T = "died or discharged before T"
CATEGORIES = (ABSENT, QUARANTINED, OUTSIDE, BEFORE_T)  # the reasons counted on the console, in this order
_BEFORE_T = {"died before prediction time": "died before the prediction time",
             "discharged before prediction time": "discharged before the prediction time"}


def reason_of(exclusion: str) -> tuple[str, str]:
    """(category, the reason written to unscored.csv) of an ``exclusion`` of sql/01_admissions_classified.sql."""
    if exclusion.startswith("quarantine:"):
        return QUARANTINED, f"quarantined: {exclusion.removeprefix('quarantine:')}"
    if exclusion in _BEFORE_T:
        return BEFORE_T, _BEFORE_T[exclusion]
    return OUTSIDE, f"outside the cohort criteria: {exclusion}"


def unscored(excluded, scored: set[int], requested: list[int] | None = None, condition: str | None = None):
    """The admissions a census asked for that got no score: DataFrame (hadm_id, reason, category),
    sorted by HADM_ID (raw ids: for the data owner's ``_private/unscored.csv`` only).

    ``excluded`` are the source's ADMISSIONS rows outside the cohort (``ExtractResult.excluded``:
    the census columns and ``exclusion``); ``scored`` the HADM_IDs scored. An id list (``requested``):
    each id without a score, absent where ADMISSIONS has no such row. A SQL ``condition``: the
    excluded admissions it selects (it is run on their columns in a local DuckDB; a quarantined row
    whose columns are missing is not selected). Neither: every excluded admission with a HADM_ID.
    """
    import pandas as pd

    rows = excluded[excluded["hadm_id"].notna()].drop_duplicates("hadm_id").copy()
    rows["hadm_id"] = rows["hadm_id"].astype("int64")
    if condition is not None and requested is None:
        rows = _selected(rows, condition)
    reasons = dict(zip(rows["hadm_id"], rows["exclusion"]))
    ids = sorted(set(requested) - scored) if requested is not None else sorted(set(reasons) - scored)
    out = []
    for h in ids:
        category, reason = reason_of(reasons[h]) if h in reasons else (ABSENT, "absent: no such HADM_ID in ADMISSIONS")
        out.append((h, reason, category))
    return pd.DataFrame(out, columns=["hadm_id", "reason", "category"])


def _selected(rows, condition: str):
    """The rows of ``rows`` that the census condition selects (run on their census columns only)."""
    import duckdb

    con = duckdb.connect()
    try:
        con.register("census", rows[list(COHORT_COLUMNS)])
        keep = con.execute(f"SELECT hadm_id FROM census WHERE ({condition})").fetchnumpy()["hadm_id"]
    except duckdb.Error:  # the database's message may quote the condition's values: only its kind
        raise CohortError("the cohort condition could not be run on the admissions outside the cohort "
                          "(for the unscored list)") from None
    finally:
        con.close()
    return rows[rows["hadm_id"].isin(set(int(h) for h in keep))]


def counts(table) -> dict[str, int]:
    """Admissions per category (``CATEGORIES`` order, zeros kept) of an ``unscored`` table."""
    found = table["category"].value_counts().to_dict() if len(table) else {}
    return {c: int(found.get(c, 0)) for c in (*CATEGORIES, *sorted(set(found) - set(CATEGORIES)))}


OTHER = "new"  # the split column's word for a census admission that is none of the model's features' admissions


def training_splits(features_dir: Path | str | None, keys) -> dict | None:
    """pseudonym -> split (train, val, test) of the census admissions ``keys`` that are among the admissions of the
    features the model was trained on (``features_dir``, the run's tag), the others ``OTHER``: a census of the
    model's own training admissions is then said to be in-sample, as a features report is. Found by pseudonym, so
    only when the census was extracted with the training's key; None when no admission is among them (or the
    training features are gone)."""
    import pyarrow.parquet as pq

    files = [Path(features_dir) / f"{s}.parquet" for s in ("train", "val", "test")] if features_dir else []
    if not files or not all(f.is_file() for f in files):
        return None
    known = {k: f.stem for f in files for k in pq.read_table(f, columns=["key"]).column("key").to_pylist()}
    keys = [str(k) for k in keys]
    return {k: known.get(k, OTHER) for k in keys} if any(k in known for k in keys) else None
