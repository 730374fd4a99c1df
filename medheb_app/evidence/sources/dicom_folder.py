"""A folder of DICOM files (any depth, any naming) -> one Study per series, de-identified.

Headers are read first (without pixels) to group files by SeriesInstanceUID; each series of
single-frame slices becomes one volume (sorted along the slice normal by the readers), and
each multi-frame file or lone image its own Study. No identifying tag is kept: patients and
studies get pseudonyms ("patient-1", "study-1") in order of first appearance in the folder, so
patient-level splits and same-study pairing still work. Files that are not DICOM images are
ignored; series that cannot be read are reported in `skipped`, not silently dropped.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pydicom

from medheb_app.evidence.dicom import image_from_dataset, volume_from_datasets
from medheb_app.evidence.pixels import LoadedImage, check_size
from medheb_app.evidence.sources.layout import require_dir
from medheb_app.evidence.study import EvidenceError, Study


@dataclass
class DicomFolder:
    studies: list[Study] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # one readable reason per unreadable series


@dataclass
class _Header:
    path: Path
    series: str
    study: str
    patient: str
    frames: int


def _headers(directory: Path) -> list[_Header]:
    headers = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        with open(path, "rb") as handle:
            if handle.read(132)[128:132] != b"DICM":
                continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = pydicom.dcmread(path, stop_before_pixels=True)
        except Exception:  # a damaged header: the file cannot join any series
            continue
        if "Rows" not in ds:  # DICOMDIR, structured reports, presentation states
            continue
        headers.append(
            _Header(
                path=path,
                series=str(ds.get("SeriesInstanceUID", "") or path),
                study=str(ds.get("StudyInstanceUID", "") or ""),
                patient=str(ds.get("PatientID", "") or ""),
                frames=int(ds.get("NumberOfFrames", 1) or 1),
            )
        )
    return headers


def _pseudonym(mapping: dict[str, str], key: str, prefix: str) -> str:
    if key not in mapping:
        mapping[key] = f"{prefix}-{len(mapping) + 1}"
    return mapping[key]


def _load(paths: list[Path], name: str) -> LoadedImage:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        datasets = [pydicom.dcmread(p) for p in paths]
    if len(datasets) == 1:
        return image_from_dataset(datasets[0], name)
    return volume_from_datasets(datasets, name)


def load_dicom_folder(directory: Path | str, max_bytes: int | None = None) -> DicomFolder:
    """Every image series under `directory` as a Study (pixels loaded, meta allowlisted)."""
    directory = require_dir(directory, "DICOM")
    check_size(
        directory.name,
        sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()),
        max_bytes,
    )
    headers = _headers(directory)
    if not headers:
        raise EvidenceError(f"{directory.name} contains no DICOM images.")
    series: dict[str, list[_Header]] = {}
    for header in headers:
        series.setdefault(header.series, []).append(header)
    patients: dict[str, str] = {}
    studies: dict[str, str] = {}
    result = DicomFolder()
    for uid, members in series.items():
        # A series of multi-frame files is several volumes, not one stack of slices.
        groups = [[m] for m in members] if any(m.frames > 1 for m in members) else [members]
        for group in groups:
            label = f"series {len(result.studies) + len(result.skipped) + 1}"
            try:
                loaded = _load([m.path for m in group], label)
            except EvidenceError as error:
                result.skipped.append(str(error))
                continue
            key = uid if len(groups) == 1 else f"{uid}/{group[0].path.name}"
            first = group[0]
            meta: dict[str, object] = {
                **loaded.safe_meta,
                "source_format": loaded.source_format,
                "study_key": _pseudonym(studies, first.study, "study"),
                "files": len(group),
            }
            if loaded.spacing is not None:
                meta["spacing"] = list(loaded.spacing)
            result.studies.append(
                Study(
                    id=f"dicom-{hashlib.sha256(key.encode()).hexdigest()[:16]}",
                    form=loaded.form,
                    modality=loaded.modality,
                    pixels=loaded.pixels,
                    patient_id=_pseudonym(patients, first.patient, "patient"),
                    source="dicom-folder",
                    meta=meta,
                )
            )
    return result
