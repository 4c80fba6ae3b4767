"""Plain helpers shared by the test modules (fixtures live in tests/conftest.py).

tests/ is on ``sys.path`` during a pytest session (pytest's default "prepend" import mode puts
the first folder without ``__init__.py`` there), so test modules import these as
``from helpers.features import write_features``. No test module imports another test module.

- ``paths``: where the MIMIC-III demo is.
- ``features``: small random features directories in the extract format (``write_features``).
- ``raw_ids``: the raw SUBJECT_ID / HADM_ID / ICU stay ids of a MIMIC CSV directory (``raw_ids_of``).
- ``runs``: one tiny tracked training per features directory and model kind (``trained_run``).
- ``system``: system programs a test needs and the project does not install (``java_missing``).
"""
