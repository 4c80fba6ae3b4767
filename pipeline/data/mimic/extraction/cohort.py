"""The cohort's splits and context: patient-level split assignment, context tokens and their vocabulary."""

from __future__ import annotations

import hashlib

import pandas as pd

from pipeline.core.configs import invalid
from pipeline.core.errors import ConfigError
from pipeline.data.mimic.extraction import tokens
from pipeline.data.mimic.extraction.config import ExtractConfig, SplitMode


def _unit_hash(seed: int, subject_id: int) -> float:
    digest = hashlib.sha256(f"split:{seed}:{subject_id}".encode()).hexdigest()
    return int(digest[:15], 16) / 16**15


def assign_splits(cohort: pd.DataFrame, cfg: ExtractConfig, release: str = "mimic-iii") -> pd.Series:
    """Split label per admission; every patient lands in exactly one split.

    era mode, MIMIC-III: a patient with any metavision stay goes to test, where only the
    metavision stays are kept ('excluded' marks the others); everyone else splits 8:1 into
    train/val. MIMIC-IV (``era_split_iv``): by the patient's anchor_year_group.
    """
    u = cohort["subject_id"].map(lambda s: _unit_hash(cfg.split_seed, int(s)))
    if cfg.split is SplitMode.random:
        cut1, cut2 = cfg.train_fraction, cfg.train_fraction + cfg.val_fraction
        return pd.Series(["train" if x < cut1 else "val" if x < cut2 else "test" for x in u], index=cohort.index)
    if release == "mimic-iv":
        return era_split_iv(cohort, u, cfg.era_groups)
    mv = cohort["icu_system"].eq("metavision")
    mv_patient = cohort["subject_id"].isin(cohort.loc[mv, "subject_id"])
    out = pd.Series(["train" if x < 8 / 9 else "val" for x in u], index=cohort.index)
    out[mv_patient & mv] = "test"
    out[mv_patient & ~mv] = "excluded"
    return out


def era_split_iv(cohort: pd.DataFrame, u: pd.Series, groups: tuple[str, ...] | None) -> pd.Series:
    """MIMIC-IV era split: patients of the latest anchor_year_group used go to test, patients of the
    earlier ones split 8:1 into train/val (by ``u``, the patient hash); ``groups`` (oldest first)
    chooses the groups, None all present; patients of other groups are 'excluded'. A patient has one
    anchor_year_group (the real 3-year window of their anchor year), so the split stays by patient."""
    era = cohort["era"]
    present = sorted(str(g) for g in era.dropna().unique())
    used = list(groups) if groups else present
    unknown = [g for g in used if g not in present]
    if unknown:
        raise invalid(ExtractConfig, f"era_groups {unknown} are not anchor_year_groups of the cohort; present: "
                                     f"{present}", "era_groups")
    if len(used) < 2:
        raise ConfigError(f"the era split needs at least two anchor_year_groups (earlier ones train, the last tests); "
                          f"{'given' if groups else 'the cohort has'} {used}")
    out = pd.Series(["train" if x < 8 / 9 else "val" for x in u], index=cohort.index)
    out[era == used[-1]] = "test"
    out[~era.isin(used)] = "excluded"
    return out


def context_tokens(cohort: pd.DataFrame) -> pd.DataFrame:
    """Raw context tokens per admission (age decade, gender, admission type and location)."""
    age = cohort["age"].astype(float)
    decade = (age // 10 * 10).clip(lower=10).astype(int)
    age_tok = ["age:90+" if a >= 90 else ("age:18-29" if d < 30 else f"age:{d}-{d + 9}") for a, d in zip(age, decade)]
    return pd.DataFrame(
        {
            "age": age_tok,
            "gender": "gender:" + cohort["gender"].fillna("<missing>").astype(str),
            "admission_type": "admission_type:" + cohort["admission_type"].fillna("<missing>").astype(str),
            "admission_location": "admission_location:" + cohort["admission_location"].fillna("<missing>").astype(str),
        },
        index=cohort.index,
    )

CONTEXT_FIELDS = ("age", "gender", "admission_type", "admission_location")


def fit_context(ctx: pd.DataFrame, subjects: pd.Series, train: pd.Series, min_patients: int) -> list[str]:
    vocab = [tokens.PAD] + [f"{f}:<other>" for f in CONTEXT_FIELDS]
    for f in CONTEXT_FIELDS:
        counts = pd.DataFrame({"tok": ctx.loc[train, f], "s": subjects[train]}).groupby("tok")["s"].nunique()
        vocab += sorted(t for t, n in counts.items() if n >= min_patients)
    return vocab


def encode_context(ctx: pd.DataFrame, vocab: list[str]) -> list[list[int]]:
    index = {t: i for i, t in enumerate(vocab)}
    cols = []
    for f in CONTEXT_FIELDS:
        other = index[f"{f}:<other>"]
        cols.append([index.get(t, other) for t in ctx[f]])
    return [list(row) for row in zip(*cols)]
