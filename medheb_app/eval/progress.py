"""A run's progress by work done: stages weighted by their estimated cost, never going back.

A job's progress bar that moves per model jumps to 50% after a baseline that took a second
and then crawls for minutes. The runner instead weighs each stage by what it will cost (the
run's estimate, eval/estimate.py) and maps each stage's own 0..1 progress onto its share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Progress = Callable[[float, str], None]


class WorkProgress:
    """Reports fractions of a run made of consecutive stages with weights `work`."""

    def __init__(self, report: Progress, work: Sequence[float]) -> None:
        weights = [max(float(w), 0.0) for w in work]
        total = sum(weights)
        if total <= 0:  # nothing measurable: equal shares
            weights, total = [1.0] * len(weights), float(len(weights) or 1)
        self.report = report
        self.shares = [w / total for w in weights]
        self.starts = [sum(self.shares[:i]) for i in range(len(self.shares))]
        self.last = 0.0

    def at(self, first: int, fraction: float, message: str, last: int | None = None) -> float:
        """Report `fraction` of stages first..last (inclusive) done; returns what was reported
        (never below the last report, never above 1)."""
        last = first if last is None else last
        span = sum(self.shares[first : last + 1])
        value = self.starts[first] + span * min(max(float(fraction), 0.0), 1.0)
        self.last = min(max(self.last, value), 1.0)
        self.report(self.last, message)
        return self.last

    def span(self, first: int, last: int, prefix: str = "") -> Progress:
        """A callback that maps a sub-step's 0..1 onto stages first..last."""
        return lambda fraction, message: self.at(first, fraction, prefix + message, last)
