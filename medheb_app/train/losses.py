"""Contrastive losses as small pure functions over (image, text) embedding batches.

Each loss takes L2-normalised embeddings of matched pairs (row i of both is a pair) and the
learned logit scale (already exponentiated), and normalises by the batch size explicitly, so
summing losses over accumulated micro-batches stays correct.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def clip_logits(
    image_emb: torch.Tensor, text_emb: torch.Tensor, logit_scale: torch.Tensor | float
) -> torch.Tensor:
    """Scaled cosine similarities, rows = images, columns = texts."""
    return logit_scale * image_emb @ text_emb.T


def clip_loss(
    image_emb: torch.Tensor, text_emb: torch.Tensor, logit_scale: torch.Tensor | float
) -> torch.Tensor:
    """Symmetric InfoNCE with the diagonal as positives (Radford et al. 2021).

    This is the report-matching baseline of CXR-Retrieve section 4: each image's own report is
    its only positive, every other report in the batch a negative, and vice versa.
    loss = (CE(logits, diag) + CE(logits.T, diag)) / 2, each CE summed then divided by B.
    """
    batch = image_emb.shape[0]
    if text_emb.shape[0] != batch:
        raise ValueError(f"clip_loss needs matched pairs; got {batch} images, {text_emb.shape[0]}")
    logits = clip_logits(image_emb, text_emb, logit_scale)
    targets = torch.arange(batch, device=logits.device)
    image_to_text = F.cross_entropy(logits, targets, reduction="sum")
    text_to_image = F.cross_entropy(logits.T, targets, reduction="sum")
    return (image_to_text + text_to_image) / (2 * batch)


LOSSES = {"clip": clip_loss}
