"""The synthetic MIMIC's writer: ``generate`` runs the generative model chunk by chunk and writes the tables.

``generate`` validates its arguments, simulates ``chunk_patients`` patients at a time
(``simulation.simulate``, whose docstring is the model's specification and goes into
``_truth/README.json``), builds each table's rows from the chunk (``tables``, ``events_chart``,
``events_icu``, ``events_hosp``; one random stream per table and chunk) and appends them to
deterministic gzip CSVs (``csvgz``), in MIMIC-III's layout or, through ``mimic4``, MIMIC-IV's.
``workers`` > 1 encodes chunks in parallel processes: the same bytes. ``SynthSummary`` is what it wrote.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pipeline.core.errors import ConfigError
from pipeline.data.mimic.sources.tables import Release
from pipeline.data.mimic.synth import events_chart, events_hosp, events_icu, simulation, tables
from pipeline.data.mimic.synth.chunk import ADULT, Chunk, IdPool
from pipeline.data.mimic.synth.csvgz import CsvGzWriter, csv_member
from pipeline.data.mimic.synth.limits import MAX_PATIENTS
from pipeline.data.mimic.synth.simulation import MODEL, SynthConfig, simulate
from pipeline.data.mimic.synth.tables import COLUMNS, TRUTH_COLUMNS

# Chart rows per ICU hour = chart_rows_per_stay / _CHART_REF_HOURS. Calibrated: with 89 the model gave
# 4,709 rows per stay over 10,262 stays (seeds 21 and 22, 4,000 patients each at density 0.1),
# so 89 * 4709 / 5400 = 77.6.
_CHART_REF_HOURS = 77.6
# Each id's range, then the range it overflows into (MIMIC-IV's 8-digit numbering) when a world needs more:
# the first ranges hold MIMIC-III (46,520 patients, 58,976 admissions), the overflow MIMIC-IV's 299,712
# patients, their 431,231 admissions and 73,181 ICU stays.
ID_RANGES = {"SUBJECT_ID": ((10_000, 100_000), (10_000_000, 10_000_000 + MAX_PATIENTS)),
             "HADM_ID": ((100_000, 200_000), (20_000_000, 21_000_000)),
             "ICUSTAY_ID": ((200_000, 300_000), (30_000_000, 31_000_000))}
_TABLE_STREAMS = ("PATIENTS", "ADMISSIONS", "ICUSTAYS", "DIAGNOSES_ICD", "CHARTEVENTS", "LABEVENTS",
                  "INPUTEVENTS_CV", "INPUTEVENTS_MV", "OUTPUTEVENTS", "DATETIMEEVENTS", "PROCEDUREEVENTS_MV",
                  "MICROBIOLOGYEVENTS", "PRESCRIPTIONS")  # one random stream each (index + 1)


@dataclass
class SynthSummary:
    """What `generate` wrote: counts, the cohort base rate and the file paths."""

    out_dir: Path  # directory written
    patients: int  # PATIENTS rows
    admissions: int  # ADMISSIONS rows
    icustays: int  # ICUSTAYS rows
    deaths: int  # in-hospital deaths (HOSPITAL_EXPIRE_FLAG = 1)
    cohort_admissions: int  # adult admissions alive in hospital at T
    base_rate: float  # fraction of those that die in hospital after T
    mean_true_risk: float  # mean TRUE_RISK over the same admissions
    rows: dict[str, int] = field(default_factory=dict)  # rows written per table
    paths: dict[str, Path] = field(default_factory=dict)  # file per table (and "truth", "truth_readme")


# ---------------------------------------------------------------------------- generate
def generate(out_dir: Path | str, patients: int, seed: int = 0, config: SynthConfig | None = None,
             layout: Release | str = Release.mimic3, progress=None, workers: int = 1) -> SynthSummary:
    """Write a synthetic MIMIC-III (full-release layout) for `patients` patients into `out_dir`;
    ``layout="mimic-iv"`` writes the same world in MIMIC-IV's layout (hosp/, icu/; `data.mimic.synth.mimic4`).

    Same seed and arguments give byte-identical files. Tables are generated `chunk_patients`
    at a time and appended to gzip streams under temporary names, renamed at the end.
    `progress(done)` is called with the patients written so far after each chunk. ``workers`` > 1
    generates and compresses chunks in that many processes, in either layout: the same bytes.
    """
    from pipeline.core.fileio import write_json

    cfg = config or SynthConfig()
    cfg.validate()
    if isinstance(patients, bool) or not isinstance(patients, (int, np.integer)) or not 1 <= patients <= MAX_PATIENTS:
        raise ConfigError(f"patients must be an integer in [1, {MAX_PATIENTS}] (SUBJECT_ID range), got {patients!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ConfigError(f"seed must be a non-negative integer, got {seed!r}")
    if layout not in (Release.mimic3, Release.mimic4):  # the MIMIC layouts (Release.meds is no layout of its own)
        raise ConfigError(f"layout must be one of {[Release.mimic3.value, Release.mimic4.value]}, got {layout!r}")
    layout = Release(layout)
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ConfigError(f"--workers must be an integer >= 1, got {workers!r}")
    out = Path(out_dir)
    (out / "_truth").mkdir(parents=True, exist_ok=True)
    ids = np.random.default_rng([seed, 1 << 20])
    pools = [IdPool(ids, lo, hi, name, (o_lo, o_hi, np.random.default_rng([seed, 1 << 20, k])))
             for k, (name, ((lo, hi), (o_lo, o_hi))) in enumerate(ID_RANGES.items(), start=1)]
    subject = np.sort(pools[0].take(patients))
    hadm_pool, icu_pool = pools[1:]
    writers: dict[str, CsvGzWriter] = {}
    iv = None
    try:
        if layout is Release.mimic4:
            from pipeline.data.mimic.synth.mimic4 import Mimic4Writer

            iv = Mimic4Writer(out, cfg.gzip_level, seed)
        else:
            for name in COLUMNS:
                writers[name] = CsvGzWriter(out / f"{name}.csv.gz", COLUMNS[name], cfg.gzip_level)
        writers["truth"] = CsvGzWriter(out / "_truth" / "truth.csv.gz", TRUTH_COLUMNS, cfg.gzip_level)

        def emit(name: str, cols: dict, ch: Chunk | None = None, ci: int = 0) -> None:
            if iv is None or name == "truth":
                writers[name].write(cols)
            else:
                iv.write(name, cols, ch, ci)

        stats = _write_chunks(emit, cfg, seed, subject, hadm_pool, icu_pool, exact_rx=iv is not None,
                              progress=progress, workers=int(workers), writers=writers, iv=iv)
        emit("D_ITEMS", tables.d_items())
        emit("D_LABITEMS", tables.d_labitems())
        for w in writers.values():
            w.close()
        if iv is not None:
            iv.close()
    except BaseException:
        for w in writers.values():
            if w.tmp.exists():
                w.abort()
        if iv is not None:
            iv.abort()
        raise
    summary = SynthSummary(
        out_dir=out, patients=patients, admissions=stats["admissions"], icustays=stats["icustays"],
        deaths=stats["deaths"], cohort_admissions=stats["cohort"],
        base_rate=stats["cohort_deaths"] / max(stats["cohort"], 1),
        mean_true_risk=stats["risk_sum"] / max(stats["cohort"], 1),
        rows={**{name: w.rows for name, w in writers.items() if name != "truth"}, **(iv.rows if iv else {})},
        paths={**{name: w.path for name, w in writers.items()},
               **({name.split("/")[1]: w.path for name, w in iv.writers.items()} if iv else {})},
    )
    readme = out / "_truth" / "README.json"
    write_json(readme, {
        "generator": "pipeline.data.mimic.synth", "seed": int(seed), "patients": int(patients), "layout": layout.value,
        "prediction_hours": cfg.prediction_hours,
        "truth": "TRUE_RISK = P(in-hospital death after ADMITTIME + prediction_hours | everything generated up to "
                 "then), exact (the logistic model below); one row per admission alive in hospital at that time.",
        "config": asdict(cfg), "model": MODEL, "description": simulation.__doc__,
        "summary": {"admissions": summary.admissions, "cohort_admissions": summary.cohort_admissions,
                    "base_rate": summary.base_rate, "mean_true_risk": summary.mean_true_risk, "rows": summary.rows},
    })
    summary.paths["truth_readme"] = readme
    return summary


def _chunk_tables(cfg: SynthConfig, seed: int, ci: int, ch: Chunk, exact_rx: bool) -> list[tuple[str, dict]]:
    """Every table's rows of chunk ``ci`` (simulated as ``ch``), in the order they are written: (table, columns).
    Each table draws from its own stream ``[seed, ci, i + 1]``, so a chunk needs nothing of the others."""
    rows_per_hour = cfg.chart_rows_per_stay / _CHART_REF_HOURS
    dens = cfg.density
    rng = {name: np.random.default_rng([seed, ci, i + 1]) for i, name in enumerate(_TABLE_STREAMS)}
    out = [("PATIENTS", tables.patients(rng["PATIENTS"], ch)),
           ("ADMISSIONS", tables.admissions(rng["ADMISSIONS"], ch)),
           ("ICUSTAYS", tables.icustays(rng["ICUSTAYS"], ch)),
           ("DIAGNOSES_ICD", events_hosp.diagnoses_icd(rng["DIAGNOSES_ICD"], ch))]
    for system in (0, 1):
        out.append(("CHARTEVENTS", events_chart.chartevents(rng["CHARTEVENTS"], ch, system, dens, rows_per_hour)))
    out += [("LABEVENTS", events_hosp.labevents(rng["LABEVENTS"], ch, dens)),
            ("INPUTEVENTS_CV", events_icu.inputevents_cv(rng["INPUTEVENTS_CV"], ch, dens)),
            ("INPUTEVENTS_MV", events_icu.inputevents_mv(rng["INPUTEVENTS_MV"], ch, dens)),
            ("OUTPUTEVENTS", events_icu.outputevents(rng["OUTPUTEVENTS"], ch, dens)),
            ("DATETIMEEVENTS", events_icu.datetimeevents(rng["DATETIMEEVENTS"], ch, dens)),
            ("PROCEDUREEVENTS_MV", events_icu.procedureevents_mv(rng["PROCEDUREEVENTS_MV"], ch, dens)),
            ("MICROBIOLOGYEVENTS", events_hosp.microbiologyevents(rng["MICROBIOLOGYEVENTS"], ch, dens)),
            ("PRESCRIPTIONS", events_hosp.prescriptions(rng["PRESCRIPTIONS"], ch, dens, exact=exact_rx)),
            ("truth", tables.truth(ch))]
    return out


def _write_chunks(emit, cfg: SynthConfig, seed: int, subject, hadm_pool, icu_pool, exact_rx: bool = False,
                  progress=None, workers: int = 1, writers: dict | None = None, iv=None) -> dict[str, float]:
    """Simulate and write every chunk through ``emit(table, columns, chunk, chunk index)``; returns counts
    for the summary. ``exact_rx``: PRESCRIPTIONS keep the order's time (the MIMIC-IV layout). ``progress``:
    called with the patients written so far after each chunk. ``workers`` > 1 (``writers`` given, and ``iv``,
    the ``Mimic4Writer``, for MIMIC-IV's layout): chunks are generated and encoded by that many processes
    (``_parallel``), each chunk's gzip members appended in chunk order: the same bytes as one process writes."""
    stats = dict(admissions=0, icustays=0, deaths=0, cohort=0, cohort_deaths=0, risk_sum=0.0)
    sims = ((ci, simulate(np.random.default_rng([seed, ci, 0]), cfg, subject[start:start + cfg.chunk_patients],
                           hadm_pool, icu_pool))
            for ci, start in enumerate(range(0, len(subject), cfg.chunk_patients)))
    if workers > 1:
        n_chunks = -(-len(subject) // cfg.chunk_patients)
        done = _parallel(sims, n_chunks, cfg, seed, {**writers, **(iv.writers if iv is not None else {})}, workers,
                         exact_rx, iv is not None)
    else:
        def serial():
            for ci, ch in sims:
                for name, cols in _chunk_tables(cfg, seed, ci, ch, exact_rx):
                    emit(name, cols, ch, ci)
                yield ci, ch
        done = serial()
    for ci, ch in done:
        cohort = (ch.kind == ADULT) & ~ch.early
        stats["admissions"] += len(ch.pat)
        stats["icustays"] += len(ch.stay_adm)
        stats["deaths"] += int(ch.died.sum())
        stats["cohort"] += int(cohort.sum())
        stats["cohort_deaths"] += int(ch.died[cohort].sum())
        stats["risk_sum"] += float(ch.risk[cohort].sum())
        if progress is not None:
            progress(min((ci + 1) * cfg.chunk_patients, len(subject)))
    return stats


# ---------------------------------------------------------------------------- parallel chunks
# A worker encodes chunk ci's tables once it knows where their ROW_IDs (MIMIC-IV: their ids) start: the rows
# of every earlier chunk, which each worker publishes (``_SHARED["rows"]``) as soon as its chunk is generated,
# before encoding it.
_SHARED: dict = {}
_CHUNK_TABLES = (*_TABLE_STREAMS, "truth")  # the tables of a chunk (``_chunk_tables``), rows counted per chunk


def _init_worker(rows, ready) -> None:
    _SHARED.update(rows=rows, ready=ready)


def _encode_chunk(args) -> tuple[int, list[tuple[str, bytes, int]]]:
    """Chunk ci's gzip members: [(writer, member, rows)] in the order one process writes them."""
    import time

    from pipeline.data.mimic.synth.mimic4 import Mimic4Converter, first_ids

    cfg, seed, ci, ch, exact_rx, mimic4, columns = args
    tables = _chunk_tables(cfg, seed, ci, ch, exact_rx)
    rows, ready, k = _SHARED["rows"], _SHARED["ready"], len(_CHUNK_TABLES)
    counts = dict.fromkeys(_CHUNK_TABLES, 0)
    for name, cols in tables:
        counts[name] += len(next(iter(cols.values())))
    for j, name in enumerate(_CHUNK_TABLES):
        rows[ci * k + j] = counts[name]
    ready[ci] = 1
    while not all(ready[:ci]):  # the earlier chunks were handed out first: each is being generated
        time.sleep(0.002)
    before = {name: sum(rows[c * k + j] for c in range(ci)) for j, name in enumerate(_CHUNK_TABLES)}
    first = {name: 1 + n for name, n in before.items()}  # MIMIC-III's ROW_IDs
    iv = Mimic4Converter(seed, first_ids(before)) if mimic4 else None
    out = []
    for name, cols in tables:
        target = name
        if iv is not None and name != "truth":
            converted = iv.convert(name, cols, ch, ci)
            if converted is None:  # no rows: one process writes nothing either
                continue
            target, cols = converted
        member, n = csv_member(columns[target], cols, first[name], cfg.gzip_level, target)
        first[name] += n
        out.append((target, member, n))
    return ci, out


def _parallel(sims, n_chunks: int, cfg: SynthConfig, seed: int, writers: dict, workers: int, exact_rx: bool,
              mimic4: bool):
    """Yield (chunk index, chunk) in order after appending each chunk's members, encoded by ``workers``
    processes (fork: each gets the shared row counts), to ``writers`` (MIMIC-IV: its tables' and the truth's).
    Chunks are simulated here, in order (the id pools are drawn in order), ``_BATCH`` per worker at a time:
    the simulations of a whole world (2.3 MB a chunk, 3,000 chunks for MIMIC-IV) are never held at once."""
    import itertools
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    rows, ready = ctx.RawArray("q", n_chunks * len(_CHUNK_TABLES)), ctx.RawArray("b", n_chunks)
    columns = {name: w.columns for name, w in writers.items()}
    sims = iter(sims)
    with ctx.Pool(workers, initializer=_init_worker, initargs=(rows, ready)) as pool:
        while batch := dict(itertools.islice(sims, _BATCH * workers)):
            jobs = [(cfg, seed, ci, ch, exact_rx, mimic4, columns) for ci, ch in batch.items()]
            for ci, members in pool.imap(_encode_chunk, jobs):
                for name, member, n in members:
                    writers[name].write_member(member, n)
                yield ci, batch[ci]


_BATCH = 8  # chunks simulated ahead per worker (the simulation is ~1 % of the work)
