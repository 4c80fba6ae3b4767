"""The prediction times of a census to score on a MEDS dataset (``score --source MEDS_DIR``; ``extract_meds`` with a
trained vocabulary): no label is needed, so a stay still open is scored too.

- ``times``: a file of prediction times, Parquet (MEDS's label schema: ``subject_id``, ``prediction_time``; a label
  column is ignored) or CSV with those two columns (a header naming them; times as ``YYYY-MM-DD HH:MM[:SS]``). A
  null or unreadable value is an error naming the file and the row (never its value).
- else an ACES task config (``task``, or a MEDS-DEV task by name, ``meds-dev:<task>``, with the dataset's
  predicates; neither: the shipped config that fits the dataset's ``dataset.json``) run without its label window
  (``labels.census_config``): the trigger's events whose windows up to the prediction time hold.

A time that cannot be scored is listed with its reason (``CATEGORIES``), never silently dropped: a subject with no
row in ``data/``, a prediction time after the dataset's last event (the data cannot show what a model would see
then), the same (subject, time) given again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.data.meds import labels as labels_mod
from pipeline.data.meds import medsdev
from pipeline.data.meds.layout import MedsError, MedsLayout

ABSENT = "absent: no such subject_id in data/"
AFTER_END = "after the data's last event"
DUPLICATE = "duplicate (subject_id, prediction_time)"
CATEGORIES = (ABSENT, AFTER_END, DUPLICATE)  # why a census time is not scored, in this order


def read_times(path: str | Path) -> pd.DataFrame:
    """subject_id (int64) and prediction_time (epoch microseconds, int64) of a times file (module docstring)."""
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise MedsError(f"--times {path}: no such file")
    if path.suffix.lower() == ".parquet":
        try:
            table = pq.read_table(path)
        except (pa.ArrowInvalid, OSError) as exc:
            raise MedsError(f"{path}: not a readable Parquet file ({' '.join(str(exc).split())[:200]})") from None
        _columns(path, table.column_names)
        subject, when = table.column("subject_id"), table.column("prediction_time")
        if not pa.types.is_integer(subject.type):
            raise MedsError(f"{path}: column 'subject_id' must hold integers, got {subject.type}")
        if not pa.types.is_timestamp(when.type):
            raise MedsError(f"{path}: column 'prediction_time' must hold timestamps, got {when.type}")
        for name, col in (("subject_id", subject), ("prediction_time", when)):
            if col.null_count:
                row = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                raise MedsError(f"{path}: column {name!r} row {row} is null")
        return pd.DataFrame({"subject_id": subject.to_numpy().astype("int64"),
                             "prediction_time": when.cast(pa.timestamp("us")).cast(pa.int64()).to_numpy()})
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise MedsError(f"{path}: not a readable CSV file ({type(exc).__name__})") from None
    frame.columns = [c.strip().lower() for c in frame.columns]
    _columns(path, list(frame.columns))
    subject = pd.to_numeric(frame["subject_id"].str.strip(), errors="coerce")
    when = pd.to_datetime(frame["prediction_time"].str.strip(), errors="coerce", format="mixed")
    for name, bad in (("subject_id", subject.isna() | (subject % 1 != 0)), ("prediction_time", when.isna())):
        if bad.any():  # the line number: the header is line 1
            raise MedsError(f"{path}: line {int(np.flatnonzero(bad.to_numpy())[0]) + 2}: no {name} (expected "
                            + ("an integer)" if name == "subject_id" else "a time YYYY-MM-DD HH:MM[:SS])"))
    return pd.DataFrame({"subject_id": subject.astype("int64").to_numpy(),
                         "prediction_time": when.astype("datetime64[us]").astype("int64").to_numpy()})


def _columns(path: Path, names: list[str]) -> None:
    missing = [c for c in ("subject_id", "prediction_time") if c not in names]
    if missing:
        raise MedsError(f"{path}: no column {missing[0]!r} (a times file holds subject_id and prediction_time, as "
                        "MEDS label files do)")


def prediction_times(layout: MedsLayout, task: str | Path | None = None, times: str | Path | None = None,
                     predicates: str | Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(the times to score: subject_id, prediction_time; the others: subject_id, prediction_time, reason; what the
    manifest records of where they came from) of a census (module docstring). ``layout``: validated (its subjects
    and last event known); ``predicates``: a predicates file for ``task`` (``labels.run_task``)."""
    if times is not None and task is not None:
        raise MedsError("give the census's prediction times (times) or a task config (task), not both")
    if times is not None:
        frame, info = read_times(times), {"times": str(Path(times).resolve())}
    else:
        if medsdev.is_medsdev(task):  # a MEDS-DEV task by name: its config, with the dataset's predicates
            task = medsdev.resolve(task, layout.dataset.get("dataset_name"), predicates,
                                   where=str(layout.root / "metadata" / "dataset.json"))
        if isinstance(task, medsdev.MedsDevTask):
            task, predicates = task.config, task.predicates
        path = Path(task) if task is not None else labels_mod.shipped_task(layout)
        table = labels_mod.run_task(path, layout, census=True, predicates=predicates)
        frame = pd.DataFrame({"subject_id": table.column("subject_id").to_numpy().astype("int64"),
                              "prediction_time": table.column("prediction_time").cast(pa.int64()).to_numpy()})
        info = {"task": str(path.resolve()), "shipped": task is None, "census": "the task without its label window"}
    reason = pd.Series(None, index=frame.index, dtype=object)
    reason[~frame["subject_id"].isin(layout.subjects)] = ABSENT
    if layout.last_time is not None:
        reason[reason.isna() & (frame["prediction_time"] > layout.last_time)] = AFTER_END
    reason[reason.isna() & frame.duplicated(["subject_id", "prediction_time"])] = DUPLICATE
    skipped = frame[reason.notna()].assign(reason=reason[reason.notna()])
    return frame[reason.isna()].reset_index(drop=True), skipped.reset_index(drop=True), {**info, "rows": len(frame)}


def counts(skipped: pd.DataFrame) -> dict[str, int]:
    """Census times not scored, per reason (``CATEGORIES`` order, zeros kept)."""
    found = skipped["reason"].value_counts().to_dict() if len(skipped) else {}
    return {c: int(found.get(c, 0)) for c in CATEGORIES}
