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
    return self_clamp(y @ y.T)


def self_clamp(kernel: torch.Tensor) -> torch.Tensor:
    """K_ii <- max(K_ii, 1): every image stays paired with its own caption (section 4.1)."""
    return kernel.diagonal_scatter(torch.clamp(kernel.diagonal(), min=1.0))


def soft_targets(kernel: torch.Tensor) -> torch.Tensor:
    """T_ij = max(K_ij, 0) / sum_k max(K_ik, 0): conflicts get 0, rows sum to 1 (section 4.1)."""
    positive = torch.clamp(kernel, min=0.0)
    return positive / positive.sum(dim=1, keepdim=True)


def profile_kernel(image_labels: torch.Tensor, caption_labels: torch.Tensor) -> torch.Tensor:
    """K_ij between image i's whole label profile and caption j's assertions (beyond the paper).

    CXR-Retrieve's K (eq. 4) compares two CAPTIONS, so an image with A and B that happened to be
    captioned "A" counts as a match for "A and no B". Here v_i holds every label of image i
    (+1 positive, -1 confirmed absent, 0 otherwise) and K_ij = v_i . t_j, except that a caption
    contradicting ANY label of the image (it negates a finding the image has, or asserts one it
    confirmedly lacks) gets K_ij <= -1: a clinical contradiction, so no attraction (T_ij = 0)
    and the HNM hinge applies. The diagonal is clamped to at least 1 as in label_kernel.
    """
    v = image_labels.to(torch.float32)
    t = caption_labels.to(torch.float32)
    kernel = v @ t.T
    contradicts = ((v.unsqueeze(1) * t.unsqueeze(0)) < 0).any(dim=-1)
    return self_clamp(torch.where(contradicts, torch.clamp(kernel, max=-1.0), kernel))


def pair_kernel(labels: torch.Tensor, image_labels: torch.Tensor | None = None) -> torch.Tensor:
    """The paper's caption kernel, or the profile kernel when image profiles are given."""
    return label_kernel(labels) if image_labels is None else profile_kernel(image_labels, labels)


def logits_and_kernel(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    labels: torch.Tensor,
    image_labels: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """What every label-aware loss starts from (section 4.1): the scaled logits (clip_logits)
    and the pair kernel K (pair_kernel), each built once."""
    return clip_logits(image_emb, text_emb, logit_scale), pair_kernel(labels, image_labels)


def label_aware_loss(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    labels: torch.Tensor,
    image_labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """Symmetric soft cross-entropy with label-agreement targets (eq. 5).

    Implemented as written: the image->text term weights log p(text j | image i) by T_ij, the
    text->image term weights log p(image j | text i) by T_ji, and the sum is divided by 2B.
    With no two captions agreeing, T is the identity and this equals clip_loss.
    `image_labels` switches K to profile_kernel.
    """
    logits, kernel = logits_and_kernel(image_emb, text_emb, logit_scale, labels, image_labels)
    return soft_cross_entropy(logits, kernel)


def soft_cross_entropy(logits: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Eq. 5 from the scaled logits and the kernel K: both directions, divided by 2B."""
    targets = soft_targets(kernel)
    image_to_text = -(targets * F.log_softmax(logits, dim=1)).sum()
    text_to_image = -(targets.T * F.log_softmax(logits.T, dim=1)).sum()
    return (image_to_text + text_to_image) / (2 * logits.shape[0])


def hnm_loss(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    labels: torch.Tensor,
    image_labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """Hinge on contradicting pairs: mean over K_ij < 0 of max(0, tau <z_i^v, z_j^t>) (eq. 6).

    A batch without conflicts contributes 0 (with a gradient path, so callers can always add it).
    `image_labels` switches K to profile_kernel.
    """
    logits, kernel = logits_and_kernel(image_emb, text_emb, logit_scale, labels, image_labels)
    return contradiction_hinge(logits, kernel)


def contradiction_hinge(logits: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Eq. 6 from the scaled logits and the kernel K: mean hinge over pairs with K_ij < 0."""
    conflicts = kernel < 0
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
    image_labels: torch.Tensor | None = None,
    hnm_weight: float = HNM_WEIGHT,
) -> torch.Tensor:
    """L + lambda * L_HNM (eq. 7), the full label-aware objective (K and logits built once)."""
    logits, kernel = logits_and_kernel(image_emb, text_emb, logit_scale, labels, image_labels)
    return soft_cross_entropy(logits, kernel) + hnm_weight * contradiction_hinge(logits, kernel)


def clip_loss_ignoring_labels(
    image_emb: torch.Tensor,
    text_emb: torch.Tensor,
    logit_scale: torch.Tensor | float,
    labels: torch.Tensor | None = None,
    image_labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """clip_loss with the label-aware call signature (the "CLIP loss (diag.)" ablation row)."""
    return clip_loss(image_emb, text_emb, logit_scale)


LOSSES = {
    "clip": clip_loss,
    "label-aware": label_aware_total,
    "attract": label_aware_loss,
    "hnm": hnm_loss,
}


# -- MedEmb objective (MedHEB section 4, Appendix A.1) -------------------------------------

MEDEMB_TEMPERATURE = 0.01  # tau, MedHEB section 4
MEDEMB_MARGIN = 0.1  # delta, MedHEB section 4


def false_negative_mask(
    cosine: torch.Tensor, margin: float | None, same_target: torch.Tensor | None = None
) -> torch.Tensor:
    """m_ij of eq. 2 as a boolean "keep j as a negative of query i" matrix (B x B).

    The diagonal is never a negative (j = i). With a margin, candidates whose cosine exceeds
    the positive's cosine by more than `margin` are dropped as likely false negatives.

    The margin is applied to the cosine, not to phi = exp(cos / tau) as eq. 2 literally reads.
    With tau = 0.01, phi spans e^-100 .. e^100, so an additive 0.1 on phi has no fixed meaning:
    when the positive scores cos > 0 it is negligible (the rule degenerates to "mask every
    negative that scores above the positive"), and when cos_pos < 0 it becomes the unrelated
    threshold cos_j > tau ln 0.1 = -0.023. On the cosine, delta = 0.1 is a fixed angular gap
    that means the same at every scale; it equals phi_j > phi_pos * e^(delta / tau) on phi.

    `same_target[i, j]` (optional) marks pairs whose targets are the same item (two queries
    with the label "Edema" as target): such a j is the query's own positive, not a negative,
    so it is dropped too whatever the margin.
    """
    batch = cosine.shape[0]
    keep = ~torch.eye(batch, dtype=torch.bool, device=cosine.device)
    if margin is not None:
        positive = torch.diagonal(cosine).unsqueeze(1)
        keep &= ~(cosine.detach() > positive.detach() + margin)
    if same_target is not None:
        keep &= ~same_target.to(torch.bool)
    return keep


def masked_infonce_loss(
    query_emb: torch.Tensor,
    target_emb: torch.Tensor,
    temperature: float = MEDEMB_TEMPERATURE,
    margin: float | None = MEDEMB_MARGIN,
    same_target: torch.Tensor | None = None,
) -> torch.Tensor:
    """L_MedEmb of eq. 3: query->target InfoNCE with false negatives masked out.

    loss = -1/B sum_i log( phi_ii / (phi_ii + sum_j m_ij phi_ij) ), phi = exp(cos / tau),
    computed as a cross-entropy over logits cos / tau with masked entries set to -inf.
    `margin=None` and no `same_target` gives the plain InfoNCE of eq. 1. Embeddings must be
    L2-normalised (rows); the sum is divided by B explicitly.
    """
    batch = query_emb.shape[0]
    if target_emb.shape[0] != batch:
        raise ValueError(
            f"masked_infonce_loss needs matched pairs; got {batch} and {target_emb.shape[0]}"
        )
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    cosine = query_emb @ target_emb.T
    keep = false_negative_mask(cosine, margin, same_target)
    keep |= torch.eye(batch, dtype=torch.bool, device=cosine.device)  # the positive itself
    logits = (cosine / temperature).masked_fill(~keep, float("-inf"))
    targets = torch.arange(batch, device=cosine.device)
    return F.cross_entropy(logits, targets, reduction="sum") / batch


def bank_infonce_loss(
    query_emb: torch.Tensor,
    bank_emb: torch.Tensor,
    positive: torch.Tensor,
    temperature: float = MEDEMB_TEMPERATURE,
) -> torch.Tensor:
    """InfoNCE of each query against a whole bank of fixed targets (eq. 1 with bank negatives).

    Row i's positive is bank row positive[i]; every other bank row is a negative. Used by the
    projection-alignment stage, whose targets come from a frozen backbone and so can be
    embedded once. Bank rows must be distinct items (duplicates would be false negatives).
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    if positive.shape[0] != query_emb.shape[0]:
        raise ValueError("bank_infonce_loss needs one positive index per query")
    logits = query_emb @ bank_emb.T / temperature
    return F.cross_entropy(logits, positive, reduction="sum") / query_emb.shape[0]
