"""The error every Laplace failure raises (one line, naming what is wrong)."""

from __future__ import annotations

from pipeline.core.errors import PipelineError


class LaplaceError(PipelineError, ValueError):
    """A model, setting or posterior that subnetwork Laplace cannot use; the message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))  # always one line
