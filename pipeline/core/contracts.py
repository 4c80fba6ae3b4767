"""The data contracts between the stages, declared once.

- ``FEATURES``: the features table that ``extract`` writes (one row per admission) and that
  training, evaluation, ``score`` and the MLflow pyfunc read.
- ``RISK``: the risk table that ``predict`` computes and ``score`` / the pyfunc return.
- ``COHORT_COLUMNS``: the columns of ``sql/02_cohort.sql`` that a census condition may use
  (``OUTCOME_COLUMNS``: the others).

A column's type is written as Arrow spells it (``list<list<int32>>``); ``arrow_type`` builds the
pyarrow type and ``accepts`` says whether a file's type can be read as it (any integer width,
large strings and large lists are accepted). Only the standard library is imported here;
pyarrow is imported inside the functions that need it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

FEATURE_VERSION = 3  # 3: bag_values (with extract --values); 2: observed_hours and before_prediction_time
    # (readers accept 1 and 2)
# A features directory (``extract --out``): one Parquet file per split (or the census's cohort.parquet) beside
VOCAB_FILE = "vocab.json"  # the vocabulary (tokens, context, bins, text items) the splits' ids index
MANIFEST_FILE = "manifest.json"  # what the extraction did (source, release, settings, splits, accounting)
BASELINE_FILE = "baseline.npz"  # a classical baseline's model file (named arrays, no pickle), beside torch's best.pt
TRAIN_CONFIG_FILE = "train_config.json"  # a run's training settings (beside its model_info.json)
SHIFT_REFERENCE_FILE = "shift_reference.npz"  # what a run's shift check compares a scored cohort with (beside its
    # model_info.json: bayes.shift's ShiftReference, the calibration half's outputs and a feature sample)
# Monte Carlo samples per mixture component when neither the caller nor the model says (a model
# stores the number its refer threshold was chosen with as ``score_samples``; see predict.score_samples)
DEFAULT_SAMPLES = 25
# Admissions per forward pass of every scoring entry point (evaluate, score, the pyfunc and `serve`,
# tasks.mortality.risk.score_features, the refer threshold chosen in training). One number because a rank-1
# model's weight draws are shared by the rows of a batch: which admissions are scored together
# changes each admission's draws (never their distribution), so the same seed gives the same
# numbers only with the same batches. 128: what evaluation has always used (`make main`'s table),
# about 0.5 GB peak at DEFAULT_SAMPLES samples x 4 components.
DEFAULT_BATCH = 128
# Fewer deaths than this in a split: its 95% intervals, ECE and calibration slope cannot be judged
# (evaluate's table and the cohort report say so instead of presenting them as findings).
MIN_DEATHS = 10


class Use(str, Enum):
    """Who needs a column of a table."""

    REQUIRED = "required"  # every reader needs it (training, evaluation, scoring, the pyfunc)
    LABEL = "label"  # training and evaluation need it; scoring reads it where present
    WINDOW = "window"  # optional: read where present (features of FEATURE_VERSION 2)
    VALUES = "values"  # optional: read where present (FEATURE_VERSION 3); a model with a value channel needs it
    METADATA = "metadata"  # written for people and splits; no model reads it


@dataclass(frozen=True)
class Column:
    """One column of a contract table."""

    name: str  # column name
    type: str  # Arrow type as written: string, int8, float32, bool, list<int32>, list<list<int32>>, ...
    use: Use  # who needs it
    meaning: str  # one line, for the docs


@dataclass(frozen=True)
class Table:
    """A table's columns in file order."""

    name: str  # what the table is called in messages and docs
    columns: tuple[Column, ...]  # in file order

    def names(self, *uses: Use) -> tuple[str, ...]:
        """Column names (of the given uses; all when none given), in file order."""
        return tuple(c.name for c in self.columns if not uses or c.use in uses)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def arrow_schema(self, names: tuple[str, ...] | None = None):
        """pyarrow schema of the table (or of the columns ``names``, in file order)."""
        import pyarrow as pa

        keep = set(names) if names is not None else None
        return pa.schema([(c.name, arrow_type(c.type)) for c in self.columns if keep is None or c.name in keep])

    def markdown(self) -> str:
        """The table as a Markdown table (name, type, use, meaning): the docs' copy is checked against it."""
        rows = ["| column | type | use | meaning |", "|---|---|---|---|"]
        rows += [f"| `{c.name}` | {c.type} | {c.use.value} | {c.meaning} |" for c in self.columns]
        return "\n".join(rows) + "\n"


FEATURES = Table("features", (
    Column("key", "string", Use.REQUIRED, "32-hex HMAC-SHA256 pseudonym of HADM_ID (never the raw id)"),
    Column("label", "int8", Use.LABEL, "1 = in-hospital death after the prediction time"),
    Column("age", "float32", Use.METADATA, "age at admission in years, capped at 90"),
    Column("gender", "string", Use.METADATA, "context category (also encoded in `context`)"),
    Column("admission_type", "string", Use.METADATA, "context category (also encoded in `context`)"),
    Column("admission_location", "string", Use.METADATA, "context category (also encoded in `context`)"),
    Column("icu_system", "string", Use.METADATA, "`carevue`, `metavision` or `none` (the era split's key)"),
    Column("context", "list<int32>", Use.REQUIRED, "context token ids, into `vocab.json[\"context\"]`"),
    Column("bag_hours", "list<float32>", Use.REQUIRED,
           "start of each bag, hours after ADMITTIME (negative = history before the admission)"),
    Column("bags", "list<list<int32>>", Use.REQUIRED,
           "token ids per bag (sorted, unique), into `vocab.json[\"tokens\"]`"),
    Column("bag_values", "list<list<float32>>", Use.VALUES,
           "per token of `bags`: mean of its events' (value - center) / scale, clipped to ±5; 0 without a binned value "
           "or out of vocabulary (`extract --values`)"),
    Column("n_events", "int32", Use.REQUIRED, "events used before the prediction time"),
    Column("observed_hours", "float32", Use.WINDOW,
           "hours of [ADMITTIME, T) the data covers (the whole window when training)"),
    Column("before_prediction_time", "bool", Use.WINDOW, "the data ends before T: a partial window (census only)"),
))

# The feature files of a MEDS source (``pipeline.data.meds``): the same model inputs as FEATURES (train, evaluate,
# laplace, score and serve read them unchanged), one row per label (subject_id, prediction_time), with the time
# origin at the prediction time T instead of ADMITTIME and the context a MEDS dataset has (its static codes and
# MEDS_BIRTH) instead of MIMIC's admission columns. The manifest records ``release`` "meds:<dataset_name>" and
# ``time_origin`` "prediction_time" (config ``prediction_hours`` 0: the window [T - lookback, T] ends at the origin).
_MEDS_MEANING = {
    "key": "32-hex HMAC-SHA256 pseudonym of (subject_id, prediction_time) (never the raw id or time)",
    "label": "the task's boolean label (MEDS `boolean_value`)",
    "context": "context token ids (age decade, the subject's static codes), into `vocab.json[\"context\"]`",
    "bag_hours": "start of each bag, hours relative to the prediction time (negative; the last hourly bag [-1, 0] "
                 "also holds events at exactly the prediction time, MEDS's inclusive end)",
    "observed_hours": "0: the window ends at the prediction time, the time origin (fully observed)",
    "before_prediction_time": "false: a MEDS label's window always ends at its prediction time",
}
MEDS_FEATURES = Table("MEDS features", (
    Column("key", "string", Use.REQUIRED, _MEDS_MEANING["key"]),
    Column("label", "int8", Use.LABEL, _MEDS_MEANING["label"]),
    Column("source", "string", Use.METADATA, "`meds:<dataset_name>` (`metadata/dataset.json`), beside mimic-iii / "
           "mimic-iv"),
    Column("age", "float32", Use.METADATA, "age at the prediction time in years from MEDS_BIRTH, capped at 90 (NaN "
           "without one)"),
    *(Column(c.name, c.type, c.use, _MEDS_MEANING.get(c.name, c.meaning)) for c in FEATURES.columns
      if c.name not in ("key", "label", "age", "gender", "admission_type", "admission_location", "icu_system")),
))

RISK = Table("risk", (
    Column("key", "string", Use.REQUIRED, "the admission's pseudonym"),
    Column("risk_mean", "float64", Use.REQUIRED, "predictive probability of the outcome (the task's label: in-hospital "
           "death for the MIMIC cohorts), mean over the draws"),
    Column("risk_sd", "float64", Use.REQUIRED,
           "standard deviation of the probability under the weight posterior (the draws, or a Laplace model's Gaussian "
           "logit)"),
    Column("risk_p05", "float64", Use.REQUIRED, "5th percentile of the probability under the weight posterior"),
    Column("risk_p95", "float64", Use.REQUIRED, "95th percentile of the probability under the weight posterior"),
    Column("mutual_info", "float64", Use.REQUIRED, "mutual information between label and weights (nats)"),
    Column("entropy", "float64", Use.REQUIRED, "predictive entropy of risk_mean (nats): the total uncertainty"),
    Column("has_spread", "bool", Use.REQUIRED,
           "the weight posterior moves this admission's risk; false: the zero risk_sd, band and mutual_info mean no "
           "posterior reaches it (a point model, or a Laplace admission on no subnetwork weight), not certainty"),
    Column("risk_calibrated", "float64", Use.REQUIRED,
           "risk_mean through the run's recalibration map (fitted on validation admissions kept apart from early "
           "stopping); what the decision and the refer rule use. NaN: the run has no calibration (trained before it, "
           "or its validation halves could not fit one: `score` says why)"),
    Column("risk_va_low", "float64", Use.REQUIRED,
           "p0, low end of the Venn-Abers pair of risk_mean from the run's calibration half (one of the two ends is a "
           "calibrated probability; the width says how far the calibration data pin the risk down). It contains "
           "risk_calibrated when the map is venn_abers, not necessarily otherwise. NaN: none"),
    Column("risk_va_high", "float64", Use.REQUIRED, "p1, high end of the Venn-Abers pair, >= risk_va_low (NaN: none)"),
    Column("high_risk", "bool", Use.REQUIRED,
           "risk_calibrated at or above the run's decision threshold (false: the run has no decision threshold)"),
    Column("decision_uncertainty", "float64", Use.REQUIRED,
           "posterior probability that the risk lies on the other side of the decision threshold (the draws' share, "
           "or the Laplace Gaussian logit's in closed form; 0 for a point model; NaN: no threshold)"),
    Column("refer", "bool", Use.REQUIRED,
           "referred for review: the run's refer rule (its ordering measure above the rule's cut, chosen so that "
           "the kept admissions' risk is at most alpha with probability 1 - delta: `score` prints the promise); a "
           "run without one: its refer measure (model_info `refer_measure`) above its validation threshold"),
    Column("n_events", "int64", Use.REQUIRED, "events used (-1 when the input does not say)"),
    Column("no_events", "bool", Use.REQUIRED, "no bag: the model saw only the context"),
    Column("observed_hours", "float64", Use.REQUIRED, "hours of the window observed (-1: unknown)"),
    Column("before_prediction_time", "bool", Use.REQUIRED, "the risk rests on a partial window"),
))

# The pyfunc's input columns: the required features, observed_hours and bag_values (optional there;
# a model with a value channel refuses a request without bag_values). before_prediction_time is
# derived from observed_hours and the model's window: an optional boolean input arrives as NaN
# where absent, which MLflow refuses to cast.
PYFUNC_OPTIONAL = ("observed_hours", "bag_values")

# Columns of sql/02_cohort.sql that a census condition (`score --cohort FILE`) may use: the condition
# is applied to a projection of these columns only (the SQL's ${census_columns}).
COHORT_COLUMNS = ("hadm_id", "subject_id", "admit_epoch", "pred_epoch", "dob_epoch", "era",
                  "window_start_epoch", "age", "gender", "admission_type", "admission_location", "icu_system")
# The cohort's other columns, its outcomes, known only after T: a census condition naming one is
# refused. A census is about patients still in hospital, so the discharge time is an outcome too.
OUTCOME_COLUMNS = ("label", "disch_epoch")


# ---------------------------------------------------------------------------- types

_LIST = re.compile(r"^list<(.+)>$")


def arrow_type(spec: str):
    """The pyarrow type of a type spec (``list<list<int32>>`` -> ``pa.list_(pa.list_(pa.int32()))``)."""
    import pyarrow as pa

    m = _LIST.match(spec)
    if m:
        return pa.list_(arrow_type(m.group(1)))
    return {"bool": pa.bool_(), "string": pa.string()}.get(spec) or getattr(pa, spec)()


def accepts(spec: str, typ) -> bool:
    """Whether a file's Arrow type ``typ`` reads as ``spec``: the same kind (integer of any width,
    float or integer for a float, string or large string, list or large list of an accepted type)."""
    import pyarrow as pa

    m = _LIST.match(spec)
    if m:
        return (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and accepts(m.group(1), typ.value_type)
    if spec == "string":
        return pa.types.is_string(typ) or pa.types.is_large_string(typ)
    if spec == "bool":
        return pa.types.is_boolean(typ)
    if spec.startswith("float"):
        return pa.types.is_floating(typ) or pa.types.is_integer(typ)
    return pa.types.is_integer(typ)


def mlflow_type(spec: str):
    """The MLflow ColSpec type of a spec: scalars and lists of scalars; a nested list is ``AnyType``
    (MLflow cannot enforce ragged nested arrays)."""
    from mlflow.types.schema import AnyType, Array

    m = _LIST.match(spec)
    if m:
        return AnyType() if _LIST.match(m.group(1)) else Array(mlflow_type(m.group(1)))
    if spec == "string" or spec == "bool":
        return "boolean" if spec == "bool" else "string"
    return "double" if spec.startswith("float") else "long"
