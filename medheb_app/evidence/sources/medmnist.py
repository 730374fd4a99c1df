"""MedMNIST / MedMNIST+ .npz files -> Studies (2D (N,H,W[,3]) and 3D (N,D,H,W) images).

The medmnist package is not installed, so the label names of the supported data sets are
written here, copied from its INFO table (medmnist/info.py, v3): every 2D and 3D data set of
MedMNIST v2 / MedMNIST+. ChestMNIST is NIH ChestX-ray14 at low resolution: its 14 labels are
NIH's, positive-only, and map to CXR-Retrieve names exactly as the NIH adapter does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from medheb_app.evidence.findings import NIH_14
from medheb_app.evidence.sources.nih import nih_findings
from medheb_app.evidence.study import EvidenceError, Study

SPLITS = ("train", "val", "test")
_ORGANS_2D = (
    "bladder",
    "femur-left",
    "femur-right",
    "heart",
    "kidney-left",
    "kidney-right",
    "liver",
    "lung-left",
    "lung-right",
    "pancreas",
    "spleen",
)


@dataclass(frozen=True)
class MedMNISTInfo:
    task: str  # "multi-label" | "multi-class" | "binary-class" | "ordinal-regression"
    modality: str
    labels: tuple[str, ...]


MEDMNIST: dict[str, MedMNISTInfo] = {
    "chestmnist": MedMNISTInfo("multi-label", "CR", NIH_14),
    "pneumoniamnist": MedMNISTInfo("binary-class", "CR", ("normal", "pneumonia")),
    "breastmnist": MedMNISTInfo("binary-class", "US", ("malignant", "normal, benign")),
    "organamnist": MedMNISTInfo("multi-class", "CT", _ORGANS_2D),
    "organcmnist": MedMNISTInfo("multi-class", "CT", _ORGANS_2D),
    "organsmnist": MedMNISTInfo("multi-class", "CT", _ORGANS_2D),
    "pathmnist": MedMNISTInfo(
        "multi-class",
        "SM",
        (
            "adipose",
            "background",
            "debris",
            "lymphocytes",
            "mucus",
            "smooth muscle",
            "normal colon mucosa",
            "cancer-associated stroma",
            "colorectal adenocarcinoma epithelium",
        ),
    ),
    "dermamnist": MedMNISTInfo(
        "multi-class",
        "XC",
        (
            "actinic keratoses and intraepithelial carcinoma",
            "basal cell carcinoma",
            "benign keratosis-like lesions",
            "dermatofibroma",
            "melanoma",
            "melanocytic nevi",
            "vascular lesions",
        ),
    ),
    "octmnist": MedMNISTInfo(
        "multi-class",
        "OPT",
        ("choroidal neovascularization", "diabetic macular edema", "drusen", "normal"),
    ),
    "retinamnist": MedMNISTInfo("ordinal-regression", "OP", ("0", "1", "2", "3", "4")),
    "bloodmnist": MedMNISTInfo(
        "multi-class",
        "SM",
        (
            "basophil",
            "eosinophil",
            "erythroblast",
            "immature granulocytes(myelocytes, metamyelocytes and promyelocytes)",
            "lymphocyte",
            "monocyte",
            "neutrophil",
            "platelet",
        ),
    ),
    "tissuemnist": MedMNISTInfo(
        "multi-class",
        "SM",
        (
            "Collecting Duct, Connecting Tubule",
            "Distal Convoluted Tubule",
            "Glomerular endothelial cells",
            "Interstitial endothelial cells",
            "Leukocytes",
            "Podocytes",
            "Proximal Tubule Segments",
            "Thick Ascending Limb",
        ),
    ),
    "organmnist3d": MedMNISTInfo(
        "multi-class",
        "CT",
        (
            "liver",
            "kidney-right",
            "kidney-left",
            "femur-right",
            "femur-left",
            "bladder",
            "heart",
            "lung-right",
            "lung-left",
            "spleen",
            "pancreas",
        ),
    ),
    "nodulemnist3d": MedMNISTInfo("binary-class", "CT", ("benign", "malignant")),
    "adrenalmnist3d": MedMNISTInfo("binary-class", "CT", ("normal", "hyperplasia")),
    "fracturemnist3d": MedMNISTInfo(
        "multi-class",
        "CT",
        ("buckle rib fracture", "nondisplaced rib fracture", "displaced rib fracture"),
    ),
    "vesselmnist3d": MedMNISTInfo("binary-class", "MR", ("vessel", "aneurysm")),
    "synapsemnist3d": MedMNISTInfo(
        "binary-class", "OT", ("inhibitory synapse", "excitatory synapse")
    ),
}


def dataset_name(path: Path) -> str:
    """'chestmnist_224.npz' -> 'chestmnist'."""
    return re.sub(r"_(28|64|128|224)$", "", path.stem.lower())


def _unit(images: np.ndarray) -> np.ndarray:
    if images.dtype == np.uint8:
        return images.astype(np.float32) / 255.0
    values = images.astype(np.float32)
    low, high = float(values.min()), float(values.max())
    return (values - low) / (high - low) if high > low else np.zeros_like(values)


def load_medmnist(
    npz_path: Path | str,
    dataset: str | None = None,
    splits: tuple[str, ...] = SPLITS,
    limit: int | None = None,
) -> list[Study]:
    """Studies from the splits of one MedMNIST .npz; `limit` caps the studies per split."""
    path = Path(npz_path)
    if not path.is_file():
        raise EvidenceError(f"{path} does not exist; expected a MedMNIST .npz file.")
    name = dataset or dataset_name(path)
    if name not in MEDMNIST:
        raise EvidenceError(
            f"{path.name}: unknown MedMNIST data set {name!r}; supported: {', '.join(MEDMNIST)}."
        )
    info = MEDMNIST[name]
    is_3d = name.endswith("3d")
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise EvidenceError(f"{path.name} is not a readable .npz file ({error}).") from None
    studies = []
    with archive:
        for split in splits:
            keys = (f"{split}_images", f"{split}_labels")
            missing = [k for k in keys if k not in archive.files]
            if missing:
                raise EvidenceError(
                    f"{path.name} lacks {', '.join(missing)}; found {', '.join(archive.files)}."
                )
            images, labels = archive[keys[0]][:limit], archive[keys[1]][:limit]
            expected = (4,) if is_3d else (3, 4)
            if images.ndim not in expected or len(images) != len(labels):
                raise EvidenceError(
                    f"{path.name}: {keys[0]} has shape {images.shape} and {keys[1]} "
                    f"{labels.shape}; expected {'(N, D, H, W)' if is_3d else '(N, H, W[, 3])'} "
                    "images with one label row each."
                )
            pixels = _unit(images)
            labels = labels.reshape(len(labels), -1).astype(int)
            for index in range(len(pixels)):
                studies.append(_study(name, info, split, index, pixels[index], labels[index]))
    return studies


def _study(
    name: str, info: MedMNISTInfo, split: str, index: int, pixels: np.ndarray, row: np.ndarray
) -> Study:
    if info.task == "multi-label":
        positive = [info.labels[i] for i in np.flatnonzero(row)]
        findings = nih_findings(positive) if name == "chestmnist" else dict.fromkeys(positive, 1)
        meta: dict[str, object] = {"labels": positive}
    else:
        label = info.labels[int(row[0])]
        findings = {label: 1}
        meta = {"label": label, "label_index": int(row[0])}
    return Study(
        id=f"{name}-{split}-{index}",
        form="3d" if name.endswith("3d") else "2d",
        modality=info.modality,
        pixels=pixels,
        findings=findings,  # type: ignore[arg-type]
        split="valid" if split == "val" else split,
        source=f"medmnist:{name}",
        meta={**meta, "task": info.task},
    )
