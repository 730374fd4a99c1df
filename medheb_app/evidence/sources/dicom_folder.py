"""A folder of DICOM files (any depth, any naming) -> one Study per series, de-identified, streamed.

Headers only are read first (pydicom `stop_before_pixels`, one file at a time, with progress
lines) to group files by SeriesInstanceUID; each series of single-frame slices becomes one
volume (sorted along the slice normal by the readers), and each multi-frame file or lone image
its own Study. No pixel is decoded here: a DicomStudy decodes its own files when the build
embeds its batch (Study.load_pixels) and reduced at once: to the embedder's own input size
by the embedder's own resize where it declares one (`input_side`, dual-lite 224: the vectors
are those of decoding the full film first), else by block means to at most WORKING_SIDE
pixels a side. The build drops the pixels after the batch, so peak memory stays at a batch of
films whatever the size of the archive (bench/bench_dicom_stream.py, BENCHMARKS.md).

Every file the folder holds is accounted for: it joins a Study, or `failed` says why not (not
an image, no pixel data, duplicate instance, unreadable). No identifying tag is kept on a
Study: patients and studies get pseudonyms ("patient-1", "study-1") in order of first
appearance, and the item id is a keyed pseudonym of its series (index/provenance.py). The
UIDs and file names live only in `references`, which the build writes to the server-side
source-reference table.
"""

from __future__ import annotations

import hashlib
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pydicom

from medheb_app.evidence.dicom import image_from_dataset, volume_from_datasets
from medheb_app.evidence.pixels import LoadedImage, check_size
from medheb_app.evidence.sources.layout import require_dir
from medheb_app.evidence.study import EvidenceError, Study

# Longest side a decoded image keeps (integer block means, so it stays >= this) for an embedder
# that declares no input size: above every shipped model's input (MedEmb-lite <= 1024), 4 MB
# of float32 for a 2048x2048 film instead of 16 MB.
WORKING_SIDE = 1024
HEADER_PROGRESS_EVERY = 500  # files between two "DICOM headers read" lines
# Failure reasons of failed.jsonl (the build summary counts them).
NOT_AN_IMAGE = "not an image"
NO_PIXEL_DATA = "no pixel data"
DUPLICATE = "duplicate instance"
UNREADABLE = "unreadable"

Progress = Callable[[str], None]
Namer = Callable[[str], str]


@dataclass
class DicomStudy(Study):
    """A Study whose pixels are decoded from its DICOM files on demand (and dropped after)."""

    files: tuple[str, ...] = field(default=(), repr=False)  # absolute paths, slice order later
    content_digest: str = field(default="", repr=False)  # SOP instances + sizes (cache key)
    working_side: int = WORKING_SIDE
    # the embedder's square input (dual-lite 224), set by the build: the decoded pixels are
    # fitted to it by the model's own resize (evidence/resize.py) instead of block means
    input_side: int | None = None

    @property
    def reloadable(self) -> bool:
        return True

    @property
    def fit_key(self) -> str:
        """How the pixels are reduced, for the cache key: a vector of one fit is not another's."""
        return f"fit-{self.input_side}" if self.input_side else str(self.working_side)

    def load_pixels(self) -> np.ndarray | None:
        if self.pixels is None and self.files:
            loaded = decode_files([Path(f) for f in self.files], self.meta.get("label", self.id))
            self.pixels = self._fit(loaded.pixels)
        return self.pixels

    def _fit(self, pixels: np.ndarray) -> np.ndarray:
        if not self.input_side:
            return downsample(pixels, self.working_side)
        # deferred: torch (only an embedder that declares its input size sets it)
        from medheb_app.evidence.resize import fit_image, fit_volume

        if self.form == "3d":
            return fit_volume(pixels, self.input_side)
        return fit_image(pixels, self.input_side)


@dataclass
class DicomFolder:
    studies: list[Study] = field(default_factory=list)
    # {"item": path relative to the folder, "reason": one of the reasons above, "detail"}
    failed: list[dict[str, str]] = field(default_factory=list)
    # item id -> {"kind": "dicom", "relative_path", "files", "study_uid", "series_uid",
    # "instance_uids"}; server-side only (store/source_refs.py), never in an index folder
    references: dict[str, dict[str, object]] = field(default_factory=dict, repr=False)
    files_seen: int = 0


@dataclass
class _Header:
    path: Path
    relative: str
    series: str
    study: str
    patient: str
    instance: str
    frames: int
    size: int
    modality: str


def downsample(pixels: np.ndarray, side: int) -> np.ndarray:
    """Integer block means over the in-plane axes until the longest side is < 2 x `side`
    (a 2048x2048 film -> 1024x1024); an image already that small is returned as it is."""
    in_plane = pixels.shape[-2:] if pixels.ndim == 2 or pixels.shape[-1] != 3 else pixels.shape[:2]
    factor = max(1, max(in_plane) // side)
    if factor == 1:
        return pixels
    if pixels.ndim == 3 and pixels.shape[-1] == 3:  # (H, W, 3) colour
        h, w = (pixels.shape[0] // factor) * factor, (pixels.shape[1] // factor) * factor
        blocks = pixels[:h, :w].reshape(h // factor, factor, w // factor, factor, 3)
        return blocks.mean(axis=(1, 3), dtype=np.float32)
    h, w = (pixels.shape[-2] // factor) * factor, (pixels.shape[-1] // factor) * factor
    lead = pixels.shape[:-2]
    blocks = pixels[..., :h, :w].reshape(*lead, h // factor, factor, w // factor, factor)
    return blocks.mean(axis=(-3, -1), dtype=np.float32)


def decode_files(paths: list[Path], name: str) -> LoadedImage:
    """The image or volume of one Study's files, pixels decoded now."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            datasets = [pydicom.dcmread(p) for p in paths]
    except Exception as error:  # pydicom raises many types on damaged files
        raise EvidenceError(f"{name} is a damaged DICOM file ({error}).") from None
    if len(datasets) == 1:
        return image_from_dataset(datasets[0], name)
    return volume_from_datasets(datasets, name)


def _read_header(path: Path, relative: str) -> _Header | tuple[str, str]:
    """The file's header without its pixels, or (reason, detail) why it joins no series."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            if handle.read(132)[128:132] != b"DICM":
                return NOT_AN_IMAGE, "not a DICOM file"
            handle.seek(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = pydicom.dcmread(handle, stop_before_pixels=True)
            # stop_before_pixels leaves the file at the pixel data tag (7FE0,xxxx), if any
            tag = handle.read(2)
    except Exception:  # pydicom raises many types; failed.jsonl says it in words, no class name
        return UNREADABLE, "damaged DICOM header"
    has_pixels = tag in (b"\xe0\x7f", b"\x7f\xe0")
    if not any(k in ds for k in ("SOPClassUID", "Modality", "Rows")):  # pydicom is lenient
        return UNREADABLE, "damaged or truncated DICOM header"
    if not has_pixels:
        kind = getattr(getattr(ds, "SOPClassUID", None), "name", "") or "non-image object"
        return NO_PIXEL_DATA, f"DICOM without pixel data ({kind})"
    if "Rows" not in ds or "Columns" not in ds:
        return UNREADABLE, "pixel data without Rows / Columns"
    return _Header(
        path=path,
        relative=relative,
        series=str(ds.get("SeriesInstanceUID", "") or ""),
        study=str(ds.get("StudyInstanceUID", "") or ""),
        patient=str(ds.get("PatientID", "") or ""),
        instance=str(ds.get("SOPInstanceUID", "") or ""),
        frames=int(ds.get("NumberOfFrames", 1) or 1),
        size=size,
        modality=str(ds.get("Modality", "") or "OT"),
    )


def _pseudonym(mapping: dict[str, str], key: str, prefix: str) -> str:
    if key not in mapping:
        mapping[key] = f"{prefix}-{len(mapping) + 1}"
    return mapping[key]


def _default_namer(reference: str) -> str:
    """Unkeyed ids for callers without a key (tests, previews); builds pass a keyed namer."""
    return f"dicom-{hashlib.sha256(reference.encode()).hexdigest()[:16]}"


def read_headers(
    directory: Path,
    progress: Progress | None = None,
    skip: frozenset[Path] = frozenset(),
) -> tuple[list[_Header], list[dict[str, str]], int]:
    """Every file's header (no pixels) in path order, the files that are no image and why,
    and how many files were seen; a progress line every HEADER_PROGRESS_EVERY files."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p not in skip)
    headers: list[_Header] = []
    failed: list[dict[str, str]] = []
    seen_instances: dict[str, str] = {}
    started = time.perf_counter()
    for number, path in enumerate(files, start=1):
        relative = path.relative_to(directory).as_posix()
        header = _read_header(path, relative)
        if isinstance(header, tuple):
            failed.append({"item": relative, "reason": header[0], "detail": header[1]})
        elif header.instance and header.instance in seen_instances:
            first = seen_instances[header.instance]
            failed.append(
                {"item": relative, "reason": DUPLICATE, "detail": f"same SOPInstanceUID as {first}"}
            )
        else:
            if header.instance:
                seen_instances[header.instance] = relative
            headers.append(header)
        if progress and (number % HEADER_PROGRESS_EVERY == 0 or number == len(files)):
            rate = number / max(time.perf_counter() - started, 1e-6)
            progress(f"DICOM headers read: {number:,} of {len(files):,} files ({rate:.0f}/s)")
    return headers, failed, len(files)


def load_dicom_folder(
    directory: Path | str,
    max_bytes: int | None = None,
    namer: Namer | None = None,
    progress: Progress | None = None,
    skip: frozenset[Path] = frozenset(),
) -> DicomFolder:
    """Every image series under `directory` as a DicomStudy (headers read, pixels not yet),
    ids from `namer(series reference)`; files in `skip` (a labels CSV) are not the archive's."""
    directory = require_dir(directory, "DICOM")
    name_of = namer or _default_namer
    check_size(
        directory.name,
        sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()),
        max_bytes,
    )
    headers, failed, seen = read_headers(directory, progress, skip)
    if not headers:
        raise EvidenceError(f"{directory.name} contains no DICOM images ({len(failed)} files).")
    series: dict[str, list[_Header]] = {}
    for header in headers:
        series.setdefault(header.series or f"file:{header.relative}", []).append(header)
    patients: dict[str, str] = {}
    studies: dict[str, str] = {}
    result = DicomFolder(failed=failed, files_seen=seen)
    for uid, members in series.items():
        # A series of multi-frame files is several volumes, not one stack of slices.
        groups = [[m] for m in members] if any(m.frames > 1 for m in members) else [members]
        names = [g[0].path.name for g in groups]
        for group in groups:
            first = group[0]
            # Ids as before for each series (keyed now); a multi-frame file by its name in the
            # series, or by its relative path when two files of the series share a name.
            if len(groups) == 1:
                reference = uid
            elif names.count(first.path.name) == 1:
                reference = f"{uid}/{first.path.name}"
            else:
                reference = f"{uid}/{first.relative}"
            item_id = name_of(reference)
            if item_id in result.references:
                raise EvidenceError(
                    f"Two series of {directory.name} got the same item id {item_id}; "
                    "nothing was merged. Report this: it should not happen."
                )
            digest = hashlib.sha1()
            for member in group:
                digest.update(f"{member.instance}:{member.size}\n".encode())
            result.studies.append(
                DicomStudy(
                    id=item_id,
                    form="3d" if len(group) > 1 or first.frames > 1 else "2d",
                    modality=first.modality,
                    patient_id=_pseudonym(patients, first.patient, "patient"),
                    source="dicom-folder",
                    meta={
                        "study_key": _pseudonym(studies, first.study, "study"),
                        "files": len(group),
                        "label": f"series {len(result.studies) + 1}",
                        "relative_path": first.relative,  # failed.jsonl only, never metadata
                        "pseudonymous": True,
                    },
                    files=tuple(str(m.path) for m in group),
                    content_digest=digest.hexdigest(),
                )
            )
            result.references[item_id] = {
                "kind": "dicom",
                "relative_path": first.relative,
                "files": [m.relative for m in group],
                "study_uid": first.study,
                "series_uid": first.series,
                "instance_uids": [m.instance for m in group],
            }
    return result
