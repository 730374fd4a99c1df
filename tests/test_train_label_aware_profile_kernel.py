"""The profile kernel (beyond the paper): an image's whole label profile against a caption."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medheb_app.train.captions import Caption
from medheb_app.train.label_aware import LabelAwareConfig, captioned_pairs, label_profiles
from medheb_app.train.losses import hnm_loss, label_kernel, pair_kernel, profile_kernel

# findings A, B, C. image 0 has A and B; image 1 has A with B confirmed absent; image 2 has C
PROFILES = torch.tensor([[1, 1, 0], [1, -1, 0], [0, 0, 1]])
# their sampled captions: "A", "A and no B", "C"
CAPTIONS = torch.tensor([[1, 0, 0], [1, -1, 0], [0, 0, 1]])


def test_profile_kernel_hand_computed() -> None:
    # image 0 vs "A and no B": 1 shared positive - 1 conflict = 0, but it contradicts -> -1
    expected = torch.tensor([[1.0, -1.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 1.0]])
    assert torch.equal(profile_kernel(PROFILES, CAPTIONS), expected)


def test_caption_kernel_attracts_the_hard_negative_that_the_profile_kernel_repels() -> None:
    assert label_kernel(CAPTIONS)[0, 1] == 1.0  # the paper's K: captions "A" and "A and no B"
    assert profile_kernel(PROFILES, CAPTIONS)[0, 1] < 0
    assert torch.equal(pair_kernel(CAPTIONS), label_kernel(CAPTIONS))


def test_hnm_hinges_the_contradiction_only_with_profiles() -> None:
    embeddings = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    with_profiles = hnm_loss(embeddings, embeddings, 10.0, CAPTIONS, PROFILES)
    assert torch.isclose(with_profiles, torch.tensor(10.0))  # one conflict, logit 10 * cos 1
    assert hnm_loss(embeddings, embeddings, 10.0, CAPTIONS) == 0.0


def test_label_profiles_and_pairs_carry_image_profiles() -> None:
    rows = [{"A": 1, "B": 0}, {"A": -1, "C": 1}, {}]
    profiles = label_profiles(rows, ["A", "B", "C"])
    assert profiles.tolist() == [[1, -1, 0], [0, 0, 1], [0, 0, 0]]
    captions = [
        Caption("a", np.array([1, 0, 0]), "single"),
        Caption("c", np.array([0, 0, 1]), "single"),
    ]
    pairs = captioned_pairs(captions, np.array([0, 1]), profiles)
    assert pairs.extras["image_labels"].tolist() == [[1, -1, 0], [0, 0, 1]]
    assert "image_labels" not in captioned_pairs(captions, np.array([0, 1])).extras


def test_kernel_option_is_validated() -> None:
    assert LabelAwareConfig().kernel == "profile"  # chosen on the val split (docstring)
    with pytest.raises(ValueError, match="kernel"):
        LabelAwareConfig(kernel="images")
