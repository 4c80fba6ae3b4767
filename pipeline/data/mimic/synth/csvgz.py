"""Arrow columns and the deterministic gzip CSV writer of the synthetic MIMIC (`pipeline.data.mimic.synth`).

Column builders (timestamps, integers, numbers, dictionary-coded strings, NULLs) and the writer
that encodes one table's rows as a gzip member of quoted CSV (``csv_member``) and appends members
to a file renamed into place on close (``CsvGzWriter``): the same bytes from any process.
"""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv


# ---------------------------------------------------------------------------- arrow columns
def col_ts(sec, null=None) -> pa.Array:
    """Epoch seconds -> timestamp column (written as YYYY-MM-DD HH:MM:SS)."""
    return pa.array(np.asarray(sec, np.int64), pa.int64(), mask=null).cast(pa.timestamp("s"))


def col_int(x, null=None) -> pa.Array:
    return pa.array(np.asarray(x, np.int64), pa.int64(), mask=null)


def col_num(x, null=None) -> pa.Array:
    x = np.asarray(x, np.float64)
    return pa.array(x, pa.float64(), mask=np.isnan(x) if null is None else (null | np.isnan(x)))


def col_str(codes, values, null=None) -> pa.Array:
    """values[codes] as a string column; empty strings and `null` rows are NULL."""
    codes = np.asarray(codes, np.int32)
    empty = np.array([v == "" for v in values], bool)[codes] if len(values) else np.ones(len(codes), bool)
    mask = empty if null is None else (empty | null)
    dictionary = pa.array([str(v) for v in values], pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32(), mask=mask), dictionary).cast(pa.string())


def col_const(value, n: int) -> pa.Array:
    return col_str(np.zeros(n, np.int32), [value])


def col_nulls(n: int) -> pa.Array:
    return pa.nulls(n, pa.string())


def col_numstr(x) -> pa.Array:
    """Numbers as their shortest decimal string (VALUE columns)."""
    return pa.array(np.asarray(x, np.float64) + 0.0, pa.float64()).cast(pa.string())


# ---------------------------------------------------------------------------- output
def gzip_member(data: bytes, level: int) -> bytes:
    """``data`` as one deterministic gzip member (no name, time 0); a file is a run of them (RFC 1952)."""
    return gzip.compress(data, compresslevel=level, mtime=0)


def csv_member(columns: tuple[str, ...], cols: dict[str, pa.Array], first_row_id: int, level: int,
               name: str = "") -> tuple[bytes, int]:
    """(gzip member of the CSV rows, rows) of one table's rows; ROW_ID numbered from ``first_row_id`` when the
    table has one and ``cols`` lacks it. Any process gives the same bytes (``synth --workers``)."""
    n = len(next(iter(cols.values())))
    if n == 0:
        return b"", 0
    if "ROW_ID" in columns and "ROW_ID" not in cols:
        cols = {"ROW_ID": col_int(np.arange(first_row_id, first_row_id + n)), **cols}
    if set(cols) != set(columns):
        raise RuntimeError(f"{name}: columns {sorted(set(cols) ^ set(columns))} mismatch")
    table = pa.table([cols[c] for c in columns], names=list(columns))
    buf = io.BytesIO()
    pa_csv.write_csv(table, buf, pa_csv.WriteOptions(include_header=False, quoting_style="needed", batch_size=1 << 16))
    return gzip_member(buf.getvalue(), level), n


class CsvGzWriter:
    """One table as a deterministic gzip CSV, one gzip member per write (the header, then each chunk's rows),
    renamed into place on close."""

    def __init__(self, path: Path, columns: tuple[str, ...], level: int):
        self.path, self.columns, self.rows, self.level = path, columns, 0, level
        self.tmp = path.with_name(f".{path.name}.tmp")
        self._raw = open(self.tmp, "wb")
        self._raw.write(gzip_member((",".join(f'"{c}"' for c in columns) + "\n").encode(), level))

    def write(self, cols: dict[str, pa.Array]) -> None:
        """Append rows; ROW_ID is numbered here when the table has one and `cols` lacks it."""
        self.write_member(*csv_member(self.columns, cols, self.rows + 1, self.level, self.path.name))

    def write_member(self, member: bytes, n: int) -> None:
        """Append ``n`` rows encoded by ``csv_member`` (numbered from this file's ``rows + 1``)."""
        self._raw.write(member)
        self.rows += n

    def close(self) -> None:
        self._raw.close()
        os.replace(self.tmp, self.path)

    def abort(self) -> None:
        self._raw.close()
        self.tmp.unlink(missing_ok=True)
