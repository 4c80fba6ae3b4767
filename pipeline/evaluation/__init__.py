"""Evaluation of trained runs: Monte Carlo metrics (the model's score_samples), the true-risk reference,
plots, and comparison over seeds.

- ``evaluate``: ``evaluate_run`` (a run's split -> report, JSON, plots, logged to the run).
- ``truth``: the synthetic source's true risk joined to the features.
- ``plots``: reliability diagram, PR curve, referral curve.
- ``compare``: evaluated runs -> mean ± sd per variant and split mode (Markdown, CSV).
The metrics themselves are ``pipeline.metrics``; models never compute them.
"""
