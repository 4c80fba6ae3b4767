"""The SQL in `sql/`: loading, parameter rendering and the build order (dialects: ``data.mimic.sources.dialect``).

DuckDB is the canonical dialect. PostgreSQL SQL is generated from the same files with
sqlglot, never kept by hand. Files are rendered with `string.Template` placeholders
(`${name}`); table placeholders are replaced by the source's relation for that table.

Each release (MIMIC-III, MIMIC-IV) has its own files mapping its tables onto one staging shape,
`sql/<release>/00_admissions_staged` (admissions with their patient's age and ICU stays) and
`sql/<release>/1x_events_<table>` (one event row shape); everything else is shared.

Build order (explicit, as in mimic-code; `BUILD_ORDER`, one release's: `build_order`):
  in the source (DuckDB over CSV, or PostgreSQL):
    <release>/00_admissions_staged -> 01_admissions_classified -> 02_cohort -> 03_cohort_subjects
    (04-06: reads of them) -> <release>/1x_events_<table> wrapped in 20_events_window_hadm (tables
    linked by HADM_ID) or 21_events_window_subject (labs)
  in the local DuckDB (the windows' rows streamed in as ev_<table>):
    30_events_used per table, stacked by 32_events (31_events_none: no table) -> 33_last_event
    -> 40_fit_bins, 41_fit_text_items, 43_fit_vocabulary over 42_tokens (training split)
    -> 44_tokenized (42_tokens over every event) -> 45_bags
Every file is one SELECT; the caller names the table it becomes.
"""

from __future__ import annotations

import functools
from pathlib import Path
from string import Template

from pipeline.data.mimic.sources.dialect import strip_comments
from pipeline.data.mimic.sources.tables import Release

SQL_DIR = Path(__file__).resolve().parents[4] / "sql"

ADMISSIONS_CLASSIFIED = "01_admissions_classified"
COHORT = "02_cohort"
COHORT_SUBJECTS = "03_cohort_subjects"
COHORT_ROWS = "04_cohort_rows"
COHORT_ELIGIBLE = "05_cohort_eligible"
DATA_END = "06_data_end"
COHORT_EXCLUSIONS = "07_cohort_exclusions"
EVENTS_WINDOW_HADM = "20_events_window_hadm"
EVENTS_WINDOW_SUBJECT = "21_events_window_subject"
MIMIC3, MIMIC4 = Release.mimic3, Release.mimic4
STAGED = {MIMIC3: "mimic3/00_admissions_staged", MIMIC4: "mimic4/00_admissions_staged"}
EVENT_SQL = {  # MIMIC-III
    "chartevents": "mimic3/10_events_chartevents",
    "labevents": "mimic3/11_events_labevents",
    "inputevents_cv": "mimic3/12_events_inputevents_cv",
    "inputevents_mv": "mimic3/13_events_inputevents_mv",
    "outputevents": "mimic3/14_events_outputevents",
    "prescriptions": "mimic3/15_events_prescriptions",
    "procedureevents_mv": "mimic3/16_events_procedureevents_mv",
    "microbiologyevents": "mimic3/17_events_microbiologyevents",
    "datetimeevents": "mimic3/18_events_datetimeevents",
}
EVENT_SQL_IV = {
    "chartevents": "mimic4/10_events_chartevents",
    "labevents": "mimic4/11_events_labevents",
    "inputevents": "mimic4/13_events_inputevents",
    "outputevents": "mimic4/14_events_outputevents",
    "prescriptions": "mimic4/15_events_prescriptions",
    "procedureevents": "mimic4/16_events_procedureevents",
    "microbiologyevents": "mimic4/17_events_microbiologyevents",
    "datetimeevents": "mimic4/18_events_datetimeevents",
}
EVENTS_BY_RELEASE = {MIMIC3: EVENT_SQL, MIMIC4: EVENT_SQL_IV}
EVENTS_USED = "30_events_used"
EVENTS_NONE = "31_events_none"
EVENTS = "32_events"
LAST_EVENT = "33_last_event"
FIT_BINS = "40_fit_bins"
FIT_TEXT_ITEMS = "41_fit_text_items"
TOKENS = "42_tokens"
FIT_VOCABULARY = "43_fit_vocabulary"
TOKENIZED = "44_tokenized"
BAGS = "45_bags"
_SHARED_COHORT = [ADMISSIONS_CLASSIFIED, COHORT, COHORT_SUBJECTS, COHORT_ROWS, COHORT_ELIGIBLE, DATA_END,
                  COHORT_EXCLUSIONS]
_SHARED_LOCAL = [EVENTS_WINDOW_HADM, EVENTS_WINDOW_SUBJECT, EVENTS_USED, EVENTS_NONE, EVENTS, LAST_EVENT,
                 FIT_BINS, FIT_TEXT_ITEMS, TOKENS, FIT_VOCABULARY, TOKENIZED, BAGS]


def build_order(release: str) -> list[str]:
    """The files one release's extraction runs, in order."""
    return [STAGED[release], *_SHARED_COHORT, *EVENTS_BY_RELEASE[release].values(), *_SHARED_LOCAL]


BUILD_ORDER = [STAGED[MIMIC3], STAGED[MIMIC4], *_SHARED_COHORT, *EVENT_SQL.values(), *EVENT_SQL_IV.values(),
               *_SHARED_LOCAL]
# Labs link to the cohort by patient (history before the admission counts).
LINK_KEY = {"labevents": "subject_id"}


@functools.cache
def load(name: str) -> str:
    path = SQL_DIR / f"{name}.sql"
    if not path.exists():
        raise FileNotFoundError(f"SQL file {path} not found")
    return path.read_text(encoding="utf-8")


def render(name: str, **params: object) -> str:
    """Substitute `${param}` placeholders; a missing parameter is an error."""
    try:
        return Template(load(name)).substitute({k: str(v) for k, v in params.items()})
    except KeyError as exc:
        raise KeyError(f"sql/{name}.sql needs parameter {exc.args[0]!r}") from None


def admissions_classified(relations: dict[str, str], release: str = MIMIC3, **params: object) -> str:
    """Every admission classified (01_admissions_classified over the release's staging SQL)."""
    staged = strip_comments(render(STAGED[release], **relations))
    return render(ADMISSIONS_CLASSIFIED, staged=staged, **params)


def events_sql(table: str, relations: dict[str, str], release: str = MIMIC3) -> str:
    """The windowed events query for one event table of ``release`` (DuckDB dialect)."""
    inner = strip_comments(render(EVENTS_BY_RELEASE[release][table], **relations))
    key = LINK_KEY.get(table, "hadm_id")
    if key == "hadm_id":
        return render(EVENTS_WINDOW_HADM, events=inner)
    return render(EVENTS_WINDOW_SUBJECT, events=inner, link_key=key)


def events_union(windows: list[str]) -> str:
    """Every used event of the windowed tables ``windows`` (e.g. ``ev_chartevents``), joined to the
    kept admissions (``adm``): 30_events_used per table, stacked (UNION ALL) into 32_events."""
    used = " UNION ALL ".join(strip_comments(render(EVENTS_USED, window=w)) for w in windows)
    return render(EVENTS, used=used or strip_comments(render(EVENTS_NONE)))
