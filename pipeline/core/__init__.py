"""The core: errors, files, contracts, configs, progress, devices, redaction (no torch, no stage)."""
