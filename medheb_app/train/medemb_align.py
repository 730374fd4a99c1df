"""Stage 1 before the MedEmb recipe: align medemb-lite's visual projection (LLaVA-style).

MedEmb starts from Qwen3-VL-Embedding, an MLLM whose vision projector was already aligned to
its language model by vision-language pretraining before any MedEmb fine-tuning (MedHEB
section 4). medemb-lite's projection starts random. This stage gives it the same starting
point, the way LLaVA's first stage does: the backbone stays frozen, only the projection is
trained, on image -> caption pairs of the ID training split (the phantom train split's
images and their reports; nothing from test parts or held-out sources).

Objective: InfoNCE from each image (no instruction) to its report among ALL distinct
reports of the pairs. The backbone is frozen, so the report embeddings are constants:
they are computed once, and every report is a negative of every image at no extra cost.
Reports with identical text are one bank entry, so a repeated template is never its own
false negative.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from medheb_app.evidence.study import Evidence
from medheb_app.train.losses import bank_infonce_loss

ALIGN_TASKS = ("phantom-cxr-i2report",)  # image -> report pairs of the ID train split


@dataclass(frozen=True)
class CaptionBank:
    """Images, the distinct captions, and which caption each image has."""

    images: list[Evidence]
    captions: list[Evidence]
    positive: list[int]


def caption_bank(pairs: Sequence, tasks: Sequence[str] = ALIGN_TASKS) -> CaptionBank:
    """Image -> caption pairs of `tasks` (MedEmb training pairs), captions deduplicated."""
    index: dict[str, int] = {}
    images, captions, positive = [], [], []
    for pair in pairs:
        if pair.task not in tasks or pair.query.image is None or not pair.target.text:
            continue
        text = pair.target.text
        if text not in index:
            index[text] = len(captions)
            captions.append(Evidence(text=text))
        images.append(Evidence(image=pair.query.image))
        positive.append(index[text])
    return CaptionBank(images, captions, positive)


@contextmanager
def _no_backbone_gradients(backbone: torch.nn.Module) -> Iterator[None]:
    """The backbone's parameters need no gradient while only the projection trains: without
    this a caller that left them trainable paid a backward pass through the whole backbone
    (5.7x the stage's time for the tiny model of tests/test_medemb_align.py)."""
    trainable = [p for p in backbone.parameters() if p.requires_grad]
    for parameter in trainable:
        parameter.requires_grad_(False)
    try:
        yield
    finally:
        for parameter in trainable:
            parameter.requires_grad_(True)


def align_projection(
    model,
    bank: CaptionBank,
    steps: int,
    lr: float,
    batch_size: int,
    temperature: float,
    seed: int,
    progress: Callable[[int, int, float], None] | None = None,
    stop: threading.Event | None = None,
) -> dict[str, float | int | None]:
    """Train `model.projection` only, `steps` batches of images; returns loss statistics.

    The backbone stays frozen: a peft model runs with its adapters disabled, and no backbone
    parameter takes a gradient during the stage (each is trainable again after it). A set
    `stop` ends the stage after the current step (the caller then sees it and cancels).
    """
    if steps < 1 or len(bank.images) < 2:
        raise ValueError("alignment needs steps >= 1 and at least 2 image-caption pairs")
    disable = getattr(model.backbone, "disable_adapter", None)
    context = disable() if disable is not None else nullcontext()
    rng = np.random.default_rng(seed)
    optimiser = torch.optim.AdamW(model.projection.parameters(), lr=lr, weight_decay=0.0)
    positives = torch.tensor(bank.positive)
    losses: list[float] = []
    with context, _no_backbone_gradients(model.backbone):
        model.backbone.eval()  # frozen: no dropout, constant caption embeddings
        with torch.no_grad():
            captions = torch.cat(
                [
                    model.embed(bank.captions[i : i + 64], [None] * len(bank.captions[i : i + 64]))
                    for i in range(0, len(bank.captions), 64)
                ]
            )
        order = rng.permutation(len(bank.images))
        cursor = 0
        for step in range(steps):
            if stop is not None and stop.is_set():
                break
            if cursor + batch_size > len(order):
                order, cursor = rng.permutation(len(bank.images)), 0
            rows = order[cursor : cursor + batch_size]
            cursor += batch_size
            images = model.embed([bank.images[i] for i in rows], [None] * len(rows))
            loss = bank_infonce_loss(images, captions, positives[rows], temperature)
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
            if progress is not None:
                progress(step + 1, steps, losses[-1])
    return {
        "pairs": len(bank.images),
        "captions": len(bank.captions),
        "steps": len(losses),
        "first_loss": round(losses[0], 6) if losses else None,
        "final_loss": round(float(np.mean(losses[-10:])), 6) if losses else None,
    }
