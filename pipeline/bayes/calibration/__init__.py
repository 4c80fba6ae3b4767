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

Modules: ``maps`` (identity, temperature, Platt, isotonic), ``venn_abers``, ``select`` (fit by name,
from_dict, the selection).
"""

from pipeline.bayes.calibration.maps import (
    LOGIT_CLIP,
    CalibrationError,
    CalibrationMap,
    Identity,
    Isotonic,
    Method,
    Platt,
    Temperature,
    expit,
    logit,
)
from pipeline.bayes.calibration.select import FOLDS, Selection, fit, from_dict, select_method, stratified_folds
from pipeline.bayes.calibration.venn_abers import VennAbers

__all__ = [
    "FOLDS", "LOGIT_CLIP", "CalibrationError", "CalibrationMap", "Identity", "Isotonic", "Method", "Platt",
    "Selection", "Temperature", "VennAbers", "expit", "fit", "from_dict", "logit", "select_method",
    "stratified_folds",
]
