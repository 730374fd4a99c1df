"""CheXpert adapter on torchxrayvision's real label table and on a CheXpert-Plus style table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from medheb_app.evidence.findings import CHEXPERT_14
from medheb_app.evidence.sources.chexpert import load_chexpert
from medheb_app.evidence.study import EvidenceError

# torchxrayvision ships the tables; find them without importing it (and torch).
XRV_SPEC = importlib.util.find_spec("torchxrayvision")
assert XRV_SPEC is not None and XRV_SPEC.origin is not None
TABLE = Path(XRV_SPEC.origin).parent / "data" / "chexpert_train.csv.gz"


def test_real_table_keeps_one_zero_minus_one_and_blank() -> None:
    raw = pd.read_csv(TABLE, nrows=500)
    studies = load_chexpert(TABLE, limit=500)
    assert len(studies) == 500
    second = studies[1]  # patient00002/study2: Cardiomegaly -1, Lung Opacity 1, Fracture 1
    assert second.id == "chexpert-patient00002-study2-view1_frontal"
    assert second.patient_id == "00002" and second.split == "train"
    assert second.findings["Cardiomegaly"] == -1 and second.findings["Lung Opacity"] == 1
    assert second.findings["Pneumothorax"] is None and second.path is None
    assert second.meta["sex"] == "Female" and second.meta["projection"] == "AP"
    for study, (_, row) in zip(studies, raw.iterrows(), strict=True):
        for name in CHEXPERT_14:
            expected = None if np.isnan(row[name]) else int(row[name])
            assert study.findings[name] == expected
    coded = {v for s in studies for v in s.findings.values()}
    assert coded == {1, 0, -1, None}
    assert len({s.id for s in studies}) == 500


def test_frontal_only_drops_laterals() -> None:
    studies = load_chexpert(TABLE, frontal_only=True, limit=300)
    assert studies and all(s.meta["view"] == "Frontal" for s in studies)
    assert len(studies) < 300


def test_plus_layout_with_images_and_report_sections(tmp_path: Path) -> None:
    relative = "train/patient00007/study3/view1_frontal.jpg"
    (tmp_path / "images" / relative).parent.mkdir(parents=True)
    Image.fromarray(np.full((8, 8), 90, np.uint8)).save(tmp_path / "images" / relative)
    row = {
        "path_to_image": relative,
        "section_findings": "Small left effusion.",
        "section_impression": "Effusion.",
        "Frontal/Lateral": "Frontal",
    }
    row.update(dict.fromkeys(CHEXPERT_14, ""))
    row["Pleural Effusion"] = 1.0
    other = dict(row, path_to_image="train/patient00008/study1/view1_frontal.jpg")
    pd.DataFrame([row, other]).to_csv(tmp_path / "plus.csv", index=False)
    first, second = load_chexpert(tmp_path / "plus.csv", image_root=tmp_path / "images")
    assert first.path is not None and first.load_pixels().shape == (8, 8)
    assert first.text == "FINDINGS: Small left effusion.\nIMPRESSION: Effusion."
    assert first.findings["Pleural Effusion"] == 1 and first.findings["Edema"] is None
    assert second.path is None and second.meta["has_image"] is False


def test_bad_tables(tmp_path: Path) -> None:
    pd.DataFrame({"Path": ["train/patient00001/study1/view1_frontal.jpg"]}).to_csv(
        tmp_path / "t.csv", index=False
    )
    with pytest.raises(EvidenceError, match="No Finding"):
        load_chexpert(tmp_path / "t.csv")
    row = {"Path": "train/patient00001/study1/view1_frontal.jpg", **dict.fromkeys(CHEXPERT_14, 2)}
    pd.DataFrame([row]).to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(EvidenceError, match="expected 1, 0, -1 or blank"):
        load_chexpert(tmp_path / "t.csv")
    with pytest.raises(EvidenceError, match="does not exist"):
        load_chexpert(tmp_path / "none.csv")
