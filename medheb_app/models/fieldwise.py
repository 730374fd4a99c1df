"""Field-wise embedding for dual-tower models (MedHEB section 5.1).

A dual encoder has one tower per modality, so an input mixing text with an image or a volume
is embedded field by field and the unit field vectors are mean-pooled and renormalised. A
volume is K uniformly sampled frames, each embedded as an image, mean-pooled, renormalised.
Any dual-tower embedder (dual-lite, open_clip models) gets this by providing two functions.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np

from medheb_app.evidence.pixels import K_FRAMES, sample_frames
from medheb_app.evidence.study import EmbedItem, as_evidence
from medheb_app.models.base import l2_normalise

EncodeTexts = Callable[[Sequence[str]], np.ndarray]
EncodeImages = Callable[[Sequence[np.ndarray]], np.ndarray]


def with_instruction(texts: Sequence[str], instruction: str | None) -> list[str]:
    """'<instruction> <text>': how a task instruction reaches a plain sentence encoder."""
    if not instruction or not instruction.strip():
        return list(texts)
    return [f"{instruction.strip()} {text}" for text in texts]


def encode_volumes(
    volumes: Sequence[np.ndarray], encode_images: EncodeImages, dims: int, frames: int = K_FRAMES
) -> np.ndarray:
    """Each volume -> its sampled frames embedded as images, mean-pooled, renormalised."""
    if not volumes:
        return np.zeros((0, dims), dtype=np.float32)
    stacks = [sample_frames(np.asarray(volume), frames) for volume in volumes]
    vectors = encode_images([frame for stack in stacks for frame in stack])
    bounds = np.cumsum([0] + [len(stack) for stack in stacks])
    pooled = [vectors[a:b].mean(axis=0) for a, b in itertools.pairwise(bounds)]
    return l2_normalise(np.stack(pooled))


def encode_fieldwise(
    items: Sequence[EmbedItem],
    encode_texts: EncodeTexts,
    encode_images: EncodeImages,
    dims: int,
    instruction: str | None = None,
    frames: int = K_FRAMES,
) -> np.ndarray:
    """Embed strings, Evidence or Studies, batching each field across all items.

    The instruction is prepended to text fields only; images and volumes are instruction-free.
    """
    evidence = [as_evidence(item) for item in items]
    total = np.zeros((len(evidence), dims), dtype=np.float32)
    rows = [i for i, e in enumerate(evidence) if e.text is not None]
    if rows:
        texts = with_instruction([evidence[i].text or "" for i in rows], instruction)
        total[rows] += encode_texts(texts)
    rows = [i for i, e in enumerate(evidence) if e.image is not None]
    if rows:
        total[rows] += encode_images([evidence[i].image for i in rows])
    rows = [i for i, e in enumerate(evidence) if e.volume is not None]
    if rows:
        volumes = [evidence[i].volume for i in rows]
        total[rows] += encode_volumes(volumes, encode_images, dims, frames)
    return l2_normalise(total)
