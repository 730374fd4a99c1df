"""The one training loop (step / cancel / progress) the contrastive and MedEmb trainers share.

A trainer hands in its epochs as iterables of batches and a `loss_of(batch)` that returns the
batch's loss and its number of items; the loop does zero_grad / backward / step / schedule,
stops between steps when `stop` is set or `total` steps are done, reports
progress(step, total, loss) and keeps each finished epoch's item-weighted mean loss.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Progress = Callable[[int, int, float], None]


@dataclass
class LoopResult:
    """What the loop did: steps taken, each finished epoch's mean loss, whether it was cut."""

    step: int = 0
    epoch_losses: list[float] = field(default_factory=list)
    cancelled: bool = False


def run_steps(
    epochs: Iterable[Iterable[Any]],
    loss_of: Callable[[Any], tuple[Any, int]],
    optimiser: Any,
    scheduler: Any,
    total: int,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> LoopResult:
    """Train over `epochs` (each an iterable of batches) for at most `total` steps."""
    result = LoopResult()
    for batches in epochs:
        running, count = 0.0, 0
        for batch in batches:
            if result.step >= total:
                break
            if stop is not None and stop.is_set():
                result.cancelled = True
                break
            loss, n_items = loss_of(batch)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            scheduler.step()
            result.step += 1
            value = loss.item()
            running += value * n_items
            count += n_items
            if progress is not None:
                progress(result.step, total, value)
        if result.cancelled:
            break
        result.epoch_losses.append(running / max(count, 1))
        if result.step >= total:
            break
    return result
