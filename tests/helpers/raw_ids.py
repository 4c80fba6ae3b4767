"""The raw identifiers of a MIMIC CSV directory: what ``privacy_scan.scan`` must never find in an output."""

from __future__ import annotations

from pathlib import Path

from pipeline.data.mimic.sources.csvdir import detect_layout, read_header
from pipeline.data.mimic.sources.tables import Release


def raw_ids_of(source_dir: Path) -> set[str]:
    """Every SUBJECT_ID, HADM_ID and ICU stay id (MIMIC-III ICUSTAY_ID, MIMIC-IV stay_id) value of a
    MIMIC-III or MIMIC-IV CSV directory, as written (every row, unusable ones too)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    release, files = detect_layout(Path(source_dir))
    stay = "stay_id" if release is Release.mimic4 else "icustay_id"
    ids: set[str] = set()
    for table, cols in (("patients", ["subject_id"]), ("admissions", ["subject_id", "hadm_id"]), ("icustays", [stay])):
        if table not in files:
            continue
        header = {name.lower(): name for name in read_header(files[table])}
        names = [header[c] for c in cols if c in header]
        read = pa_csv.read_csv(files[table], convert_options=pa_csv.ConvertOptions(
            include_columns=names, column_types={n: pa.string() for n in names}, strings_can_be_null=True))
        for name in names:
            ids |= {v for v in read.column(name).to_pylist() if v}
    return ids
