"""Drawing each finding as the anatomy change a radiologist looks for, with its bounding box.

A drawer changes the canvas layers (lung fill, additive density, kept markings, ribs) or, for
cardiomegaly, volume loss and mediastinal widening, the geometry before the layers are built.
Every drawer returns the boxes of what it drew, in pixels of the image, on the patient's side.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from medheb_app.evidence.phantoms.anatomy import (
    Geometry,
    grid,
    lateral_wall,
    lung_coordinates,
    rib_band,
    soft_step,
)
from medheb_app.evidence.phantoms.canvas import (
    Canvas,
    blob,
    box_from_corners,
    draw_segment,
    lung_point,
    mask_box,
    mottle,
    window,
)
from medheb_app.evidence.phantoms.plan import MM_PER_IMAGE_WIDTH, FindingSpec
from medheb_app.evidence.study import Box

# ---------------------------------------------------------------- geometry changes


def apply_geometry(geom: Geometry, spec: FindingSpec) -> None:
    """Findings that change the anatomy's shape rather than paint over it."""
    s = spec.strength
    if spec.finding == "Cardiomegaly":
        geom.heart_scale = 1 + s * (spec.level((1.2, 1.33, 1.48)) - 1)
    elif spec.finding == "Enlarged Cardiomediastinum":
        geom.mediastinum_scale = 1 + s * (spec.level((1.5, 1.8, 2.1)) - 1)
    elif spec.finding == "Atelectasis":
        for side in spec.sides:  # volume loss: the hemidiaphragm rises
            geom.elevation[side] = s * spec.level((0.04, 0.07, 0.11))


# ---------------------------------------------------------------- drawers


def draw_effusion(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """Dependent fluid with a meniscus rising laterally, blunting the costophrenic angle."""
    boxes = []
    for side in spec.sides:
        u, v = lung_coordinates(canvas.geom, side)
        apex, base = canvas.geom.lung_rows(side)
        level = spec.level((0.88, 0.72, 0.52)) + rng.normal(0, 0.02)
        meniscus = level - 0.16 * np.clip(u, 0, 1) ** 2
        fluid = soft_step((v - meniscus) * (base - apex) * canvas.size, 2.5) * canvas.fields[side]
        canvas.add_fill(fluid * spec.strength)
        canvas.extra += 0.08 * spec.strength * fluid  # fluid is denser than collapsed lung
        boxes += mask_box(spec, side, fluid, canvas.size)
    return boxes


def draw_pneumothorax(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """A thin visceral pleural line with no lung markings between it and the chest wall."""
    boxes = []
    for side in spec.sides:
        u, v = lung_coordinates(canvas.geom, side)
        medial, lateral = canvas.geom.lung_edges(side)
        apex, base = canvas.geom.lung_rows(side)
        width_px = abs(lateral - medial) * canvas.size
        gap = spec.level((0.14, 0.28, 0.48)) * float(rng.uniform(0.9, 1.1))
        lowest = spec.level((0.55, 0.8, 1.0))
        line_u = lateral_wall(v) - gap
        extent = soft_step((lowest - v) * (base - apex) * canvas.size, 8.0) * canvas.fields[side]
        space = soft_step((u - line_u) * width_px, 1.0) * extent
        line = np.exp(-(((u - line_u) * width_px / 0.8) ** 2)) * extent * (v > 0.02)
        canvas.keep[:] = np.minimum(canvas.keep, 1 - spec.strength * space)
        canvas.extra += spec.strength * (0.22 * line - 0.07 * space)
        if spec.severity == "severe":  # the collapsing lung is denser
            canvas.add_fill(0.25 * spec.strength * (extent - space))
        boxes += mask_box(spec, side, np.maximum(space, line), canvas.size)
    return boxes


def _lobe(u: np.ndarray, v: np.ndarray, side: str, zone: str, height_px: float) -> np.ndarray:
    if zone == "upper" and side == "right":  # sharp lower edge on the horizontal fissure
        return soft_step((0.42 - v) * height_px, 1.0)
    if zone == "upper":
        return soft_step((0.55 - v) * height_px, 12.0)
    if zone == "middle":  # right middle lobe: silhouettes the right heart border
        return soft_step((v - 0.42) * height_px, 1.0) * soft_step((0.62 - u) * height_px, 10.0)
    return soft_step((v - 0.52 - 0.12 * (1 - u)) * height_px, 10.0)


def _air_bronchograms(
    canvas: Canvas,
    side: str,
    start: tuple[float, float],
    reach: float,
    count: int,
    amount: float,
    mask: np.ndarray,
    rng: np.random.Generator,
) -> None:
    """Branching dark tubes (air-filled bronchi) inside an opacity."""
    geom = canvas.geom
    for _ in range(count):
        u0, v0 = start[0] + rng.normal(0, 0.03), start[1] + rng.normal(0, 0.03)
        u1, v1 = u0 + reach * rng.uniform(0.7, 1.0), v0 + rng.normal(0, 0.12)
        p0, p1 = geom.to_xy(side, u0, v0), geom.to_xy(side, u1, v1)
        draw_segment(canvas.extra, p0, p1, 0.9, -amount, mask)
        mid = ((p0[0] + p1[0]) / 2, (p0[1] + p1[1]) / 2)
        tip = geom.to_xy(side, u1 - 0.05, v1 + rng.choice((-1, 1)) * rng.uniform(0.08, 0.15))
        draw_segment(canvas.extra, mid, tip, 0.7, -amount, mask)


def draw_consolidation(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """Lobar airspace opacity bounded by a fissure, with air bronchograms."""
    boxes = []
    texture_mod = 0.85 + 0.15 * mottle(canvas, rng)
    for side in spec.sides:
        u, v = lung_coordinates(canvas.geom, side)
        apex, base = canvas.geom.lung_rows(side)
        lobe = _lobe(u, v, side, spec.zone, (base - apex) * canvas.size) * canvas.fields[side]
        amount = spec.level((0.7, 0.82, 0.92)) * spec.strength
        canvas.add_fill(amount * lobe * texture_mod)
        centre_v = {"upper": 0.28, "middle": 0.55, "lower": 0.72}[spec.zone]
        _air_bronchograms(
            canvas, side, (0.15, centre_v), 0.5, 2 + int(rng.integers(3)), 0.2 * amount, lobe, rng
        )
        boxes += mask_box(spec, side, lobe * canvas.lungs[side], canvas.size, 0.3)
    return boxes


def draw_pneumonia(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """Focal, ill-defined consolidation in one zone, with a few air bronchograms."""
    boxes = []
    texture = 0.8 + 0.2 * mottle(canvas, rng)
    for side in spec.sides:
        radius = spec.level((0.045, 0.065, 0.09)) * float(rng.uniform(0.9, 1.1))
        u0, v0 = lung_point(canvas, side, rng, spec.zone, 0.5 * radius / 0.6)
        centre = canvas.geom.to_xy(side, u0, v0)
        patch = blob(canvas, centre, radius, radius * 0.85, 6.0, 0.15, rng)
        patch *= canvas.fields[side]
        amount = 0.8 * spec.strength
        canvas.add_fill(amount * patch * texture)
        _air_bronchograms(
            canvas, side, (u0 - 0.12, v0), 0.2, 1 + int(rng.integers(2)), 0.25 * amount, patch, rng
        )
        boxes += mask_box(spec, side, patch * canvas.lungs[side], canvas.size, 0.3)
    return boxes


def draw_opacity(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """Patchy, ill-defined airspace opacities clustered in one zone."""
    boxes = []
    for side in spec.sides:
        u0, v0 = lung_point(canvas, side, rng, spec.zone, 0.12)
        patches = np.zeros_like(canvas.fill)
        for _ in range(int(spec.level((3, 5, 7)))):
            u = u0 + rng.normal(0, 0.12)
            v = v0 + rng.normal(0, 0.07)
            r = float(rng.uniform(0.02, 0.04))
            centre = canvas.geom.to_xy(side, u, v)
            patches = np.maximum(
                patches,
                rng.uniform(0.7, 1.0)
                * blob(canvas, centre, r, r * rng.uniform(0.7, 1.0), 4.0, 0.2, rng),
            )
        patches *= canvas.fields[side]
        canvas.add_fill(0.55 * spec.strength * patches)
        boxes += mask_box(spec, side, patches * canvas.lungs[side], canvas.size, 0.25)
    return boxes


def draw_edema(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """Bilateral perihilar (bat-wing) haze with Kerley B lines at the lung bases."""
    x, y = grid(canvas.size)
    amount = spec.level((0.32, 0.47, 0.62)) * spec.strength
    spread = spec.level((0.13, 0.17, 0.21))
    footprint = np.zeros_like(canvas.fill)
    for side in ("right", "left"):
        hx, hy = canvas.geom.anatomy.hilum[side]
        haze = np.exp(-(((x - hx) / (1.15 * spread)) ** 2 + ((y - hy) / (1.5 * spread)) ** 2))
        haze *= canvas.fields[side]
        canvas.add_fill(amount * haze)
        footprint = np.maximum(footprint, haze * canvas.lungs[side])
        lines = np.zeros_like(canvas.fill)
        for _ in range(int(spec.level((3, 5, 7)))):
            v = float(rng.uniform(0.62, 0.85))
            wall = float(lateral_wall(np.float32(v)))
            p0 = canvas.geom.to_xy(side, wall - 0.015, v)
            p1 = canvas.geom.to_xy(side, wall - rng.uniform(0.07, 0.11), v + rng.normal(0, 0.01))
            draw_segment(lines, p0, p1, 0.6, 1.0, canvas.fields[side])
        canvas.extra += 0.2 * spec.strength * lines
        footprint = np.maximum(footprint, lines)
    return mask_box(spec, "bilateral", footprint, canvas.size, 0.2)


def draw_lesion(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """A round, well-defined nodule (mild, moderate) or lobulated mass (severe)."""
    radius = (spec.size_mm or 10) / 2 / MM_PER_IMAGE_WIDTH
    boxes = []
    for side in spec.sides:
        u, v = lung_point(canvas, side, rng, spec.zone, 0.08 + radius)
        centre = canvas.geom.to_xy(side, u, v)
        wobble = 0.12 if spec.severity == "severe" else 0.03
        nodule = blob(canvas, centre, radius, radius * rng.uniform(0.9, 1.0), 1.2, wobble, rng)
        canvas.add_fill(0.95 * spec.strength * nodule)
        canvas.extra += 0.06 * spec.strength * nodule
        boxes += mask_box(spec, side, nodule, canvas.size, 0.3)
    return boxes


def draw_fracture(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """A lateral rib break: a lucent gap, with the lateral fragment displaced when not mild."""
    a = canvas.geom.anatomy
    size = canvas.size
    x, _ = grid(size)
    side = spec.side or "right"
    k = (spec.rib or 6) - 2  # posterior rib number -> index of the rib band
    dx_break = a.half_width * float(rng.uniform(0.62, 0.8))
    x_break = a.cx - dx_break if side == "right" else a.cx + dx_break
    y_break = a.rib_phase + a.rib_spacing * (k + 0.5) + a.rib_curve * dx_break**2
    rows, cols = window(size, [(x_break, y_break)], max(0.05, a.rib_spacing))
    p = canvas.rib_p[rows, cols]
    own = np.abs(p - (k + 0.5)) < 0.5
    dx = np.abs(x[rows, cols] - a.cx)
    lateral = soft_step((dx - dx_break) * size, 1.0)
    shift = spec.strength * spec.level((0.0, 0.16, 0.3))
    gap_px = spec.level((0.9, 1.2, 1.6))
    gap = 1 - spec.strength * np.exp(-(((dx - dx_break) * size / gap_px) ** 2))
    broken = rib_band(p + shift * lateral) * gap
    before = canvas.ribs[rows, cols].copy()
    after = np.where(own, broken, before)
    canvas.ribs[rows, cols] = after
    change = np.zeros_like(canvas.fill)
    change[rows, cols] = np.abs(after - before)
    return mask_box(spec, side, change, size, 0.1)


def draw_atelectasis(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """Plate-like linear bands at the base; the raised hemidiaphragm was set in the geometry."""
    boxes = []
    for side in spec.sides:
        bands = np.zeros_like(canvas.fill)
        lowest = 1.0
        for _ in range(int(spec.level((1, 2, 3)))):
            v = float(rng.uniform(0.58, 0.8))
            lowest = min(lowest, v)
            p0 = canvas.geom.to_xy(side, float(rng.uniform(0.12, 0.25)), v)
            p1 = canvas.geom.to_xy(side, float(rng.uniform(0.65, 0.8)), v + rng.normal(0, 0.04))
            draw_segment(bands, p0, p1, spec.level((1.0, 1.4, 1.9)), 1.0, canvas.fields[side])
        canvas.add_fill(0.85 * spec.strength * np.minimum(bands, 1))
        medial, lateral = canvas.geom.lung_edges(side)
        apex, base = canvas.geom.lung_rows(side)
        top = apex + (lowest - 0.04) * (base - apex)
        boxes.append(
            box_from_corners(
                spec,
                side,
                min(medial, lateral),
                top,
                max(medial, lateral),
                base + 0.01,
                canvas.size,
            )
        )
    return boxes


def draw_pleural_thickening(
    canvas: Canvas, spec: FindingSpec, rng: np.random.Generator
) -> list[Box]:
    """Smooth soft-tissue band along the lateral chest wall (CheXpert "Pleural Other")."""
    boxes = []
    for side in spec.sides:
        u, v = lung_coordinates(canvas.geom, side)
        medial, lateral = canvas.geom.lung_edges(side)
        apex, base = canvas.geom.lung_rows(side)
        thickness = spec.level((0.05, 0.08, 0.12))
        top, bottom = float(rng.uniform(0.15, 0.3)), float(rng.uniform(0.6, 0.8))
        band = soft_step(
            (u - lateral_wall(v) + thickness) * abs(lateral - medial) * canvas.size, 1.5
        )
        band *= soft_step((v - top) * (base - apex) * canvas.size, 6.0)
        band *= soft_step((bottom - v) * (base - apex) * canvas.size, 6.0) * canvas.fields[side]
        canvas.add_fill(0.75 * spec.strength * band)
        boxes += mask_box(spec, side, band, canvas.size, 0.3)
    return boxes


def draw_device(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """An endotracheal tube, a right central venous catheter or a left chest pacemaker."""
    a = canvas.geom.anatomy
    amount = 0.45 * spec.strength
    device = np.zeros_like(canvas.fill)
    if spec.zone == "endotracheal tube":
        tip = float(rng.uniform(0.22, 0.3))
        for offset in (-0.008, 0.008):
            draw_segment(device, (a.cx + offset, 0.0), (a.cx + offset, tip), 0.6, 1.0)
        path = []
    elif spec.zone == "central venous catheter":
        path = [
            (a.cx - 0.24, 0.1),
            (a.cx - 0.08, 0.155),
            (a.cx - 0.035, 0.2),
            (a.cx - 0.03, float(rng.uniform(0.3, 0.36))),
        ]
    else:
        gx, gy = a.cx + 0.22, 0.14
        device[
            int((gy - 0.025) * a.size) : int((gy + 0.025) * a.size),
            int((gx - 0.035) * a.size) : int((gx + 0.035) * a.size),
        ] = 1.6
        hx, hy, _, _ = canvas.geom.heart_ellipse()
        path = [(gx - 0.03, gy), (a.cx + 0.02, 0.2), (a.cx - 0.01, hy - 0.02), (hx + 0.02, hy)]
    for p0, p1 in itertools.pairwise(path):
        draw_segment(device, p0, p1, 0.8, 1.0)
    canvas.extra += amount * np.minimum(device, 1.6)
    return [replace(box, severity=None) for box in mask_box(spec, None, device, canvas.size, 0.2)]


def heart_box(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """Cardiomegaly is drawn by the geometry; its box is the cardiac silhouette."""
    hx, hy, rx, ry = canvas.geom.heart_ellipse()
    return [box_from_corners(spec, None, hx - rx, hy - ry, hx + rx, hy + ry, canvas.size)]


def mediastinum_box(canvas: Canvas, spec: FindingSpec, rng: np.random.Generator) -> list[Box]:
    """Mediastinal widening is drawn by the geometry; its box is the upper mediastinum."""
    a = canvas.geom.anatomy
    width = a.mediastinum_half_width * canvas.geom.mediastinum_scale
    _, hy, _, ry = canvas.geom.heart_ellipse()
    return [
        box_from_corners(spec, None, a.cx - width, 0.1, a.cx + width, hy - 0.6 * ry, canvas.size)
    ]


Drawer = Callable[[Canvas, FindingSpec, np.random.Generator], list[Box]]
DRAWERS: dict[str, Drawer] = {
    "Cardiomegaly": heart_box,
    "Enlarged Cardiomediastinum": mediastinum_box,
    "Pleural Other": draw_pleural_thickening,
    "Atelectasis": draw_atelectasis,
    "Consolidation": draw_consolidation,
    "Pneumonia": draw_pneumonia,
    "Lung Opacity": draw_opacity,
    "Edema": draw_edema,
    "Lung Lesion": draw_lesion,
    "Pleural Effusion": draw_effusion,
    "Pneumothorax": draw_pneumothorax,
    "Fracture": draw_fracture,
    "Support Devices": draw_device,
}
