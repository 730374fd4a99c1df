"""3D phantoms: a chest CT, paired T1/T2 MR volumes and a CT projection per synthetic subject.

One subject's anatomy (body wall with subcutaneous fat, lungs with branching vessels, heart,
aorta, spine with its fluid-filled canal, ribs, optional nodules and pleural effusion) is built
once as soft tissue masks and painted three times with each modality's tissue values: Hounsfield
units for CT, signal for T1 (fat bright, fluid dark) and T2 (fluid bright). The projection is a
DRR-style mean attenuation along the anterior-posterior axis, for modality bridging (MedHEB
MB-VR). Axes: depth = superior -> inferior, rows = anterior -> posterior, columns = patient
right -> left (radiological display).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.phantoms.corpus import quantise_image, quantise_volume
from medheb_app.evidence.phantoms.splits import split_by_group
from medheb_app.evidence.study import Box, EvidenceError, Findings, Study

SHAPE = (48, 96, 96)
SPACING_MM = (5.0, 3.6, 3.6)  # depth, row, column
LUNG_WINDOW = (-600.0, 1500.0)  # centre, width (HU)
VOLUME_SPLITS = {"train": 0.7, "test": 0.3}
MU_WATER_PER_MM = 0.02  # linear attenuation of water near 70 keV

# Tissue values as (CT HU, T1 signal, T2 signal). Fat is bright on T1, fluid bright on T2.
TISSUES: dict[str, tuple[float, float, float]] = {
    "air": (-1000.0, 0.0, 0.0),
    "fat": (-100.0, 0.9, 0.5),
    "muscle": (45.0, 0.35, 0.25),
    "lung": (-860.0, 0.04, 0.05),
    "vessel": (40.0, 0.25, 0.4),
    "blood": (40.0, 0.3, 0.55),
    "bone": (700.0, 0.55, 0.3),
    "fluid": (8.0, 0.1, 0.95),
    "nodule": (35.0, 0.42, 0.65),
}


@dataclass(frozen=True)
class Nodule:
    side: str
    zone: str
    diameter_mm: float
    centre_mm: tuple[float, float, float]  # depth, row, column, from the volume's corner


def _axes() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Voxel-centre coordinates in mm as open (broadcastable) grids."""
    return tuple(  # type: ignore[return-value]
        ((np.arange(n, dtype=np.float32) + 0.5) * s).reshape(
            [n if i == axis else 1 for i in range(3)]
        )
        for axis, (n, s) in enumerate(zip(SHAPE, SPACING_MM, strict=True))
    )


def _soft(signed_mm: np.ndarray, width_mm: float = 2.0) -> np.ndarray:
    return np.clip(signed_mm / width_mm + 0.5, 0.0, 1.0).astype(np.float32)


class _Painter:
    """Paints soft masks with a tissue's values into CT, T1 and T2 volumes at once."""

    def __init__(self) -> None:
        air = TISSUES["air"]
        self.maps = [np.full(SHAPE, value, np.float32) for value in air]

    def paint(self, mask: np.ndarray, tissue: str) -> None:
        mask = np.broadcast_to(mask, SHAPE)
        for volume, value in zip(self.maps, TISSUES[tissue], strict=True):
            volume += mask * (value - volume)


def _segment_tube(
    painter: _Painter, axes, p0, p1, radius_mm: float, tissue: str, within: np.ndarray
) -> None:
    """A cylinder of `radius_mm` from p0 to p1 (mm), painted only where `within` is set."""
    pad = radius_mm + 3
    bounds = [
        (max(0, int((min(a, b) - pad) / s)), min(n, int((max(a, b) + pad) / s) + 1))
        for a, b, s, n in zip(p0, p1, SPACING_MM, SHAPE, strict=True)
    ]
    window = tuple(slice(lo, hi) for lo, hi in bounds)
    z, y, x = (
        axis[tuple(window[i] if i == j else slice(None) for i in range(3))]
        for j, axis in enumerate(axes)
    )
    d = np.subtract(p1, p0)
    t = ((z - p0[0]) * d[0] + (y - p0[1]) * d[1] + (x - p0[2]) * d[2]) / max(d @ d, 1e-6)
    t = np.clip(t, 0, 1)
    dist = np.sqrt(
        (z - p0[0] - t * d[0]) ** 2 + (y - p0[1] - t * d[1]) ** 2 + (x - p0[2] - t * d[2]) ** 2
    )
    mask = _soft(radius_mm - dist, 1.5) * within[window]
    for volume, value in zip(painter.maps, TISSUES[tissue], strict=True):
        volume[window] += mask * (value - volume[window])


def build_subject(rng: np.random.Generator) -> tuple[list[np.ndarray], list[Nodule], str | None]:
    """One subject: (CT HU, T1, T2) volumes, its nodules, and its effusion side (or None)."""
    axes = z, y, x = _axes()
    depth, height, width = (n * s for n, s in zip(SHAPE, SPACING_MM, strict=True))
    cx, cy = width / 2 + rng.normal(0, 3), height / 2 + rng.normal(0, 3)
    body_rx, body_ry = width * rng.uniform(0.42, 0.46), height * rng.uniform(0.3, 0.34)
    fat_mm = float(rng.uniform(8, 20))
    painter = _Painter()

    ring = ((x - cx) / body_rx) ** 2 + ((y - cy) / body_ry) ** 2
    painter.paint(_soft((1 - np.sqrt(ring)) * body_ry), "fat")
    inner = np.sqrt(((x - cx) / (body_rx - fat_mm)) ** 2 + ((y - cy) / (body_ry - fat_mm)) ** 2)
    painter.paint(_soft((1 - inner) * (body_ry - fat_mm)), "muscle")
    rib_phase = float(rng.uniform(0, 25))
    ribs = (np.abs(inner - 0.93) < 0.035) * (np.sin((z + rib_phase) * 2 * np.pi / 25) > 0.55)
    painter.paint(ribs.astype(np.float32), "bone")

    lungs: dict[str, np.ndarray] = {}
    top = float(rng.uniform(10, 20))
    base = depth * rng.uniform(0.78, 0.86)
    for side, sign in (("right", -1), ("left", 1)):
        lx, ly = cx + sign * body_rx * 0.45, cy + 0.05 * body_ry
        rx, ry = body_rx * 0.38, body_ry * 0.72
        radial = np.sqrt(((x - lx) / rx) ** 2 + ((y - ly) / ry) ** 2)
        taper = np.sqrt(np.clip((z - top) / (0.45 * (base - top)), 0, 1))  # narrow apex
        dome = base - 0.12 * depth * np.clip(1 - radial**2, 0, 1)
        lung = _soft((taper - radial) * rx) * _soft(dome - z)
        lungs[side] = lung
        painter.paint(lung, "lung")
    heart_c = (base - 0.22 * depth, cy - 0.3 * body_ry, cx + 0.12 * body_rx)
    heart = np.sqrt(
        ((z - heart_c[0]) / (0.2 * depth)) ** 2
        + ((y - heart_c[1]) / (0.55 * body_ry)) ** 2
        + ((x - heart_c[2]) / (0.33 * body_rx)) ** 2
    )
    painter.paint(_soft((1 - heart) * 25), "blood")
    aorta = np.sqrt((x - cx - 0.12 * body_rx) ** 2 + (y - cy - 0.35 * body_ry) ** 2)
    painter.paint(_soft(11 - aorta) * (z > top), "blood")
    spine = np.sqrt((x - cx) ** 2 + (y - cy - 0.72 * body_ry) ** 2)
    painter.paint(_soft(17 - spine), "bone")
    canal = np.sqrt((x - cx) ** 2 + (y - cy - 0.72 * body_ry - 20) ** 2)
    painter.paint(_soft(6 - canal), "fluid")

    for side, sign in (("right", -1), ("left", 1)):
        hilum = (depth * 0.42, cy, cx + sign * body_rx * 0.22)
        for _ in range(7):
            direction = np.array(
                [rng.normal(0, 0.7), rng.normal(0, 0.3), sign * rng.uniform(0.6, 1)]
            )
            direction /= np.linalg.norm(direction)
            end = tuple(np.add(hilum, direction * rng.uniform(60, 110)))
            _segment_tube(painter, axes, hilum, end, 2.6, "vessel", lungs[side])
            mid = tuple(np.add(hilum, direction * rng.uniform(25, 55)))
            branch = direction + rng.normal(0, 0.5, 3)
            tip = tuple(np.add(mid, branch / np.linalg.norm(branch) * rng.uniform(30, 50)))
            _segment_tube(painter, axes, mid, tip, 1.6, "vessel", lungs[side])

    effusion = None
    if rng.random() < 0.25:
        effusion = ("right", "left")[int(rng.integers(2))]
        level = cy + body_ry * rng.uniform(0.2, 0.5)  # dependent (posterior) fluid
        painter.paint(lungs[effusion] * _soft(y - level, 3.0) * (z > depth * 0.35), "fluid")

    nodules = []
    for _ in range(int(rng.choice(4, p=(0.4, 0.3, 0.2, 0.1)))):
        side = ("right", "left")[int(rng.integers(2))]
        sign = -1 if side == "right" else 1
        zone_index = int(rng.integers(3))
        centre = (
            top + (base - top) * (0.25 + 0.22 * zone_index) + rng.normal(0, 6),
            cy + rng.normal(0, 0.2) * body_ry,
            cx + sign * body_rx * rng.uniform(0.35, 0.6),
        )
        diameter = float(rng.uniform(6, 24))
        distance = np.sqrt((z - centre[0]) ** 2 + (y - centre[1]) ** 2 + (x - centre[2]) ** 2)
        painter.paint(_soft(diameter / 2 - distance, 1.5), "nodule")
        zone = ("upper", "middle", "lower")[zone_index]
        nodules.append(Nodule(side, zone, round(diameter, 1), tuple(round(c, 1) for c in centre)))
    return painter.maps, nodules, effusion


def ct_to_unit(hu: np.ndarray, window: tuple[float, float] = LUNG_WINDOW) -> np.ndarray:
    """Window Hounsfield units to [0, 1] (lung window by default)."""
    centre, width = window
    return np.clip((hu - (centre - width / 2)) / width, 0.0, 1.0)


def drr(hu: np.ndarray) -> np.ndarray:
    """Radiograph-like projection: mean attenuation along the AP axis, rows resampled so the
    image keeps the body's physical proportions. Bright = dense, as on a radiograph."""
    mu = np.clip(1 + hu / 1000.0, 0, None)  # attenuation relative to water
    projection = mu.mean(axis=1) / 1.1
    zoom = (SPACING_MM[0] / SPACING_MM[2], 1.0)
    return np.clip(ndimage.zoom(projection, zoom, order=1), 0, 1)


def _mr(signal: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Add a smooth coil bias field and Rician noise, as magnitude MR images have."""
    z, y, x = (np.linspace(-1, 1, n, dtype=np.float32) for n in SHAPE)
    bias = 1 + 0.12 * rng.normal() * y[None, :, None] + 0.08 * rng.normal() * x[None, None, :]
    bias = bias + 0.05 * rng.normal() * z[:, None, None]
    sd = 0.02
    real = signal * bias + sd * rng.standard_normal(SHAPE, dtype=np.float32)
    imag = sd * rng.standard_normal(SHAPE, dtype=np.float32)
    return np.sqrt(real * real + imag * imag)


def _findings(nodules: list[Nodule], effusion: str | None) -> Findings:
    findings: Findings = dict.fromkeys(CHEXPERT_14)
    findings["Lung Lesion"] = 1 if nodules else 0
    findings["Pleural Effusion"] = 1 if effusion else 0
    if not nodules and not effusion:
        findings["No Finding"] = 1
    return findings


def _describe(nodules: list[Nodule], effusion: str | None) -> str:
    if not nodules:
        parts = ["No pulmonary nodules."]
    elif len(nodules) == 1:
        n = nodules[0]
        parts = [f"A {n.diameter_mm:.0f} mm nodule in the {n.side} {n.zone} zone."]
    else:
        count = {2: "Two", 3: "Three"}[len(nodules)]
        listed = "; ".join(f"{n.side} {n.zone} zone {n.diameter_mm:.0f} mm" for n in nodules)
        largest = max(n.diameter_mm for n in nodules)
        parts = [f"{count} pulmonary nodules ({listed}), the largest {largest:.0f} mm."]
    parts.append(f"Small {effusion} pleural effusion." if effusion else "No pleural effusion.")
    return " ".join(parts)


_HEADERS = {
    "CT": "Non-contrast CT of the chest, lung window.",
    "MR-T1": "T1-weighted MR of the chest (fat bright, fluid dark).",
    "MR-T2": "T2-weighted MR of the chest (fluid bright).",
    "DX-projection": "Radiograph-like projection (DRR) of the chest CT.",
}


def _projection_boxes(nodules: list[Nodule], shape: tuple[int, int]) -> list[Box]:
    """Nodule boxes in the projection's pixel grid (rows = depth rescaled, cols = columns)."""
    rows_per_mm = shape[0] / (SHAPE[0] * SPACING_MM[0])
    cols_per_mm = shape[1] / (SHAPE[2] * SPACING_MM[2])
    boxes = []
    for n in nodules:
        r = n.diameter_mm / 2
        boxes.append(
            Box(
                finding="Lung Lesion",
                x=round((n.centre_mm[2] - r) * cols_per_mm, 1),
                y=round((n.centre_mm[0] - r) * rows_per_mm, 1),
                w=round(2 * r * cols_per_mm, 1),
                h=round(2 * r * rows_per_mm, 1),
                side=n.side,
                severity="severe"
                if n.diameter_mm >= 20
                else "moderate"
                if n.diameter_mm >= 12
                else "mild",
            )
        )
    return boxes


def generate_volume_corpus(n_subjects: int = 48, seed: int = 0) -> list[Study]:
    """Per subject: CT, T1 MR, T2 MR (form 3d) and the CT's projection (form 2d).

    Deterministic by seed; subjects are split 70/30 train/test, all four studies together.
    """
    if n_subjects < 1:
        raise EvidenceError(f"Number of subjects must be at least 1; got {n_subjects}.")
    subject_ids = [f"phantom-subj-{i:05d}" for i in range(n_subjects)]
    splits = split_by_group(subject_ids, VOLUME_SPLITS, seed)
    studies = []
    for index, subject in enumerate(subject_ids):
        rng = np.random.default_rng([seed, 7, index])
        (hu, t1, t2), nodules, effusion = build_subject(rng)
        hu = hu + 15 * rng.standard_normal(SHAPE, dtype=np.float32)
        projection = quantise_image(drr(hu))
        pixels = {
            "CT": quantise_volume(ct_to_unit(hu)),
            "MR-T1": quantise_volume(_mr(t1, rng)),
            "MR-T2": quantise_volume(_mr(t2, rng)),
            "DX-projection": projection,
        }
        findings = _findings(nodules, effusion)
        description = _describe(nodules, effusion)
        laterality = {}
        if nodules:
            sides = {n.side for n in nodules}
            laterality["Lung Lesion"] = sides.pop() if len(sides) == 1 else "bilateral"
        if effusion:
            laterality["Pleural Effusion"] = effusion
        meta = {
            "subject_id": subject,
            "nodule_count": len(nodules),
            "nodules": [
                {
                    "side": n.side,
                    "zone": n.zone,
                    "diameter_mm": n.diameter_mm,
                    "centre_mm": list(n.centre_mm),
                }
                for n in nodules
            ],
            "effusion": effusion,
            "spacing_mm": list(SPACING_MM),
            "seed": seed,
        }
        for modality, tag in (
            ("CT", "ct"),
            ("MR-T1", "mrt1"),
            ("MR-T2", "mrt2"),
            ("DX-projection", "drr"),
        ):
            studies.append(
                Study(
                    id=f"phantom-{tag}-{index:05d}",
                    form="2d" if modality == "DX-projection" else "3d",
                    modality=modality,
                    pixels=pixels[modality],
                    text=f"{_HEADERS[modality]} {description}",
                    findings=dict(findings),
                    boxes=_projection_boxes(nodules, projection.shape)
                    if modality == "DX-projection"
                    else [],
                    laterality=dict(laterality),
                    severity={},
                    patient_id=subject,
                    split=splits[subject],
                    source="phantom",
                    synthetic=True,
                    meta=dict(meta, window=list(LUNG_WINDOW)) if modality == "CT" else dict(meta),
                )
            )
    return studies
