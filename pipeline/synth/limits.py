"""The generator's argument limits (standard library only: the CLI's options read them too)."""

MAX_PATIENTS = 89_999  # SUBJECT_IDs are drawn from [10000, 100000)
MAX_DENSITY = 10.0  # SynthConfig.density is in (0, MAX_DENSITY]
