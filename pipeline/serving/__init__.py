"""Scoring a census: features or a MIMIC-III / MIMIC-IV source -> the risk table (``contracts.RISK``), one row per admission.

- ``score``: ``score`` (a model URI and features or a source -> a scores Parquet file).
- ``cohort``: census cohort files (HADM_ID lists or a SQL condition).
- ``release``: the MIMIC release of a model and of its inputs; scoring across releases only when asked.
The MLflow pyfunc (``mlflow models serve``, ``spark_udf``) is ``pipeline.runs.pyfunc``.
"""
