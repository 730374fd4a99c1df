"""The one training loop (step / cancel / progress) the contrastive and MedEmb trainers share.

A trainer hands in its epochs as iterables of batches and a `loss_of(batch)` that returns the
batch's loss and its number of items; the loop does zero_grad / backward / step / schedule,
stops between steps when `stop` is set or `total` steps are done, reports
progress(step, total, loss) and keeps each finished epoch's item-weighted mean loss.

Work before the first step (drawing a corpus, caching frozen-tower features) is reported as
named stages through `report_stage` and checked for cancellation per batch through
`check_stop`, so a job shows what it does within seconds and stops within one batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from medheb_app.cancellation import Cancelled

Progress = Callable[[int, int, float], None]


class TrainingProgress:
    """A background job's view of a trainer: steps become the job's progress (a log line per
    tenth of the run), and `stage(text)` names the work before the first step."""

    def __init__(self, progress: Callable[..., None], log: Callable[[str], None]) -> None:
        self.progress, self.log, self._decile = progress, log, -1

    def __call__(self, step: int, total: int, loss: float) -> None:
        self.progress(step / max(total, 1), f"step {step}/{total}, loss {loss:.4f}")
        decile = int(10 * step / max(total, 1))
        if decile != self._decile:
            self._decile = decile
            self.log(f"step {step}/{total}: loss {loss:.4f}")

    def stage(self, text: str, fraction: float = 0.0) -> None:
        self.progress(fraction, text)


def report_stage(progress: Progress | None, text: str) -> None:
    """Name the current stage if the caller listens for stages (TrainingProgress does)."""
    stage = getattr(progress, "stage", None)
    if callable(stage):
        stage(text)


def check_stop(stop: threading.Event | None, doing: str) -> None:
    """Raise Cancelled (whose text says what is kept: nothing) when `stop` is set."""
    if stop is not None and stop.is_set():
        raise Cancelled(f"stopped while {doing}; no checkpoint saved")


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
