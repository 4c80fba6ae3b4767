"""Load a MIMIC-III or MIMIC-IV CSV directory into PostgreSQL with mimic-code's table layout.

MIMIC-IV (a directory with hosp/ and icu/) goes into the schemas `<prefix>_hosp` and `<prefix>_icu`
(mimic-code: `mimiciv_hosp`, `mimiciv_icu`), each table as mimic-code's mimic-iv/buildmimic/postgres
create.sql defines it (`ddl_mimic4`), with the primary keys of its constraint.sql; the rest of this
docstring holds for both releases.

MIMIC-III tables and columns are named and typed as mimic-code's `postgres_create_tables.sql`
creates them (lowercase names, `row_id INT`, `charttime TIMESTAMP(0)`, `valuenum DOUBLE
PRECISION`, NOT NULL, primary keys and unique keys), without its CHARTEVENTS inheritance
partitions (queries on the parent table see the same rows). Each table is loaded in one
transaction: DROP + CREATE + `COPY ... FROM STDIN` streamed from the (gunzipped) file +
constraints, then ANALYZE. CSV semantics follow mimic-code's `\\copy ... CSV HEADER NULL ''`:
an unquoted empty field is NULL, a quoted empty field is the empty string.
"""

from __future__ import annotations

import gzip
import logging
import re
import time
from pathlib import Path
from typing import IO

from pipeline.core.errors import PipelineError
from pipeline.core.redact import redact_dsn
from pipeline.data.mimic.sources.ddl_mimic4 import DDL_IV, PRIMARY_KEYS_IV
from pipeline.data.mimic.sources.tables import Release

log = logging.getLogger(__name__)

COPY_CHUNK_BYTES = 1 << 20  # bytes per copy.write() call
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
_QUOTED_VALUE = re.compile(r'(:\s*)"[^"]*"')  # `...: "value"` in a server message


# Column definitions per table, as in mimic-code's mimic-iii/buildmimic/postgres/
# postgres_create_tables.sql (names lowercased; keys are added after COPY, see constraints()).
DDL: dict[str, str] = {
    "admissions": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL,
        admittime TIMESTAMP(0) NOT NULL, dischtime TIMESTAMP(0) NOT NULL, deathtime TIMESTAMP(0),
        admission_type VARCHAR(50) NOT NULL, admission_location VARCHAR(50) NOT NULL,
        discharge_location VARCHAR(50) NOT NULL, insurance VARCHAR(255) NOT NULL, language VARCHAR(10),
        religion VARCHAR(50), marital_status VARCHAR(50), ethnicity VARCHAR(200) NOT NULL,
        edregtime TIMESTAMP(0), edouttime TIMESTAMP(0), diagnosis VARCHAR(255),
        hospital_expire_flag SMALLINT, has_chartevents_data SMALLINT NOT NULL""",
    "callout": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL, submit_wardid INT,
        submit_careunit VARCHAR(15), curr_wardid INT, curr_careunit VARCHAR(15), callout_wardid INT,
        callout_service VARCHAR(10) NOT NULL, request_tele SMALLINT NOT NULL,
        request_resp SMALLINT NOT NULL, request_cdiff SMALLINT NOT NULL, request_mrsa SMALLINT NOT NULL,
        request_vre SMALLINT NOT NULL, callout_status VARCHAR(20) NOT NULL,
        callout_outcome VARCHAR(20) NOT NULL, discharge_wardid INT,
        acknowledge_status VARCHAR(20) NOT NULL, createtime TIMESTAMP(0) NOT NULL,
        updatetime TIMESTAMP(0) NOT NULL, acknowledgetime TIMESTAMP(0), outcometime TIMESTAMP(0) NOT NULL,
        firstreservationtime TIMESTAMP(0), currentreservationtime TIMESTAMP(0)""",
    "caregivers": """row_id INT NOT NULL, cgid INT NOT NULL, label VARCHAR(15), description VARCHAR(30)""",
    "chartevents": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT, icustay_id INT, itemid INT,
        charttime TIMESTAMP(0), storetime TIMESTAMP(0), cgid INT, value VARCHAR(255),
        valuenum DOUBLE PRECISION, valueuom VARCHAR(50), warning INT, error INT,
        resultstatus VARCHAR(50), stopped VARCHAR(50)""",
    "cptevents": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL,
        costcenter VARCHAR(10) NOT NULL, chartdate TIMESTAMP(0), cpt_cd VARCHAR(10) NOT NULL,
        cpt_number INT, cpt_suffix VARCHAR(5), ticket_id_seq INT, sectionheader VARCHAR(50),
        subsectionheader VARCHAR(255), description VARCHAR(200)""",
    "datetimeevents": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT, icustay_id INT,
        itemid INT NOT NULL, charttime TIMESTAMP(0) NOT NULL, storetime TIMESTAMP(0) NOT NULL,
        cgid INT NOT NULL, value TIMESTAMP(0), valueuom VARCHAR(50) NOT NULL, warning SMALLINT,
        error SMALLINT, resultstatus VARCHAR(50), stopped VARCHAR(50)""",
    "diagnoses_icd": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL, seq_num INT,
        icd9_code VARCHAR(10)""",
    "drgcodes": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL,
        drg_type VARCHAR(20) NOT NULL, drg_code VARCHAR(20) NOT NULL, description VARCHAR(255),
        drg_severity SMALLINT, drg_mortality SMALLINT""",
    "d_cpt": """row_id INT NOT NULL, category SMALLINT NOT NULL, sectionrange VARCHAR(100) NOT NULL,
        sectionheader VARCHAR(50) NOT NULL, subsectionrange VARCHAR(100) NOT NULL,
        subsectionheader VARCHAR(255) NOT NULL, codesuffix VARCHAR(5), mincodeinsubsection INT NOT NULL,
        maxcodeinsubsection INT NOT NULL""",
    "d_icd_diagnoses": """row_id INT NOT NULL, icd9_code VARCHAR(10) NOT NULL,
        short_title VARCHAR(50) NOT NULL, long_title VARCHAR(255) NOT NULL""",
    "d_icd_procedures": """row_id INT NOT NULL, icd9_code VARCHAR(10) NOT NULL,
        short_title VARCHAR(50) NOT NULL, long_title VARCHAR(255) NOT NULL""",
    "d_items": """row_id INT NOT NULL, itemid INT NOT NULL, label VARCHAR(200), abbreviation VARCHAR(100),
        dbsource VARCHAR(20), linksto VARCHAR(50), category VARCHAR(100), unitname VARCHAR(100),
        param_type VARCHAR(30), conceptid INT""",
    "d_labitems": """row_id INT NOT NULL, itemid INT NOT NULL, label VARCHAR(100) NOT NULL,
        fluid VARCHAR(100) NOT NULL, category VARCHAR(100) NOT NULL, loinc_code VARCHAR(100)""",
    "icustays": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL,
        icustay_id INT NOT NULL, dbsource VARCHAR(20) NOT NULL, first_careunit VARCHAR(20) NOT NULL,
        last_careunit VARCHAR(20) NOT NULL, first_wardid SMALLINT NOT NULL,
        last_wardid SMALLINT NOT NULL, intime TIMESTAMP(0) NOT NULL, outtime TIMESTAMP(0),
        los DOUBLE PRECISION""",
    "inputevents_cv": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT, icustay_id INT,
        charttime TIMESTAMP(0), itemid INT, amount DOUBLE PRECISION, amountuom VARCHAR(30),
        rate DOUBLE PRECISION, rateuom VARCHAR(30), storetime TIMESTAMP(0), cgid INT, orderid INT,
        linkorderid INT, stopped VARCHAR(30), newbottle INT, originalamount DOUBLE PRECISION,
        originalamountuom VARCHAR(30), originalroute VARCHAR(30), originalrate DOUBLE PRECISION,
        originalrateuom VARCHAR(30), originalsite VARCHAR(30)""",
    "inputevents_mv": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT, icustay_id INT,
        starttime TIMESTAMP(0), endtime TIMESTAMP(0), itemid INT, amount DOUBLE PRECISION,
        amountuom VARCHAR(30), rate DOUBLE PRECISION, rateuom VARCHAR(30), storetime TIMESTAMP(0),
        cgid INT, orderid INT, linkorderid INT, ordercategoryname VARCHAR(100),
        secondaryordercategoryname VARCHAR(100), ordercomponenttypedescription VARCHAR(200),
        ordercategorydescription VARCHAR(50), patientweight DOUBLE PRECISION,
        totalamount DOUBLE PRECISION, totalamountuom VARCHAR(50), isopenbag SMALLINT,
        continueinnextdept SMALLINT, cancelreason SMALLINT, statusdescription VARCHAR(30),
        comments_editedby VARCHAR(30), comments_canceledby VARCHAR(40), comments_date TIMESTAMP(0),
        originalamount DOUBLE PRECISION, originalrate DOUBLE PRECISION""",
    "labevents": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT, itemid INT NOT NULL,
        charttime TIMESTAMP(0), value VARCHAR(200), valuenum DOUBLE PRECISION, valueuom VARCHAR(20),
        flag VARCHAR(20)""",
    "microbiologyevents": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT,
        chartdate TIMESTAMP(0), charttime TIMESTAMP(0), spec_itemid INT, spec_type_desc VARCHAR(100),
        org_itemid INT, org_name VARCHAR(100), isolate_num SMALLINT, ab_itemid INT,
        ab_name VARCHAR(30), dilution_text VARCHAR(10), dilution_comparison VARCHAR(20),
        dilution_value DOUBLE PRECISION, interpretation VARCHAR(5)""",
    "noteevents": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT, chartdate TIMESTAMP(0),
        charttime TIMESTAMP(0), storetime TIMESTAMP(0), category VARCHAR(50), description VARCHAR(255),
        cgid INT, iserror CHAR(1), text TEXT""",
    "outputevents": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT, icustay_id INT,
        charttime TIMESTAMP(0), itemid INT, value DOUBLE PRECISION, valueuom VARCHAR(30),
        storetime TIMESTAMP(0), cgid INT, stopped VARCHAR(30), newbottle CHAR(1), iserror INT""",
    "patients": """row_id INT NOT NULL, subject_id INT NOT NULL, gender VARCHAR(5) NOT NULL,
        dob TIMESTAMP(0) NOT NULL, dod TIMESTAMP(0), dod_hosp TIMESTAMP(0), dod_ssn TIMESTAMP(0),
        expire_flag INT NOT NULL""",
    "prescriptions": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL, icustay_id INT,
        startdate TIMESTAMP(0), enddate TIMESTAMP(0), drug_type VARCHAR(100) NOT NULL,
        drug VARCHAR(100) NOT NULL, drug_name_poe VARCHAR(100), drug_name_generic VARCHAR(100),
        formulary_drug_cd VARCHAR(120), gsn VARCHAR(200), ndc VARCHAR(120), prod_strength VARCHAR(120),
        dose_val_rx VARCHAR(120), dose_unit_rx VARCHAR(120), form_val_disp VARCHAR(120),
        form_unit_disp VARCHAR(120), route VARCHAR(120)""",
    "procedureevents_mv": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL,
        icustay_id INT, starttime TIMESTAMP(0), endtime TIMESTAMP(0), itemid INT,
        value DOUBLE PRECISION, valueuom VARCHAR(30), location VARCHAR(30),
        locationcategory VARCHAR(30), storetime TIMESTAMP(0), cgid INT, orderid INT, linkorderid INT,
        ordercategoryname VARCHAR(100), secondaryordercategoryname VARCHAR(100),
        ordercategorydescription VARCHAR(50), isopenbag SMALLINT, continueinnextdept SMALLINT,
        cancelreason SMALLINT, statusdescription VARCHAR(30), comments_editedby VARCHAR(30),
        comments_canceledby VARCHAR(30), comments_date TIMESTAMP(0)""",
    "procedures_icd": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL,
        seq_num INT NOT NULL, icd9_code VARCHAR(10) NOT NULL""",
    "services": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL,
        transfertime TIMESTAMP(0) NOT NULL, prev_service VARCHAR(20), curr_service VARCHAR(20)""",
    "transfers": """row_id INT NOT NULL, subject_id INT NOT NULL, hadm_id INT NOT NULL, icustay_id INT,
        dbsource VARCHAR(20), eventtype VARCHAR(20), prev_careunit VARCHAR(20),
        curr_careunit VARCHAR(20), prev_wardid SMALLINT, curr_wardid SMALLINT, intime TIMESTAMP(0),
        outtime TIMESTAMP(0), los DOUBLE PRECISION""",
}

# Unique keys besides PRIMARY KEY (row_id), as mimic-code names them: table -> (name, column).
_UNIQUE: dict[str, tuple[str, str]] = {
    "admissions": ("adm_hadm_unique", "hadm_id"),
    "caregivers": ("cg_cgid_unique", "cgid"),
    "d_cpt": ("dcpt_ssrange_unique", "subsectionrange"),
    "d_icd_diagnoses": ("d_icd_diag_code_unique", "icd9_code"),
    "d_icd_procedures": ("d_icd_proc_code_unique", "icd9_code"),
    "d_items": ("ditems_itemid_unique", "itemid"),
    "d_labitems": ("dlabitems_itemid_unique", "itemid"),
    "icustays": ("icustay_icustayid_unique", "icustay_id"),
    "patients": ("pat_subid_unique", "subject_id"),
}


MIMIC3, MIMIC4 = Release.mimic3.value, Release.mimic4.value


def ddl(table: str, release: str = MIMIC3) -> str:
    """mimic-code's column definitions of `table` in `release`."""
    return DDL[table] if release == MIMIC3 else DDL_IV[table][1]


def known_tables(release: str = MIMIC3) -> list[str]:
    return sorted(DDL if release == MIMIC3 else DDL_IV)


def constraints(table: str, release: str = MIMIC3) -> list[tuple[str, str, tuple[str, ...]]]:
    """(constraint name, PRIMARY KEY | UNIQUE, columns) added to `table` after its COPY."""
    if release == MIMIC4:
        return [(f"{table}_pk", "PRIMARY KEY", PRIMARY_KEYS_IV[table])] if table in PRIMARY_KEYS_IV else []
    out = [(f"{table}_rowid_pk", "PRIMARY KEY", ("row_id",))]
    if table in _UNIQUE:
        out.append((_UNIQUE[table][0], "UNIQUE", (_UNIQUE[table][1],)))
    return out


def columns(table: str, release: str = MIMIC3) -> list[str]:
    """Column names of `table` in mimic-code's order."""
    return [part.split()[0] for part in ddl(table, release).split(",")]


class PgLoadError(PipelineError, ValueError):
    """A CSV file could not be loaded; the message names the file, table, line and column."""


def find_table_files(source_dir: Path) -> dict[str, Path]:
    """Map lowercase table name -> its `TABLE.csv` or `TABLE.csv.gz` file; two files for one
    table are an error (the loader must not guess which one the site meant)."""
    from pipeline.data.mimic.sources.base import SourceError
    from pipeline.data.mimic.sources.csvdir import find_tables

    try:
        return find_tables(Path(source_dir), strict=True)
    except SourceError as exc:
        raise PgLoadError(str(exc)) from None


def _open_bytes(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def read_header(path: Path) -> list[str]:
    """Lowercased column names from the first CSV line (quoted or not, either case)."""
    from pipeline.data.mimic.sources.base import SourceError
    from pipeline.data.mimic.sources.csvdir import read_header as raw_header

    try:
        return [c.strip().lower() for c in raw_header(path)]
    except SourceError as exc:
        raise PgLoadError(str(exc)) from None


def _check_header(path: Path, table: str, header: list[str], release: str = MIMIC3) -> None:
    expected = columns(table, release)
    unknown = [c for c in header if c not in expected]
    missing = [c for c in expected if c not in header]
    dupes = sorted({c for c in header if header.count(c) > 1})
    problems = []
    if unknown:
        problems.append(f"unknown columns {unknown}")
    if missing:
        problems.append(f"missing columns {missing}")
    if dupes:
        problems.append(f"duplicated columns {dupes}")
    if problems:
        title = f"{Release.mimic4.title} " if release == MIMIC4 else ""
        raise PgLoadError(f"{path}: header does not match mimic-code's {title}{table.upper()}: " + "; ".join(problems))


def _server_error(path: Path, schema: str, table: str, exc: Exception) -> PgLoadError:
    """A PgLoadError naming file/table/line/column, with data values masked (privacy)."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) or type(exc).__name__
    context = getattr(diag, "context", None) or ""
    where = context.strip().splitlines()[0] if context.strip() else ""  # "COPY t, line 5, column c: ..."
    text = "; ".join(p for p in (primary, where) if p)
    text = _QUOTED_VALUE.sub(r'\1"<value hidden>"', text)
    return PgLoadError(f"{path}: loading {schema}.{table} failed: {text}")


def load_table(conn, path: Path, table: str, schema: str = "mimiciii", release: str = MIMIC3) -> int:
    """Replace `schema.table` with the rows of one CSV file in one transaction; return rows.

    `conn` is an autocommit psycopg connection. DROP ... CASCADE (as mimic-code does) also
    drops views that depend on the old table.
    """
    import psycopg
    from psycopg import sql

    header = read_header(path)
    _check_header(path, table, header, release)
    qualified = sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))
    cols = sql.SQL(", ").join(sql.Identifier(c) for c in header)
    copy_sql = sql.SQL(
        "COPY {} ({}) FROM STDIN WITH (FORMAT csv, HEADER true, NULL '', ENCODING 'UTF8', FREEZE true)"
    ).format(qualified, cols)
    try:
        with conn.transaction(), conn.cursor() as cur:
            cur.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(qualified))
            cur.execute(sql.SQL("CREATE TABLE {} ({})").format(qualified, sql.SQL(ddl(table, release))))
            with cur.copy(copy_sql) as copy, _open_bytes(path) as fh:
                while chunk := fh.read(COPY_CHUNK_BYTES):
                    copy.write(chunk)
            rows = cur.rowcount
            for name, kind, cols_of_key in constraints(table, release):
                cur.execute(
                    sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {} ({})").format(
                        qualified, sql.Identifier(name), sql.SQL(kind),
                        sql.SQL(", ").join(sql.Identifier(c) for c in cols_of_key)
                    )
                )
        conn.execute(sql.SQL("ANALYZE {}").format(qualified))
    except psycopg.Error as exc:
        raise _server_error(path, schema, table, exc) from None
    except (OSError, EOFError) as exc:  # includes gzip.BadGzipFile
        raise PgLoadError(f"{path}: could not read file: {exc}") from None
    return int(rows)


def load_mimic_csv(
    dsn: str, source_dir: Path, schema: str | None = None, tables: list[str] | None = None
) -> dict[str, int]:
    """Load MIMIC-III or MIMIC-IV CSVs from `source_dir` into PostgreSQL; return rows loaded per table.

    MIMIC-III goes into `schema` (default `mimiciii`); MIMIC-IV (hosp/ and icu/) into
    `<schema>_hosp` and `<schema>_icu` (default prefix `mimiciv`, as mimic-code).
    `tables` (any case) limits the load; None loads every known table present. Requested
    tables without a file, and files that are not tables of the release, are skipped with a
    warning. Each table is replaced in its own transaction, so a failure leaves earlier
    tables loaded and the failing one as it was before.
    """
    import psycopg
    from psycopg import sql

    if schema is not None and not _IDENT.match(schema):
        raise PgLoadError(f"schema name {schema!r} must match {_IDENT.pattern}")
    release, files = _release_files(Path(source_dir))
    title = Release(release).title
    known = known_tables(release)
    schema_of = {t: target_schema(t, release, schema) for t in known}
    if tables is None:
        wanted = sorted(t for t in files if t in known)
    else:
        wanted = list(dict.fromkeys(t.lower() for t in tables))
        unknown = [t for t in wanted if t not in known]
        if unknown:
            raise PgLoadError(f"not {title} tables: {unknown}; known: {known}")
    for t in sorted(set(files) - set(known)):
        log.warning("skipping %s: not a %s table", files[t].name, title)
    for t in wanted:
        if t not in files:
            log.warning("skipping %s: no %s.csv[.gz] in %s", t, t.upper(), source_dir)
    wanted = [t for t in wanted if t in files]

    safe_dsn = redact_dsn(dsn)
    try:
        conn = psycopg.connect(dsn, autocommit=True)
    except psycopg.Error as exc:
        raise PgLoadError(f"cannot connect to {safe_dsn}: {redact_dsn(str(exc)).strip()}") from None
    counts: dict[str, int] = {}
    with conn:
        for name in dict.fromkeys(schema_of[t] for t in wanted):
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(name)))
        for table in wanted:
            t0 = time.perf_counter()
            counts[table] = load_table(conn, files[table], table, schema_of[table], release)
            log.info(
                "loaded %d rows into %s.%s from %s in %.2fs (%s)",
                counts[table], schema_of[table], table, files[table].name, time.perf_counter() - t0, safe_dsn,
            )
    return counts


def target_schema(table: str, release: str = MIMIC3, schema: str | None = None) -> str:
    """The schema a table is loaded into: MIMIC-III ``schema`` (default ``mimiciii``); MIMIC-IV
    ``<schema>_<module>`` (default prefix ``mimiciv``: ``mimiciv_hosp``, ``mimiciv_icu``, as mimic-code)."""
    if release == MIMIC3:
        return schema or "mimiciii"
    return f"{schema or 'mimiciv'}_{DDL_IV[table][0]}"


def source_release(source_dir: Path | str) -> str:
    """The release of a CSV directory: "mimic-iii" or "mimic-iv" (hosp/ and icu/)."""
    return _release_files(Path(source_dir))[0]


def _release_files(source_dir: Path) -> tuple[str, dict[str, Path]]:
    """(release, lowercase table name -> file) of a CSV directory (layout detected, as extraction does)."""
    from pipeline.data.mimic.sources.base import SourceError
    from pipeline.data.mimic.sources.csvdir import detect_layout

    try:
        release, files = detect_layout(source_dir, strict=True)
    except SourceError as exc:
        raise PgLoadError(str(exc)) from None
    return release.value, files
