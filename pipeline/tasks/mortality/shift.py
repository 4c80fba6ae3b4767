"""The shift check of a mortality run (issue 43): is a scored cohort still like the run's calibration half?

``bayes.shift`` holds the tests; this module says what a mortality run compares, so that training, ``score``,
``evaluate`` and ``recertify`` compare the same things:

- **the model's outputs** (``MEASURES``): the calibrated risk and, for a posterior model, its mutual information,
  sd and decision uncertainty, each as the run's ``Policy.measures`` defines it (the draws through the run's
  map), so a cohort's measures and the reference's are one definition;
- **the features** (``feature_matrix``): one sparse row per admission built from the FeatureSet's flat arrays in
  one pass, the matrix scoring has at hand: log1p of the bags each token id occurs in (every bag the model reads,
  the out-of-vocabulary tokens included, so a new coding of the events shows), the context one-hot, log1p of the
  events and of the bags. Token names are the vocabulary's; no key, no date, no value of a row beyond these counts.
  (The baselines' ``Featurizer`` adds a recent-bag block and the age: 0.70 s on 3,000 admissions against this
  matrix's few hundredths, measured by ``benchmarks.promise_checks``.)

``reference_of`` is what a run keeps (``ShiftReference``: the calibration half's measures and a row sample of its
matrix, saved as ``runs.store.SHIFT_REFERENCE``). ``CohortSample`` gathers a scored cohort chunk by chunk (every
admission's measures and matrix row while the cohort fits ``MAX_COHORT``, else a seeded uniform sample of that
many: a random sample of the cohort tests the same distribution), and ``check_cohort`` runs ``check_shift`` on it:
``CohortCheck``, its sentence and its JSON (``shift``). A run whose file predates the check (a policy, no
reference file) is checked on its outputs alone and says so; a run without a policy cannot be checked and says
why.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from pipeline.bayes.shift import ShiftReference, Verdict, check_shift, make_reference
from pipeline.core.errors import PipelineError

MEASURES = ("risk", "mi", "sd", "decision")  # the model outputs compared (``Policy.measures``' names)
POSTERIOR = ("mi", "sd", "decision")  # of which the posterior's (Monte Carlo measures of the draws)
MAX_COHORT = 20_000  # cohort admissions compared at most (a uniform sample of a larger cohort)
HINT = "; see `recertify`"  # what a shifted cohort's sentence ends with
DENSE = ("log_events", "log_bags")  # the matrix's last columns
DENSE_CELLS = 1 << 23  # a cohort matrix of at most this many cells is compared dense (64 MiB of float64)


class ShiftError(PipelineError, ValueError):
    """A cohort the check cannot compare with the run's reference (another vocabulary's matrix)."""


def columns_of(vocab: dict) -> list[str]:
    """The matrix's column names: ``token:<name>`` per token id, ``context:<name>`` per context id, ``DENSE``."""
    return ([f"token:{t}" for t in vocab["tokens"]] + [f"context:{c}" for c in vocab["context"]] + list(DENSE))


def feature_matrix(fs, n_tokens: int, n_context: int) -> sparse.csr_matrix:
    """(N, n_tokens + n_context + 2) CSR: the FeatureSet's rows (module docstring); ids must lie in the vocabulary
    (``FeatureSet.check_vocab``)."""
    n = len(fs)
    bag_adm = np.repeat(np.arange(n, dtype=np.int64), fs.n_bags)  # (M,) admission of each bag
    tok_adm = np.repeat(bag_adm, np.diff(fs.token_offsets))  # (Z,) admission of each token occurrence
    tokens = fs.tokens.astype(np.int64)
    real = tokens != 0
    ctx = fs.context.astype(np.int64)  # (N, C) 0-padded
    ctx_rows = np.broadcast_to(np.arange(n, dtype=np.int64)[:, None], ctx.shape)[ctx != 0]
    rows = np.concatenate([tok_adm[real], ctx_rows])
    cols = np.concatenate([tokens[real], n_tokens + ctx[ctx != 0]])
    width = n_tokens + n_context + len(DENSE)
    m = sparse.csr_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(n, width))  # duplicates summed
    token = m.indices < n_tokens
    m.data = np.where(token, np.log1p(m.data), 1.0)  # token counts -> log1p; the context one-hot stays 1
    dense = sparse.csr_matrix(np.stack([np.log1p(fs.n_events.astype(np.float64)),
                                        np.log1p(fs.n_bags.astype(np.float64))], 1))  # (N, 2)
    out = sparse.hstack([m[:, : n_tokens + n_context], dense], format="csr")
    out.sort_indices()
    return out


def reference_of(policy, fs, vocab: dict, seed: int = 0) -> ShiftReference | None:
    """What a run keeps for the check: its ``policy``'s calibration-half measures (``MEASURES``) and a row sample
    of the calibration half ``fs``'s matrix (None: no policy or no calibration admissions)."""
    cal = (getattr(policy, "kept", None) or {}).get("calibration") or {}
    kept = cal.get("measures") or {}
    if not kept or fs is None or not len(fs):
        return None
    measures = {k: np.asarray(kept[k], dtype=np.float64) for k in MEASURES if k in kept}
    if len({v.shape[0] for v in measures.values()} | {len(fs)}) > 1:
        raise ShiftError(f"the calibration half holds {len(fs)} admissions, its measures "
                         f"{sorted({v.shape[0] for v in measures.values()})}")
    return make_reference(measures, feature_matrix(fs, len(vocab["tokens"]), len(vocab["context"])),
                          columns_of(vocab), seed=seed)


def outputs_reference(policy) -> ShiftReference | None:
    """The reference of a run that keeps no reference file: its policy's calibration measures alone."""
    kept = ((getattr(policy, "kept", None) or {}).get("calibration") or {}).get("measures") or {}
    measures = {k: np.asarray(kept[k], dtype=np.float64) for k in MEASURES if k in kept}
    return make_reference(measures) if measures else None


class CohortSample:
    """A scored cohort's measures and matrix rows, gathered chunk by chunk (module docstring)."""

    def __init__(self, max_rows: int = MAX_COHORT, seed: int = 0) -> None:
        self.max_rows, self.total = int(max_rows), 0
        self._rng = np.random.default_rng(seed)
        self._u = np.empty(0)  # (R,) each kept row's uniform draw: the R smallest are kept
        self._measures: dict[str, np.ndarray] = {}
        self._matrix = None

    def add(self, n: int, measures: dict, matrix=None) -> None:
        """One chunk of ``n`` admissions: their ``measures`` (name -> (n,)) and optionally ``matrix`` (n, d)."""
        self.total += int(n)
        if n == 0 or (not measures and matrix is None):
            return
        u = np.concatenate([self._u, self._rng.random(n)])
        ms = {k: np.concatenate([self._measures.get(k, np.empty(0)), np.asarray(v, np.float64)])
              for k, v in measures.items()}
        mat = None if matrix is None else (matrix if self._matrix is None else
                                           sparse.vstack([self._matrix, matrix], format="csr"))
        if u.shape[0] > self.max_rows:
            keep = np.sort(np.argpartition(u, self.max_rows - 1)[: self.max_rows])
            u, ms = u[keep], {k: v[keep] for k, v in ms.items()}
            mat = None if mat is None else mat[keep]
        self._u, self._measures, self._matrix = u, ms, mat

    @property
    def measures(self) -> dict[str, np.ndarray]:
        return self._measures

    @property
    def matrix(self):
        return self._matrix


class CohortChecker:
    """What ``score`` and ``evaluate`` feed the check with, chunk by chunk: ``add(fs, measures)``, then ``result``."""

    def __init__(self, reference: ShiftReference | None, policy, vocab: dict | None, posterior: bool = True,
                 seed: int = 0) -> None:
        self.reference, self.policy, self.posterior, self.seed = reference, policy, posterior, seed
        self.vocab = vocab
        self.sample = CohortSample(seed=seed)
        self.matrix = reference is not None and reference.features is not None and vocab is not None

    def add(self, fs, measures: dict) -> None:
        """A scored chunk: its FeatureSet and the policy's measures of it (``risk.scored_features``)."""
        if self.policy is None:
            self.sample.add(len(fs), {})
            return
        x = feature_matrix(fs, len(self.vocab["tokens"]), len(self.vocab["context"])) if self.matrix else None
        self.sample.add(len(fs), {k: measures[k] for k in MEASURES if k in measures}, x)

    def result(self) -> CohortCheck:
        return check_cohort(self.reference, self.policy, self.sample, columns_of(self.vocab) if self.matrix else None,
                            self.posterior, self.seed)


def checker(run, scorer, seed: int = 0) -> CohortChecker:
    """The checker of a cohort scored by ``scorer`` (a ``MortalityScorer``) of the run ``run`` (``runs.load.Run``:
    its reference, vocabulary and ``score_samples``): the posterior's measures are compared only when the cohort
    is scored at the draws the reference was (a Gaussian-logit model's are exact at any)."""
    chosen = run.info.score_samples
    same = chosen is None or int(chosen) == int(scorer.samples) or bool(scorer.model.gaussian_logits)
    return CohortChecker(run.shift_reference, scorer.policy, run.vocab, same, seed)


@dataclass
class CohortCheck:
    """The check of one scored cohort, or why there is none."""

    report: object | None  # bayes.shift.ShiftReport (None: not checked, ``why`` says why)
    admissions: int  # the cohort's admissions
    tested: int  # of which compared (a uniform sample beyond MAX_COHORT)
    features: bool  # the features were compared (False: the outputs alone)
    why: str = ""  # a note: what was left out, or why nothing was checked

    @property
    def shifted(self) -> bool:
        return self.report is not None and self.report.verdict is Verdict.SHIFTED

    def sentence(self) -> str:
        """One sentence (the issue's), with what it rests on."""
        if self.report is None:
            return self.why
        r = dataclasses.replace(self.report, n=self.admissions) if self.tested < self.admissions else self.report
        text = r.sentence(HINT)
        if self.tested < self.admissions and self.report.verdict is not Verdict.TOO_SMALL:
            text += f" (a random {self.tested:,} of them compared)"
        return text + (f" ({self.why})" if self.why else "")

    def to_dict(self) -> dict:
        base = self.report.to_dict() if self.report is not None else {"verdict": None}
        return {**base, "admissions": self.admissions, "tested": self.tested, "features": self.features,
                "note": self.why, "sentence": self.sentence()}


def check_cohort(reference: ShiftReference | None, policy, sample: CohortSample, columns: list[str] | None = None,
                 posterior: bool = True, seed: int = 0) -> CohortCheck:
    """The check of a gathered cohort against the run's ``reference`` (None: the policy's outputs alone; no policy
    either: not checked); ``posterior`` False leaves out the posterior's measures (scored at another number of
    draws than the reference: their Monte Carlo noise differs)."""
    notes = []
    if reference is None:
        reference = outputs_reference(policy)
        if reference is None:
            return CohortCheck(None, sample.total, 0, False, "no shift check: this run has no policy, so no "
                               "calibration admissions to compare with (the run's reason is said where it has no "
                               "calibration)")
        notes.append("on the model's outputs alone: this run keeps no feature reference (trained before the check)")
    if not posterior:
        skipped = [k for k in POSTERIOR if k in reference.measures]
        reference = dataclasses.replace(reference, measures={k: v for k, v in reference.measures.items()
                                                             if k not in POSTERIOR})
        if skipped:
            notes.append("the posterior's measures left out: scored with another number of draws than the "
                         "calibration half")
    cohort = {k: v for k, v in sample.measures.items() if k in reference.measures}
    use = reference.features is not None and sample.matrix is not None
    matrix = sample.matrix
    if use and matrix.shape[0] * matrix.shape[1] <= DENSE_CELLS:  # small: dense products are the faster
        matrix = matrix.toarray()
        if sparse.issparse(reference.features):
            reference = dataclasses.replace(reference, features=reference.features.toarray())
    if use:
        try:
            reference.check_columns(columns)
        except ValueError as exc:  # a matrix of another vocabulary: the caller's features are not the run's
            raise ShiftError(f"shift check: {exc}") from None
    try:
        report = check_shift(reference, cohort, matrix if use else None, columns if use else None,
                             seed=seed)
    except ValueError as exc:  # a reference too small for any cohort to reach the level, nothing to compare
        return CohortCheck(None, sample.total, 0, False, f"no shift check: {exc}")
    tested = next(iter(cohort.values())).shape[0] if cohort else (sample.matrix.shape[0] if use else 0)
    return CohortCheck(report, sample.total, tested, use, "; ".join(notes))
