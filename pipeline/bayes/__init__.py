"""The Bayesian toolbox, task-free: the layer family, the metrics, subnetwork Laplace."""
