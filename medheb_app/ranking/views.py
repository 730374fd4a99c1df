"""What the probes read of an image: the model's embedding of the whole image and of zoomed crops.

Beyond the paper. A model's image embedding is one pooled vector of a downsampled image, so a
small finding (a 5 mm nodule, a focal pneumonia, a thin pleural line) is a small part of it.
Embedding a 2x2 grid of overlapping crops, each 55% of the side and resized by the model to its
full input size (about 1.6x zoom), with the same Embedder gives the probe views in which such a
finding fills more of the picture. The ranker stays model-agnostic: every vector still comes
from `embedder.encode`. A second, closer set of views (a 3x3 grid of 40% crops, about 2.2x
zoom) joins it in the default (`VIEW_SETS`, `DEFAULT_VIEWS`), chosen on the val split at
about 2.8x the embedding cost of the 2x2 set. What each view set does to single, pair and
negation P@5 and HNRR@5 on the phantom val and test splits is measured by
bench/logic_ceiling.py and reported in docs/cxr-retrieve.md, "Session 3: closer views";
the per-finding effect (small lesions gain, rib fractures stay invisible) in the same file.

Crop vectors go through the embedding cache under the study's content key plus the crop's
geometry, so a gallery is cropped and embedded once per model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from medheb_app.evidence.study import Evidence, EvidenceError, Study
from medheb_app.index.cache import embed_with_cache
from medheb_app.models.base import Embedder

CROP_FRACTION = 0.55
GRID = 2
CHUNK = 64  # studies whose crops are held in memory at once
# What a probe can read besides the whole-image embedding: named sets of (grid, fraction).
VIEW_SETS: dict[str, tuple[tuple[int, float], ...]] = {
    "whole": (),
    "2x2": ((GRID, CROP_FRACTION),),
    "2x2+3x3": ((GRID, CROP_FRACTION), (3, 0.4)),
}
DEFAULT_VIEWS = "2x2+3x3"


def check_views(views: str) -> str:
    """`views` if it names a view set, else a ValueError that lists the names."""
    if views not in VIEW_SETS:
        raise ValueError(f"Unknown probe views {views!r}; use one of {', '.join(VIEW_SETS)}.")
    return views


def view_vectors(
    embedder: Embedder,
    studies: Sequence[Study],
    views: str,
    cache: object = None,
    progress: Callable[[float, str], None] | None = None,
) -> np.ndarray:
    """(n, crops * dims): the crop embeddings of every grid in the view set, concatenated.
    `progress` hears the share of studies done after each chunk."""
    return _grid_vectors(embedder, studies, VIEW_SETS[check_views(views)], cache, progress)


def crops_per_image(views: str) -> int:
    """How many crops the view set embeds per image (besides the whole image)."""
    return sum(grid * grid for grid, _ in VIEW_SETS[check_views(views)])


def crop_grid(image: np.ndarray, fraction: float = CROP_FRACTION, grid: int = GRID) -> list:
    """`grid` x `grid` crops of `fraction` of each side, evenly spaced from edge to edge.

    Row-major from the top left; with fraction > 1 / grid neighbouring crops overlap, so a
    finding on a boundary is whole in at least one crop.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"Crop fraction must be in (0, 1]; got {fraction}.")
    if image.ndim not in (2, 3):
        raise EvidenceError(f"Crops need a 2D image (H, W[, C]); got shape {image.shape}.")
    height, width = image.shape[:2]
    size_h, size_w = max(1, round(fraction * height)), max(1, round(fraction * width))
    tops = np.linspace(0, height - size_h, grid).round().astype(int)
    lefts = np.linspace(0, width - size_w, grid).round().astype(int)
    return [image[t : t + size_h, s : s + size_w] for t in tops for s in lefts]


def crop_key(
    content_key: str, index: int, fraction: float = CROP_FRACTION, grid: int = GRID
) -> str:
    """Cache key of one crop: the image's content key plus the crop's geometry."""
    return f"{content_key}|crop{grid}x{grid}@{fraction:g}#{index}"


def crop_vectors(
    embedder: Embedder,
    studies: Sequence[Study],
    cache: object = None,
    fraction: float = CROP_FRACTION,
    grid: int = GRID,
) -> np.ndarray:
    """(n, grid * grid * dims): each study's crop embeddings, concatenated in grid order."""
    return _grid_vectors(embedder, studies, ((grid, fraction),), cache)


def _grid_vectors(
    embedder: Embedder,
    studies: Sequence[Study],
    geometry: Sequence[tuple[int, float]],
    cache: object = None,
    progress: Callable[[float, str], None] | None = None,
) -> np.ndarray:
    """Per study, the crops of each (grid, fraction) in turn, embedded through the cache.

    A study's content key is computed, and its pixels read from disk, once for all grids.
    """
    # deferred: faiss
    from medheb_app.index.catalog import study_content_key

    width = sum(grid * grid for grid, _ in geometry) * embedder.card.dims
    rows = []
    for start in range(0, len(studies), CHUNK):
        chunk = studies[start : start + CHUNK]
        keys = [
            crop_key(content, i, fraction, grid)
            for content in map(study_content_key, chunk)
            for grid, fraction in geometry
            for i in range(grid * grid)
        ]
        cached = cache.get(embedder.card.fingerprint, keys) if cache is not None else {}  # type: ignore[attr-defined]
        if len(cached) == len(set(keys)):
            vectors = np.stack([cached[k] for k in keys])
        else:
            items = [Evidence(image=crop) for study in chunk for crop in _crops(study, geometry)]
            vectors = embed_with_cache(
                embedder,
                items,  # type: ignore[arg-type]
                keys,
                cache,  # type: ignore[arg-type]
                progress=_within(progress, start, len(chunk), len(studies)),
            )
        rows.append(np.asarray(vectors, dtype=np.float32).reshape(len(chunk), -1))
        if progress:
            done = start + len(chunk)
            progress(done / len(studies), f"cropped and embedded {done} of {len(studies)} images")
    if not rows:
        return np.zeros((0, width), dtype=np.float32)
    return np.concatenate(rows)


def _within(
    progress: Callable[[float, str], None] | None, start: int, size: int, total: int
) -> Callable[[float, str], None] | None:
    """A chunk's own 0..1 progress as the whole gallery's (a chunk holds hundreds of crops)."""
    if progress is None:
        return None
    return lambda done, message: progress((start + done * size) / total, "crops: " + message)


def _crops(study: Study, geometry: Sequence[tuple[int, float]]) -> list:
    unload = study.pixels is None and study.path is not None
    pixels = study.load_pixels()
    if pixels is None or study.form != "2d":
        raise EvidenceError(f"Study {study.id} is not a 2D image; crops need one.")
    image = np.asarray(pixels, dtype=np.float32)
    crops = [crop for grid, fraction in geometry for crop in crop_grid(image, fraction, grid)]
    if unload:
        study.pixels = None  # keep memory flat over a large gallery
    return [crop.copy() for crop in crops]
