"""Scoring a census: features or a MIMIC-III source -> the risk table (``contracts.RISK``), one row per admission.

- ``score``: ``score`` (a model URI and features or a source -> a scores Parquet file).
- ``cohort``: census cohort files (HADM_ID lists or a SQL condition).
The MLflow pyfunc (``mlflow models serve``, ``spark_udf``) is ``pipeline.runs.pyfunc``.
"""
