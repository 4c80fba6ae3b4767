"""A MEDS label's context: its age decade at the prediction time (from MEDS_BIRTH) and its subject's static
codes (the rows with a null time), as context tokens fitted on the training split (``min_patients`` training
subjects, else the field's ``<other>``), like the MIMIC extraction's age, gender and admission tokens.

A static row's value is not used (its code is the token). Ages are in years of 365.2425 days, capped at 90
(the MIMIC extraction's cap); decades as the MIMIC tokens (``age:18-29`` ... ``age:90+``), ``age:0-17`` for a
child and ``age:<missing>`` without a MEDS_BIRTH.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.data.mimic.extraction import tokens

US_PER_YEAR = 365.2425 * 86400 * 1e6
FIELDS = ("age", "static")


def ages(birth_us: pd.Series, pred_us: pd.Series) -> pd.Series:
    """Age in years at the prediction time, capped at 90; NaN without a birth."""
    years = (pred_us.astype("float64") - birth_us.astype("float64")) / US_PER_YEAR
    return years.clip(upper=90.0)


def age_token(age: float) -> str:
    if not np.isfinite(age):
        return "age:<missing>"
    if age >= 90:
        return "age:90+"
    if age < 18:
        return "age:0-17"
    if age < 30:
        return "age:18-29"
    decade = int(age // 10 * 10)
    return f"age:{decade}-{decade + 9}"


def raw_tokens(cohort: pd.DataFrame, static: dict[int, list[str]]) -> list[list[str]]:
    """Each label's raw context tokens: its age token, then ``static:<code>`` per static code of its subject."""
    return [[age_token(a)] + [f"static:{c}" for c in static.get(int(s), [])]
            for a, s in zip(cohort["age"], cohort["subject_id"])]


def fit(raw: list[list[str]], subjects: pd.Series, train: pd.Series, min_patients: int) -> list[str]:
    """The context vocabulary: padding, each field's ``<other>``, then the tokens of at least ``min_patients``
    training subjects, sorted."""
    seen: dict[str, set] = {}
    for toks, subject, is_train in zip(raw, subjects, train):
        if is_train:
            for t in toks:
                seen.setdefault(t, set()).add(int(subject))
    kept = sorted(t for t, s in seen.items() if len(s) >= min_patients)
    return [tokens.PAD] + [f"{f}:<other>" for f in FIELDS] + kept


def encode(raw: list[list[str]], vocab: list[str]) -> list[list[int]]:
    """Context ids per label: each token's id, or its field's ``<other>`` (once per field), distinct, sorted."""
    index = {t: i for i, t in enumerate(vocab)}
    other = {f: index[f"{f}:<other>"] for f in FIELDS}
    return [sorted({index.get(t, other[t.split(":", 1)[0]]) for t in toks}) for toks in raw]
