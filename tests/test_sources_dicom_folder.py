"""DICOM folder adapter on real pydicom files mixed with a slice series, junk and a damaged file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pydicom
import pytest
from pydicom.data import get_testdata_file

from medheb_app.evidence.pixels import normalise
from medheb_app.evidence.sources.dicom_folder import load_dicom_folder
from medheb_app.evidence.study import EvidenceError
from tests.test_readers_formats import _write_series


def real(name: str) -> Path:
    path = get_testdata_file(name, download=False)
    assert path is not None
    return Path(path)


def test_folder_groups_series_and_keeps_no_identifiers(tmp_path: Path) -> None:
    root = tmp_path / "export"
    frames = _write_series(root / "patient_a" / "series_1")
    (root / "misc").mkdir()
    for name in ("CT_small.dcm", "emri_small.dcm", "reportsi.dcm", "MR_truncated.dcm"):
        shutil.copy(real(name), root / "misc" / name)
    (root / "misc" / "notes.txt").write_text("not dicom")
    result = load_dicom_folder(root)
    by_files = sorted((s.meta["files"], s.form, s.modality) for s in result.studies)
    # headers only so far: the truncated MR is a study until its pixels are decoded
    assert by_files == [(1, "2d", "CT"), (1, "2d", "MR"), (1, "3d", "MR"), (10, "3d", "MR")]
    assert all(s.pixels is None for s in result.studies)
    reasons = sorted((f["item"], f["reason"]) for f in result.failed)
    assert reasons == [
        ("misc/notes.txt", "not an image"),
        ("misc/reportsi.dcm", "no pixel data"),
        ("patient_a/series_1/README.txt", "not an image"),
    ]
    assert result.files_seen == 16  # 10 slices + README, 4 DICOM files + notes.txt
    truncated = next(s for s in result.studies if s.meta["relative_path"].endswith("truncated.dcm"))
    with pytest.raises(EvidenceError, match="damaged or truncated pixel data"):
        truncated.load_pixels()
    series = next(s for s in result.studies if s.meta["files"] == 10)
    np.testing.assert_allclose(
        series.load_pixels(), normalise(frames.astype(np.float32)), atol=1e-6
    )
    ct = next(s for s in result.studies if s.modality == "CT")
    emri = next(s for s in result.studies if s.meta["files"] == 1 and s.form == "3d")
    assert {s.patient_id for s in result.studies} == {"patient-1", "patient-2", "patient-3"}
    assert ct.patient_id != series.patient_id
    assert emri.patient_id == series.patient_id  # same (empty) PatientID, same pseudonym
    surface = repr(result)
    for name in ("CT_small.dcm", "emri_small.dcm"):
        ds = pydicom.dcmread(real(name), stop_before_pixels=True)
        for keyword in ("PatientName", "PatientID", "InstitutionName", "StudyInstanceUID"):
            value = str(ds.get(keyword, "") or "")
            if value:
                assert value not in surface
    again = load_dicom_folder(root)
    assert [s.id for s in again.studies] == [s.id for s in result.studies]


def test_folder_without_dicom_and_size_limit(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    with pytest.raises(EvidenceError, match="contains no DICOM images"):
        load_dicom_folder(tmp_path)
    shutil.copy(real("CT_small.dcm"), tmp_path)
    with pytest.raises(EvidenceError, match="the limit is 1 KB"):
        load_dicom_folder(tmp_path, max_bytes=1024)
    with pytest.raises(EvidenceError, match="not a folder"):
        load_dicom_folder(tmp_path / "CT_small.dcm")
