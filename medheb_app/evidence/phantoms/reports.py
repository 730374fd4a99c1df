"""Radiology report text for a phantom: every labelled finding asserted, negated or hedged.

Coded 1 -> asserted with side and severity ("Moderate cardiomegaly."), 0 -> negated ("No
pleural effusion."), -1 -> hedged ("Possible left lower lobe atelectasis."), blank -> not
mentioned at all, as in the reports CheXpert's labeler read (CXR-Retrieve section 3.2).
Phrasing varies with the seed.
"""

from __future__ import annotations

import numpy as np

from medheb_app.evidence.phantoms.plan import FindingSpec
from medheb_app.evidence.study import Findings

# Order in which radiologists usually dictate a chest radiograph.
REPORT_ORDER: tuple[str, ...] = (
    "Support Devices",
    "Cardiomegaly",
    "Enlarged Cardiomediastinum",
    "Edema",
    "Consolidation",
    "Pneumonia",
    "Lung Opacity",
    "Atelectasis",
    "Lung Lesion",
    "Pleural Effusion",
    "Pleural Other",
    "Pneumothorax",
    "Fracture",
)

_NEGATIONS: dict[str, tuple[str, ...]] = {
    "Support Devices": ("No support devices.", "No lines or tubes are seen."),
    "Cardiomegaly": ("No cardiomegaly.", "Heart size is normal.", "The heart is not enlarged."),
    "Enlarged Cardiomediastinum": (
        "The mediastinum is not widened.",
        "Normal mediastinal contours.",
    ),
    "Edema": ("No pulmonary edema.", "No evidence of pulmonary edema."),
    "Consolidation": ("No focal consolidation.", "There is no consolidation."),
    "Pneumonia": ("No evidence of pneumonia.", "No radiographic signs of pneumonia."),
    "Lung Opacity": ("No focal airspace opacity.", "No lung opacities."),
    "Atelectasis": ("No atelectasis.", "No evidence of atelectasis."),
    "Lung Lesion": ("No suspicious pulmonary nodule or mass.", "No focal lung lesion."),
    "Pleural Effusion": ("No pleural effusion.", "There is no pleural effusion."),
    "Pleural Other": ("No pleural thickening.",),
    "Pneumothorax": ("No pneumothorax.", "There is no pneumothorax."),
    "Fracture": ("No acute fracture.", "No displaced rib fracture."),
}
_HEDGES = ("Possible {}.", "Cannot exclude {}.", "Questionable {}.", "Findings may represent {}.")
_SIZE = {"mild": "small", "moderate": "moderate", "severe": "large"}
_DEGREE = {"mild": "mildly", "moderate": "moderately", "severe": "markedly"}
_DISPLACEMENT = {"mild": "nondisplaced", "moderate": "minimally displaced", "severe": "displaced"}
_EDEMA = {
    "mild": "mild interstitial pulmonary edema",
    "moderate": "moderate pulmonary edema",
    "severe": "severe alveolar pulmonary edema",
}
_DEVICES = {
    "endotracheal tube": "endotracheal tube",
    "central venous catheter": "right-sided central venous catheter",
    "pacemaker": "left chest wall pacemaker",
}


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _lobe(spec: FindingSpec) -> str:
    if spec.zone == "middle" and spec.side == "left":
        return "lingular"
    if spec.zone == "middle" and spec.side == "bilateral":
        return "right middle lobe and lingular"
    if spec.side == "bilateral":
        return f"bilateral {spec.zone} lobe"
    return f"{spec.side} {spec.zone} lobe"


def _zone(spec: FindingSpec) -> str:
    if spec.side == "bilateral":
        return f"bilateral {spec.zone} zones"
    return f"{spec.side} {spec.zone} zone"


def phrases(spec: FindingSpec) -> tuple[str, ...]:
    """Noun phrases describing the finding with its side and severity (lower case)."""
    sev, side, bilateral = spec.severity, spec.side, spec.side == "bilateral"
    name = spec.finding
    if name == "Cardiomegaly":
        return (f"{ {'severe': 'marked'}.get(sev, sev) } cardiomegaly",)
    if name == "Enlarged Cardiomediastinum":
        return ("enlargement of the cardiomediastinal silhouette", "widened mediastinum")
    if name == "Edema":
        return (
            _EDEMA[sev],
            f"perihilar haziness with Kerley B lines, in keeping with {_EDEMA[sev]}",
        )
    if name == "Consolidation":
        return (
            f"{_lobe(spec)} consolidation",
            f"{_lobe(spec)} consolidation with air bronchograms",
        )
    if name == "Pneumonia":
        return (
            f"{_lobe(spec)} pneumonia",
            f"focal airspace disease in the {_zone(spec)}, compatible with pneumonia",
        )
    if name == "Lung Opacity":
        plural = "opacities" if bilateral or sev != "mild" else "opacity"
        return (f"patchy {_zone(spec)} {plural}", f"patchy {plural} in the {_zone(spec)}")
    if name == "Atelectasis":
        where = "bibasilar" if bilateral else f"{side} basilar"
        return (f"{where} atelectasis", f"{side} lower lobe plate-like atelectasis")
    if name == "Lung Lesion":
        kind = "mass" if sev == "severe" else "nodule"
        return (f"{spec.size_mm} mm {kind} in the {_zone(spec)}", f"{_zone(spec)} {kind}")
    if name == "Pleural Effusion":
        noun = "pleural effusions" if bilateral else "pleural effusion"
        return (f"{_SIZE[sev]} {side} {noun}",)
    if name == "Pleural Other":
        return (f"{side} pleural thickening",)
    if name == "Pneumothorax":
        return (f"{_SIZE[sev]} {side} pneumothorax", f"{_SIZE[sev]} {side} apical pneumothorax")
    if name == "Fracture":
        return (f"{_DISPLACEMENT[sev]} fracture of the {side} {_ordinal(spec.rib or 6)} rib",)
    if name == "Support Devices":
        return (_DEVICES[spec.zone],)
    raise KeyError(f"No report phrasing for finding {name!r}")


def _assert(spec: FindingSpec, rng: np.random.Generator) -> str:
    phrase = _pick(phrases(spec), rng)
    if spec.finding == "Cardiomegaly" and rng.random() < 0.5:
        return f"The heart is {_DEGREE[spec.severity]} enlarged."
    if spec.finding == "Support Devices":
        return _pick((f"{phrase.capitalize()} in place.", f"Interval placement of {phrase}."), rng)
    if spec.finding == "Pleural Effusion" and rng.random() < 0.5:
        angle = "angles" if spec.side == "bilateral" else "angle"
        return f"{phrase.capitalize()} with blunting of the costophrenic {angle}."
    return f"{phrase[0].upper()}{phrase[1:]}."


def _pick(options: tuple[str, ...], rng: np.random.Generator) -> str:
    return options[int(rng.integers(len(options)))]


def write_report(
    findings: Findings, specs: list[FindingSpec], view: str, rng: np.random.Generator
) -> str:
    """The report for one study. `specs` must hold a spec for every finding coded 1 or -1."""
    by_name = {spec.finding: spec for spec in specs}
    view_text = "PA" if view == "PA" else "Portable AP"
    sentences = [_pick((f"{view_text} view of the chest.", f"{view_text} chest radiograph."), rng)]
    for name in REPORT_ORDER:
        value = findings.get(name)
        if value is None:
            continue
        if value == 0:
            sentences.append(_pick(_NEGATIONS[name], rng))
        elif value == 1:
            sentences.append(_assert(by_name[name], rng))
        else:
            sentences.append(_pick(_HEDGES, rng).format(phrases(by_name[name])[0]))
    if findings.get("No Finding") == 1:
        sentences.append(
            _pick(
                ("No acute cardiopulmonary process.", "No acute cardiopulmonary abnormality."), rng
            )
        )
    return " ".join(sentences)
