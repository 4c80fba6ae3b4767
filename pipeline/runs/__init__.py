"""A trained run, owned in one place: its checkpoint, its MLflow record, its logged model.

- ``formats``: the one loader of a run's model (``load_model``): the model file's format (a torch
  ``best.pt`` or a classical baseline's ``baseline.npz``), a checkpoint's kind (mortality,
  laplace, vision).
- ``info``: ``ModelInfo``, what ``formats.load_model`` returns with a model (the same keys for every
  kind), ``RunKind`` (mortality | vision) and ``ModelFormat``.
- ``store``: the tracking store (the one MLflow client factory), artifact names, model URIs
  (a run id, ``runs:/<id>/model``, ``models:/name/version``, a local model directory) and the
  features a run was trained on.
- ``tracking``: a run being written (params, metrics, artifacts, the pyfunc), redacted; a context
  manager that ends the run FAILED on any exception, FINISHED otherwise.
- ``record``: what every trained run records (validation summary, run files, features tags,
  artifacts, the pyfunc), written once for training, the baselines and Laplace.
- ``pyfunc``: the run's model as an MLflow pyfunc (features in, risk table out).
- ``vision``: a vision run read back (its image model, or the Laplace model fitted on one).
- ``truth``: the true risk of a synthetic source joined to its features (the reference evaluation
  judges a run by, and training / Laplace choose the refer measure by on validation).

Training writes runs; evaluation, scoring, comparison and the benchmarks read them through
``store.load_run_model``. Nothing here imports the training code.
"""
