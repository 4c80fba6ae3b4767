"""A copy of the MIMIC-III demo with its ADMISSIONS edited (the other tables linked, not copied)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd


def demo_with_admissions(demo_dir: Path, dst: Path, edit: Callable[[pd.DataFrame], None]) -> Path:
    """``dst`` holding links to every table of ``demo_dir`` but ADMISSIONS, which is the demo's after
    ``edit(adm)`` changed it in place (``adm``: every column as text, empty cells as "")."""
    dst.mkdir(parents=True)
    for f in demo_dir.glob("*.csv.gz"):
        if f.name != "ADMISSIONS.csv.gz":
            (dst / f.name).symlink_to(f)
    adm = pd.read_csv(demo_dir / "ADMISSIONS.csv.gz", dtype=str, keep_default_na=False)
    edit(adm)
    adm.to_csv(dst / "ADMISSIONS.csv.gz", index=False)
    return dst
