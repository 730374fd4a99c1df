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


# -- label-aware losses (CXR-Retrieve section 4.1) ----------------------------------------


def label_kernel(labels: torch.Tensor) -> torch.Tensor:
    """K = Y Y^T over caption assertion vectors y in {-1, 0, 1}^L (eq. 4).

    K_ij counts shared positives plus shared confirmed absences minus conflicts; K_ij < 0 flags
    a clinical contradiction. The diagonal is clamped to at least 1 ("self-clamp"), so every
    image stays paired with its own caption even when the caption asserts nothing.
    """
    y = labels.to(torch.float32)
    kernel = y @ y.T
    diagonal = torch.clamp(torch.diagonal(kernel), min=1.0)
    return kernel - torch.diag(torch.diagonal(kernel)) + torch.diag(diagonal)


def soft_targets(kernel: torch.Tensor) -> torch.Tensor:
    """T_ij = max(K_ij, 0) / sum_k max(K_ik, 0): conflicts get 0, rows sum to 1 (section 4.1)."""
    positive = torch.clamp(kernel, min=0.0)
    return positive / positive.sum(dim=1, keepdim=True)


def label_aware_loss(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    labels: torch.Tensor,
) -> torch.Tensor:
    """Symmetric soft cross-entropy with label-agreement targets (eq. 5).

    Implemented as written: the image->text term weights log p(text j | image i) by T_ij, the
    text->image term weights log p(image j | text i) by T_ji, and the sum is divided by 2B.
    With no two captions agreeing, T is the identity and this equals clip_loss.
    """
    targets = soft_targets(label_kernel(labels))
    logits = clip_logits(image_emb, text_emb, logit_scale)
    image_to_text = -(targets * F.log_softmax(logits, dim=1)).sum()
    text_to_image = -(targets.T * F.log_softmax(logits.T, dim=1)).sum()
    return (image_to_text + text_to_image) / (2 * image_emb.shape[0])


def hnm_loss(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    labels: torch.Tensor,
) -> torch.Tensor:
    """Hinge on contradicting pairs: mean over K_ij < 0 of max(0, tau <z_i^v, z_j^t>) (eq. 6).

    A batch without conflicts contributes 0 (with a gradient path, so callers can always add it).
    """
    conflicts = label_kernel(labels) < 0
    logits = clip_logits(image_emb, text_emb, logit_scale)
    count = conflicts.sum()
    if count == 0:
        return logits.sum() * 0.0
    return torch.clamp(logits[conflicts], min=0.0).sum() / count


HNM_WEIGHT = 0.3  # lambda_HNM, CXR-Retrieve section 5.1


def label_aware_total(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    labels: torch.Tensor,
    hnm_weight: float = HNM_WEIGHT,
) -> torch.Tensor:
    """L + lambda * L_HNM (eq. 7), the full label-aware objective."""
    attract = label_aware_loss(image_emb, text_emb, logit_scale, labels)
    return attract + hnm_weight * hnm_loss(image_emb, text_emb, logit_scale, labels)


def clip_loss_ignoring_labels(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """clip_loss with the label-aware call signature (the "CLIP loss (diag.)" ablation row)."""
    return clip_loss(image_emb, text_emb, logit_scale)


LOSSES = {
    "clip": clip_loss,
    "label-aware": label_aware_total,
    "attract": label_aware_loss,
    "hnm": hnm_loss,
}
