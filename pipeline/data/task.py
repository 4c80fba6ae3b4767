"""What a feature set predicts, in words (issue 44): the task an extraction recorded in its ``manifest.json``
(``["task"]``: ``name``, ``outcome`` and ``outcomes``, the outcome's singular and plural, ``prediction_time``, when
a prediction is made, ``source``, the data, and ``definition``, where the task comes from), so that what reads the
features can say "readmission" or "death in the ICU" instead of assuming a death.

``describe(features_dir)`` (or ``of_manifest``) gives it back as ``TaskWords``; features written before the task
was recorded are the MIMIC extraction's in-hospital mortality (``MORTALITY``, at their own prediction hours), or,
for a MEDS extraction, the words its recorded task config or label files give (``from_path``). The words of an
ACES config come from its ``metadata`` (``outcome``, ``outcomes``, ``prediction_time``: this project's keys, which
es-aces ignores), else its file name, and its index window (``prediction_time_of``). No torch (PyYAML reads a config).

A run records the words of the features it was trained on (``task_words`` in its model file and ``model_info.json``,
read back by ``of_record``; ``runs.load.Run.words``), so that scoring, the pyfunc, ``evaluate`` and the cohort report
say the outcome without the features folder. Sentences count the outcome as ``event`` / ``events`` and the others as
``others`` ("death" / "deaths" / "survivors" for in-hospital mortality, as they always have).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pipeline.core import fileio
from pipeline.core.errors import ConfigError, naming

ACRONYMS = {"icu": "ICU", "ed": "ED", "ccu": "CCU", "er": "ER"}  # predicate-name words spelled in capitals
UNITS = {"d": "day", "h": "hour", "m": "minute", "s": "second", "y": "year"}  # ACES duration units
SPECIAL = {"_ANY_EVENT": "each event", "_RECORD_START": "the record's start", "_RECORD_END": "the record's end"}
PREPOSITIONS = {"in", "within", "after", "at", "of", "during", "before", "from", "to", "on", "by", "for"}


@dataclass(frozen=True)
class TaskWords:
    name: str  # the task's name: "in_hospital_mortality", a MEDS-DEV task's ("mortality/in_icu/first_24h"), a file's
    outcome: str  # the positive label's outcome, singular ("in-hospital death", "readmission")
    outcomes: str  # the same, plural ("in-hospital deaths", "readmissions")
    prediction_time: str  # when a prediction is made, in words ("24 hours after the hospital admission")
    source: str  # the data the labels were drawn from ("MIMIC-IV", "meds:MIMIC-IV")
    definition: str = ""  # where the task is defined ("the MIMIC extraction's cohort", "MEDS-DEV 0.0.14 task ...")

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def mortality(self) -> bool:
        """The MIMIC cohorts' in-hospital death, whose sentences have always said "death" and "deaths" (the report's
        opening sentence says where)."""
        return self.outcome == MORTALITY_OUTCOME

    @property
    def event(self) -> str:
        """The outcome as a count names it, singular: "death" (in-hospital mortality), else ``outcome``."""
        return "death" if self.mortality else self.outcome

    @property
    def events(self) -> str:
        """The same, plural: "deaths" (in-hospital mortality), else ``outcomes``."""
        return "deaths" if self.mortality else self.outcomes

    @property
    def others(self) -> str:
        """The admissions without the outcome: "survivors" (in-hospital mortality), else "admissions without a
        readmission"."""
        return "survivors" if self.mortality else f"admissions without {article(self.outcome)} {self.outcome}"

    @property
    def title(self) -> str:
        """The risk in a title: "Mortality risk" (in-hospital mortality), else "Risk of readmission"."""
        return "Mortality risk" if self.mortality else f"Risk of {self.outcome}"

    @property
    def rate(self) -> str:
        """The observed share of the outcome, as an axis names it: "death rate", else "rate of readmissions"."""
        return "death rate" if self.mortality else f"rate of {self.outcomes}"


MORTALITY_OUTCOME = "in-hospital death"  # the MIMIC extraction's outcome (MORTALITY's)
MORTALITY = TaskWords("in_hospital_mortality", MORTALITY_OUTCOME, "in-hospital deaths",
                      "24 hours after the hospital admission", "MIMIC",
                      "the MIMIC extraction's cohort: adult admissions alive and in hospital at the prediction time")
WORD_KEYS = ("name", "outcome", "outcomes", "prediction_time", "source")  # what a manifest's task must hold


def mimic_mortality(prediction_hours: float, source: str) -> TaskWords:
    """The MIMIC extraction's task: in-hospital death after ``prediction_hours`` hours of an admission."""
    return replace(MORTALITY, prediction_time=f"{_number(prediction_hours)} {_unit('hour', prediction_hours)} after "
                                              "the hospital admission", source=source)


def article(phrase: str) -> str:
    """The indefinite article of ``phrase``: "an" before a vowel ("an ICU admission"), else "a"."""
    return "an" if phrase[:1].lower() in "aeiou" else "a"


def plural(phrase: str) -> str:
    """``phrase`` in the plural, by its head noun: the word before the first preposition ("death in the ICU" ->
    "deaths in the ICU"), else the last word ("readmission" -> "readmissions"); English's regular endings."""
    words = phrase.split(" ")
    head = next((i - 1 for i, w in enumerate(words) if i and w.lower() in PREPOSITIONS), len(words) - 1)
    w = words[head]
    if re.search(r"(s|x|z|ch|sh)$", w, re.I):
        w += "es"
    elif re.search(r"[^aeiou]y$", w, re.I):
        w = w[:-1] + "ies"
    else:
        w += "s"
    return " ".join([*words[:head], w, *words[head + 1:]])


def parse_outcome(text: str | None) -> tuple[str, str] | None:
    """An outcome given in words (``extract --outcome``) as (singular, plural): "NAME" (the plural by ``plural``) or
    "SINGULAR|PLURAL"; None: not given. An empty value (or part) is a ``ConfigError`` naming the argument."""
    if text is None:
        return None
    parts = [" ".join(p.split()) for p in str(text).split("|")]
    if len(parts) > 2 or not all(parts):
        raise naming(ConfigError(f"`outcome` {text!r}: give the outcome's name in words, e.g. readmission, or "
                                 "SINGULAR|PLURAL, e.g. 'death in the ICU|deaths in the ICU'"), "outcome")
    return parts[0], parts[1] if len(parts) == 2 else plural(parts[0])


def words_of_name(name: str) -> str:
    """A file's or predicate's name as words: ``icu_admission`` -> "ICU admission"."""
    return " ".join(ACRONYMS.get(w.lower(), w) for w in re.split(r"[_\-\s]+", name) if w)


def _number(x: float) -> str:
    return f"{x:g}"


def _unit(unit: str, n: float) -> str:
    return unit if float(n) == 1 else unit + "s"


def duration_words(text: str) -> str | None:
    """An ACES duration ("24h", "30d", "6574d 8h 45m 36s") in words ("24 hours"); None if it is not one."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([dhmsy])\b", text)
    if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*([dhmsy])\b|\s", "", text):
        return None
    return " ".join(f"{_number(float(n))} {_unit(UNITS[u], float(n))}" for n, u in parts)


def prediction_time_of(doc: dict) -> str | None:
    """The prediction time of an ACES config (its parsed YAML ``doc``) in words, from the window holding
    ``index_timestamp`` and the trigger: "24 hours after the ICU admission", "at the hospital discharge"; None
    where the windows do not reduce to the trigger plus a duration or the next or previous event of a predicate."""
    windows = doc.get("windows") or {}
    trigger = doc.get("trigger")
    index = next(((n, w) for n, w in windows.items() if isinstance(w, dict) and "index_timestamp" in w), None)
    if not index or not isinstance(trigger, str):
        return None
    name, window = index
    resolved = _boundary(windows, name, str(window["index_timestamp"]), set())
    if resolved is None:
        return None
    base, offset = resolved
    what = (SPECIAL.get(trigger) or f"the {words_of_name(trigger)}") if base == "trigger" else f"the {base}"
    return f"{' '.join(offset)} after {what}" if offset else f"at {what}"


def _boundary(windows: dict, name: str, which: str, seen: set) -> tuple[str, list[str]] | None:
    """(the base: "trigger" or an event's words, the durations added) of window ``name``'s ``which`` end."""
    if (name, which) in seen or which not in ("start", "end") or not isinstance(windows.get(name), dict):
        return None
    seen.add((name, which))
    expr = windows[name].get(which)
    if expr is None:
        return None
    expr = str(expr).strip()
    arrow = re.fullmatch(r"(start|end|trigger)\s*(->|<-)\s*(\w+)", expr)
    if arrow:
        return f"{'next' if arrow.group(2) == '->' else 'previous'} {words_of_name(arrow.group(3))}", []
    m = re.fullmatch(r"([\w.]+)\s*(?:([+-])\s*(.+))?", expr)
    if not m:
        return None
    ref, sign, duration = m.groups()
    if ref == "trigger":
        resolved = ("trigger", [])
    elif ref in ("start", "end"):
        resolved = _boundary(windows, name, ref, seen)
    elif "." in ref:
        resolved = _boundary(windows, *ref.split(".", 1), seen)
    else:
        return None
    if resolved is None:
        return None
    if duration is None:
        return resolved
    words = duration_words(duration)
    if words is None or sign != "+" or resolved[1]:  # a duration on a duration: said by the config alone
        return None
    return resolved[0], [words]


def from_aces(path: Path, doc: dict | None, source: str, definition: str, name: str | None = None,
              outcome: tuple[str, str] | None = None) -> TaskWords:
    """The words of the ACES config at ``path`` (``doc``: its YAML, None if unreadable): ``outcome`` (given), else
    its ``metadata``'s ``outcome`` / ``outcomes``, else its file name; its ``metadata``'s ``prediction_time``, else
    ``prediction_time_of``."""
    meta = (doc or {}).get("metadata") if isinstance((doc or {}).get("metadata"), dict) else {}
    stem = words_of_name(Path(path).stem)
    if outcome is None and meta.get("outcome"):
        outcome = (str(meta["outcome"]), str(meta.get("outcomes") or plural(str(meta["outcome"]))))
    singular, plural_ = outcome or (stem, plural(stem))
    when = meta.get("prediction_time") or prediction_time_of(doc or {}) or f"the prediction time of {Path(path).name}"
    return TaskWords(name or Path(path).stem, singular, plural_, str(when), source, definition)


def from_path(path: str | Path, source: str, definition: str, outcome: tuple[str, str] | None = None) -> TaskWords:
    """The words of a task config file (``from_aces``, reading it) or of label files (their file or folder name;
    the prediction time is the labels' own)."""
    path = Path(path)
    if path.suffix in (".yaml", ".yml"):
        return from_aces(path, read_yaml(path), source, definition, outcome=outcome)
    stem = words_of_name(path.stem)
    singular, plural_ = outcome or (stem, plural(stem))
    return TaskWords(path.stem, singular, plural_, "the label files' prediction times", source, definition)


def read_yaml(path: Path) -> dict | None:
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return doc if isinstance(doc, dict) else None


def of_manifest(manifest: dict | None) -> TaskWords:
    """The task a features manifest records (module docstring), with the defaults for one that records no words."""
    m = manifest or {}
    task = m.get("task") if isinstance(m.get("task"), dict) else {}
    recorded = of_record(task)
    if recorded is not None:
        return recorded
    release = str(m.get("release") or "mimic-iii")
    if release.startswith("meds:"):
        where = task.get("task") or task.get("labels")
        if task.get("shipped") or not where:
            return replace(MORTALITY, source=release, definition="the shipped ACES config")
        return from_path(where, release, f"{'ACES config' if task.get('task') else 'label files'} {Path(where).name}")
    hours = (m.get("config") or {}).get("prediction_hours", 24.0)
    return mimic_mortality(float(hours if hours is not None else 24.0), release.upper())


def of_record(recorded: dict | None) -> TaskWords | None:
    """The words a run recorded (``TaskWords.to_json``), or None where it recorded none (a run trained before)."""
    if not isinstance(recorded, dict) or not all(isinstance(recorded.get(k), str) and recorded[k] for k in WORD_KEYS):
        return None
    return TaskWords(**{k: recorded[k] for k in (*WORD_KEYS, "definition") if k in recorded})


def describe(features: str | Path, missing_ok: bool = False) -> TaskWords:
    """The task of the features directory ``features`` (or of its ``manifest.json`` given directly);
    ``missing_ok``: features without a manifest are the MIMIC extraction's (``of_manifest({})``)."""
    path = Path(features)
    path = path / "manifest.json" if path.is_dir() else path
    if missing_ok and not path.exists():
        return of_manifest({})
    try:
        manifest = fileio.read_json(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable features manifest ({exc})") from None
    return of_manifest(manifest)


__all__ = ["MORTALITY", "MORTALITY_OUTCOME", "TaskWords", "article", "describe", "from_aces", "from_path",
           "mimic_mortality", "of_manifest", "of_record", "parse_outcome", "plural", "prediction_time_of"]
