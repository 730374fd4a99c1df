"""Token-budgeted dynamic batching (MedHEB Appendix A.1, eq. 4).

A batch B of query-target pairs is accepted only if

    2 |B| max_{i in B} l*_i <= T   and   |B| <= S_max,   l*_i = max(|q_i|, |t_i+|),

where the 2 counts the query and the target sequence and T = 2 B_nom L_max is the padded-token
cost of one static batch of B_nom pairs at the maximum length L_max. Short pairs (labels,
questions) then travel in large batches and long ones (reports, volumes) in small ones, at the
same padded cost per step. Batches are formed online by greedy best-fit packing: each arriving
pair goes to the open batch it fits most tightly; a batch that can take no more is emitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field


def token_budget(nominal_batch: int, max_len: int) -> int:
    """T = 2 B_nom L_max: the padded cost of one static batch (Appendix A.1)."""
    if nominal_batch < 1 or max_len < 1:
        raise ValueError("nominal_batch and max_len must be at least 1")
    return 2 * nominal_batch * max_len


def padded_cost(lengths: Sequence[int]) -> int:
    """2 |B| max l*: the left side of eq. 4 for a batch of effective pair lengths."""
    return 2 * len(lengths) * max(lengths) if lengths else 0


@dataclass
class _OpenBatch:
    rows: list[int] = field(default_factory=list)
    longest: int = 0

    def cost(self) -> int:
        return 2 * len(self.rows) * self.longest

    def cost_with(self, length: int) -> int:
        return 2 * (len(self.rows) + 1) * max(self.longest, length)


@dataclass(frozen=True)
class TokenBudgetBatcher:
    """Online greedy best-fit packing of pairs under eq. 4.

    budget: T. max_size: S_max. max_open: batches kept open at once (the online window);
    when a pair fits none and the window is full, the fullest open batch is emitted first.
    A pair longer than T / 2 on its own still gets a batch of one (it cannot be split);
    `oversized` reports such pairs so callers can truncate instead.
    """

    budget: int
    max_size: int
    max_open: int = 8

    def __post_init__(self) -> None:
        if self.budget < 2 or self.max_size < 1 or self.max_open < 1:
            raise ValueError("budget must be >= 2, max_size and max_open >= 1")

    def oversized(self, lengths: Sequence[int]) -> list[int]:
        return [i for i, n in enumerate(lengths) if 2 * n > self.budget]

    def batches(
        self, lengths: Sequence[int], order: Iterable[int] | None = None
    ) -> Iterator[list[int]]:
        """Yield lists of row indices covering every row once, in arrival `order`."""
        open_batches: list[_OpenBatch] = []
        for row in range(len(lengths)) if order is None else order:
            length = int(lengths[row])
            if length < 1:
                raise ValueError(f"pair {row} has length {length}; lengths must be >= 1")
            fits = [
                b
                for b in open_batches
                if len(b.rows) < self.max_size and b.cost_with(length) <= self.budget
            ]
            if fits:
                # best fit: the batch left with the least unused budget after taking the pair
                chosen = min(fits, key=lambda b: self.budget - b.cost_with(length))
            else:
                if len(open_batches) >= self.max_open:
                    fullest = max(open_batches, key=_OpenBatch.cost)
                    open_batches.remove(fullest)
                    yield fullest.rows
                chosen = _OpenBatch()
                open_batches.append(chosen)
            chosen.rows.append(row)
            chosen.longest = max(chosen.longest, length)
            if self._closed(chosen):
                open_batches.remove(chosen)
                yield chosen.rows
        for batch in sorted(open_batches, key=lambda b: b.rows[0]):
            yield batch.rows

    def _closed(self, batch: _OpenBatch) -> bool:
        """Full: at S_max, or even a pair of length 1 would break the budget."""
        return len(batch.rows) >= self.max_size or batch.cost_with(1) > self.budget


def static_batches(n: int, batch_size: int, order: Iterable[int] | None = None) -> list[list[int]]:
    """Fixed-size batches in arrival order: the baseline the dynamic batcher replaces."""
    rows = list(range(n) if order is None else order)
    return [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]


def batching_stats(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> dict[str, float]:
    """Steps, padded tokens (eq. 4's left side summed) and the share of them that is padding.

    Useful tokens are 2 l*_i per pair (the query and the target padded to the pair's longer
    side), so `padding_share` counts only the padding that batching adds.
    """
    padded = sum(padded_cost([lengths[i] for i in batch]) for batch in batches)
    useful = sum(2 * lengths[i] for batch in batches for i in batch)
    return {
        "steps": len(batches),
        "pairs": sum(len(batch) for batch in batches),
        "padded_tokens": padded,
        "padding_share": round(1 - useful / padded, 4) if padded else 0.0,
        "mean_pairs_per_step": round(sum(map(len, batches)) / max(len(batches), 1), 2),
    }
