"""The MedEmb objective (MedHEB eq. 1-3) against hand-computed 3x3 cases."""

from __future__ import annotations

import math

import pytest
import torch

from medheb_app.train.losses import false_negative_mask, masked_infonce_loss

# Targets are the unit axes, so query row i holds its cosines to targets 1..3 directly.
TARGETS = torch.eye(3)
QUERIES = torch.tensor([[0.6, 0.8, 0.0], [0.0, 0.8, 0.6], [0.8, 0.0, 0.6]])
TAU = 0.5


def test_mask_drops_the_diagonal_and_candidates_beating_the_positive_by_the_margin():
    keep = false_negative_mask(QUERIES @ TARGETS.T, margin=0.1)
    expected = torch.tensor([[0, 0, 1], [1, 0, 1], [0, 1, 0]], dtype=torch.bool)
    assert torch.equal(keep, expected)


def test_mask_keeps_a_candidate_that_beats_the_positive_by_less_than_the_margin():
    cosine = torch.tensor([[0.50, 0.55], [0.10, 0.90]])
    assert torch.equal(
        false_negative_mask(cosine, margin=0.1), torch.tensor([[False, True], [True, False]])
    )
    # without a margin nothing but the diagonal is dropped
    assert false_negative_mask(QUERIES @ TARGETS.T, margin=None).sum() == 6


def test_masked_loss_matches_the_hand_computed_value():
    # row 1: positive 0.6, 0.8 masked (> 0.7), 0.0 kept; row 2: positive 0.8, 0.0 and 0.6 kept;
    # row 3: positive 0.6, 0.8 masked, 0.0 kept.
    by_hand = (
        math.log(1 + math.exp((0.0 - 0.6) / TAU))
        + math.log(1 + math.exp((0.0 - 0.8) / TAU) + math.exp((0.6 - 0.8) / TAU))
        + math.log(1 + math.exp((0.0 - 0.6) / TAU))
    ) / 3
    loss = masked_infonce_loss(QUERIES, TARGETS, temperature=TAU, margin=0.1)
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)


def test_without_a_margin_it_is_plain_infonce():
    by_hand = (
        math.log(1 + math.exp((0.8 - 0.6) / TAU) + math.exp((0.0 - 0.6) / TAU))
        + math.log(1 + math.exp((0.0 - 0.8) / TAU) + math.exp((0.6 - 0.8) / TAU))
        + math.log(1 + math.exp((0.8 - 0.6) / TAU) + math.exp((0.0 - 0.6) / TAU))
    ) / 3
    loss = masked_infonce_loss(QUERIES, TARGETS, temperature=TAU, margin=None)
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)
    reference = torch.nn.functional.cross_entropy(QUERIES @ TARGETS.T / TAU, torch.arange(3))
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)


def test_same_target_pairs_are_not_negatives():
    same = torch.tensor([[0, 0, 1], [0, 0, 0], [1, 0, 0]], dtype=torch.bool)
    loss = masked_infonce_loss(QUERIES, TARGETS, temperature=TAU, margin=None, same_target=same)
    by_hand = (
        math.log(1 + math.exp((0.8 - 0.6) / TAU))  # row 1 keeps only target 2
        + math.log(1 + math.exp((0.0 - 0.8) / TAU) + math.exp((0.6 - 0.8) / TAU))
        + math.log(1 + math.exp((0.0 - 0.6) / TAU))  # row 3 keeps only target 2
    ) / 3
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)


def test_the_paper_temperature_gives_finite_loss_and_gradients():
    queries = torch.nn.functional.normalize(torch.randn(5, 8), dim=-1).requires_grad_()
    targets = torch.nn.functional.normalize(torch.randn(5, 8), dim=-1)
    loss = masked_infonce_loss(queries, targets)  # tau 0.01, delta 0.1
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(queries.grad).all()


def test_mismatched_batches_are_refused():
    with pytest.raises(ValueError, match="matched pairs"):
        masked_infonce_loss(torch.eye(3), torch.eye(2, 3))


def test_bank_loss_scores_each_query_against_every_bank_row():
    from medheb_app.train.losses import bank_infonce_loss

    # query 1 -> bank row 1 (cosines 0.6, 0.8, 0.0), query 2 -> bank row 0 (0.0, 0.8, 0.6)
    positive = torch.tensor([1, 0])
    by_hand = (
        -math.log(math.exp(0.8 / TAU) / sum(math.exp(c / TAU) for c in (0.6, 0.8, 0.0)))
        - math.log(math.exp(0.0 / TAU) / sum(math.exp(c / TAU) for c in (0.0, 0.8, 0.6)))
    ) / 2
    loss = bank_infonce_loss(QUERIES[:2], TARGETS, positive, TAU)
    assert loss.item() == pytest.approx(by_hand, rel=1e-6)
    with pytest.raises(ValueError, match="one positive index per query"):
        bank_infonce_loss(QUERIES, TARGETS, positive, TAU)
