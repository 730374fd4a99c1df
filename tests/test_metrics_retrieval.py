"""Metrics pinned on hand-computed cases, the papers' own numbers and sklearn's NDCG."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import ndcg_score

from medheb_app.eval import metrics as m

RANKED = ["a", "b", "c", "d", "e", "f"]


def test_hit_at_k_counts_only_the_top_k() -> None:
    assert m.hit_at_k(RANKED, {"c"}, 1) == 0.0
    assert m.hit_at_k(RANKED, {"c"}, 2) == 0.0
    assert m.hit_at_k(RANKED, {"c"}, 3) == 1.0
    assert m.hit_at_k(RANKED, {"z", "a"}, 1) == 1.0
    assert m.hit_at_k(RANKED, set(), 5) == 0.0


def test_reciprocal_rank_is_first_positive_within_k() -> None:
    assert m.reciprocal_rank_at_k(RANKED, {"c", "e"}, 5) == pytest.approx(1 / 3)
    assert m.reciprocal_rank_at_k(RANKED, {"f"}, 5) == 0.0  # rank 6 is outside MRR@5
    assert m.reciprocal_rank_at_k(RANKED, {"a"}, 5) == 1.0


def test_mrr_averages_queries() -> None:
    value = m.mrr_at_k([RANKED, RANKED, RANKED], [{"a"}, {"b"}, {"z"}], 5)
    assert value == pytest.approx((1 + 0.5 + 0) / 3)
    with pytest.raises(ValueError):
        m.mrr_at_k([RANKED], [{"a"}, {"b"}], 5)


def test_ndcg_hand_computed() -> None:
    gains = {"a": 0.0, "b": 2.0, "c": 1.0, "x": 3.0}
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    ideal = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert m.ndcg_at_k(RANKED, gains, 3) == pytest.approx(dcg / ideal)
    assert m.ndcg_at_k(["x", "b", "c"], gains, 3) == pytest.approx(1.0)
    assert m.ndcg_at_k(RANKED, {"a": 0.0}, 5) == 0.0


def test_ndcg_matches_sklearn_on_random_graded_lists() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(6, 30))
        gains = rng.integers(0, 4, size=n).astype(float)
        if gains.max() == 0:
            gains[0] = 1.0
        scores = rng.normal(size=n)
        ranked = list(np.argsort(-scores, kind="stable"))
        for k in (1, 3, 5, 10):
            ours = m.ndcg_at_k(ranked, dict(enumerate(gains)), k)
            theirs = ndcg_score(gains[None, :], scores[None, :], k=k)
            assert ours == pytest.approx(theirs, abs=1e-9)


def test_ndcg_rejects_negative_gains_and_bad_k() -> None:
    with pytest.raises(ValueError):
        m.ndcg_at_k(RANKED, {"a": -1.0}, 3)
    with pytest.raises(ValueError):
        m.hit_at_k(RANKED, {"a"}, 0)


def test_precision_recall_and_hard_negative_rate() -> None:
    relevant = {"a", "c", "f"}
    assert m.precision_at_k(RANKED, relevant, 1) == 1.0
    assert m.precision_at_k(RANKED, relevant, 3) == pytest.approx(2 / 3)
    assert m.precision_at_k(RANKED, relevant, 5) == pytest.approx(2 / 5)
    # a short list still divides by k (missing slots are not relevant)
    assert m.precision_at_k(["a"], relevant, 5) == pytest.approx(1 / 5)
    assert m.any_relevant_at_k(RANKED, {"e"}, 3) == 0.0
    assert m.any_relevant_at_k(RANKED, {"e"}, 5) == 1.0
    assert m.hard_negative_rate_at_k(RANKED, {"b", "d", "e"}, 5) == pytest.approx(3 / 5)
    assert m.hard_negative_rate_at_k(RANKED, {"b"}, 1) == 0.0


def test_cv_reproduces_medheb_table_7() -> None:
    # siglip-so400m row of MedHEB Table 7: mu 11.34, sigma 9.45, CV 0.833
    siglip = [31.38, 6.78, 12.19, 5.01, 20.91, 2.36, 2.65, 9.45]
    assert m.macro_average(siglip) == pytest.approx(11.34, abs=0.01)
    assert m.coefficient_of_variation(siglip) == pytest.approx(0.833, abs=0.001)
    medemb_8b = [54.36, 20.30, 58.83, 28.97, 55.70, 35.47, 44.17, 70.64]
    assert m.coefficient_of_variation(medemb_8b) == pytest.approx(0.343, abs=0.001)
    assert m.coefficient_of_variation([0.0, 0.0]) == 0.0
    with pytest.raises(ValueError):
        m.macro_average([])


def test_bootstrap_ci_brackets_the_mean_and_is_deterministic() -> None:
    values = [1.0] * 30 + [0.0] * 70
    mean, low, high = m.bootstrap_ci(values, n_boot=2000, seed=3)
    assert mean == pytest.approx(0.3)
    assert low < 0.3 < high
    # binomial standard error sqrt(.3*.7/100) = 0.046: the 95% interval is about +-0.09
    assert 0.06 < high - low < 0.13 * 2
    assert m.bootstrap_ci(values, n_boot=2000, seed=3) == (mean, low, high)
    assert m.bootstrap_ci([1.0] * 5, n_boot=100) == (1.0, 1.0, 1.0)


def test_paired_bootstrap_detects_a_real_difference_and_not_a_null_one() -> None:
    rng = np.random.default_rng(0)
    b = rng.integers(0, 2, size=200).astype(float)
    a = b.copy()
    a[rng.choice(np.flatnonzero(b == 0), size=40, replace=False)] = 1.0  # a fixes 40 misses
    diff, (low, high), p_value = m.paired_bootstrap_test(a, b, n_boot=2000, seed=1)
    assert diff == pytest.approx(0.2)
    assert 0 < low < diff < high
    assert p_value < 0.01
    same_diff, _, same_p = m.paired_bootstrap_test(b, b, n_boot=500)
    assert same_diff == 0.0
    assert same_p == 1.0
    with pytest.raises(ValueError):
        m.paired_bootstrap_test([1.0, 0.0], [1.0], n_boot=10)


def test_stratified_bootstrap_keeps_each_tasks_weight() -> None:
    # task A: 2 queries both hit; task B: 8 queries, none hit -> macro mean 0.5 (micro: 0.2)
    mean, low, high = m.stratified_bootstrap_ci([[1, 1], [0] * 8], n_boot=200, seed=1)
    assert mean == 0.5 and low == high == 0.5  # no within-task spread: no interval width
    mean, low, high = m.stratified_bootstrap_ci([[1, 0, 1, 0], [1, 1]], n_boot=500, seed=0)
    assert mean == 0.75 and low < 0.75 < high and low >= 0.5
    with pytest.raises(ValueError):
        m.stratified_bootstrap_ci([[1.0], []])
