"""What every MIMIC-III source shares: its error, a table's description, the empty stand-in for a missing
optional table, and the short form of a database error."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline.core.errors import PipelineError
from pipeline.data.mimic.sources.tables import Release, TableSpec


class SourceError(PipelineError, RuntimeError):
    """A problem with the input data that stops the run (names the file/table/column)."""


class CrossReleaseError(SourceError, ValueError):
    """Data of one MIMIC release met a model of the other (or feature files of both releases were mixed),
    without being asked to score across releases: item ids, units and what is recorded differ between the
    releases, so most tokens would fall out of the model's vocabulary."""

    def __init__(self, message: str, expected: Release | None = None, found: Release | None = None) -> None:
        super().__init__(message)
        self.expected, self.found = expected, found  # the model's release, the data's (None: not one release)


class EmptyTable(SourceError):
    """A table file with no header line (zero bytes)."""


@dataclass
class TableInfo:
    name: str  # lowercase table name
    location: str  # file path or schema.table (never a password)
    columns: dict[str, str] = field(default_factory=dict)  # lowercase -> name as stored
    missing_optional: list[str] = field(default_factory=list)


def empty_relation(spec: TableSpec) -> str:
    """A relation with the table's columns and no rows (for a missing optional table)."""
    cols = ", ".join(f"CAST(NULL AS {t}) AS {c}" for c, t in spec.columns.items())
    return f"(SELECT {cols}, CAST(NULL AS VARCHAR) AS _error WHERE 1 = 0)"


def merge_rejects(*lists: list[tuple[int, str]]) -> list[tuple[int, str]]:
    merged: dict[int, str] = {}
    for rejects in lists:
        for line, why in rejects:
            merged.setdefault(line, why)
    return sorted(merged.items())


_ECHO = re.compile(r"^\s*(LINE \d+:|\^+\s*$)")


def short_error(exc: Exception) -> str:
    """The first informative lines of a database error (no stack, no data dump). The echo of
    the statement that DuckDB and PostgreSQL add ("LINE n: ..." and its caret line) is left out:
    it can quote values of a user's cohort condition (HADM_IDs)."""
    lines = [ln for ln in str(exc).splitlines() if ln.strip() and not _ECHO.match(ln)]
    if lines and lines[0].startswith(OUT_OF_MEMORY):  # DuckDB's: its "possible solutions" are not ours
        return f"{lines[0][:300]} {MEMORY_HINT}"
    return " ".join(lines[:2])[:500]


OUT_OF_MEMORY = "Out of Memory Error"  # how DuckDB's OutOfMemoryException begins
MEMORY_HINT = ("(over DuckDB's memory limit: give it more with --memory-limit, or work on fewer tables at once: "
               "extract --scan-workers 1, stage --workers 1)")


def set_memory_limit(con, cfg) -> None:
    """``SET memory_limit`` on a DuckDB connection from config ``cfg``'s ``memory_limit``; a value DuckDB does not
    read as a size, or reads as no limit at all (``-1``, ``none``, a negative size: the process would no longer stay
    bounded, as the option's help promises), is a config error naming the field (the command line:
    ``--memory-limit``)."""
    import duckdb

    from pipeline.core.configs import invalid

    value = str(cfg.memory_limit)
    sizes = "give a size such as 2GB, 512MB, 1.5GiB or 80% (of the machine's memory)"
    try:
        con.execute(f"SET memory_limit = '{value.replace(chr(39), '')}'")
    except duckdb.Error as exc:
        said = (str(exc).strip().splitlines() or [""])[0].split(": ", 1)[-1][:200]
        raise invalid(cfg, f"memory_limit {value!r} is refused by DuckDB ({said}); {sizes}", "memory_limit") from None
    if _setting(con) == _unlimited():
        con.execute("RESET memory_limit")
        raise invalid(cfg, f"memory_limit {value!r} is no limit to DuckDB, and the process would no longer stay "
                           f"bounded; {sizes}", "memory_limit")


def _setting(con) -> str:
    return str(con.execute("SELECT current_setting('memory_limit')").fetchone()[0])


def _unlimited() -> str:
    """How DuckDB states no memory limit (``SET memory_limit = '-1'`` read back)."""
    import duckdb

    with duckdb.connect() as con:
        con.execute("SET memory_limit = '-1'")
        return _setting(con)
