"""A process's start-up heap: what a process loads before it serves (imports, a model's
weights, the UI) is built without full cycle collections, then frozen out of later ones.

Python runs a full collection whenever the objects that survived the young generations grow
by a quarter. Importing torch, gradio and transformers and loading a model grows a process's
heap from nothing to about a million objects, so a start walked them all ~8 times, and every
later full collection walked them again, though none of them is garbage while the process
lives (BENCHMARKS.md, "Process start: the cycle collector"). The young generations still run
during the phase, so short-lived cycles are freed as before.

For a process's entry point (app.py, a Ray actor's constructor), in its main thread, once.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

NO_FULL_COLLECTIONS = 1_000_000_000  # gen-1 collections before a full one: never, in practice


@contextmanager
def startup_phase() -> Iterator[None]:
    """Load inside the block; on leaving, everything alive is frozen (gc.freeze) and the
    collector's thresholds are as before."""
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, NO_FULL_COLLECTIONS)
    try:
        yield
    finally:
        gc.freeze()
        gc.set_threshold(young, middle, full)
