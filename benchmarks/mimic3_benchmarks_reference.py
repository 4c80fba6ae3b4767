"""The event-extraction pattern of YerevaNN/mimic3-benchmarks, applied to this pipeline's
cohort and window rules: a second baseline for `benchmarks/extract.py`.

mimic3-benchmarks reads the small tables whole with pandas, then streams every event table
row by row (csv.DictReader), keeps the rows of cohort subjects and writes them into one
events file per subject (`extract_subjects`); a later pass reads each subject's file with
pandas and cuts the events to each stay's window (`extract_episodes_from_subjects`). This
module follows that structure (no code is copied): `benchmarks/pandas_reference.py` is the
vectorized whole-table variant. Like it, it counts the events each table contributes and
neither bags nor tokenizes, so its ratio is conservative.
"""

from __future__ import annotations

import csv
import gzip
import tempfile
from pathlib import Path

import pandas as pd

from benchmarks.pandas_reference import EVENTS, cohort, in_window
from pipeline.data.mimic.sources.csvdir import find_tables


def _open(path: Path):
    return gzip.open(path, "rt", newline="") if path.name.lower().endswith(".gz") else open(path, newline="")


def break_up_by_subject(path: Path, subjects: set[str], out_dir: Path, table: str) -> int:
    """Row-by-row pass: rows of cohort subjects appended to out_dir/<subject>/<table>.csv."""
    writers: dict[str, tuple] = {}
    kept = 0
    with _open(path) as fh:
        reader = csv.DictReader(fh)
        fields = [f.lower() for f in reader.fieldnames]
        for row in reader:
            subject = row.get("SUBJECT_ID", row.get("subject_id"))
            if subject not in subjects:
                continue
            if subject not in writers:
                d = out_dir / subject
                d.mkdir(exist_ok=True)
                f = open(d / f"{table}.csv", "w", newline="")
                w = csv.writer(f)
                w.writerow(fields)
                writers[subject] = (f, w)
            writers[subject][1].writerow(row.values())
            kept += 1
    for f, _ in writers.values():
        f.close()
    return kept


def subject_events(sdir: Path, table: str, coh: pd.DataFrame) -> int:
    """Per-subject pass: read the subject's events with pandas, keep those in the window."""
    tcol, scol = EVENTS[table][:2]
    path = sdir / f"{table}.csv"
    if not path.exists():
        return 0
    ev = pd.read_csv(path, low_memory=False)
    for t in [tcol] + ([scol] if scol else []):
        if t in ev:
            ev[t] = pd.to_datetime(ev[t], errors="coerce").astype("datetime64[s]")
    return in_window(ev, coh, table)


def run(src: Path) -> dict[str, int]:
    files = find_tables(src)
    coh = cohort(src)
    subjects = {str(s) for s in coh["subject_id"].unique()}
    used: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tables = [t for t in EVENTS if t in files]
        for table in tables:
            break_up_by_subject(files[table], subjects, root, table)
        for table in tables:
            used[table] = 0
        for sdir in sorted(p for p in root.iterdir() if p.is_dir()):
            mine = coh[coh["subject_id"] == int(sdir.name)]
            for table in tables:
                used[table] += subject_events(sdir, table, mine)
    return used
