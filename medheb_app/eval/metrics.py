"""Retrieval metrics as pure functions over ranked id lists and relevance judgements.

Conventions shared by every function here:
- `ranked` is a sequence of candidate ids, best first (ties already broken by the ranker).
- Relevance is a collection of relevant ids (binary) or a mapping id -> gain (graded).
- Scores are fractions in [0, 1]; reports multiply by 100 where the papers print percent.

MedHEB section 5.1 (Hit@1, MRR@5, Hit@5), Appendix A.3 (cross-family CV) and section 5.5
(graded NDCG@K); CXR-Retrieve section 4 equations 1-3 (P@k, R@k, HNRR@k).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence

import numpy as np

Id = Hashable


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1; got {k}.")


def hit_at_k(ranked: Sequence[Id], positives: Collection[Id], k: int) -> float:
    """1.0 when any of the top k is a positive, else 0.0 (MedHEB Hit@k)."""
    _check_k(k)
    return float(any(item in positives for item in ranked[:k]))


def reciprocal_rank_at_k(ranked: Sequence[Id], positives: Collection[Id], k: int) -> float:
    """1 / rank of the first positive within the top k, else 0 (one query's share of MRR@k)."""
    _check_k(k)
    for rank, item in enumerate(ranked[:k], start=1):
        if item in positives:
            return 1.0 / rank
    return 0.0


def mrr_at_k(
    ranked_lists: Iterable[Sequence[Id]], positives_lists: Iterable[Collection[Id]], k: int
) -> float:
    """Mean over queries of `reciprocal_rank_at_k` (MedHEB MRR@5 with k=5)."""
    values = [
        reciprocal_rank_at_k(ranked, positives, k)
        for ranked, positives in zip(ranked_lists, positives_lists, strict=True)
    ]
    if not values:
        raise ValueError("MRR needs at least one query.")
    return float(np.mean(values))


def dcg(gains_in_rank_order: Sequence[float]) -> float:
    """Discounted cumulative gain with the standard log2(rank + 1) discount, linear gains."""
    return float(
        sum(gain / math.log2(rank + 1) for rank, gain in enumerate(gains_in_rank_order, start=1))
    )


def ndcg_at_k(ranked: Sequence[Id], gains: Mapping[Id, float], k: int) -> float:
    """Normalised DCG of the top k (MedHEB section 5.5, graded relevance).

    Ids missing from `gains` have gain 0. The ideal ordering is taken over every judged gain,
    not only over the retrieved ones, so a ranker that never surfaces the best candidate is
    penalised. A query with no positive gain scores 0 (nothing could be found).
    """
    _check_k(k)
    if any(gain < 0 for gain in gains.values()):
        raise ValueError("NDCG gains must be non-negative.")
    ideal = dcg(sorted(gains.values(), reverse=True)[:k])
    if ideal == 0.0:
        return 0.0
    return dcg([float(gains.get(item, 0.0)) for item in ranked[:k]]) / ideal


def precision_at_k(ranked: Sequence[Id], relevant: Collection[Id], k: int) -> float:
    """Share of the top k that is relevant (CXR-Retrieve eq. 1); divides by k, not by len."""
    _check_k(k)
    return sum(item in relevant for item in ranked[:k]) / k


def any_relevant_at_k(ranked: Sequence[Id], relevant: Collection[Id], k: int) -> float:
    """1.0 when at least one of the top k is relevant (CXR-Retrieve R@k, eq. 2)."""
    return hit_at_k(ranked, relevant, k)


def hard_negative_rate_at_k(ranked: Sequence[Id], hard_negatives: Collection[Id], k: int) -> float:
    """Share of the top k that are hard negatives (CXR-Retrieve HNRR@k, eq. 3).

    For "A and no B" queries a hard negative is a study with both A and B positive.
    """
    _check_k(k)
    return sum(item in hard_negatives for item in ranked[:k]) / k


def macro_average(values: Iterable[float]) -> float:
    """Unweighted mean (task-macro or query-macro); raises on an empty input."""
    values = list(values)
    if not values:
        raise ValueError("Cannot average an empty list of scores.")
    return float(np.mean(values))


def coefficient_of_variation(family_scores: Sequence[float], eps: float = 1e-8) -> float:
    """CV = sigma / (mu + eps) over family-level Hit@1 (MedHEB Appendix A.3).

    sigma is the population standard deviation (ddof=0, numpy's default): the eight families
    are the whole population being described, not a sample from a larger set, and Table 7's
    mu / sigma / CV columns are consistent with ddof=0. eps keeps a model that scores zero
    everywhere finite (CV 0) instead of dividing by zero.
    """
    scores = np.asarray(family_scores, dtype=float)
    if scores.size == 0:
        raise ValueError("CV needs at least one family score.")
    return float(scores.std(ddof=0) / (scores.mean() + eps))


def bootstrap_ci(
    per_query: Sequence[float], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high): percentile bootstrap CI of a per-query metric's mean."""
    values = np.asarray(per_query, dtype=float)
    if values.size == 0:
        raise ValueError("Bootstrap needs at least one per-query value.")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1); got {alpha}.")
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, values.size, size=(n_boot, values.size))
    means = values[indices].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(values.mean()), float(low), float(high)


def stratified_bootstrap_ci(
    groups: Sequence[Sequence[float]], n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float, float]:
    """(macro mean, low, high): percentile bootstrap CI of a mean over groups (tasks) of
    per-query values, resampling queries within each group, so every task keeps its weight."""
    arrays = [np.asarray(group, dtype=float) for group in groups]
    if not arrays or any(a.size == 0 for a in arrays):
        raise ValueError("Bootstrap needs at least one group, each with a per-query value.")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1); got {alpha}.")
    rng = np.random.default_rng(seed)
    means = np.zeros(n_boot)
    for values in arrays:
        means += values[rng.integers(0, values.size, size=(n_boot, values.size))].mean(axis=1)
    means /= len(arrays)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(np.mean([a.mean() for a in arrays])), float(low), float(high)


def paired_bootstrap_test(
    per_query_a: Sequence[float],
    per_query_b: Sequence[float],
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, tuple[float, float], float]:
    """Mean difference a - b over the same queries, its bootstrap CI and a two-sided p-value.

    Queries are resampled jointly (paired). The p-value is the share of resampled differences
    on the other side of zero from the observed one, doubled (percentile bootstrap test),
    with a +1 correction so it is never exactly 0.
    """
    a = np.asarray(per_query_a, dtype=float)
    b = np.asarray(per_query_b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"Paired test needs the same queries: got {a.size} and {b.size} values.")
    if a.size == 0:
        raise ValueError("Paired test needs at least one query.")
    diff = a - b
    observed = float(diff.mean())
    rng = np.random.default_rng(seed)
    boots = diff[rng.integers(0, diff.size, size=(n_boot, diff.size))].mean(axis=1)
    low, high = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    if observed > 0:
        tail = np.sum(boots <= 0)
    elif observed < 0:
        tail = np.sum(boots >= 0)
    else:
        tail = n_boot
    p_value = min(1.0, 2 * (tail + 1) / (n_boot + 1))
    return observed, (float(low), float(high)), float(p_value)
