"""The one training loop (step / cancel / progress) the contrastive and MedEmb trainers share.

A trainer hands in its epochs as iterables of batches and a `loss_of(batch)` that returns the
batch's loss and its number of items; the loop does zero_grad / backward / step / schedule,
stops after `total` steps, raises `Cancelled` (medheb_app/cancellation.py, the one
cancellation type; nothing is saved) between steps when `stop` is set, reports
progress(step, total, loss) and keeps each finished epoch's item-weighted mean loss.

Work before the first step (drawing a corpus, caching frozen-tower features) is reported as
named stages through `report_stage` and checked for cancellation per batch through
`check_stop`, so a job shows what it does within seconds and stops within one batch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from medheb_app.cancellation import raise_if_stopped

Progress = Callable[[int, int, float], None]
# stages whose work is kept on disk for a rerun on the same data (train/contrastive.py's
# feature cache, evidence/phantoms/saved.py's corpora): "drawing 2000 phantom studies", ...
REUSABLE_STAGES = ("drawing", "caching")


class TrainingProgress:
    """A background job's view of a trainer: steps become the job's progress (a log line per
    tenth of the run), and `stage(text)` names the work before the first step. It also times
    the run (`timing()`: seconds before the first step, seconds per step, steps done of how
    many), which the training estimate reads from finished jobs (eval/estimate.py)."""

    def __init__(self, progress: Callable[..., None], log: Callable[[str], None]) -> None:
        self.progress, self.log, self._decile = progress, log, -1
        self.started = time.perf_counter()
        self.first_step: float | None = None  # when step 1 was reported
        self.last_step: float | None = None
        self.steps = 0
        self.total = 0
        self._stage: tuple[str, float] | None = None  # the stage under way and its start
        self.reusable_s = 0.0  # setup a rerun on the same data skips (drawing, caching)
        self._tail_reusable = False

    def _end_stage(self, now: float) -> bool:
        """Close the stage under way; whether it was reusable work."""
        reusable = self._stage is not None and self._stage[0].startswith(REUSABLE_STAGES)
        if reusable:
            self.reusable_s += now - self._stage[1]  # type: ignore[index]
        self._stage = None
        return reusable

    def __call__(self, step: int, total: int, loss: float) -> None:
        now = time.perf_counter()
        if self.first_step is None and step >= 1:
            self.first_step = now
            self._tail_reusable = self._end_stage(now)  # it ran on through step 1
        self.last_step, self.steps, self.total = now, step, total
        self.progress(step / max(total, 1), f"step {step}/{total}, loss {loss:.4f}")
        decile = int(10 * step / max(total, 1))
        if decile != self._decile:
            self._decile = decile
            self.log(f"step {step}/{total}: loss {loss:.4f}")

    def stage(self, text: str, fraction: float = 0.0) -> None:
        now = time.perf_counter()
        if self.first_step is None:
            self._end_stage(now)
            self._stage = (text, now)
        self.progress(fraction, text)

    def timing(self) -> dict[str, float]:
        """{"setup_s": before the first step (its own time counted as a step), "step_s": per
        step, "steps": done, "total_steps": planned, "first_step_s": from the start to the end
        of step 1, "reusable_s": the part of setup spent drawing a corpus or caching features,
        which a rerun on the same data finds on disk}; {} before any step. After one step only,
        step_s is that whole time."""
        if self.first_step is None or self.last_step is None or self.steps < 1:
            return {}
        per_step = (self.last_step - self.first_step) / max(self.steps - 1, 1)
        if self.steps == 1:
            per_step = self.first_step - self.started  # one step: an upper bound
        setup = max(self.first_step - self.started - per_step, 0.0)
        tail = per_step if self._tail_reusable else 0.0  # step 1 is not reusable work
        return {
            "setup_s": round(setup, 3),
            "step_s": round(per_step, 5),
            "steps": self.steps,
            "total_steps": self.total,
            "first_step_s": round(self.first_step - self.started, 3),
            "reusable_s": round(min(self.reusable_s - tail, setup), 3),
        }


def report_stage(progress: Progress | None, text: str) -> None:
    """Name the current stage if the caller listens for stages (TrainingProgress does)."""
    stage = getattr(progress, "stage", None)
    if callable(stage):
        stage(text)


def check_stop(stop: threading.Event | None, doing: str) -> None:
    """Raise Cancelled (whose text says what is kept: nothing) when `stop` is set."""
    raise_if_stopped(stop, f"stopped while {doing}; no checkpoint saved")


@dataclass
class LoopResult:
    """What the loop did: steps taken and each finished epoch's mean loss (a cut loop raises
    Cancelled instead of returning)."""

    step: int = 0
    epoch_losses: list[float] = field(default_factory=list)


def run_steps(
    epochs: Iterable[Iterable[Any]],
    loss_of: Callable[[Any], tuple[Any, int]],
    optimiser: Any,
    scheduler: Any,
    total: int,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> LoopResult:
    """Train over `epochs` (each an iterable of batches) for at most `total` steps; Cancelled
    ("stopped after step 2 of 40; no checkpoint saved") as soon as `stop` is set."""
    result = LoopResult()
    for batches in epochs:
        running, count = 0.0, 0
        for batch in batches:
            if result.step >= total:
                break
            raise_if_stopped(
                stop, f"stopped after step {result.step} of {total}; no checkpoint saved"
            )
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
        result.epoch_losses.append(running / max(count, 1))
        if result.step >= total:
            break
    return result
