"""Label-aware losses (CXR-Retrieve eq. 4-7) against hand-computed 3x3 toy batches."""

from __future__ import annotations

import math

import pytest
import torch

from medheb_app.train.losses import (
    HNM_WEIGHT,
    LOSSES,
    clip_loss,
    hnm_loss,
    label_aware_loss,
    label_aware_total,
    label_kernel,
    soft_targets,
)

# caption 0 "A and no C", caption 1 "A", caption 2 "C"
LABELS = torch.tensor([[1, 0, -1], [1, 0, 0], [0, 0, 1]])


def test_label_kernel_counts_agreements_and_conflicts() -> None:
    expected = torch.tensor([[2.0, 1.0, -1.0], [1.0, 1.0, 0.0], [-1.0, 0.0, 1.0]])
    assert torch.equal(label_kernel(LABELS), expected)


def test_self_clamp_for_captions_that_assert_nothing() -> None:
    kernel = label_kernel(torch.zeros(2, 3))
    assert torch.equal(kernel, torch.eye(2))


def test_soft_targets_zero_conflicts_and_rows_sum_to_one() -> None:
    targets = soft_targets(label_kernel(LABELS))
    expected = torch.tensor([[2 / 3, 1 / 3, 0.0], [0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    assert torch.allclose(targets, expected)


def test_label_aware_loss_hand_computed() -> None:
    eye = torch.eye(3)
    loss = label_aware_loss(eye, eye, 1.0, LABELS)
    a = 1 - math.log(math.e + 2)  # log p of the matching (diagonal) entry
    b = -math.log(math.e + 2)  # log p of an off-diagonal entry
    # both directions weight a by 2/3 + 1/2 + 1 and b by 1/3 + 1/2; divided by 2B = 6
    expected = -2 * ((13 / 6) * a + (5 / 6) * b) / 6
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_label_aware_equals_clip_when_no_captions_agree() -> None:
    generator = torch.Generator().manual_seed(0)
    image = torch.nn.functional.normalize(torch.randn(4, 8, generator=generator), dim=1)
    text = torch.nn.functional.normalize(torch.randn(4, 8, generator=generator), dim=1)
    distinct = torch.eye(4)[:, :4]
    assert label_aware_loss(image, text, 5.0, distinct).item() == pytest.approx(
        clip_loss(image, text, 5.0).item(), rel=1e-6
    )


def test_hnm_loss_hand_computed() -> None:
    image = torch.eye(3)
    text = torch.stack([torch.tensor([1.0, 0, 0]), torch.tensor([0, 1.0, 0])])
    text = torch.cat([text, torch.tensor([[1.0, 0, 1.0]]) / math.sqrt(2)])
    # conflict pairs (0, 2): 10 * 1/sqrt(2); (2, 0): 10 * 0 -> mean over 2 pairs
    assert hnm_loss(image, text, 10.0, LABELS).item() == pytest.approx(10 / (2 * math.sqrt(2)))
    # a conflicting pair that is already dissimilar (negative logit) costs nothing
    assert hnm_loss(image, -text, 10.0, LABELS).item() == pytest.approx(0.0)


def test_hnm_without_conflicts_is_zero_with_gradient() -> None:
    image = torch.eye(3, requires_grad=True)
    loss = hnm_loss(image, torch.eye(3), 1.0, torch.eye(3))
    loss.backward()
    assert loss.item() == 0.0 and image.grad is not None


def test_total_is_attract_plus_weighted_hnm() -> None:
    image = torch.eye(3)
    text = torch.nn.functional.normalize(torch.tensor([[1.0, 0.2, 0], [0, 1, 0], [1, 0, 1]]), dim=1)
    total = label_aware_total(image, text, 10.0, LABELS)
    expected = label_aware_loss(image, text, 10.0, LABELS) + HNM_WEIGHT * hnm_loss(
        image, text, 10.0, LABELS
    )
    assert HNM_WEIGHT == 0.3
    assert total.item() == pytest.approx(expected.item())
    profiles = torch.tensor([[1.0, 1, 0], [0, 1, -1], [-1, 0, 1]])  # image 0 has both 0 and 1
    with_profiles = label_aware_total(image, text, 10.0, LABELS, profiles, hnm_weight=0.5)
    attract = label_aware_loss(image, text, 10.0, LABELS, profiles)
    hinge = hnm_loss(image, text, 10.0, LABELS, profiles)
    assert with_profiles.item() == pytest.approx((attract + 0.5 * hinge).item())
    assert LOSSES["label-aware"] is label_aware_total and "clip" in LOSSES
