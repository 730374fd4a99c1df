"""The one cancellation type: work that stops because its `stop` Event was set raises
`Cancelled`, whose message says what was kept ("no checkpoint saved", "kept the 3 shards
already written").

Library code (the benchmark runner, the index builders, the embedding cache, the training
loop) raises it between batches; the job runner (medheb_app/jobs.py) records a job that
raises it as cancelled, and `jobs.JobCancelled` is this same class. It subclasses
InterruptedError, which these functions raised before, so callers that catch that still do.
A leaf: it imports nothing from medheb_app.
"""

from __future__ import annotations

import threading


class Cancelled(InterruptedError):
    """Raised when a `stop` Event is set; the message says what was kept."""


def raise_if_stopped(stop: threading.Event | None, message: str) -> None:
    """Raise `Cancelled(message)` when `stop` is set (None: never)."""
    if stop is not None and stop.is_set():
        raise Cancelled(message)
