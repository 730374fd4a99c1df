"""Finding vocabularies (CheXpert 14, CXR-Retrieve 10, NIH ChestX-ray14), maps between them,
and `Vocabulary`: which findings one labelled source (hence one index) codes, and how."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CHEXPERT_14: tuple[str, ...] = (
    "No Finding",
    "Enlarged Cardiomediastinum",
    "Cardiomegaly",
    "Lung Opacity",
    "Lung Lesion",
    "Edema",
    "Consolidation",
    "Pneumonia",
    "Atelectasis",
    "Pneumothorax",
    "Pleural Effusion",
    "Pleural Other",
    "Fracture",
    "Support Devices",
)

# CXR-Retrieve section 3: CheXpert 14 minus Support Devices, No Finding,
# Enlarged Cardiomediastinum and Pleural Other.
CXR_RETRIEVE_10: tuple[str, ...] = (
    "Atelectasis",
    "Cardiomegaly",
    "Consolidation",
    "Edema",
    "Fracture",
    "Lung Lesion",
    "Lung Opacity",
    "Pleural Effusion",
    "Pneumonia",
    "Pneumothorax",
)

NIH_14: tuple[str, ...] = (
    "Atelectasis",
    "Cardiomegaly",
    "Effusion",
    "Infiltration",
    "Mass",
    "Nodule",
    "Pneumonia",
    "Pneumothorax",
    "Consolidation",
    "Edema",
    "Emphysema",
    "Fibrosis",
    "Pleural_Thickening",
    "Hernia",
)

# NIH label -> CXR-Retrieve finding. Mass and Nodule are CheXpert's "Lung Lesion";
# Infiltration is folded into "Lung Opacity" as CheXpert's labeler does. NIH has no Fracture.
NIH_TO_CXR_RETRIEVE: dict[str, str] = {
    "Atelectasis": "Atelectasis",
    "Cardiomegaly": "Cardiomegaly",
    "Effusion": "Pleural Effusion",
    "Infiltration": "Lung Opacity",
    "Mass": "Lung Lesion",
    "Nodule": "Lung Lesion",
    "Pneumonia": "Pneumonia",
    "Pneumothorax": "Pneumothorax",
    "Consolidation": "Consolidation",
    "Edema": "Edema",
}
NIH_MISSING_CXR_RETRIEVE: tuple[str, ...] = tuple(
    f for f in CXR_RETRIEVE_10 if f not in NIH_TO_CXR_RETRIEVE.values()
)


def canonical_finding(name: str, vocabulary: tuple[str, ...] = CXR_RETRIEVE_10) -> str:
    """Return the vocabulary's spelling of `name` (case and underscore insensitive)."""
    wanted = name.replace("_", " ").strip().lower()
    for finding in vocabulary:
        if finding.lower() == wanted:
            return finding
    raise KeyError(f"Unknown finding {name!r}; known: {', '.join(vocabulary)}")


@dataclass(frozen=True)
class Vocabulary:
    """The findings a source labels, how it codes them, and under which names."""

    names: tuple[str, ...] = ()
    scheme: str = "none"  # "positive-only" | "coded" (1 / 0 / -1 / blank) | "none"
    source: str = ""

    @property
    def labelled(self) -> bool:
        return bool(self.names) and self.scheme != "none"

    @property
    def confirmed_negatives(self) -> bool:
        """Whether a 0 means 'confirmed absent' (needed by strict negation)."""
        return self.scheme == "coded"

    def describe(self) -> str:
        """One line for people: '14 findings (positive-only, nih-cxr14): Atelectasis, ...'."""
        if not self.labelled:
            return "no finding labels"
        return f"{len(self.names)} findings ({self.scheme}, {self.source}): " + ", ".join(
            self.names
        )

    def to_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "scheme": self.scheme, "source": self.source}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Vocabulary | None:
        if not data:
            return None
        return cls(
            tuple(data.get("names", ())), str(data.get("scheme", "none")), data.get("source", "")
        )


def scheme_of(findings: Sequence[Mapping[str, int | None]]) -> str:
    """'coded' when any label is 0 or -1, 'positive-only' when only 1s, 'none' when empty."""
    values = {value for row in findings for value in row.values() if value is not None}
    if not values:
        return "none"
    return "coded" if values & {0, -1} else "positive-only"
