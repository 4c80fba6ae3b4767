"""Clinical mortality-risk pipeline on MIMIC-III with calibrated uncertainty.

Stages: extract (SQL on DuckDB or PostgreSQL -> de-identified token sequences),
train (rank-1 Bayesian LSTM and baselines, tracked in MLflow), evaluate, score.
Heavy libraries (torch, mlflow) are imported lazily by the modules that need them.
"""

__version__ = "0.1.0"
