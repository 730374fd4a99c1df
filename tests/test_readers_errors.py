"""Bad uploads give one EvidenceError a clinician can read; identifying DICOM tags never leak."""

from __future__ import annotations

import gzip
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pydicom
import pytest
from nibabel.testing import data_path as NIBABEL_DATA
from pydicom.data import get_testdata_file

from medheb_app.evidence.file_study import study_from_file
from medheb_app.evidence.readers import read_any
from medheb_app.evidence.study import EvidenceError

IDENTIFYING = (
    "PatientName",
    "PatientID",
    "PatientBirthDate",
    "InstitutionName",
    "ReferringPhysicianName",
    "AccessionNumber",
    "StudyDate",
    "StudyInstanceUID",
    "SOPInstanceUID",
)


def dicom_file(name: str) -> Path:
    path = get_testdata_file(name, download=False)
    assert path is not None, f"pydicom test file {name} is not installed"
    return Path(path)


def expect_error(path: Path, match: str, max_bytes: int | None = None) -> str:
    with pytest.raises(EvidenceError, match=match) as caught:
        read_any(path, max_bytes=max_bytes)
    message = str(caught.value)
    assert "Traceback" not in message and "\n" not in message
    return message


def test_text_file_renamed_dcm(tmp_path: Path) -> None:
    fake = tmp_path / "scan.dcm"
    fake.write_text("Findings: no acute cardiopulmonary process.\n" * 20)
    expect_error(fake, r"^scan\.dcm is not a PNG, JPEG, DICOM or NIfTI file\.$")


def test_unknown_extension(tmp_path: Path) -> None:
    doc = tmp_path / "report.docx"
    doc.write_bytes(b"not an image at all")
    expect_error(doc, "not a PNG, JPEG, DICOM or NIfTI file")


def test_dicom_cut_in_half(tmp_path: Path) -> None:
    data = dicom_file("CT_small.dcm").read_bytes()
    cut = tmp_path / "cut.dcm"
    cut.write_bytes(data[: len(data) // 2])
    expect_error(cut, "damaged or truncated")


def test_zero_byte_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.png"
    empty.touch()
    expect_error(empty, r"empty \(0 bytes\)")


def test_empty_zip_and_zip_without_dicom(tmp_path: Path) -> None:
    with zipfile.ZipFile(tmp_path / "empty.zip", "w"):
        pass
    expect_error(tmp_path / "empty.zip", "empty.zip is empty")
    with zipfile.ZipFile(tmp_path / "notes.zip", "w") as archive:
        archive.writestr("notes.txt", "no images here")
    expect_error(tmp_path / "notes.zip", "contains no DICOM images")


def test_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "series").mkdir()
    expect_error(tmp_path / "series", "is empty")


def test_file_over_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    huge = tmp_path / "huge.dcm"
    with open(huge, "wb") as handle:  # sparse: 3 GB on paper, nothing on disk
        handle.truncate(3 * 1024**3)
    message = expect_error(huge, "limit", max_bytes=512 * 1024**2)
    assert message == "huge.dcm is 3.0 GB; the limit is 512 MB."


def test_small_file_over_a_tiny_limit() -> None:
    expect_error(dicom_file("CT_small.dcm"), r"CT_small\.dcm is 38 KB; the limit is 1 KB", 1024)


def test_zip_checked_on_unpacked_size(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as handle:
        handle.writestr("zeros.dcm", b"\0" * 2_000_000)
    assert archive.stat().st_size < 100_000
    expect_error(archive, r"bomb\.zip \(unpacked\) is 1\.9 MB", max_bytes=1_000_000)


def test_compressed_dicom_without_decoder_names_the_syntax() -> None:
    message = expect_error(dicom_file("JPEG-LL.dcm"), "no decoder for it is installed")
    assert "JPEG Lossless" in message


def test_dicom_without_pixel_data() -> None:
    expect_error(dicom_file("rtplan.dcm"), "without pixel data.*RT Plan Storage")
    expect_error(dicom_file("reportsi.dcm"), "without pixel data")


def test_truncated_pixel_data() -> None:
    expect_error(dicom_file("MR_truncated.dcm"), "damaged or truncated pixel data")


def test_zero_size_arrays(tmp_path: Path) -> None:
    np.save(tmp_path / "empty.npy", np.zeros((0, 64, 64), np.float32))
    expect_error(tmp_path / "empty.npy", "empty array")


def test_gzip_files_that_are_not_named_nifti(tmp_path: Path) -> None:
    volume = Path(NIBABEL_DATA) / "example4d.nii.gz"
    renamed = tmp_path / "volume.bin"
    renamed.write_bytes(volume.read_bytes())
    expect_error(renamed, r"volume\.bin is a NIfTI volume; name it \.nii or \.nii\.gz")
    packed = tmp_path / "slice.dcm.gz"
    packed.write_bytes(gzip.compress(dicom_file("CT_small.dcm").read_bytes()))
    expect_error(packed, r"slice\.dcm\.gz is gzip-compressed; unpack it first\.")
    broken = tmp_path / "broken.gz"
    broken.write_bytes(b"\x1f\x8b" + b"junk" * 10)
    expect_error(broken, "not a PNG, JPEG, DICOM or NIfTI file")


def test_missing_path(tmp_path: Path) -> None:
    expect_error(tmp_path / "nowhere.dcm", "does not exist")


@pytest.mark.parametrize("name", ["RG1_UNCI.dcm", "CT_small.dcm"])
def test_identifying_tags_never_reach_the_image_or_the_study(name: str, tmp_path: Path) -> None:
    path = dicom_file(name)
    ds = pydicom.dcmread(path, stop_before_pixels=True)
    secrets = [str(ds[k].value) for k in IDENTIFYING if k in ds and str(ds[k].value).strip()]
    assert len(secrets) >= 4, "the fixture should carry identifying tags to test against"
    loaded = read_any(path)
    study = study_from_file(path)
    surface = " ".join(
        [repr(loaded), repr(loaded.safe_meta), repr(study), json.dumps(study.meta, default=str)]
    )
    for secret in secrets:
        assert secret not in surface
    for keyword in IDENTIFYING:
        assert keyword not in loaded.safe_meta and keyword not in study.meta
    assert str(path.name) not in surface  # file names often carry patient names


def test_study_from_file_ids_follow_content(tmp_path: Path) -> None:
    first = study_from_file(dicom_file("CT_small.dcm"))
    again = study_from_file(dicom_file("CT_small.dcm"))
    other = study_from_file(dicom_file("MR_small.dcm"))
    assert first.id == again.id != other.id
    assert first.id.startswith("upload-")
    assert first.source == "upload" and first.form == "2d" and first.modality == "CT"
    assert first.pixels is not None and first.pixels.shape == (128, 128)
    assert first.meta["source_format"] == "dicom"
    volume = study_from_file(dicom_file("emri_small.dcm"))
    assert volume.form == "3d" and volume.evidence().volume is not None


def test_a_damaged_member_of_a_zip_is_skipped_and_logged_without_its_name(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A series zip with one member pydicom cannot parse still reads; the skip is logged (no
    silent except), and the log does not name the member, which may name a patient. pydicom is
    lenient with damaged headers, so its failure on the member is forced by a wrapper."""
    good = dicom_file("CT_small.dcm").read_bytes()
    damaged = good[:132] + b"DAMAGED"
    real_read = pydicom.dcmread

    def read(handle: io.BufferedIOBase, *args: object, **kwargs: object) -> object:
        start = handle.tell()
        if handle.read(139)[132:139] == b"DAMAGED":
            raise ValueError("unexpected end of file in element (0008,0005)")
        handle.seek(start)
        return real_read(handle, *args, **kwargs)

    monkeypatch.setattr(pydicom, "dcmread", read)
    archive = tmp_path / "series.zip"
    with zipfile.ZipFile(archive, "w") as handle:
        handle.writestr("slice1.dcm", good)
        handle.writestr("DOE_JANE_slice2.dcm", damaged)
    with caplog.at_level("WARNING", logger="medheb_app.evidence.dicom"):
        loaded = read_any(archive)
    assert loaded.pixels.size > 0
    skipped = [r.getMessage() for r in caplog.records if "damaged DICOM member" in r.getMessage()]
    assert skipped == ["skipped a damaged DICOM member of an upload (ValueError)"]
