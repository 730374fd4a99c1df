"""The drawing surface for chest findings: layers to change, and helpers to place and box them.

Coordinates are normalised to [0, 1] as in anatomy.py; boxes are returned in image pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from medheb_app.evidence.phantoms.anatomy import (
    Geometry,
    diaphragm,
    grid,
    lateral_wall,
    segment_distance,
    soft_step,
    texture_bank,
)
from medheb_app.evidence.phantoms.plan import FindingSpec
from medheb_app.evidence.study import Box

Point = tuple[float, float]


@dataclass
class Canvas:
    """Layers a finding may change before they are composed into the image."""

    geom: Geometry
    fields: dict[str, np.ndarray]  # pleural space per side (lung field incl. behind the heart)
    lungs: dict[str, np.ndarray]  # aerated lung per side (heart and mediastinum removed)
    fill: np.ndarray  # 0 = aerated .. 1 = air fully replaced by fluid or tissue
    extra: np.ndarray  # additive density (lines, tubes, bronchograms)
    keep: np.ndarray  # 1 = lung markings visible, 0 = none (pneumothorax)
    ribs: np.ndarray
    rib_p: np.ndarray

    @property
    def size(self) -> int:
        return self.geom.anatomy.size

    def add_fill(self, amount: np.ndarray) -> None:
        """Overlapping opacities combine like stacked absorbers: 1 - (1 - a)(1 - b)."""
        self.fill[:] = 1 - (1 - self.fill) * (1 - np.clip(amount, 0, 1))


def box_from_corners(
    spec: FindingSpec, side: str | None, x0: float, y0: float, x1: float, y1: float, size: int
) -> Box:
    """A Box from normalised corners, clipped to the image."""
    left, top = max(0.0, x0 * size), max(0.0, y0 * size)
    right, bottom = min(float(size), x1 * size), min(float(size), y1 * size)
    return Box(
        finding=spec.finding,
        x=round(float(left), 1),
        y=round(float(top), 1),
        w=round(float(max(right - left, 1.0)), 1),
        h=round(float(max(bottom - top, 1.0)), 1),
        side=side,
        severity=spec.severity,
    )


def mask_box(
    spec: FindingSpec, side: str | None, mask: np.ndarray, size: int, threshold: float = 0.15
) -> list[Box]:
    rows = np.flatnonzero((mask > threshold).any(axis=1))
    cols = np.flatnonzero((mask > threshold).any(axis=0))
    if rows.size == 0:
        return []
    return [
        box_from_corners(
            spec,
            side,
            cols[0] / size,
            rows[0] / size,
            (cols[-1] + 1) / size,
            (rows[-1] + 1) / size,
            size,
        )
    ]


def window(size: int, points: list[Point], pad: float) -> tuple[slice, slice]:
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    c0, c1 = int(max(0, (min(xs) - pad) * size)), int(min(size, (max(xs) + pad) * size + 1))
    r0, r1 = int(max(0, (min(ys) - pad) * size)), int(min(size, (max(ys) + pad) * size + 1))
    return slice(r0, r1), slice(c0, c1)


def draw_segment(
    layer: np.ndarray,
    p0: Point,
    p1: Point,
    half_px: float,
    amount: float,
    mask: np.ndarray | None = None,
) -> None:
    """Add a line of density `amount` and half width `half_px` from p0 to p1, in place."""
    size = layer.shape[0]
    rows, cols = window(size, [p0, p1], (half_px + 2) / size)
    x, y = grid(size)
    band = soft_step(half_px - segment_distance(x[rows, cols], y[rows, cols], p0, p1) * size)
    if mask is not None:
        band *= mask[rows, cols]
    layer[rows, cols] += amount * band


def lung_point(
    canvas: Canvas, side: str, rng: np.random.Generator, zone: str, margin: float
) -> tuple[float, float]:
    """A (u, v) well inside the lung's zone, `margin` (in v) above the diaphragm, chosen among
    a few candidates as the one least hidden (by the heart or by opacities drawn so far)."""
    v_range = {"upper": (0.22, 0.4), "middle": (0.42, 0.6), "lower": (0.62, 0.74)}[zone]
    best, best_fill = (0.5, 0.5), np.inf
    for _ in range(6):
        v = float(rng.uniform(*v_range))
        u = float(rng.uniform(0.3, max(0.35, float(lateral_wall(np.float32(v))) - 0.25)))
        v = min(v, float(diaphragm(canvas.geom, side, np.float32(u))) - margin)
        x, y = canvas.geom.to_xy(side, u, v)
        row = min(canvas.size - 1, max(0, int(y * canvas.size)))
        col = min(canvas.size - 1, max(0, int(x * canvas.size)))
        covered = float(canvas.fill[row, col]) + 1 - float(canvas.lungs[side][row, col])
        if covered < best_fill:
            best, best_fill = (u, v), covered
        if covered < 0.2:
            break
    return best


def mottle(canvas: Canvas, rng: np.random.Generator) -> np.ndarray:
    """Smooth mottling in [0, 1] from the texture bank, placed by the finding's own seed."""
    bank = texture_bank(canvas.size)
    shift = (int(rng.integers(canvas.size)), int(rng.integers(canvas.size)))
    return np.roll(bank[int(rng.integers(len(bank)))], shift, axis=(0, 1))


def blob(
    canvas: Canvas,
    centre: Point,
    rx: float,
    ry: float,
    edge_px: float,
    wobble: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """A soft, slightly irregular ellipse (irregularity = radial wobble with 3-5 lobes)."""
    lobes, phase = int(rng.integers(3, 6)), float(rng.uniform(0, 6.3))
    out = np.zeros_like(canvas.fill)
    reach = max(rx, ry) * (1 + wobble) + edge_px / canvas.size
    rows, cols = window(canvas.size, [centre], reach)
    x, y = grid(canvas.size)
    dx, dy = (x[rows, cols] - centre[0]) / rx, (y[rows, cols] - centre[1]) / ry
    r = np.sqrt(dx * dx + dy * dy)
    if wobble:
        r = r / (1 + wobble * np.sin(lobes * np.arctan2(dy, dx) + phase))
    out[rows, cols] = soft_step((1 - r) * min(rx, ry) * canvas.size, edge_px)
    return out
