"""A trained run, owned in one place: written once, read back once, for every task.

- ``record``: ``write_run``, what every finished run records (model_info.json, the features' copies and
  tags, metrics, artifacts, the model file, the pyfunc), and ``validation_summary`` (the refer measure
  and threshold from validation).
- ``load``: ``load_run``, the one reader (a run id, ``runs:/<id>/...``, an MLflow model URI, a local model
  directory or a model file -> a typed ``Run``); ``find_runs`` and ``evaluation`` (which runs, and their
  evaluations' reports).
- ``formats``: a model file of any task and format -> (model, ``ModelInfo``), its task found by the key
  its checkpoint records (``pipeline.tasks.base``): this package imports no concrete task.
- ``info``: ``ModelInfo`` (the same fields for every kind; ``run_kind``, its task's key) and ``ModelFormat``.
- ``store``: the tracking store (the one MLflow client factory), artifact names, tags.
- ``tracking``: a run being written (params, metrics, artifacts, the pyfunc), redacted; a context
  manager that ends the run KILLED on Ctrl-C, FAILED on any other exception, FINISHED otherwise.
- ``pyfunc``: the run's model as an MLflow pyfunc (features in, risk table out).
- ``truth``: the true risk of a synthetic source joined to its features (the reference evaluation
  judges a run by, and training / Laplace choose the refer measure by on validation).
"""
