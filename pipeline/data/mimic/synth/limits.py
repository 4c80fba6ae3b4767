"""The generator's argument limits (standard library only: the CLI's options read them too)."""

MAX_PATIENTS = 400_000  # SUBJECT_IDs are drawn from [10000, 100000), then (beyond 89,999 patients: MIMIC-IV's
# 299,712) from [10000000, 10400000) as MIMIC-IV numbers them (``generator.ID_RANGES``)
MAX_DENSITY = 10.0  # SynthConfig.density is in (0, MAX_DENSITY]
