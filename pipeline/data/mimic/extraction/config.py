"""Settings and result of an extraction (``ExtractConfig``: one comment per field)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

from pipeline.core.configs import check_at_least, check_choice, invalid


class SplitMode(str, Enum):
    random = "random"  # 80/10/10 by patient
    era = "era"  # MIMIC-III: carevue-era stays in train/val, metavision-era in test; MIMIC-IV: by anchor_year_group


@dataclass
class ExtractConfig:
    prediction_hours: float = 24.0  # prediction time T = ADMITTIME + this many hours
    lookback_days: float = 30.0  # history used: events in [T - lookback, T)
    hourly_hours: float | None = None  # last N hours before T in hourly bags, older history daily (unset:
        # prediction_hours)
    n_bins: int = 5  # quantile bins per numeric item (fitted on train)
    min_patients: int = 5  # tokens in fewer training patients collapse to per-source OOV
    max_text_values: int = 50  # items with more distinct text values are free text: item token only
    text_max_len: int = 40  # text values are truncated to this many characters
    split: SplitMode = SplitMode.random  # split by patient: random (80/10/10) or era (older stays train/val,
        # newer test)
    split_seed: int = 0  # seed of the deterministic patient hash
    era_groups: tuple[str, ...] | None = None  # MIMIC-IV era split: anchor_year_groups used, oldest first;
        # the last is test (unset: all present)
    train_fraction: float = 0.8  # fraction of patients in train (random split)
    val_fraction: float = 0.1  # fraction of patients in val (random split)
    memory_limit: str = "2GB"  # DuckDB memory limit, a size: 2GB, 512MB, 80% (spills to disk beyond it; at 2GB the
        # process stays under ~3 GB); -1 (no limit) is refused
    threads: int | None = None  # DuckDB threads (unset: all cores)
    verify_counts: bool = False  # also count each event table with a second scan and check the two agree
    scan_workers: int = 2  # event tables scanned at once (CSV sources; 1: one after another)
    values: bool = False  # also write bag_values, the value channel beside each token (for --value-channel models;
        # ~2x the files)

    def __post_init__(self) -> None:
        check_choice(self, "split", SplitMode)
        for name in ("prediction_hours", "lookback_days", "hourly_hours"):
            value = getattr(self, name)
            if value is not None and not 0 < value < float("inf"):
                raise invalid(self, f"{name} must be a positive number of hours/days, got {value}", name)
        check_at_least(self, 1, ("n_bins", "min_patients", "max_text_values", "text_max_len", "threads",
                                 "scan_workers"))
        if not 0 < self.train_fraction < 1 or not 0 <= self.val_fraction < 1:
            raise invalid(self, f"train_fraction must lie in (0, 1) and val_fraction in [0, 1), got "
                                f"{self.train_fraction} and {self.val_fraction}", "train_fraction", "val_fraction")
        if self.train_fraction + self.val_fraction >= 1:
            raise invalid(self, f"train_fraction {self.train_fraction} + val_fraction {self.val_fraction} must be "
                                "< 1 (the rest of the patients is the test split)", "train_fraction", "val_fraction")
        if self.era_groups is not None:
            self.era_groups = tuple(self.era_groups)

    @property
    def hourly(self) -> float:
        return self.prediction_hours if self.hourly_hours is None else self.hourly_hours

    def to_json(self) -> dict:
        d = asdict(self)
        d["split"] = self.split.value
        if self.era_groups is None:  # unset: not written (manifests of MIMIC-III stay as they were)
            del d["era_groups"]
        else:
            d["era_groups"] = list(self.era_groups)
        if not self.values:  # off: not written (manifests stay as they were before the value channel)
            del d["values"]
        return d


@dataclass
class ExtractResult:
    out_dir: Path
    manifest: dict
    link_file: Path
    files: dict[str, Path] = field(default_factory=dict)
    # scoring only: the ADMISSIONS rows outside the cohort, their cohort columns and `exclusion` (the
    # reason); raw HADM_IDs, so in memory only, for the data owner's _private/unscored.csv
    excluded: object = None
