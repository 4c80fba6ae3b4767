"""The pyfunc's model code (MLflow's models-from-code): ``log_model`` logs this file, and MLflow
runs it when the model loads, so no pickled Python object is stored or unpickled."""

from mlflow.models import set_model

from pipeline.runs.pyfunc import MortalityRiskModel

set_model(MortalityRiskModel())
