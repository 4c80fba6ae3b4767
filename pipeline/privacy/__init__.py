"""De-identification of what the pipeline writes: ``deid`` (keyed pseudonyms, the de-identification
key, the data owner's link file) and ``redact`` (secrets and dates kept out of logs and MLflow params).
The scan that checks outputs for raw identifiers is a test helper (``tests/helpers/privacy_scan.py``)."""
