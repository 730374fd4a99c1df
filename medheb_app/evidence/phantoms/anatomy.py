"""Normal frontal chest anatomy for the radiograph phantoms, as density layers.

The image is built in "density" units (0 = air outside the body, about 1 = heart or liver),
from layers that findings can change before composition: body and mediastinum, the two lung
fields (air, minus whatever fills them), vascular lung markings, ribs and clavicles. Coordinates
are normalised to [0, 1] (x = column, y = row). The view is frontal PA/AP, so the patient's right
lung is on the image's left.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
from scipy import ndimage

SIDES = ("right", "left")
N_TEXTURES = 6
_TEXTURE_SEED = 20240917  # fixed, so the texture bank is the same for every corpus seed


@dataclass(frozen=True)
class ChestAnatomy:
    """One synthetic subject's normal chest; findings modify a copy of it (see Geometry)."""

    size: int
    view: str
    cx: float  # thorax midline
    half_width: float  # thorax half width at the lung bases
    apex: dict[str, float]  # lung apex row per side
    base: dict[str, float]  # costophrenic angle row per side
    dome: dict[str, float]  # diaphragm dome height, as a fraction of lung height
    heart: tuple[float, float, float, float]  # centre x, centre y, radius x, radius y
    mediastinum_half_width: float
    hilum: dict[str, tuple[float, float]]
    rib_phase: float
    rib_spacing: float
    rib_curve: float
    texture: int
    texture_shift: tuple[int, int]
    exposure: float
    noise: int  # index into the noise bank
    noise_shift: tuple[int, int]


@dataclass
class Geometry:
    """The anatomy as findings leave it: heart size, diaphragm elevation, mediastinal width."""

    anatomy: ChestAnatomy
    heart_scale: float = 1.0
    mediastinum_scale: float = 1.0
    elevation: dict[str, float] = field(default_factory=lambda: {"right": 0.0, "left": 0.0})

    def lung_edges(self, side: str) -> tuple[float, float]:
        """Medial and lateral x of a lung field."""
        a = self.anatomy
        medial = a.cx - 0.05 if side == "right" else a.cx + 0.06
        lateral = a.cx - a.half_width if side == "right" else a.cx + a.half_width
        return medial, lateral

    def lung_rows(self, side: str) -> tuple[float, float]:
        return self.anatomy.apex[side], self.anatomy.base[side]

    def to_xy(self, side: str, u: float, v: float) -> tuple[float, float]:
        """Lung coordinates (u: 0 medial .. 1 lateral, v: 0 apex .. 1 base) to image x, y."""
        medial, lateral = self.lung_edges(side)
        apex, base = self.lung_rows(side)
        return medial + u * (lateral - medial), apex + v * (base - apex)

    def heart_ellipse(self) -> tuple[float, float, float, float]:
        hx, hy, rx, ry = self.anatomy.heart
        scale = self.heart_scale
        # An enlarged heart grows mostly to the patient's left and downwards.
        return (
            hx + 0.35 * rx * (scale - 1),
            hy + 0.2 * ry * (scale - 1),
            rx * scale,
            ry * (1 + 0.5 * (scale - 1)),
        )


def sample_anatomy(rng: np.random.Generator, size: int, view: str) -> ChestAnatomy:
    """Draw a plausible normal chest: proportions vary a few percent between subjects.

    The acquisition (exposure, noise) is left neutral; see `with_acquisition`.
    """
    cx = 0.5 + rng.normal(0, 0.008)
    base = 0.74 + rng.normal(0, 0.015)
    heart_rx = 0.145 + rng.normal(0, 0.007)
    if view == "AP":
        heart_rx *= 1.06  # AP projection magnifies the heart
    return ChestAnatomy(
        size=size,
        view=view,
        cx=cx,
        half_width=0.36 + rng.normal(0, 0.01),
        apex={"right": 0.13 + rng.normal(0, 0.008), "left": 0.14 + rng.normal(0, 0.008)},
        base={"right": base - 0.02, "left": base},
        dome={"right": 0.16 + rng.normal(0, 0.015), "left": 0.13 + rng.normal(0, 0.015)},
        heart=(cx + 0.03, base - 0.13, heart_rx, 0.12 + rng.normal(0, 0.005)),
        mediastinum_half_width=0.058 + rng.normal(0, 0.003),
        hilum={"right": (cx - 0.1, 0.42), "left": (cx + 0.105, 0.4)},
        rib_phase=float(rng.uniform(0.0, 0.06)),
        rib_spacing=0.062 + rng.normal(0, 0.003),
        rib_curve=1.2 + rng.normal(0, 0.08),
        texture=int(rng.integers(N_TEXTURES)),
        texture_shift=(int(rng.integers(size)), int(rng.integers(size))),
        exposure=0.9,
        noise=0,
        noise_shift=(0, 0),
    )


def with_acquisition(anatomy: ChestAnatomy, rng: np.random.Generator) -> ChestAnatomy:
    """The same chest on another exposure: new exposure scale and quantum noise."""
    return replace(
        anatomy,
        exposure=float(rng.uniform(0.82, 0.98)),
        noise=int(rng.integers(N_TEXTURES)),
        noise_shift=(int(rng.integers(anatomy.size)), int(rng.integers(anatomy.size))),
    )


@lru_cache(maxsize=4)
def grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Normalised pixel-centre coordinates (x, y), each (size, size) float32."""
    axis = (np.arange(size, dtype=np.float32) + 0.5) / size
    return np.meshgrid(axis, axis)


@lru_cache(maxsize=4)
def texture_bank(size: int) -> np.ndarray:
    """Vessel-like line networks (zero crossings of smoothed noise), one per texture index."""
    rng = np.random.default_rng(_TEXTURE_SEED)
    bank = np.empty((N_TEXTURES, size, size), dtype=np.float32)
    for i in range(N_TEXTURES):
        smooth = ndimage.gaussian_filter(rng.standard_normal((size, size)), size / 110)
        smooth /= smooth.std()
        bank[i] = np.exp(-((smooth / 0.3) ** 2))
    return bank


@lru_cache(maxsize=4)
def noise_bank(size: int) -> np.ndarray:
    """Unit-variance white noise fields; a study rolls one by its own shift (cheaper than
    drawing fresh noise, and just as deterministic)."""
    rng = np.random.default_rng(_TEXTURE_SEED + 1)
    return rng.standard_normal((N_TEXTURES, size, size), dtype=np.float32)


def soft_step(signed_px: np.ndarray, width_px: float = 1.0) -> np.ndarray:
    """0 outside, 1 inside, a linear ramp `width_px` wide across the boundary."""
    return np.clip(signed_px / width_px + 0.5, 0.0, 1.0)


def lung_coordinates(geom: Geometry, side: str) -> tuple[np.ndarray, np.ndarray]:
    """(u, v) for every pixel: u 0 at the medial edge .. 1 at the lateral wall, v apex .. base."""
    x, y = grid(geom.anatomy.size)
    medial, lateral = geom.lung_edges(side)
    apex, base = geom.lung_rows(side)
    return (x - medial) / (lateral - medial), (y - apex) / (base - apex)


def lateral_wall(v: np.ndarray) -> np.ndarray:
    """Lateral lung boundary (in u) at height v: a quarter ellipse, narrow apex, wide base."""
    vc = np.clip(v, 0.0, 1.0)
    return np.sqrt(1.0 - (1.0 - vc) ** 2)


def diaphragm(geom: Geometry, side: str, u: np.ndarray) -> np.ndarray:
    """Diaphragm height (in v) at u: a dome, lowest at the costophrenic angle (u = 1)."""
    uc = np.clip(u, 0.0, 1.0)
    return 1.0 - geom.anatomy.dome[side] * 4 * uc * (1.08 - uc) - geom.elevation[side]


def lung_field(geom: Geometry, side: str) -> np.ndarray:
    """Soft mask of one lung field (1 = aerated lung) before heart and mediastinum are removed."""
    size = geom.anatomy.size
    u, v = lung_coordinates(geom, side)
    medial, lateral = geom.lung_edges(side)
    apex, base = geom.lung_rows(side)
    width_px = abs(lateral - medial) * size
    height_px = (base - apex) * size
    inside = np.minimum(
        np.minimum(u * width_px, (lateral_wall(v) - u) * width_px),
        np.minimum(v * height_px, (diaphragm(geom, side, u) - v) * height_px),
    )
    return soft_step(inside, 1.5)


def ellipse(
    cx: float, cy: float, rx: float, ry: float, size: int, edge_px: float = 1.5
) -> np.ndarray:
    """Soft filled ellipse in normalised coordinates."""
    x, y = grid(size)
    r = np.sqrt(((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2)
    return soft_step((1.0 - r) * min(rx, ry) * size, edge_px)


def segment_distance(
    x: np.ndarray, y: np.ndarray, p0: tuple[float, float], p1: tuple[float, float]
) -> np.ndarray:
    """Distance from each (x, y) to the segment p0-p1 (same units as the inputs)."""
    dx, dy = p1[0] - p0[0], p1[1] - p0[1]
    length2 = max(dx * dx + dy * dy, 1e-12)
    t = np.clip(((x - p0[0]) * dx + (y - p0[1]) * dy) / length2, 0.0, 1.0)
    ex, ey = x - (p0[0] + t * dx), y - (p0[1] + t * dy)
    return np.sqrt(ex * ex + ey * ey)


def rib_layer(geom: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """Posterior ribs as periodic curved bands, and each pixel's rib coordinate.

    Returns (ribs, p): ribs in [0, 1]; p = rib phase, whose integer part numbers the rib.
    """
    a = geom.anatomy
    x, y = grid(a.size)
    p = rib_phase(geom, x, y)
    ribs = rib_band(p)
    dx = np.abs(x - a.cx)
    cage = soft_step((a.half_width + 0.015 - dx) * a.size, 3.0) * soft_step((dx - 0.03) * a.size)
    cage *= (y > 0.06) & (y < a.base["left"])
    return ribs * cage, p


def rib_phase(geom: Geometry, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    a = geom.anatomy
    return (y - a.rib_curve * (x - a.cx) ** 2 - a.rib_phase) / a.rib_spacing


def rib_band(p: np.ndarray) -> np.ndarray:
    """Rib density across one rib period: a band 40% of the period wide with soft edges."""
    r = np.abs(p - np.floor(p) - 0.5)
    return np.clip((0.2 - r) / 0.06, 0.0, 1.0)


def clavicles(geom: Geometry) -> np.ndarray:
    a = geom.anatomy
    x, y = grid(a.size)
    out = np.zeros_like(x)
    rows = slice(int(0.06 * a.size), int(0.16 * a.size) + 1)
    for sign in (-1, 1):
        lo, hi = sorted((a.cx + sign * 0.02, a.cx + sign * 0.28))
        cols = slice(max(0, int(lo * a.size)), min(a.size, int(hi * a.size) + 1))
        p0, p1 = (a.cx + sign * 0.035, 0.135), (a.cx + sign * 0.26, 0.085)
        d = segment_distance(x[rows, cols], y[rows, cols], p0, p1)
        out[rows, cols] = np.maximum(out[rows, cols], soft_step((0.011 - d) * a.size, 1.5))
    return out


def body_layers(geom: Geometry) -> dict[str, np.ndarray]:
    """Soft tissue, mediastinum, heart, spine and trachea densities of the normal chest."""
    a = geom.anatomy
    size = a.size
    x, y = grid(size)
    trunk = ellipse(a.cx, 0.62, a.half_width + 0.1, 0.72, size, 3.0)
    shoulders = ellipse(a.cx, 0.16, a.half_width + 0.15, 0.14, size, 3.0)
    body = np.maximum(trunk, shoulders)
    abdomen = soft_step((y - a.base["left"] + 0.03) * size, 20.0) * body
    mw = a.mediastinum_half_width * geom.mediastinum_scale
    # The mediastinum narrows towards the thoracic inlet.
    taper = mw * (0.75 + 0.25 * np.clip((y - 0.1) / 0.25, 0, 1))
    upper = soft_step((y - 0.02) * size, 4.0) * (y < a.heart[1])
    mediastinum = soft_step((taper - np.abs(x - a.cx)) * size, 2.0) * upper
    heart = ellipse(*geom.heart_ellipse(), size, 2.0)
    spine = soft_step((0.032 - np.abs(x - a.cx)) * size, 1.5) * body
    trachea = soft_step((0.011 - np.abs(x - a.cx)) * size, 1.5) * (y > 0.04) * (y < 0.36)
    return {
        "body": body,
        "abdomen": abdomen,
        "mediastinum": np.maximum(mediastinum, heart),
        "spine": spine,
        "trachea": trachea,
        "heart": heart,
    }


def lung_markings(geom: Geometry) -> np.ndarray:
    """Vascular markings: a shifted texture, densest near the hila, fading to the periphery."""
    a = geom.anatomy
    x, y = grid(a.size)
    texture = np.roll(texture_bank(a.size)[a.texture], a.texture_shift, axis=(0, 1))
    near = np.zeros_like(x)
    for side in SIDES:
        hx, hy = a.hilum[side]
        near = np.maximum(near, np.exp(-np.sqrt((x - hx) ** 2 + (y - hy) ** 2) / 0.2))
    return texture * (0.25 + 0.75 * near)
