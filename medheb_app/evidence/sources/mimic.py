"""MIMIC-CXR-JPG on disk -> one Study per image, with its study's CheXpert labels and report.

Layout (PhysioNet MIMIC-CXR-JPG 2.0.0 / 2.1.0):
  mimic-cxr-2.0.0-chexpert.csv[.gz]   subject_id, study_id, the 14 CheXpert findings
  mimic-cxr-2.0.0-split.csv[.gz]      dicom_id, study_id, subject_id, split
  mimic-cxr-2.0.0-metadata.csv[.gz]   optional: dicom_id, ViewPosition, ... (frontal filter)
  files/pXX/pNNNNNNNN/sNNNNNNNN/<dicom_id>.jpg
  files/pXX/pNNNNNNNN/sNNNNNNNN.txt   optional free-text reports (MIMIC-CXR reports)
"""

from __future__ import annotations

import re
from pathlib import Path

from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.sources.chexpert import coded_findings
from medheb_app.evidence.sources.layout import cell, find_table, read_table, require_dir
from medheb_app.evidence.study import EvidenceError, Study

FRONTAL_VIEWS = ("PA", "AP")
_WHAT = "MIMIC-CXR-JPG"
_SECTION = re.compile(r"^\s*(FINDINGS|IMPRESSION)\s*:\s*", re.MULTILINE)
_ANY_HEADING = re.compile(r"^\s*[A-Z][A-Z /()-]{2,}:\s*", re.MULTILINE)


def study_folder(root: Path, subject_id: int, study_id: int) -> Path:
    """files/pXX/pNNNNNNNN/sNNNNNNNN for a subject and study."""
    subject = f"p{subject_id}"
    return root / "files" / subject[:3] / subject / f"s{study_id}"


def report_sections(text: str) -> dict[str, str]:
    """The FINDINGS and IMPRESSION sections of a free-text report (each up to the next heading)."""
    sections: dict[str, str] = {}
    for match in _SECTION.finditer(text):
        rest = text[match.end() :]
        following = _ANY_HEADING.search(rest)
        body = rest[: following.start()] if following else rest
        sections[match.group(1).lower()] = " ".join(body.split())
    return sections


def load_mimic(
    root: Path | str,
    frontal_only: bool = True,
    with_reports: bool = True,
) -> list[Study]:
    """Studies for every image on disk that has a split row and its study's CheXpert labels."""
    root = require_dir(root, _WHAT)
    labels = read_table(
        find_table(root, ["mimic-cxr-2.0.0-chexpert.csv"], _WHAT),
        ["subject_id", "study_id", *CHEXPERT_14],
    )
    splits = read_table(
        find_table(root, ["mimic-cxr-2.0.0-split.csv"], _WHAT),
        ["dicom_id", "study_id", "subject_id", "split"],
    )
    if not (root / "files").is_dir():
        raise EvidenceError(f"{root} has no files/ folder of images; it is not the {_WHAT} layout.")
    rows = splits.merge(labels, on=["subject_id", "study_id"], how="inner")
    metadata_path = next(
        (
            root / n
            for n in ("mimic-cxr-2.0.0-metadata.csv", "mimic-cxr-2.0.0-metadata.csv.gz")
            if (root / n).is_file()
        ),
        None,
    )
    if metadata_path is not None:
        metadata = read_table(metadata_path, ["dicom_id", "ViewPosition"])
        rows = rows.merge(metadata[["dicom_id", "ViewPosition"]], on="dicom_id", how="left")
        if frontal_only:
            rows = rows[rows["ViewPosition"].isin(FRONTAL_VIEWS)]
    findings = coded_findings(rows, CHEXPERT_14, "mimic-cxr-2.0.0-chexpert.csv")
    studies = []
    reports: dict[Path, dict[str, str]] = {}
    for row, coded in zip(rows.to_dict("records"), findings, strict=True):
        folder = study_folder(root, int(row["subject_id"]), int(row["study_id"]))
        image = folder / f"{row['dicom_id']}.jpg"
        if not image.is_file():
            continue
        text = None
        sections: dict[str, str] = {}
        report = folder.with_suffix(".txt")
        if with_reports and report.is_file():
            if report not in reports:
                reports[report] = report_sections(report.read_text(errors="replace"))
            sections = reports[report]
            text = "\n".join(f"{k.upper()}: {v}" for k, v in sections.items()) or None
        split = str(row["split"])
        studies.append(
            Study(
                id=f"mimic-{row['dicom_id']}",
                form="2d",
                modality="CR",
                path=str(image),
                text=text,
                findings=coded,
                patient_id=str(row["subject_id"]),
                split="valid" if split == "validate" else split,
                source="mimic-cxr",
                meta={
                    "study_id": int(row["study_id"]),
                    "dicom_id": str(row["dicom_id"]),
                    "view": cell(row.get("ViewPosition")),
                    "source_split": split,
                    **sections,
                },
            )
        )
    if not studies:
        raise EvidenceError(
            f"No image of the split table was found under {root}/files "
            "(expected files/pXX/pNNNNNNNN/sNNNNNNNN/<dicom_id>.jpg)."
        )
    return studies
