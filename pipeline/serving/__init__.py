"""Scoring a census: features or a MIMIC-III / MIMIC-IV source -> the risk table (``contracts.RISK``), one row per
admission.

- ``score``: ``score`` (a model URI and features or a source -> a scores Parquet file, the data
  owner's ``_private/`` files, the cohort report).
- ``cohort``: census cohort files (HADM_ID lists or a SQL condition) and the admissions without a score.
- ``release``: the MIMIC release of a model and of its inputs; scoring across releases only when asked.
- ``report``: the self-contained HTML cohort report.
- ``server``: ``cli.py serve`` (MLflow's scoring app on 127.0.0.1); ``guard``: its request guard.
The MLflow pyfunc (``mlflow models serve``, ``spark_udf``) is ``pipeline.runs.pyfunc``.
"""
