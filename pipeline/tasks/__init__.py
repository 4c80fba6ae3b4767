"""The tasks: each one a model family, its batches, likelihood, metrics and output table."""
