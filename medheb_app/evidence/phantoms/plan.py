"""What each labelled finding of a phantom looks like: side, severity, zone, and whether drawn.

A plan is made once per study from its CheXpert label row and then used twice: by the renderer
(what to draw) and by the report writer (what to say), so image and text always agree.
Uncertain (-1) findings are drawn faintly or not at all, decided by the seed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from medheb_app.evidence.study import Findings

SEVERITIES = ("mild", "moderate", "severe")
FAINT = 0.5  # strength of an uncertain finding that is drawn
P_DRAW_UNCERTAIN = 0.5

# Findings the renderer can draw, in drawing order (later ones overlay earlier ones).
DRAWABLE: tuple[str, ...] = (
    "Cardiomegaly",
    "Enlarged Cardiomediastinum",
    "Pleural Other",
    "Pleural Effusion",
    "Edema",
    "Consolidation",
    "Atelectasis",
    "Pneumonia",
    "Lung Opacity",
    "Lung Lesion",
    "Pneumothorax",
    "Fracture",
    "Support Devices",
)
# Focal findings are placed in a zone that no lobar consolidation or sizeable effusion
# already fills, so that each one stays visible.
FOCAL = ("Pneumonia", "Lung Opacity", "Lung Lesion")
ZONES = ("upper", "middle", "lower")

# P(right), P(left), P(bilateral) per lateralised finding; None = no side (central).
_SIDE_ODDS: dict[str, tuple[float, float, float] | None] = {
    "Cardiomegaly": None,
    "Enlarged Cardiomediastinum": None,
    "Support Devices": None,
    "Edema": (0.0, 0.0, 1.0),
    "Pleural Effusion": (0.35, 0.3, 0.35),
    "Atelectasis": (0.3, 0.4, 0.3),
    "Consolidation": (0.45, 0.35, 0.2),
    "Pneumonia": (0.45, 0.35, 0.2),
    "Lung Opacity": (0.35, 0.3, 0.35),
    "Pneumothorax": (0.5, 0.47, 0.03),
    "Lung Lesion": (0.55, 0.45, 0.0),
    "Fracture": (0.5, 0.5, 0.0),
    "Pleural Other": (0.45, 0.45, 0.1),
}
_ZONES: dict[str, tuple[str, ...]] = {
    "Consolidation": ("upper", "middle", "lower", "lower"),
    "Pneumonia": ("upper", "middle", "lower", "lower"),
    "Lung Opacity": ("upper", "middle", "lower"),
    "Lung Lesion": ("upper", "middle", "lower"),
    "Atelectasis": ("lower",),
    "Pleural Effusion": ("lower",),
    "Pneumothorax": ("upper",),
    "Pleural Other": ("middle",),
    "Fracture": ("rib",),
    "Edema": ("perihilar",),
    "Cardiomegaly": ("cardiac",),
    "Enlarged Cardiomediastinum": ("mediastinal",),
    "Support Devices": ("endotracheal tube", "central venous catheter", "pacemaker"),
}
_LESION_RADIUS = {"mild": 0.017, "moderate": 0.028, "severe": 0.045}
MM_PER_IMAGE_WIDTH = 400.0  # a 256-pixel phantom spans about 40 cm of chest


@dataclass(frozen=True)
class FindingSpec:
    """One labelled (1 or -1) finding: how it is drawn (strength 0 = not drawn) and described."""

    finding: str
    value: int
    side: str | None
    severity: str
    zone: str
    strength: float
    seed: int
    size_mm: int | None = None  # lesion diameter
    rib: int | None = None  # fractured rib number

    @property
    def drawn(self) -> bool:
        return self.strength > 0

    @property
    def sides(self) -> tuple[str, ...]:
        """The lungs involved, patient's right first."""
        if self.side == "bilateral":
            return ("right", "left")
        return (self.side,) if self.side else ()

    def level(self, values: tuple[float, float, float]) -> float:
        """The value for this spec's severity out of (mild, moderate, severe)."""
        return values[SEVERITIES.index(self.severity)]


def plan_findings(findings: Findings, rng: np.random.Generator) -> list[FindingSpec]:
    """A spec for every drawable finding coded 1 or -1; 0 and blank findings get none."""
    specs = []
    for name in DRAWABLE:
        value = findings.get(name)
        if value not in (1, -1):
            continue
        if value == 1:
            strength = 1.0
            severity = SEVERITIES[int(rng.choice(3, p=(0.4, 0.4, 0.2)))]
        else:
            strength = FAINT if rng.random() < P_DRAW_UNCERTAIN else 0.0
            severity = "mild"
        odds = _SIDE_ODDS[name]
        side = None if odds is None else ("right", "left", "bilateral")[int(rng.choice(3, p=odds))]
        zones = _ZONES[name]
        zone = zones[int(rng.integers(len(zones)))]
        size_mm = None
        if name == "Lung Lesion":
            radius = _LESION_RADIUS[severity] * float(rng.uniform(0.85, 1.15))
            size_mm = round(2 * radius * MM_PER_IMAGE_WIDTH)
        rib = int(rng.integers(4, 10)) if name == "Fracture" else None
        specs.append(
            FindingSpec(
                finding=name,
                value=int(value),
                side=side,
                severity=severity,
                zone=zone,
                strength=strength,
                seed=int(rng.integers(2**31)),
                size_mm=size_mm,
                rib=rib,
            )
        )
    return _separate_focal(specs, rng)


def _occupied(specs: list[FindingSpec]) -> dict[str, set[str]]:
    taken: dict[str, set[str]] = {"right": set(), "left": set()}
    for spec in specs:
        zones: tuple[str, ...] = ()
        if spec.finding == "Consolidation":
            zones = (spec.zone,)
        elif spec.finding == "Pleural Effusion" and spec.severity != "mild":
            zones = ("lower", "middle") if spec.severity == "severe" else ("lower",)
        for side in spec.sides:
            taken[side].update(zones)
    return taken


def _separate_focal(specs: list[FindingSpec], rng: np.random.Generator) -> list[FindingSpec]:
    taken = _occupied(specs)
    out = []
    for spec in specs:
        if spec.finding in FOCAL:
            blocked = set().union(*(taken[side] for side in spec.sides))
            free = [zone for zone in ZONES if zone not in blocked]
            if spec.zone in blocked and free:
                spec = replace(spec, zone=free[int(rng.integers(len(free)))])
            for side in spec.sides:
                taken[side].add(spec.zone)
        out.append(spec)
    return out
