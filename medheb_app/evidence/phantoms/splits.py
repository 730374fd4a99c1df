"""Deterministic train / val / test assignment by patient, so no patient spans two splits."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def split_by_group(groups: Sequence[str], fractions: dict[str, float], seed: int) -> dict[str, str]:
    """Map each distinct group (patient or subject) to a split, in the given proportions.

    Groups are shuffled with the seed and cut at the cumulative fractions, so the sizes match
    the fractions to within one group.
    """
    if abs(sum(fractions.values()) - 1.0) > 1e-9:
        raise ValueError(f"Split fractions must sum to 1; got {fractions}.")
    distinct = sorted(set(groups))
    order = np.random.default_rng([seed, 0x5917]).permutation(len(distinct))
    bounds = np.cumsum(list(fractions.values())) * len(distinct)
    names = list(fractions)
    assignment = {}
    for rank, index in enumerate(order):
        position = int(np.searchsorted(bounds, rank, side="right"))
        assignment[distinct[index]] = names[min(position, len(names) - 1)]
    return assignment
