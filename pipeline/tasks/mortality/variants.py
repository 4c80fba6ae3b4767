"""The named model variants of the benchmark (kind + settings) and how a run's settings map to a name.

Torch-free: ``compare`` labels runs with it, ``train --model`` accepts every name, the grid
trains every variant.
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from enum import Enum

from pipeline.tasks.mortality.config import MortalityConfig

# model variants of the benchmark, in table order: name -> (model kind, MortalityConfig settings)
VARIANT_SPECS: dict[str, tuple[str, dict]] = {
    "deterministic": ("deterministic", {}),
    "bayes-emb": ("bayes-emb", {}),
    "bayes-full": ("bayes-full", {}),
    "batchensemble": ("batchensemble", {}),
    "rank1-gaussian": ("rank1", {"prior": "gaussian"}),
    "rank1-cauchy": ("rank1", {"prior": "cauchy"}),
    # rank-1 with BatchEnsemble's random-sign factor start under a prior wide enough not to undo it
    # (N(1, 1): a -1 start costs 2 nats, not the 200 of N(1, 0.1));
    # docs/experiments/2026-11-29-random-sign-rank1-variants.md
    "rank1-signs": ("rank1", {"prior": "gaussian", "factor_init": "random_sign", "prior_stddev": 1.0}),
    # the same start under a sign-symmetric prior, ½N(1, 0.1) + ½N(-1, 0.1): a sign costs nothing
    "rank1-symmetric": ("rank1", {"prior": "gaussian", "factor_init": "random_sign", "prior_signs": True}),
    "deep-ensemble": ("deep-ensemble", {}),
}
VARIANTS = tuple(VARIANT_SPECS)


def model_label(kind: str | None, prior: str | None) -> str:
    """``rank1-<prior>`` for rank-1 models, the kind otherwise."""
    return f"rank1-{prior or 'gaussian'}" if kind == "rank1" else str(kind)


def canon(value) -> str:
    """A setting's value as text, numbers written one way ("1", "1.0" and 1 -> "1")."""
    text = str(value)
    try:
        f = float(text)
    except ValueError:
        return text
    return str(int(f)) if f.is_integer() else repr(f)


def model_defaults() -> dict[str, str]:
    """``model.<field>`` defaults of MortalityConfig as text: a setting a run does not record (it
    predates the setting) had this value."""
    return {f"model.{f.name}": str(f.default.value if isinstance(f.default, Enum) else f.default)
            for f in fields(MortalityConfig) if f.default is not MISSING}


def variant_label(kind: str | None, model_config: dict, defaults: dict[str, str] | None = None) -> str:
    """The benchmark variant ``model_config`` is: the one whose settings it has, and the defaults for
    every setting that another variant of the same kind changes; else ``model_label``. Values compare
    as text or numbers (MLflow params are strings); a setting missing from ``model_config`` counts
    as its default."""
    defaults = model_defaults() if defaults is None else defaults
    keys = {key for k, settings in VARIANT_SPECS.values() if k == kind for key in settings}

    def value(cfg: dict, key: str):
        return cfg.get(key, defaults.get(f"model.{key}"))

    for name, (k, settings) in VARIANT_SPECS.items():
        if k == kind and all(canon(value(model_config, key)) == canon(value(settings, key)) for key in keys):
            return name
    return model_label(kind, model_config.get("prior"))


def model_names() -> list[str]:
    """Every LSTM model ``train --model`` takes, as its help lists them: rank1, then the variants, then any kind
    that is no variant's name."""
    from pipeline.tasks.mortality.config import ModelKind

    return list(dict.fromkeys(["rank1", *VARIANTS, *(k.value for k in ModelKind)]))


def resolve(name: str) -> tuple[str, dict]:
    """(model kind, MortalityConfig settings) of a variant name or a plain model kind."""
    from pipeline.tasks.mortality.config import ModelKind

    if name in VARIANT_SPECS:
        kind, settings = VARIANT_SPECS[name]
        return kind, dict(settings)
    if name in {k.value for k in ModelKind}:
        return name, {}
    from pipeline.core.errors import ConfigError
    from pipeline.tasks.mortality.baselines.config import BASELINES

    raise ConfigError(f"unknown model {name!r}; choose a model kind or variant ({', '.join(model_names())}) or a "
                      f"classical baseline ({', '.join(BASELINES)})")
