"""The one conversion of pixels and volumes into what a person sees: `to_uint8` (display
bytes), `to_rgb8` (three channels for drawing), `montage` (a volume's slices as one grid), and
`Unrenderable`, the error for anything that cannot be shown.

The study's media writer (study/payloads.py), the page's evidence renderer (ui/evidence_view.py)
and the JSON API's PNG route (api/read_routes.py) all draw through these, so a volume or a
16-bit array looks the same wherever it appears. A leaf: it imports nothing from medheb_app.
"""

from __future__ import annotations

import math

import numpy as np


class Unrenderable(ValueError):
    """A payload, query or candidate that cannot be shown to a person (missing file, unknown
    form, not an image); the message says why. The study's renderer and the page's
    (ui/evidence_view.py) raise this one type."""


def to_uint8(pixels: np.ndarray) -> np.ndarray:
    """Display bytes: uint8 is kept; other integers are scaled from their type's range (a
    16-bit image keeps its contrast); floats are read as [0, 1], clipped, NaN as 0."""
    pixels = np.asarray(pixels)
    if pixels.dtype == np.uint8:
        return pixels
    if pixels.dtype == np.bool_:
        return pixels.astype(np.uint8) * 255
    if np.issubdtype(pixels.dtype, np.integer):
        info = np.iinfo(pixels.dtype)
        low = 0 if info.min < 0 else info.min  # signed: negatives are black, as floats below 0
        pixels = (pixels.astype(np.float64) - low) / (info.max - low)
    return np.rint(np.clip(np.nan_to_num(pixels.astype(np.float32)), 0.0, 1.0) * 255).astype(
        np.uint8
    )


def to_rgb8(pixels: np.ndarray) -> np.ndarray:
    """(H, W), (H, W, 1), (H, W, 3) or (H, W, 4) pixels -> (H, W, 3) uint8 through `to_uint8`,
    grey repeated into three channels (alpha dropped) for drawing; Unrenderable otherwise."""
    array = np.asarray(pixels)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
        raise Unrenderable(f"an array of shape {array.shape} is not an image")
    array = to_uint8(array)
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=-1)
    return np.ascontiguousarray(array[..., :3])


def montage(
    volume: np.ndarray, n: int | None = None, gutter: int = 0, mark_middle: bool = False
) -> np.ndarray:
    """A (D, H, W) volume's slices as one grey uint8 grid, row by row, top-left first: all D
    slices, or up to `n` evenly spaced ones; `gutter` black pixels between tiles; with
    `mark_middle` the slice nearest the centre gets a 2-pixel white frame, so a reader finds it
    at once."""
    volume = np.asarray(volume)
    if volume.ndim != 3 or 0 in volume.shape:
        raise Unrenderable(f"an array of shape {volume.shape} is not a volume")
    depth, height, width = volume.shape
    count = depth if n is None else min(n, depth)
    picks = sorted({int(np.rint(i)) for i in np.linspace(0, depth - 1, count)})
    middle = min(picks, key=lambda i: abs(i - depth // 2))
    cols = math.ceil(math.sqrt(len(picks)))
    rows = math.ceil(len(picks) / cols)
    step_y, step_x = height + gutter, width + gutter
    grid = np.zeros((rows * step_y - gutter, cols * step_x - gutter), dtype=np.uint8)
    for k, index in enumerate(picks):
        tile = to_uint8(volume[index])
        if mark_middle and index == middle:
            tile = tile.copy()
            tile[:2], tile[-2:], tile[:, :2], tile[:, -2:] = 255, 255, 255, 255
        r, c = divmod(k, cols)
        grid[r * step_y : r * step_y + height, c * step_x : c * step_x + width] = tile
    return grid
