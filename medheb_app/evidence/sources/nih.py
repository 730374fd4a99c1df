"""NIH ChestX-ray14 on disk -> Studies, from the shared 1,000-image copy or the official layout.

Layouts understood:
- shared copy: labels.csv (Image Index, split, Finding Labels, ..., OriginalWidth,
  OriginalHeight, PixelSpacingX, PixelSpacingY), images/<Image Index>, optional bboxes.csv;
- official release: Data_Entry_2017_v2020.csv[.gz] (or Data_Entry_2017.csv), images in
  images/ or images_NNN/images/, optional BBox_List_2017.csv[.gz] and test_list.txt.

NIH labels are text-mined and positive-only: a listed finding is 1, anything else is None
("not mentioned"), never 0. NIH names are kept in meta["nih_labels"]; Study.findings uses the
CXR-Retrieve names through NIH_TO_CXR_RETRIEVE. NIH boxes are given on the released
1024 x 1024 images (their x + w never passes 1024 however wide the original was; torchxrayvision
scales them from 1024 too), so they are scaled from 1024 to the size of the stored image.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from PIL import Image

from medheb_app.evidence.findings import CXR_RETRIEVE_10, NIH_14, NIH_TO_CXR_RETRIEVE
from medheb_app.evidence.sources.layout import (
    cell,
    find_table,
    read_table,
    require_dir,
    split_by_patient,
)
from medheb_app.evidence.study import Box, EvidenceError, Findings, Study

NIH_BOX_FRAME = 1024  # the released images (and so the boxes) are 1024 x 1024
NO_FINDING = "No Finding"
_BOX_ALIASES = {"Infiltrate": "Infiltration"}  # BBox_List spells one label differently
_OFFICIAL_COLUMNS = {
    "OriginalImage[Width": "OriginalWidth",
    "Height]": "OriginalHeight",
    "OriginalImagePixelSpacing[x": "PixelSpacingX",
    "y]": "PixelSpacingY",
}
_REQUIRED = ("Image Index", "Finding Labels", "Patient ID")
_WHAT = "NIH ChestX-ray14"


def nih_findings(labels: list[str]) -> Findings:
    """Positive-only NIH labels -> CXR-Retrieve findings: listed -> 1, everything else None."""
    findings: Findings = dict.fromkeys(CXR_RETRIEVE_10)
    for label in labels:
        if label in NIH_TO_CXR_RETRIEVE:
            findings[NIH_TO_CXR_RETRIEVE[label]] = 1
    return findings


def parse_labels(cell_text: object, image: str) -> list[str]:
    """'A|B' -> ['A', 'B']; 'No Finding' -> []; unknown names are an error, not a silent drop."""
    text = str(cell_text or "").strip()
    if not text or text == NO_FINDING:
        return []
    labels = [part.strip() for part in text.split("|") if part.strip()]
    unknown = [label for label in labels if label not in NIH_14 and label != NO_FINDING]
    if unknown:
        raise EvidenceError(
            f"{image} has unknown NIH label(s) {unknown}; expected names from {list(NIH_14)}."
        )
    return [label for label in labels if label != NO_FINDING]


def _image_index(directory: Path) -> dict[str, Path]:
    """Image file name -> path, over images/ and the official images_NNN/images/ folders."""
    folders = [directory / "images", *sorted(directory.glob("images_*/images"))]
    found: dict[str, Path] = {}
    for folder in folders:
        if folder.is_dir():
            for entry in folder.iterdir():
                found.setdefault(entry.name, entry)
    return found


def _read_labels(directory: Path) -> tuple[pd.DataFrame, str]:
    """The label table with the shared copy's column names, and which layout it came from."""
    if (directory / "labels.csv").is_file():
        return read_table(directory / "labels.csv", _REQUIRED), "shared"
    path = find_table(
        directory,
        ["Data_Entry_2017_v2020.csv", "Data_Entry_2017.csv", "labels.csv"],
        _WHAT,
    )
    frame = read_table(path, _REQUIRED).rename(columns=_OFFICIAL_COLUMNS)
    test_list = directory / "test_list.txt"
    if test_list.is_file():
        test_names = set(test_list.read_text().split())
        frame["split"] = ["test" if n in test_names else "train" for n in frame["Image Index"]]
    return frame, "official"


def _read_boxes(directory: Path) -> dict[str, list[tuple[str, float, float, float, float]]]:
    """Image name -> [(NIH label, x, y, w, h)] in the 1024 x 1024 frame."""
    for name in ("bboxes.csv", "BBox_List_2017.csv", "BBox_List_2017.csv.gz"):
        if (directory / name).is_file():
            frame = read_table(
                directory / name, ["Image Index", "Finding Label", "Bbox [x", "y", "w", "h]"]
            )
            break
    else:
        return {}
    boxes: dict[str, list[tuple[str, float, float, float, float]]] = {}
    for row in frame.itertuples(index=False):
        label = _BOX_ALIASES.get(row[1], row[1])
        boxes.setdefault(row[0], []).append(
            (label, float(row[2]), float(row[3]), float(row[4]), float(row[5]))
        )
    return boxes


def _scaled_boxes(raw: list[tuple[str, float, float, float, float]], image: Path) -> list[Box]:
    with Image.open(image) as opened:
        width, height = opened.size
    sx, sy = width / NIH_BOX_FRAME, height / NIH_BOX_FRAME
    return [
        Box(NIH_TO_CXR_RETRIEVE.get(label, label), x * sx, y * sy, w * sx, h * sy)
        for label, x, y, w, h in raw
    ]


def _age(value: object) -> int | None:
    """'58' or the 2017 file's '058Y' -> 58."""
    match = re.search(r"\d+", str(value)) if cell(value) is not None else None
    return int(match.group()) if match else None


def load_nih(
    directory: Path | str,
    resplit_by_patient: bool = True,
    seed: int = 0,
    test_fraction: float = 0.3,
) -> list[Study]:
    """Studies for every labelled image present on disk, re-split by patient by default.

    The shared copy's split leaks patients across splits (30 of 264), so by default whole
    patients are drawn into train / test; the source's split stays in meta["source_split"].
    """
    directory = require_dir(directory, _WHAT)
    frame, layout = _read_labels(directory)
    images = _image_index(directory)
    if not images:
        raise EvidenceError(
            f"{directory} has no images/ folder (or images_NNN/images/); it is not in the "
            f"{_WHAT} layout."
        )
    frame = frame[frame["Image Index"].isin(images)]
    if frame.empty:
        raise EvidenceError(
            f"None of the images listed in the label table are in {directory}/images."
        )
    frame = frame.assign(**{"Patient ID": frame["Patient ID"].astype(str)})
    splits = (
        split_by_patient(frame["Patient ID"], test_fraction, seed) if resplit_by_patient else {}
    )
    boxes = _read_boxes(directory)
    studies = []
    for row in frame.to_dict("records"):
        name = str(row["Image Index"])
        labels = parse_labels(row["Finding Labels"], name)
        source_split = cell(row.get("split"))
        path = images[name]
        studies.append(
            Study(
                id=f"nih-{Path(name).stem}",
                form="2d",
                modality="CR",
                path=str(path),
                findings=nih_findings(labels),
                boxes=_scaled_boxes(boxes[name], path) if name in boxes else [],
                patient_id=row["Patient ID"],
                split=splits.get(row["Patient ID"]) if resplit_by_patient else source_split,
                source="nih-cxr14",
                meta={
                    "nih_labels": labels,
                    "image_index": name,
                    "source_split": source_split,
                    "layout": layout,
                    "follow_up": cell(row.get("Follow-up #")),
                    "age": _age(row.get("Patient Age")),
                    "sex": cell(row.get("Patient Gender")),
                    "view": cell(row.get("View Position")),
                    "original_size": [
                        cell(row.get("OriginalWidth")),
                        cell(row.get("OriginalHeight")),
                    ],
                    "pixel_spacing": [
                        cell(row.get("PixelSpacingX")),
                        cell(row.get("PixelSpacingY")),
                    ],
                },
            )
        )
    return studies
