"""``cli.py monitor``: a scored cohort's promise watched as its outcomes arrive (issue 43, item 3).

``monitor(run, scores, outcomes)`` reads the outcomes received since the last call (``read_outcomes``: a CSV of
``key,label``, or MEDS label files whose subject and prediction time give the pseudonym as the MEDS extraction
forms it, with the de-identification key), matches them to the scores ``score`` wrote for the run, and feeds them,
in the file's order, to the anytime-valid monitor of the kept miss rate and the flagged sensitivity
(``bayes.monitor``) at the promise the scores were made with (the scores file records it: ``summary.scores_meta``).
The state (the monitor's counts, which scored admissions have had their outcome, the scores file's digest) is a
JSON file written atomically beside the scores (``<scores>.monitor.json``) or at ``state``; the next call continues
from it, so repeated calls append to one stream.

Everything is checked before anything is written (nothing half-written; one line naming the file and row): the
scores must be the run's (another run's cohort is refused), the outcome column present and 0/1, each key in the
scored cohort, once in the file and not received in an earlier call. The state holds no key: the scored rows that
have an outcome are a bitmap over the scores file's rows.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.core import fileio
from pipeline.core.errors import PipelineError

STATE_FORMAT = 1  # the state file's version
CSV_COLUMNS = ("key", "label")  # an outcomes CSV's columns


class MonitorError(PipelineError, ValueError):
    """Input the monitor cannot use; the message names the file and row."""


def state_path(scores: Path, state: Path | None = None) -> Path:
    """Where the state lives: ``state``, else ``<scores stem>.monitor.json`` beside the scores."""
    return Path(state) if state is not None else Path(scores).with_name(Path(scores).stem + ".monitor.json")


@dataclass
class Outcomes:
    """Outcomes read from a file, in its order."""

    keys: np.ndarray  # (N,) str pseudonyms
    labels: np.ndarray  # (N,) 0/1
    where: list[str]  # (N,) "FILE row R" of each, for messages


def _label_values(raw, where: list[str]) -> np.ndarray:
    """0/1 labels from a column of 0/1 (or true/false) values; one line naming the first bad row."""
    import pandas as pd

    text = pd.Series(raw).astype("string").str.strip().str.lower()
    y = text.map({"0": 0, "1": 1, "0.0": 0, "1.0": 1, "false": 0, "true": 1})
    bad = np.flatnonzero(y.isna().to_numpy())
    if bad.size:
        shown = "missing" if pd.isna(text.iloc[bad[0]]) else f"{str(text.iloc[bad[0]])[:20]!r}"
        raise MonitorError(f"{where[bad[0]]}: column 'label' is {shown}: an outcome is 0 or 1 ({bad.size} such rows)")
    return y.to_numpy(dtype=np.int8)


def read_outcomes(path: Path | str) -> Outcomes:
    """The outcomes of ``path``: a CSV with columns ``key,label`` (others ignored), or MEDS label files (a Parquet
    file, or a folder of them: subject_id, prediction_time, boolean_value)."""
    path = Path(path)
    if not path.exists():
        raise MonitorError(f"{path}: no such outcomes file")
    if path.is_dir() or path.suffix == ".parquet":
        return _meds_outcomes(path)
    import pandas as pd

    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    except (ValueError, UnicodeDecodeError, OSError) as exc:
        raise MonitorError(f"{path}: not a readable CSV of key,label ({type(exc).__name__})") from None
    missing = [c for c in CSV_COLUMNS if c not in frame.columns]
    if missing:
        raise MonitorError(f"{path}: missing column(s) {missing}; an outcomes file holds key,label (the pseudonym "
                           f"of a scored admission and its outcome, 0 or 1), found {list(frame.columns)[:8]}")
    where = [f"{path} row {i + 1}" for i in range(len(frame))]  # data rows, 1-based, after the header
    keys = frame["key"]
    blank = np.flatnonzero(keys.isna().to_numpy())
    if blank.size:
        raise MonitorError(f"{where[blank[0]]}: column 'key' is empty ({blank.size} such rows)")
    return Outcomes(keys.astype(str).str.strip().to_numpy(), _label_values(frame["label"], where), where)


def _meds_outcomes(path: Path) -> Outcomes:
    """MEDS label files: each label's pseudonym as the MEDS extraction forms it (``data.meds.flow.pseudonym``)."""
    from pipeline.data.meds.flow import pseudonym
    from pipeline.data.meds.labels import read_label_files
    from pipeline.data.mimic import deid

    try:
        frame, names = read_label_files(path)
    except PipelineError as exc:
        raise MonitorError(str(exc)) from None
    where = [f"{names[f]} row {r}" for f, r in zip(frame["file"], frame["row"])]
    key = deid.load_key(create=False)
    keys = np.array([pseudonym(key, s, t) for s, t in zip(frame["subject_id"], frame["prediction_time"])])
    raw = frame["boolean_value"].astype("object").where(frame["boolean_value"].notna(), None)
    return Outcomes(keys, _label_values(raw.map(lambda v: None if v is None else int(bool(v))), where), where)


@dataclass
class MonitorResult:
    """What one call of ``monitor`` did and found."""

    state_file: Path  # the state written
    received: int  # outcomes of this call
    report: dict  # bayes.monitor's report (counts, bounds, alarm, the sentence) and the stream's context
    sentence: str  # the promise's state in one sentence (the alarm's when it is raised)

    @property
    def alarm(self) -> bool:
        return bool(self.report.get("alarm"))

    def summary(self) -> str:
        """What ``cli.py monitor`` prints."""
        r = self.report
        head = "ALARM: " if self.alarm else ""
        sens = r.get("sensitivity")
        lo, hi = r["sensitivity_bounds"]
        flagged = (f"flagged sensitivity {sens:.1%} ({r['flagged']:,} of {r['deaths']:,} {r['outcomes']} flagged high "
                   f"risk; in [{lo:.1%}, {hi:.1%}], each bound with {r['confidence']:.0%} confidence)"
                   if sens is not None else f"flagged sensitivity: no {r['outcomes']} yet")
        return "\n".join([f"{head}{self.sentence}", f"  {self.received:,} outcomes received now, "
                          f"{r['admissions']:,} in all of {r['scored']:,} scored admissions; {flagged}",
                          f"  state: {self.state_file}"])


def _scores(scores: Path, run_id: str):
    """(keys, refer, high_risk, the promise) of a scores file ``score`` wrote for run ``run_id``."""
    import pyarrow.parquet as pq

    from pipeline.serving.summary import scores_meta

    if not scores.exists():
        raise MonitorError(f"{scores}: no such scores file")
    try:
        meta = scores_meta(scores)
        table = pq.read_table(scores, columns=["key", "refer", "high_risk"])
    except (OSError, ValueError, KeyError) as exc:
        raise MonitorError(f"{scores}: not a scores file written by `score` ({type(exc).__name__})") from None
    if meta is None:
        raise MonitorError(f"{scores}: the scores do not record the run that made them (written by an older version): "
                           "score the cohort again")
    if meta.get("run_id") != run_id:
        raise MonitorError(f"{scores}: scored by run {meta.get('run_id')}, not run {run_id}: these admissions are "
                           "another run's cohort (give that run, or the scores of this one)")
    promise = meta.get("promise")
    if not promise:
        raise MonitorError(f"{scores}: scored with no refer rule (run {run_id} has no policy): there is no promise to "
                           "watch")
    if promise.get("risk") != "miss_rate":
        raise MonitorError(f"{scores}: the refer rule bounds the {promise.get('risk')} risk; the monitor watches the "
                           "miss rate (a run scored with --risk miss_rate)")
    keys = table.column("key").to_numpy(zero_copy_only=False).astype(str)
    return keys, table.column("refer").to_numpy(), table.column("high_risk").to_numpy(), promise


def _bits(seen: np.ndarray) -> str:
    return base64.b64encode(np.packbits(seen).tobytes()).decode("ascii")


def _unbits(text: str, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(base64.b64decode(text), dtype=np.uint8))[:n].astype(bool)


def _read_state(path: Path, run_id: str, scores: Path, digest: str, n: int, promise: dict):
    """(MonitorState, seen (n,) bool) from the state file, or a fresh one; the file must belong to these scores."""
    from pipeline.bayes import monitor as bm

    if not path.exists():
        return bm.start(promise["alpha"], promise["delta"]), np.zeros(n, dtype=bool)
    try:
        d = fileio.read_json(path)
        if d.get("format") != STATE_FORMAT:
            raise ValueError(f"format {d.get('format')!r}")
        state, seen = bm.MonitorState.from_dict(d["monitor"]), _unbits(d["seen"], n)
    except (ValueError, KeyError, TypeError) as exc:
        raise MonitorError(f"{path}: not a monitor state file ({exc})") from None
    if d.get("run_id") != run_id or d.get("scores_sha256") != digest:
        raise MonitorError(f"{path}: the state of another stream (run {d.get('run_id')}, other scores than {scores}); "
                           "give --state a new file for these scores")
    return state, seen


def monitor(run: str, scores: Path | str, outcomes: Path | str, state: Path | str | None = None) -> MonitorResult:
    """One call of the monitor (module docstring): ``run`` the run (its id) that scored ``scores``; ``outcomes``
    this call's outcomes file; ``state`` the state file (default beside the scores)."""
    from pipeline.bayes import monitor as bm

    run_id = _run_id(run)
    scores = Path(scores)
    keys, refer, high, promise = _scores(scores, run_id)
    path = state_path(scores, state)
    digest = fileio.sha256_file(scores)
    current, seen = _read_state(path, run_id, scores, digest, keys.shape[0], promise)
    got = read_outcomes(outcomes)
    rows = _match(got, keys, seen)
    nxt = bm.update(current, got.labels, refer[rows], high[rows])
    seen = seen.copy()
    seen[rows] = True
    words = _outcome_words(run_id)
    fileio.write_json(path, {"format": STATE_FORMAT, "run_id": run_id, "scores": scores.name,
                             "scores_sha256": digest, "scored": int(keys.shape[0]), "promise": promise,
                             "monitor": nxt.to_dict(), "seen": _bits(seen)})
    report = {**nxt.report(words), "run_id": run_id, "scored": int(keys.shape[0]), "received": len(rows),
              "outcomes": words, "scores": str(scores), "state": str(path)}
    return MonitorResult(path, len(rows), report, report["sentence"])


def _run_id(run: str) -> str:
    """The id of a tracked run (an id or ``runs:/<id>/...``), checked to exist in the tracking store."""
    from pipeline.runs import store
    from pipeline.runs.load import RUN_URI

    m = RUN_URI.match(str(run).strip())
    if not m:
        raise MonitorError(f"{run!r} is not a run id (32 hexadecimal digits, as `train` prints it after run_id:)")
    try:
        store.client().get_run(m.group(1))
    except Exception as exc:  # noqa: BLE001 - mlflow raises MlflowException for unknown ids
        raise store.run_not_found(m.group(1), exc) from None
    return m.group(1)


def _match(got: Outcomes, keys: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """(N,) the scored row of each outcome; one line naming the first outcome with no, a repeated or an earlier one."""
    import pandas as pd

    index = pd.Index(keys)
    rows = index.get_indexer(got.keys)
    unknown = np.flatnonzero(rows < 0)
    if unknown.size:
        raise MonitorError(f"{got.where[unknown[0]]}: key not in the scored cohort ({unknown.size} such rows): "
                           "outcomes of admissions these scores do not hold (another cohort, or another key)")
    dup = np.flatnonzero(pd.Series(rows).duplicated().to_numpy())
    if dup.size:
        first = got.where[int(np.flatnonzero(rows == rows[dup[0]])[0])]
        raise MonitorError(f"{got.where[dup[0]]}: key repeated (first at {first}): one outcome per admission "
                           f"({dup.size} repeated rows)")
    again = np.flatnonzero(seen[rows])
    if again.size:
        raise MonitorError(f"{got.where[again[0]]}: this admission's outcome was received in an earlier call "
                           f"({again.size} such rows): one outcome per admission")
    return rows


def _outcome_words(run_id: str) -> str:
    """The outcome's plural in words, from the run's features manifest (``data.task``; "deaths" by default)."""
    import tempfile

    from pipeline.data.task import of_manifest
    from pipeline.runs import store

    try:
        with tempfile.TemporaryDirectory(prefix="monitor-") as tmp:
            manifest = fileio.read_json(store.client().download_artifacts(
                run_id, f"{store.FEATURES_ARTIFACTS}/{store.MANIFEST}", tmp))
    except Exception:  # noqa: BLE001 - a run without a manifest (or an unreachable artifact): the default words
        manifest = None
    return of_manifest(manifest).outcomes


__all__ = ["MonitorError", "MonitorResult", "Outcomes", "monitor", "read_outcomes", "state_path"]
