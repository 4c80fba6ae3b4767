"""Workflows that write tracked (MLflow) runs across stages: the benchmark grid (``grid``), a Laplace
run on a trained model (``laplace_run``), a vision run (``vision_run``) and a classical baseline's run
(``baselines_run``). The algorithm packages they drive (``laplace``, ``vision``, ``baselines``) never
import ``runs``; the top of the layer order, so nothing in ``pipeline`` imports this package."""
