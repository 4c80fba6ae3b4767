"""Post-hoc recalibration of a binary risk: maps fitted on (risk, label) of calibration admissions.

Arrays in, arrays out (numpy, scipy, scikit-learn; no torch). ``Method`` names the choices: ``none``,
``temperature`` and ``platt`` scaling of the logit, ``isotonic`` regression, and inductive ``venn_abers``
(a calibrated interval [p0, p1] per admission and its merged probability). ``fit(method, p, y)`` gives a
``CalibrationMap`` whose ``apply`` works on arrays of any shape (a risk, or its Monte Carlo draws), whose
``raw_threshold`` maps a decision threshold on the calibrated risk back to the raw risk, and whose
``to_dict`` / ``from_dict`` round trip is plain JSON. ``select_method`` chooses the method by held-out NLL
(cross-fitting on the calibration data; see ``select``).

The data a map is fitted on must be kept apart from the data that any later guarantee is computed on (the
refer rule's calibration split): a map applied to its own fit data gives in-sample risks.

Modules: ``options`` (the methods, importable without numpy or scipy), ``maps`` (identity, temperature,
Platt, isotonic), ``venn_abers``, ``select`` (fit by name, from_dict, the selection). Names load their module
on first use (``pipeline.core.lazy``).
"""

from pipeline.core.lazy import lazy

_HOMES = {
    **dict.fromkeys(("LOGIT_CLIP", "CalibrationError", "CalibrationMap", "Identity", "Isotonic", "Platt", "Temperature",
                     "expit", "logit"), "maps"),
    "Method": "options",
    **dict.fromkeys(("FOLDS", "Selection", "fit", "from_dict", "select_method", "stratified_folds"), "select"),
    "VennAbers": "venn_abers",
}
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy(__name__, _HOMES)
