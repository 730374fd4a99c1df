"""Token-budgeted dynamic batching (MedHEB eq. 4) and the warmup + cosine schedule."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from medheb_app.train.batching import (
    TokenBudgetBatcher,
    batching_stats,
    padded_cost,
    static_batches,
    token_budget,
)
from medheb_app.train.schedule import warmup_cosine


def test_budget_is_twice_nominal_batch_times_max_length():
    assert token_budget(32, 128) == 8192
    assert padded_cost([3, 10, 7]) == 60


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batches_never_exceed_the_budget_and_pack_every_pair_once(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 200, size=500).tolist()
    batcher = TokenBudgetBatcher(budget=token_budget(8, 200), max_size=24, max_open=4)
    batches = list(batcher.batches(lengths, order=rng.permutation(len(lengths))))
    rows = sorted(row for batch in batches for row in batch)
    assert rows == list(range(len(lengths)))
    for batch in batches:
        assert padded_cost([lengths[i] for i in batch]) <= batcher.budget
        assert 1 <= len(batch) <= 24


def test_short_pairs_share_big_batches_and_long_pairs_small_ones():
    lengths = [10] * 40 + [100] * 8
    batcher = TokenBudgetBatcher(budget=token_budget(4, 100), max_size=64)
    batches = list(batcher.batches(lengths))
    sizes = sorted(len(b) for b in batches)
    assert sizes == [4, 4, 40]  # 2 * 40 * 10 = 800 = 2 * 4 * 100
    assert all(len({lengths[i] for i in b}) == 1 for b in batches)  # no long pair pads a short one
    # a static batcher at the nominal batch size needs 12 steps for the same pairs
    assert len(static_batches(len(lengths), 4)) == 12


def test_best_fit_picks_the_tightest_open_batch():
    batcher = TokenBudgetBatcher(budget=100, max_size=10, max_open=2, fit="budget")
    # A = [10, 10]; 20 cannot join A (2 * 3 * 20 = 120) and opens B. The 5 fits both:
    # A would be left with 100 - 60 = 40 unused, B with 100 - 80 = 20, so best fit takes B
    # (first fit would take A), after which B is full (a third pair would cost 120).
    assert list(batcher.batches([10, 10, 20, 5])) == [[2, 3], [0, 1]]


def test_padding_fit_keeps_similar_lengths_together():
    lengths = [10, 60, 11, 58, 12, 59, 10, 61]
    batcher = TokenBudgetBatcher(budget=1000, max_size=8, max_open=2, fit="padding")
    batches = list(batcher.batches(lengths))
    assert sorted(map(sorted, batches)) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    mixed = list(TokenBudgetBatcher(1000, 8, max_open=2, fit="budget").batches(lengths))
    cost = sum(padded_cost([lengths[i] for i in b]) for b in batches)
    assert cost < sum(padded_cost([lengths[i] for i in b]) for b in mixed)


@pytest.mark.parametrize("fit", ["padding", "budget"])
def test_both_fits_respect_the_budget_on_mixed_lengths(fit):
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 80, size=400).tolist()
    batcher = TokenBudgetBatcher(budget=token_budget(16, 80), max_size=64, fit=fit)
    batches = list(batcher.batches(lengths, rng.permutation(400)))
    assert sorted(r for b in batches for r in b) == list(range(400))
    assert all(padded_cost([lengths[i] for i in b]) <= batcher.budget for b in batches)


def test_an_oversized_pair_still_gets_a_batch_of_its_own():
    batcher = TokenBudgetBatcher(budget=50, max_size=4, fit="budget")
    assert batcher.oversized([10, 30, 5]) == [1]
    batches = list(batcher.batches([10, 30, 5]))
    assert sorted(map(sorted, batches)) == [[0, 2], [1]]


def test_bad_lengths_and_settings_are_refused():
    with pytest.raises(ValueError):
        TokenBudgetBatcher(budget=1, max_size=4)
    with pytest.raises(ValueError, match="length"):
        list(TokenBudgetBatcher(budget=10, max_size=4).batches([3, 0]))


def test_schedule_ramps_to_the_peak_at_warmup_end_and_decays_to_the_floor():
    total, warmup = 100, 10
    assert warmup_cosine(0, total, warmup) == pytest.approx(0.1)
    assert warmup_cosine(warmup - 1, total, warmup) == pytest.approx(1.0)
    assert warmup_cosine(warmup, total, warmup) == pytest.approx(1.0)
    assert warmup_cosine(55, total, warmup) == pytest.approx(0.5)  # halfway through the decay
    assert warmup_cosine(total, total, warmup) == pytest.approx(0.0)
    assert warmup_cosine(total, total, warmup, floor=0.1) == pytest.approx(0.1)
    values = [warmup_cosine(s, total, warmup) for s in range(warmup, total + 1)]
    assert all(a >= b for a, b in itertools.pairwise(values))


def test_batching_stats_count_steps_padding_and_pairs():
    stats = batching_stats([10, 10, 30], [[0, 2], [1]])
    assert stats["steps"] == 2 and stats["pairs"] == 3
    assert stats["padded_tokens"] == 2 * 2 * 30 + 2 * 10
    assert stats["padding_share"] == pytest.approx(1 - (20 + 20 + 60) / 140, abs=1e-4)
