"""The torch device a command runs on (``--device``: cpu, cuda, cuda:N; default cuda when available).

Checkpoints are read onto the CPU (``map_location``) and moved to the device after, so a model trained on
one device loads on any other. Batches are built on the CPU (``pipeline.data.batches``) and moved per step
(``to_device``). torch is imported by the functions, not by this module.
"""

from __future__ import annotations

from pipeline.core.errors import ConfigError


def resolve_device(name: str | None = None):
    """The torch device ``name`` (cpu, cuda, cuda:1 ...); None: cuda when available, else cpu. A device
    that does not exist here is a ``ConfigError`` (one line, naming ``--device``)."""
    import torch

    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ConfigError(f"--device {name!r} is not a torch device (cpu, cuda, cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {name!r}: CUDA is not available here (torch {torch.__version__}); use cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"--device {name!r}: only {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise ConfigError(f"--device {name!r}: only cpu and cuda devices are supported")
    return device


def model_device(model):
    """The device of a model's first parameter or buffer (cpu for a model with neither, or a non-torch model)."""
    import torch

    for t in (*getattr(model, "parameters", tuple)(), *getattr(model, "buffers", tuple)()):
        return t.device
    return torch.device("cpu")


def to_device(batch: dict, device) -> dict:
    """``batch`` with every tensor on ``device`` (the same dict where it is the CPU: no copy)."""
    import torch

    if device is None or torch.device(device).type == "cpu":
        return batch
    return {k: v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
