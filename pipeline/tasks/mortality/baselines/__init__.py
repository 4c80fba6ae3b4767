"""Classical baselines on the same feature files as the LSTMs: logistic regression and gradient boosting.

- ``config``: ``BaselineKind``, ``BaselineConfig`` (torch- and scikit-learn-free).
- ``featurize``: FeatureSet -> one row of token counts (window, recent bags), context one-hot,
  age and event counts per admission (``Featurizer``, ``Rows``), numpy only.
- ``predictors``: the fitted models as arrays (``LinearPredictor``, ``TreePredictor``), numpy only.
- ``fit``: scikit-learn fits, every choice made on validation.
- ``model``: ``BaselineModel`` (featurizer + predictor), its file ``baseline.npz`` (no pickle),
  and ``feature_logits``, by which ``predict`` scores it like a point model.

Training and logging a baseline run is ``pipeline.workflows.baselines_run``; loading one is
``pipeline.runs.formats``. Nothing here imports torch, MLflow or another stage's model code.
"""
