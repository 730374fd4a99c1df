"""Finding vocabularies (CheXpert 14, CXR-Retrieve 10, NIH ChestX-ray14) and maps between them."""

from __future__ import annotations

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
