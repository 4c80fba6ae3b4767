"""Accounting of every source table: rows read = used + quarantined + outside the window, and the
quarantined rows themselves (table, ROW_ID or CSV line, reason). Event tables are materialised here,
each scanned once (the row count comes from the scan's profile), two at a time where the source allows."""

from __future__ import annotations

import logging
import time

from pipeline.data.mimic.extraction import queries
from pipeline.data.mimic.sources.base import merge_rejects

log = logging.getLogger(__name__)


def table_accounting(src) -> tuple[dict, dict]:
    """Accounting and quarantine for ADMISSIONS, PATIENTS and ICUSTAYS."""
    acc, quar = {}, {}
    read, rejects = _rows_read(src.count_rows("admissions"), src.scan_rejects("admissions"))
    rows = src.fetch_arrow(
        "SELECT exclusion, count(*) AS n FROM admissions_classified GROUP BY exclusion", "ADMISSIONS"
    ).to_pylist()
    by = {r["exclusion"]: int(r["n"]) for r in rows}
    q_rows = src.fetch_arrow(
        "SELECT row_id, exclusion FROM admissions_classified WHERE exclusion LIKE 'quarantine:%' ORDER BY row_id, "
        "exclusion",
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
        "excluded_by": {k: v for k, v in sorted(by.items(), key=lambda kv: str(kv[0]))
                        if k and not k.startswith("quarantine:")},
    }
    for table, used_sql in (
        ("patients",
         "SELECT count(*) FROM {rel} p WHERE p._error IS NULL AND p.subject_id IN (SELECT subject_id FROM cohort)"),
        ("icustays",
         "SELECT count(*) FROM {rel} i WHERE i._error IS NULL AND i.hadm_id IN (SELECT hadm_id FROM cohort)"),
    ):
        if table not in src.tables:
            continue
        rel = src.relation(table)
        read, rejects = _rows_read(src.count_rows(table), src.scan_rejects(table))
        used = int(src.fetch_arrow(used_sql.format(rel=rel), table.upper()).column(0)[0].as_py())
        row_id = src.specs[table].row_id  # None: the release has no row id (MIMIC-IV), listed by reason only
        ident = f"q.{row_id}" if row_id else "CAST(NULL AS BIGINT)"
        bad = src.fetch_arrow(f"SELECT {ident} AS row_id, q._error FROM {rel} q WHERE q._error IS NOT NULL "
                              f"ORDER BY {ident}, q._error", table.upper()).to_pylist()
        quar[table] = [(r["row_id"], None, r["_error"]) for r in bad] + [(None, line, why) for line, why in rejects]
        acc[table] = {
            "rows_read": read,
            "used": used,
            "quarantined": len(quar[table]),
            "outside_window": read - used - len(quar[table]),
        }
    return acc, quar


def scan_all_events(src, tables: list[str], rel: dict, verify: bool, workers: int):
    """Yield (table, (rows read, rejected lines)) after materializing each ``ev_<table>``;
    ``workers`` scans at a time where the source allows it, started in the order given."""
    jobs = [(t, queries.events_sql(t, rel, src.release)) for t in tables]
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
    n, malformed = counted
    return n + len(malformed), merge_rejects(malformed, scan_rejects)


def event_accounting(con, table: str, counted: tuple[int, list], row_ids: bool = True) -> tuple[dict, list]:
    """Rows read = used + quarantined + outside the window, for ``ev_<table>``. A table linked to the
    cohort by HADM_ID has one ``ev_`` row per source row, so its used rows are counted as they are;
    a table linked by patient (``queries.LINK_KEY``: labs, whose rows can serve several admissions)
    is counted by distinct id when ``row_ids`` (its rows carry one: MIMIC-III's ROW_ID, MIMIC-IV's
    labevent_id). Only that table pays for a distinct count, on its used rows, by a GROUP BY (which
    spills under the memory limit; count(DISTINCT) does not)."""
    total, rejects = counted  # rows read, every rejected line
    if row_ids and queries.LINK_KEY.get(table, "hadm_id") != "hadm_id":
        sql = (f"SELECT count(row_id), coalesce(sum(n), 0) FROM (SELECT row_id, count(*) AS n FROM ev_{table} "
               "WHERE reason IS NULL GROUP BY row_id)")
    else:
        sql = f"SELECT count(*), count(*) FROM ev_{table} WHERE reason IS NULL"
    used, events_used = con.sql(sql).fetchall()[0]  # source rows used; events used (a lab row can serve
    # several admissions)
    q_rows = con.sql(f"SELECT row_id, reason FROM ev_{table} WHERE reason IS NOT NULL "
                     "ORDER BY row_id, reason").fetchall()
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
