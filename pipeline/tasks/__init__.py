"""The tasks: each one a model family, its batches, likelihood, metrics, output table, what its run records and
how a run of it scores; ``base`` holds their protocols and the one registry, ``TASKS``."""
