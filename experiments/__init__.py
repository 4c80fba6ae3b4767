"""Experiments: studies whose numbers the dated reports under docs/experiments/ give, run as
``python -m experiments.NAME`` from the repository root (see README.md)."""
