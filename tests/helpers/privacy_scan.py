"""Privacy scan of pipeline outputs: no raw identifiers, no calendar dates.

`scan(paths, raw_ids)` reads every Parquet, JSON, CSV, text and log file under the given
paths (skipping `_private/`, which holds the data owner's link file) and reports:
- any string containing a calendar date (YYYY-MM-DD, or YYYY/MM/DD);
- any whole number inside a string that equals a raw SUBJECT_ID, HADM_ID or ICUSTAY_ID (stay_id),
  except in the item field of a token (`source:ITEMID:...`), which is a MIMIC item code;
- any integer cell outside token/context id lists and counts that equals a raw id.
Used by the tests on demo and synthetic outputs, on scores and on MLflow artifacts (the raw ids
of a source: tests/helpers/raw_ids.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from pipeline.core.redact import DATE  # the pattern redaction replaces

NUMBER = re.compile(r"(?<![\w.])\d{4,9}(?![\w.])")
TOKEN = re.compile(r"^(chart|lab|input|output|rx|proc|micro|dtevent):[^:]*(:|$)")
# Integer columns that are counts or vocabulary ids by construction.
COUNT_COLUMNS = {"label", "n_events", "context", "bags", "line", "row_id", "positives", "n", "refer"}
# (row_id: the ROW_ID of a quarantined source row, a table row number, not a patient identifier)
SKIP_DIRS = {"_private"}
TEXT_SUFFIXES = {".json", ".csv", ".txt", ".log", ".md", ".yaml", ".yml", ".html"}


@dataclass(frozen=True)
class Finding:
    path: str
    where: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path} [{self.where}]: {self.problem}"


def _strings_in_json(obj, where: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{where}.{k}", str(k)
            yield from _strings_in_json(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _strings_in_json(v, f"{where}[{i}]")
    elif isinstance(obj, str):
        yield where, obj


def check_string(text: str, raw_ids: set[str]) -> str | None:
    if DATE.search(text):
        return "calendar date"
    body = TOKEN.sub("", text)  # a token's item field is an item code, not an identifier
    for m in NUMBER.finditer(body):
        if m.group(0) in raw_ids:
            return f"raw identifier {m.group(0)}"
    return None


def _scan_parquet(path: Path, raw_ids: set[str]) -> Iterator[Finding]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for name in table.column_names:
        col = table.column(name)
        typ = col.type
        while pa.types.is_list(typ):
            col = pa.chunked_array([c.flatten() for c in col.chunks], typ.value_type)
            typ = typ.value_type
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            for i, v in enumerate(col.to_pylist()):
                if v is not None and (why := check_string(v, raw_ids)):
                    yield Finding(str(path), f"{name} row {i}", why)
        elif pa.types.is_integer(typ) and name not in COUNT_COLUMNS:
            for i, v in enumerate(col.to_pylist()):
                if v is not None and str(v) in raw_ids:
                    yield Finding(str(path), f"{name} row {i}", f"raw identifier {v}")
        elif pa.types.is_timestamp(typ) or pa.types.is_date(typ):
            yield Finding(str(path), name, "timestamp column")


def scan(paths: Iterable[Path], raw_ids: Iterable[int | str]) -> list[Finding]:
    ids = {str(int(i)) for i in raw_ids}
    findings: list[Finding] = []
    files: list[Path] = []
    for p in map(Path, paths):
        files += [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    for f in files:
        if SKIP_DIRS & set(f.parts):
            continue
        if f.suffix == ".parquet":
            findings += _scan_parquet(f, ids)
        elif f.suffix == ".json":
            for where, s in _strings_in_json(json.loads(f.read_text(encoding="utf-8"))):
                if why := check_string(s, ids):
                    findings.append(Finding(str(f), where, why))
        elif f.suffix in TEXT_SUFFIXES or f.name == "MLmodel":
            for i, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines()):
                for part in re.split(r"[\s,\"'=]+", line):
                    if part and (why := check_string(part, ids)):
                        findings.append(Finding(str(f), f"line {i + 1}", why))
    return findings
