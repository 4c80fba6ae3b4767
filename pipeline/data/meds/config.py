"""Settings of a MEDS extraction and of a MEDS export (one comment per field; standard library only)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum

from pipeline.core.configs import check_at_least, check_choice, invalid


class MedsSplit(str, Enum):
    meds = "meds"  # metadata/subject_splits.parquet: train / tuning / held_out -> train / val / test
    random = "random"  # 80/10/10 by a hash of subject_id (the MIMIC extraction's random split)


@dataclass
class MedsConfig:
    lookback_days: float = 30.0  # history used: events in [T - lookback, T], T the label's prediction_time
    hourly_hours: float = 24.0  # the last N hours before T in hourly bags, older history daily
    n_bins: int = 5  # quantile bins per numeric code (fitted on train)
    min_patients: int = 5  # tokens (and code groups, static codes) in fewer training subjects collapse to OOV
    max_text_values: int = 50  # codes with more distinct text values in train are free text: code token only
    text_max_len: int = 40  # text values are truncated to this many characters
    split: MedsSplit = MedsSplit.meds  # meds: subject_splits.parquet; random: 80/10/10 by subject hash
    split_seed: int = 0  # seed of the subject hash (split random, or a dataset without subject_splits.parquet)
    train_fraction: float = 0.8  # fraction of subjects in train (random split)
    val_fraction: float = 0.1  # fraction of subjects in val (random split)
    memory_limit: str = "2GB"  # DuckDB memory limit (spills to disk beyond it)
    threads: int | None = None  # DuckDB threads (unset: all cores)
    values: bool = False  # also write bag_values, the value channel beside each token (~2x the files)

    def __post_init__(self) -> None:
        check_choice(self, "split", MedsSplit)
        for name in ("lookback_days", "hourly_hours"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise invalid(self, f"{name} must be a positive number of hours/days, got {value}", name)
        check_at_least(self, 1, ("n_bins", "min_patients", "max_text_values", "text_max_len", "threads"))
        if not 0 < self.train_fraction < 1 or not 0 <= self.val_fraction < 1 or \
                self.train_fraction + self.val_fraction >= 1:
            raise invalid(self, f"train_fraction {self.train_fraction} and val_fraction {self.val_fraction} must lie "
                          "in (0, 1) and [0, 1) with a sum < 1", "train_fraction", "val_fraction")

    def to_json(self) -> dict:
        """The manifest's ``config``: ExtractConfig's names where they mean the same, and ``prediction_hours``
        0 (the bags' time origin is the prediction time: what baselines, the pyfunc and the report read)."""
        d = asdict(self)
        d["split"] = self.split.value
        d["prediction_hours"] = 0.0
        if not self.values:
            del d["values"]
        return d


@dataclass
class ExportConfig:
    subjects_per_shard: int = 10_000  # subjects per data/ shard (sorted by subject_id, then time)
    split_seed: int = 0  # seed of the subject hash that splits subject_splits.parquet (the extraction's random split)
    train_fraction: float = 0.8  # fraction of subjects in train
    val_fraction: float = 0.1  # fraction of subjects in tuning (the rest: held_out)
    memory_limit: str = "3GB"  # DuckDB memory limit (spills to disk beyond it)
    threads: int | None = None  # DuckDB threads (unset: all cores)
    row_group_rows: int = 122_880  # rows per Parquet row group of a shard

    def __post_init__(self) -> None:
        check_at_least(self, 1, ("subjects_per_shard", "threads", "row_group_rows"))
        if not 0 < self.train_fraction < 1 or not 0 <= self.val_fraction < 1 or \
                self.train_fraction + self.val_fraction >= 1:
            raise invalid(self, f"train_fraction {self.train_fraction} and val_fraction {self.val_fraction} must lie "
                          "in (0, 1) and [0, 1) with a sum < 1", "train_fraction", "val_fraction")
