"""experiments.vision_digits and vision_digits_cli: the same runs named alike, and which go to the pool first."""

from __future__ import annotations

from experiments import vision_digits as vd
from experiments import vision_digits_cli as vdc


def test_the_command_line_study_runs_the_library_studys_methods():
    """vision_digits_cli asks vision_digits' settings of a method (its K); each name's flags are those settings."""
    flags = {m: dict(zip(f[::2], f[1::2])) for m, f in vdc.METHODS.items()}
    assert flags == {m: {f"--{k.replace('_', '-')}": v for k, v in s.items()} for m, s in vd.METHODS.items()}


def test_members_is_the_models_k():
    """The K-member runs go first (the long ones): K of each method's model, 1 for the deterministic network."""
    assert {m: vd.members(m, 4) for m in vd.METHODS} == {m: 1 if m == "deterministic" else 4 for m in vd.METHODS}
    assert vd.members("deep-ensemble", 2) == vd.members("rank1-cauchy", 2) == 2
