"""medemb-lite's visual projection: frozen-feature standardisation, then a linear map.

Part of medemb-lite (models/medemb_lite.py): it turns EfficientNet-Lite0 feature cells and
volume frames into BERT input tokens, the role of an MLLM's vision projector.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from medheb_app.models.towers import IMAGE_DIM, TEXT_DIM

VisualKind = Literal["image", "frame"]


class VisualProjection(nn.Module):
    """Frozen tower features -> BERT's token space: per-channel standardisation, then linear.

    The frozen ImageNet features of radiographs share a large common component (the pooled
    features of two different phantom chest films have cosine 0.89 on average), so a plain
    linear map hands BERT nearly the same visual tokens for every image: a checkpoint trained
    that way embedded 60 phantom test images at a mean pairwise cosine of 0.98 (their
    reports: 0.70). Standardising each channel with the training images' mean and std
    (image cells and volume frames apart: they come from different resolutions and
    poolings) keeps what differs between images. The statistics are buffers fitted once
    before training and saved with the weights; unfitted they are the identity.
    """

    kinds: tuple[VisualKind, ...] = ("image", "frame")

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(IMAGE_DIM, TEXT_DIM)
        for kind in self.kinds:
            self.register_buffer(f"{kind}_mean", torch.zeros(IMAGE_DIM))
            self.register_buffer(f"{kind}_std", torch.ones(IMAGE_DIM))

    def forward(self, features: torch.Tensor, kind: VisualKind = "image") -> torch.Tensor:
        mean, std = getattr(self, f"{kind}_mean"), getattr(self, f"{kind}_std")
        return self.linear((features - mean) / std)

    def fit(self, moments: ChannelMoments, kind: VisualKind) -> None:
        """Set a kind's statistics from the moments of its training tokens."""
        mean, std = moments.mean_std()
        getattr(self, f"{kind}_mean").copy_(mean)
        getattr(self, f"{kind}_std").copy_(std)

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        """A saved state; checkpoints from before standardisation hold a bare Linear."""
        if "weight" in state:
            self.linear.load_state_dict(state)
        else:
            self.load_state_dict(state)


class ChannelMoments:
    """Running per-channel sum and sum of squares (float64), so no token matrix is kept."""

    def __init__(self, dim: int = IMAGE_DIM) -> None:
        self.n = 0
        self.sum = torch.zeros(dim, dtype=torch.float64)
        self.squares = torch.zeros(dim, dtype=torch.float64)

    def add(self, tokens: torch.Tensor) -> None:
        tokens = tokens.to(torch.float64).reshape(-1, self.sum.shape[0])
        self.n += len(tokens)
        self.sum += tokens.sum(0)
        self.squares += (tokens**2).sum(0)

    def mean_std(self, floor: float = 1e-3) -> tuple[torch.Tensor, torch.Tensor]:
        if self.n < 2:
            raise ValueError("channel statistics need at least two tokens")
        mean = self.sum / self.n
        variance = (self.squares / self.n - mean**2).clamp(min=0) * self.n / (self.n - 1)
        return mean.float(), variance.sqrt().clamp(min=floor).float()
