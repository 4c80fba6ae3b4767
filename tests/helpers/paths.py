"""Where the test data lives."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository


def demo_path() -> Path:
    """The MIMIC-III demo: $MIMIC_DEMO_DIR, else shared/mimic-iii-demo beside or inside the repository."""
    env = os.environ.get("MIMIC_DEMO_DIR")
    candidates = [Path(env)] if env else []
    candidates += [ROOT.parent / "shared" / "mimic-iii-demo", ROOT / "shared" / "mimic-iii-demo"]
    for cand in candidates:
        if (cand / "ADMISSIONS.csv.gz").exists():
            return cand
    raise FileNotFoundError(f"MIMIC-III demo not found in {[str(c) for c in candidates]}; set MIMIC_DEMO_DIR")
