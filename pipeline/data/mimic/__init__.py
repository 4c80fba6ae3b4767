"""MIMIC-III and MIMIC-IV: sources, the synthetic generator, the extraction, de-identification (no torch)."""
