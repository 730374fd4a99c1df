"""NIH ChestX-ray14 adapter on the real 1,000-image copy and on the official Data_Entry layout."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from medheb_app.evidence.sources.nih import load_nih, nih_findings
from medheb_app.evidence.study import EvidenceError
from tests.conftest import NIH_DIR, require_shared

# torchxrayvision ships the tables; find them without importing it (and torch).
XRV_SPEC = importlib.util.find_spec("torchxrayvision")
assert XRV_SPEC is not None and XRV_SPEC.origin is not None
XRV_DATA = Path(XRV_SPEC.origin).parent / "data"


def test_positive_only_labels_never_become_zero() -> None:
    findings = nih_findings(["Effusion", "Mass", "Nodule", "Hernia"])
    assert findings["Pleural Effusion"] == 1 and findings["Lung Lesion"] == 1
    assert all(value in (1, None) for value in findings.values())
    assert findings["Cardiomegaly"] is None and findings["Fracture"] is None


def test_shared_copy_labels_match_the_csv() -> None:
    directory = require_shared(NIH_DIR)
    table = pd.read_csv(directory / "labels.csv").set_index("Image Index")
    studies = load_nih(directory)
    assert len(studies) == len(table) == 1000
    by_name = {s.meta["image_index"]: s for s in studies}
    row = table.loc["00000001_001.png"]  # Cardiomegaly|Emphysema
    study = by_name["00000001_001.png"]
    assert study.meta["nih_labels"] == row["Finding Labels"].split("|")
    assert study.findings["Cardiomegaly"] == 1 and "Emphysema" not in study.findings
    assert study.positives() == ["Cardiomegaly"]
    assert study.patient_id == "1" and study.form == "2d" and Path(study.path).is_file()
    no_finding = [
        s for s in studies if table.loc[s.meta["image_index"], "Finding Labels"] == "No Finding"
    ]
    assert no_finding and all(not s.positives() for s in no_finding)
    assert all(v is None or v == 1 for s in studies for v in s.findings.values())


def test_resplit_removes_the_shipped_patient_leak() -> None:
    studies = load_nih(require_shared(NIH_DIR), seed=0, test_fraction=0.3)
    shipped: dict[str, set[str]] = {}
    fresh: dict[str, set[str]] = {}
    for s in studies:
        shipped.setdefault(s.patient_id, set()).add(s.meta["source_split"])
        fresh.setdefault(s.patient_id, set()).add(s.split)
    assert sum(len(v) > 1 for v in shipped.values()) == 30
    assert all(len(v) == 1 for v in fresh.values())
    n_test = sum(v == {"test"} for v in fresh.values())
    assert n_test == round(len(fresh) * 0.3)
    other = load_nih(NIH_DIR, seed=1)
    assert [s.split for s in other] != [s.split for s in studies]
    kept = load_nih(NIH_DIR, resplit_by_patient=False)
    assert [s.split for s in kept] == [s.meta["source_split"] for s in kept]


def test_boxes_are_scaled_from_the_1024_frame_to_the_stored_image() -> None:
    directory = require_shared(NIH_DIR)
    boxes = pd.read_csv(directory / "bboxes.csv")
    studies = {s.meta["image_index"]: s for s in load_nih(directory)}
    assert sum(len(s.boxes) for s in studies.values()) == len(boxes) == 9
    first = boxes.iloc[0]
    study = studies[first["Image Index"]]
    width, height = Image.open(study.path).size
    box = study.boxes[0]
    assert box.finding == "Atelectasis"
    assert box.x == pytest.approx(first["Bbox [x"] * width / 1024)
    assert box.h == pytest.approx(first["h]"] * height / 1024)
    assert all(b.x + b.w <= width and b.y + b.h <= height for b in study.boxes)
    infiltrate = [s for s in studies.values() if any(b.finding == "Lung Opacity" for b in s.boxes)]
    assert len(infiltrate) == 2  # "Infiltrate" boxes map through Infiltration


def test_official_layout_with_the_real_data_entry_table(tmp_path: Path) -> None:
    directory = require_shared(NIH_DIR)
    shutil.copy(XRV_DATA / "Data_Entry_2017_v2020.csv.gz", tmp_path)
    shutil.copy(XRV_DATA / "BBox_List_2017.csv.gz", tmp_path)
    names = ["00000001_000.png", "00000001_001.png", "00000032_037.png", "00000003_000.png"]
    (tmp_path / "images_001" / "images").mkdir(parents=True)
    for name in names:
        shutil.copy(directory / "images" / name, tmp_path / "images_001" / "images" / name)
    (tmp_path / "test_list.txt").write_text("00000003_000.png\n")
    studies = {s.meta["image_index"]: s for s in load_nih(tmp_path, resplit_by_patient=False)}
    assert sorted(studies) == sorted(names)
    assert studies["00000001_000.png"].findings["Cardiomegaly"] == 1
    assert studies["00000001_000.png"].meta["original_size"] == [2682, 2749]
    assert studies["00000003_000.png"].split == "test"
    assert studies["00000001_000.png"].split == "train"
    assert studies["00000032_037.png"].boxes, "the official BBox list has a box on this image"


def test_wrong_layouts_name_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match=r"Data_Entry_2017_v2020\.csv"):
        load_nih(tmp_path)
    pd.DataFrame({"Image Index": ["a.png"], "Finding Labels": ["Effusion"]}).to_csv(
        tmp_path / "labels.csv", index=False
    )
    with pytest.raises(EvidenceError, match="'Patient ID'"):
        load_nih(tmp_path)
    pd.DataFrame(
        {"Image Index": ["a.png"], "Finding Labels": ["Effusion"], "Patient ID": [1]}
    ).to_csv(tmp_path / "labels.csv", index=False)
    with pytest.raises(EvidenceError, match="no images/ folder"):
        load_nih(tmp_path)
    with pytest.raises(EvidenceError, match="not a folder"):
        load_nih(tmp_path / "missing")
