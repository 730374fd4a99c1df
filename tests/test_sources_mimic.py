"""MIMIC-CXR-JPG adapter on a fixture in the exact PhysioNet layout (gzipped CSVs, tiny JPGs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.sources.mimic import load_mimic, report_sections, study_folder
from medheb_app.evidence.study import EvidenceError

REPORT = """                                 FINAL REPORT
 EXAMINATION:  CHEST (PA AND LAT)

 INDICATION:  ___F with new onset ascites  // eval for infection

 FINDINGS:
 There is no focal consolidation, pleural effusion or pneumothorax.  Bilateral
 nodular opacities that most likely represent nipple shadows.

 IMPRESSION:
 No acute cardiopulmonary process.
"""

IMAGES = [  # dicom_id, subject, study, view, split, written to disk
    ("02aa804e-bde0afdd", 10000032, 50414267, "PA", "train", True),
    ("174413ec-4ec4c1f7", 10000032, 50414267, "LATERAL", "train", True),
    ("2a2277a9-b0ded155", 10000764, 57375967, "AP", "validate", True),
    ("68b5c4b1-227d0485", 10000898, 50771383, "PA", "test", False),
]


def build_mimic(root: Path) -> None:
    labels = []
    for subject, study, positives in (
        (10000032, 50414267, {"No Finding": 1.0}),
        (10000764, 57375967, {"Pleural Effusion": 1.0, "Edema": -1.0, "Pneumothorax": 0.0}),
        (10000898, 50771383, {"Atelectasis": 1.0}),
    ):
        row = {"subject_id": subject, "study_id": study, **dict.fromkeys(CHEXPERT_14, np.nan)}
        row.update(positives)
        labels.append(row)
    pd.DataFrame(labels).to_csv(root / "mimic-cxr-2.0.0-chexpert.csv.gz", index=False)
    split = [
        {"dicom_id": d, "study_id": st, "subject_id": su, "split": sp}
        for d, su, st, _, sp, _ in IMAGES
    ]
    pd.DataFrame(split).to_csv(root / "mimic-cxr-2.0.0-split.csv.gz", index=False)
    meta = [
        {"dicom_id": d, "subject_id": su, "study_id": st, "ViewPosition": v, "Rows": 16}
        for d, su, st, v, _, _ in IMAGES
    ]
    pd.DataFrame(meta).to_csv(root / "mimic-cxr-2.0.0-metadata.csv.gz", index=False)
    for dicom_id, subject, study, _, _, on_disk in IMAGES:
        folder = study_folder(root, subject, study)
        folder.mkdir(parents=True, exist_ok=True)
        if on_disk:
            pixels = np.random.default_rng(subject).integers(0, 255, (16, 12), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{dicom_id}.jpg")
    study_folder(root, 10000032, 50414267).with_suffix(".txt").write_text(REPORT)


def test_layout_paths() -> None:
    assert study_folder(Path("/m"), 10000032, 50414267) == Path("/m/files/p10/p10000032/s50414267")


def test_report_sections_parsed() -> None:
    sections = report_sections(REPORT)
    assert sections["impression"] == "No acute cardiopulmonary process."
    assert sections["findings"].startswith("There is no focal consolidation")
    assert sections["findings"].endswith("nipple shadows.")


def test_frontal_images_with_labels_and_reports(tmp_path: Path) -> None:
    build_mimic(tmp_path)
    studies = {s.meta["dicom_id"]: s for s in load_mimic(tmp_path)}
    assert sorted(studies) == ["02aa804e-bde0afdd", "2a2277a9-b0ded155"]  # lateral, missing out
    first = studies["02aa804e-bde0afdd"]
    assert first.findings["No Finding"] == 1 and first.findings["Edema"] is None
    assert first.text is not None and "IMPRESSION: No acute cardiopulmonary process." in first.text
    assert first.patient_id == "10000032" and first.split == "train"
    assert first.load_pixels().shape == (16, 12)
    second = studies["2a2277a9-b0ded155"]
    assert second.findings["Pleural Effusion"] == 1 and second.findings["Edema"] == -1
    assert second.findings["Pneumothorax"] == 0 and second.split == "valid"
    assert second.text is None
    everything = load_mimic(tmp_path, frontal_only=False)
    assert len(everything) == 3


def test_missing_pieces_are_named(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match=r"mimic-cxr-2\.0\.0-chexpert\.csv"):
        load_mimic(tmp_path)
    build_mimic(tmp_path)
    (tmp_path / "mimic-cxr-2.0.0-split.csv.gz").unlink()
    with pytest.raises(EvidenceError, match=r"mimic-cxr-2\.0\.0-split\.csv"):
        load_mimic(tmp_path)
