"""Speed and memory benchmarks, run as ``python -m benchmarks.NAME`` from the repository root (see README.md)."""
