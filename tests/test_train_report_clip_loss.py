"""clip_loss against a hand-computed 2x2 case, and its batch-size normalisation."""

from __future__ import annotations

import math

import pytest
import torch

from medheb_app.train.losses import clip_loss


def test_clip_loss_hand_computed_2x2() -> None:
    images = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    texts = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    # logits = 2 * images @ texts.T = [[2.0, 1.2], [0.0, 1.6]]
    image_to_text = (-2.0 + math.log(math.exp(2.0) + math.exp(1.2))) + (
        -1.6 + math.log(math.exp(0.0) + math.exp(1.6))
    )
    text_to_image = (-2.0 + math.log(math.exp(2.0) + math.exp(0.0))) + (
        -1.6 + math.log(math.exp(1.2) + math.exp(1.6))
    )
    expected = (image_to_text + text_to_image) / 4
    assert clip_loss(images, texts, 2.0).item() == pytest.approx(expected, rel=1e-6)


def test_clip_loss_is_a_per_pair_mean() -> None:
    # Orthogonal pairs, scale 1: every row's CE is log(e + 3) - 1; summed over 4 rows and two
    # directions then divided by 2 * 4, the loss is that per-row value, not 8 times it.
    eye = torch.eye(4)
    assert clip_loss(eye, eye, 1.0).item() == pytest.approx(math.log(1 + 3 * math.exp(-1)))


def test_clip_loss_rejects_unmatched_batches() -> None:
    with pytest.raises(ValueError, match="matched pairs"):
        clip_loss(torch.eye(3), torch.eye(2, 3), 1.0)


def test_clip_loss_decreases_when_pairs_align() -> None:
    generator = torch.Generator().manual_seed(0)
    images = torch.nn.functional.normalize(torch.randn(8, 16, generator=generator), dim=-1)
    noise = torch.nn.functional.normalize(torch.randn(8, 16, generator=generator), dim=-1)
    assert clip_loss(images, images, 10.0) < clip_loss(images, noise, 10.0)
