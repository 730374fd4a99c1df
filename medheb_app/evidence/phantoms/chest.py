"""Synthetic frontal chest radiographs with CheXpert label rows, reports and finding boxes.

Each study: a label row sampled from the real CheXpert table (labels.py), a plan of how each
labelled finding looks (plan.py), a rendered 2D image whose findings are drawn as visible
anatomy changes (anatomy.py, drawing.py), and a report that states each label (reports.py).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

from medheb_app.evidence.phantoms.anatomy import (
    SIDES,
    ChestAnatomy,
    Geometry,
    body_layers,
    clavicles,
    lung_field,
    lung_markings,
    noise_bank,
    rib_layer,
    sample_anatomy,
    with_acquisition,
)
from medheb_app.evidence.phantoms.canvas import Canvas
from medheb_app.evidence.phantoms.corpus import quantise_image
from medheb_app.evidence.phantoms.drawing import DRAWERS, apply_geometry
from medheb_app.evidence.phantoms.labels import sample_label_rows
from medheb_app.evidence.phantoms.plan import DRAWABLE, FindingSpec, plan_findings
from medheb_app.evidence.phantoms.reports import write_report
from medheb_app.evidence.phantoms.splits import split_by_group
from medheb_app.evidence.study import Box, EvidenceError, Study

CHEST_SPLITS = {"train": 0.7, "val": 0.1, "test": 0.2}
# Findings whose severity means something (a support device is present or not).
GRADED = tuple(f for f in DRAWABLE if f != "Support Devices")
NOISE_SD = 0.012


def render_chest(anatomy: ChestAnatomy, specs: list[FindingSpec]) -> tuple[np.ndarray, list[Box]]:
    """Render the anatomy with every drawn spec; returns (pixels in [0, 1], boxes).

    Rendering is a pure function of its inputs: dropping one spec re-renders the same subject
    without that finding (same anatomy, noise and other findings).
    """
    drawn = sorted((s for s in specs if s.drawn), key=lambda s: DRAWABLE.index(s.finding))
    geom = Geometry(anatomy)
    for spec in drawn:
        apply_geometry(geom, spec)
    layers = body_layers(geom)
    fields = {side: lung_field(geom, side) for side in SIDES}
    lungs = {side: fields[side] * (1 - layers["mediastinum"]) for side in SIDES}
    ribs, rib_p = rib_layer(geom)
    size = anatomy.size
    canvas = Canvas(
        geom=geom,
        fields=fields,
        lungs=lungs,
        fill=np.zeros((size, size), np.float32),
        extra=np.zeros((size, size), np.float32),
        keep=np.ones((size, size), np.float32),
        ribs=ribs,
        rib_p=rib_p,
    )
    boxes: list[Box] = []
    for spec in drawn:
        boxes += DRAWERS[spec.finding](canvas, spec, np.random.default_rng(spec.seed))
    return _compose(canvas, layers), boxes


def _compose(canvas: Canvas, layers: dict[str, np.ndarray]) -> np.ndarray:
    """Sum the density layers, soften, map to grey levels and add quantum noise."""
    geom = canvas.geom
    lung = canvas.lungs["right"] + canvas.lungs["left"]
    fill = np.clip(canvas.fill, 0, 1)
    density = (
        0.5 * layers["body"]
        + 0.22 * layers["abdomen"]
        + 0.33 * layers["mediastinum"]
        + 0.12 * layers["spine"]
        - 0.25 * layers["trachea"]
        + lung * (0.25 * fill - 0.45 * (1 - fill))
        + 0.14 * lung_markings(geom) * lung * (1 - fill) * canvas.keep
        + 0.09 * canvas.ribs * (1 - 0.6 * layers["mediastinum"])  # posterior, behind the heart
        + 0.2 * clavicles(geom)
        + canvas.extra
    )
    density = ndimage.gaussian_filter(density, 0.6)
    a = geom.anatomy
    noise = np.roll(noise_bank(a.size)[a.noise], a.noise_shift, axis=(0, 1))
    return quantise_image(0.03 + a.exposure * density + NOISE_SD * noise)


def generate_chest_corpus(n: int = 2000, seed: int = 0, size: int = 256) -> list[Study]:
    """`n` synthetic chest radiograph studies, deterministic by seed.

    The first k studies for a seed are the same whatever `n` is.
    """
    if size < 64:
        raise EvidenceError(f"Phantom images need at least 64 pixels a side; got {size}.")
    rows = sample_label_rows(n, seed)
    patient_ids = [f"phantom-pt-{row.patient_index:05d}" for row in rows]
    splits = split_by_group(patient_ids, CHEST_SPLITS, seed)
    studies = []
    for index, (row, patient_id) in enumerate(zip(rows, patient_ids, strict=True)):
        anatomy = _study_anatomy(seed, row.patient_index, index, size, row.view)
        specs = plan_findings(row.findings, np.random.default_rng([seed, 1, index]))
        pixels, boxes = render_chest(anatomy, specs)
        text = write_report(row.findings, specs, row.view, np.random.default_rng([seed, 2, index]))
        studies.append(
            Study(
                id=f"phantom-cxr-{index:06d}",
                form="2d",
                modality="CR",
                pixels=pixels,
                text=text,
                findings=dict(row.findings),
                boxes=boxes,
                laterality={s.finding: s.side for s in specs if s.side},
                severity={s.finding: s.severity for s in specs if s.finding in GRADED},
                patient_id=patient_id,
                split=splits[patient_id],
                source="phantom",
                synthetic=True,
                meta={
                    "label_row": row.row,
                    "drawn": [s.finding for s in specs if s.drawn],
                    "faint": [s.finding for s in specs if 0 < s.strength < 1],
                    "view": row.view,
                    "sex": row.sex,
                    "age": row.age,
                    "seed": seed,
                },
            )
        )
    return studies


def chest_study_specs(study: Study) -> tuple[ChestAnatomy, list[FindingSpec]]:
    """Re-derive a generated study's anatomy and finding plan (for re-rendering variants)."""
    index = int(study.id.rsplit("-", 1)[1])
    seed = int(study.meta["seed"])  # type: ignore[arg-type]
    size = study.pixels.shape[0] if study.pixels is not None else 256
    patient_index = int(str(study.patient_id).rsplit("-", 1)[1])
    anatomy = _study_anatomy(seed, patient_index, index, size, str(study.meta["view"]))
    return anatomy, plan_findings(study.findings, np.random.default_rng([seed, 1, index]))


def _study_anatomy(seed: int, patient_index: int, index: int, size: int, view: str) -> ChestAnatomy:
    """A patient keeps one chest across studies; each study is a new exposure of it."""
    anatomy = sample_anatomy(np.random.default_rng([seed, 3, patient_index]), size, view)
    return with_acquisition(anatomy, np.random.default_rng([seed, 4, index]))
