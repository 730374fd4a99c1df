"""Words for where a finding box lies, for region-level (visual grounding) tasks."""

from __future__ import annotations

from medheb_app.evidence.study import Box

# Rows (as a fraction of the image) that the phantom lung fields span, apex to costophrenic angle.
LUNG_TOP, LUNG_BOTTOM = 0.13, 0.74

_TERMS = {
    "Fracture": "rib fracture",
    "Pleural Other": "pleural thickening",
    "Support Devices": "support device",
}
_CENTRAL = {
    "Cardiomegaly": "enlarged cardiac silhouette (cardiomegaly)",
    "Enlarged Cardiomediastinum": "widened upper mediastinum (enlarged cardiomediastinum)",
}


def lung_zone(box: Box, size: int = 256) -> str:
    """upper / middle / lower: the third of the lung height holding the box's centre."""
    centre = (box.y + box.h / 2) / size
    position = (centre - LUNG_TOP) / (LUNG_BOTTOM - LUNG_TOP)
    return "upper" if position < 1 / 3 else "middle" if position < 2 / 3 else "lower"


def region_description(box: Box, size: int = 256) -> str:
    """E.g. "left lower zone pleural effusion"; `size` is the image side the box refers to."""
    if box.finding in _CENTRAL:
        return _CENTRAL[box.finding]
    term = _TERMS.get(box.finding, box.finding.lower())
    if box.finding == "Edema":
        return "bilateral perihilar edema"
    if box.side is None:
        return f"{term} over the {lung_zone(box, size)} chest"
    return f"{box.side} {lung_zone(box, size)} zone {term}"
