"""Write mlflow/MLproject from the `train` command's options (run from the repository root).

    python mlflow/render_mlproject.py            # rewrites mlflow/MLproject
    python mlflow/render_mlproject.py --check    # exit 1 if the file is not what it would write

The `train` entry point has one parameter per option of `cli.py train` that has a concrete,
non-boolean default (MLproject parameters cannot be unset, and a boolean flag takes no value);
its defaults are the config defaults. tests/test_cli.py runs the check.
"""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cli  # noqa: E402  (the repository root on the path first)
from pipeline.tasks.mortality.config import MortalityConfig  # noqa: E402
from pipeline.tasks.mortality.train_config import TrainConfig  # noqa: E402

HEADER = """\
# MLflow project: `mlflow run mlflow/ -e train --env-manager local -P data=FEATURES_DIR`
# (run it with the repository's virtual environment active: --env-manager local uses the
# current `python`). MLflow starts the command in this directory; the command moves to the
# repository root first, so checkpoints land in runs/train/<run id> (git-ignored). `path`
# parameters are made absolute by MLflow beforehand. cli.py joins the run that `mlflow run`
# started (MLFLOW_RUN_ID) and logs into it.
# Written by mlflow/render_mlproject.py from the options of `cli.py train`: do not edit by hand.
name: mimic-rank1

python_env: python_env.yaml

entry_points:
"""

PAPER = """\
  train_paper:
    # paper scale (LSTM 256, 20k steps): the `paper` preset; sizes come from the preset
    parameters:
      data: path
      model: {type: string, default: rank1}
      seed: {type: float, default: 0}
      nll: {type: string, default: average}
      prior: {type: string, default: gaussian}
    command: >-
      cd .. && python cli.py train --data {data} --model {model} --preset paper --seed {seed} --nll {nll}
      --prior {prior} --no-progress
"""


OFF_AT_ZERO = ("max_steps", "patience_epochs", "max_minutes")  # TrainConfig fields unset by default whose 0 means unset


def parameters() -> list[tuple[str, str, str]]:
    """(MLproject parameter, its type and default as YAML, the option) for the train entry point."""
    out = []
    for _, name, annotation, default, _ in cli.config_options(TrainConfig, MortalityConfig):
        if default is None and name in OFF_AT_ZERO:  # unset by default, and 0 says unset: the parameter's default 0
            default = 0
        if default is None or isinstance(default, bool):
            continue
        param = cli.ALIASES.get(name, name)
        value = default.value if isinstance(default, Enum) else default
        kind = "string" if isinstance(value, str) else "float"
        out.append((param, f"{{type: {kind}, default: {value}}}", f"--{param.replace('_', '-')}"))
    return out


def render() -> str:
    params = parameters()
    lines = [HEADER + "  train:", "    parameters:", "      data: path", "      model: {type: string, default: rank1}"]
    lines += [f"      {p}: {spec}" for p, spec, _ in params]
    words = ["cd .. && python cli.py train --data {data} --model {model}"]
    words += [f"{flag} {{{p}}}" for p, _, flag in params] + ["--no-progress"]
    command, line = [], "      "
    for w in words:  # folded YAML: the lines join with spaces
        if len(line) + len(w) > 110:
            command.append(line.rstrip())
            line = "      "
        line += w + " "
    command.append(line.rstrip())
    lines += ["    command: >-", *command]
    return "\n".join(lines) + "\n" + PAPER


if __name__ == "__main__":
    target = ROOT / "mlflow" / "MLproject"
    text = render()
    if "--check" in sys.argv[1:]:
        sys.exit(0 if target.read_text() == text else 1)
    target.write_text(text)
