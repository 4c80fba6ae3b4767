"""Workflows that write tracked (MLflow) runs across stages: the one training workflow of every task
(``train``: ``train_plan``; the mortality task's ``train``), the benchmark grid (``grid``), a Laplace run on a
trained model of any task (``laplace_run``), a vision run (``vision_run``) and a classical baseline's run
(``baselines_run``). The algorithm packages they drive (``laplace``, ``vision``, ``baselines``) never
import ``runs``; the top of the layer order, so nothing in ``pipeline`` imports this package."""
