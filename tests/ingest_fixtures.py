"""Real-format fixtures for the ingest tests: DICOM films written with pydicom, PNG / JPEG
folders, a labels CSV and a JSONL manifest, with the odd cases a lab's archive has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

DX_CLASS = "1.2.840.10008.5.1.4.1.1.1.1"  # Digital X-Ray Image Storage - For Presentation
SR_CLASS = "1.2.840.10008.5.1.4.1.1.88.11"  # Basic Text SR
PATIENT_FOLDER = "DOE^JANE_MRN900042"


def film(
    path: Path,
    *,
    pixels: np.ndarray | None = None,
    side: int = 64,
    seed: int = 0,
    series_uid: str | None = None,
    study_uid: str | None = None,
    sop_uid: str | None = None,
    patient: str = "DOE^JANE",
    patient_id: str = "MRN900042",
    with_pixels: bool = True,
) -> Dataset:
    """Write one 16-bit single-frame DX film (or, with_pixels=False, an SR without pixels)."""
    ds = Dataset()
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds.file_meta.MediaStorageSOPClassUID = DX_CLASS if with_pixels else SR_CLASS
    ds.SOPInstanceUID = sop_uid or generate_uid()
    ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    ds.SOPClassUID = ds.file_meta.MediaStorageSOPClassUID
    ds.StudyInstanceUID = study_uid or generate_uid()
    ds.SeriesInstanceUID = series_uid or generate_uid()
    ds.PatientName, ds.PatientID = patient, patient_id
    ds.InstitutionName = "St Elsewhere General"
    ds.Modality = "DX" if with_pixels else "SR"
    if with_pixels:
        if pixels is None:
            pixels = np.random.default_rng(seed).integers(0, 4096, (side, side), dtype=np.uint16)
        ds.Rows, ds.Columns = pixels.shape
        ds.BitsAllocated, ds.BitsStored, ds.HighBit = 16, 12, 11
        ds.PixelRepresentation, ds.SamplesPerPixel = 0, 1
        ds.PhotometricInterpretation = "MONOCHROME2"
        ds.PixelData = np.ascontiguousarray(pixels, dtype=np.uint16).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(path, enforce_file_format=True)
    return ds


def image(path: Path, seed: int = 0, side: int = 24) -> Path:
    """A small greyscale PNG or JPEG (by suffix) with seeded content."""
    path.parent.mkdir(parents=True, exist_ok=True)
    array = np.random.default_rng(seed).integers(0, 255, (side, side), dtype=np.uint8)
    Image.fromarray(array).save(path)
    return path
