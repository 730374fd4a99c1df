"""DICOM reading: single and multi-frame files, series folders and zips, with de-identification.

Stored values go through the Modality LUT (RescaleSlope/Intercept, per frame for enhanced
multi-frame files) before windowing. Only allowlisted, non-identifying tags leave this module.
"""

from __future__ import annotations

import functools
import io
import logging
import warnings
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np

from medheb_app.evidence.budget import (
    MAX_DECODE_VOXELS,
    check_declared,
    decoding,
    inflate_capped,
    kept_positions,
)
from medheb_app.evidence.pixels import (
    EvidenceError,
    LoadedImage,
    check_size,
    normalise,
    not_an_image,
    reason_of,
    to_unit_range,
)

# Allowlist, never a blocklist: a tag not named here is never copied out of a DICOM file.
SAFE_TAGS: tuple[str, ...] = (
    "Modality",
    "BodyPartExamined",
    "ViewPosition",
    "ImageType",
    "Rows",
    "Columns",
    "NumberOfFrames",
    "SamplesPerPixel",
    "BitsStored",
    "PhotometricInterpretation",
    "PixelSpacing",
    "ImagerPixelSpacing",
    "SliceThickness",
    "SpacingBetweenSlices",
    "WindowCenter",
    "WindowWidth",
    "RescaleSlope",
    "RescaleIntercept",
    "Manufacturer",
    "ManufacturerModelName",
    "MagneticFieldStrength",
    "KVP",
)
_FUNCTIONAL_GROUPS = ("SharedFunctionalGroupsSequence", "PerFrameFunctionalGroupsSequence")

log = logging.getLogger(__name__)


def _find(ds: object, keyword: str) -> object | None:
    """A tag from the top level, else from an enhanced file's functional groups (first frame)."""
    value = getattr(ds, keyword, None)
    if value is not None:
        return value
    for group_name in _FUNCTIONAL_GROUPS:
        groups = getattr(ds, group_name, None)
        if not groups:
            continue
        for macro in groups[0]:
            if macro.VR == "SQ" and macro.value:
                value = getattr(macro.value[0], keyword, None)
                if value is not None:
                    return value
    return None


def _plain(value: object) -> object:
    """pydicom values (DSfloat, IS, MultiValue, UID) -> JSON-friendly Python values."""
    if isinstance(value, str | bytes):
        return str(value)
    if isinstance(value, Iterable):
        return [_plain(v) for v in value]
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def safe_meta_of(ds: object) -> dict[str, object]:
    """The allowlisted, non-identifying tags of a dataset (functional groups included)."""
    meta: dict[str, object] = {}
    for keyword in SAFE_TAGS:
        value = _find(ds, keyword)
        if value is not None and value != "":
            meta[keyword] = _plain(value)
    syntax = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
    if syntax is not None:
        meta["TransferSyntax"] = syntax.name
    return meta


def _first_float(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        return float(value)  # type: ignore[arg-type]
    values = list(value)
    return float(values[0]) if values else None


def _window_of(ds: object) -> tuple[float, float] | None:
    center, width = _first_float(_find(ds, "WindowCenter")), _first_float(_find(ds, "WindowWidth"))
    if center is None or width is None or width <= 0:
        return None
    return center, width


def _read_deflated(data: bytes, name: str) -> object | None:
    """A Deflated Explicit VR Little Endian file (PS3.5 A.5) read with its inflation capped,
    or None for any other file. pydicom would inflate the whole dataset at once, before any
    size is known (a 196 KB file reached 5.27 GB): here the dataset is inflated only up to the
    decode budget's bytes, then parsed as the explicit VR little endian data it is."""
    import pydicom
    from pydicom import uid
    from pydicom.filereader import read_preamble

    if data[128:132] != b"DICM":
        return None
    stream = io.BytesIO(data)
    read_preamble(stream, False)
    meta = pydicom.filereader._read_file_meta_info(stream)
    if meta.get("TransferSyntaxUID") != uid.DeflatedExplicitVRLittleEndian:
        return None
    cap = MAX_DECODE_VOXELS * 4 + 16 * 2**20  # the largest budgeted pixels, plus headers
    body = inflate_capped(stream.read(), cap, name)
    ds = pydicom.dcmread(io.BytesIO(body), force=True)
    meta.TransferSyntaxUID = uid.ExplicitVRLittleEndian
    ds.file_meta = meta
    return ds


def declared_values(ds: object) -> tuple[int, int, int]:
    """(values per frame, frames, rows x columns) a dataset's header declares."""
    rows, columns = int(getattr(ds, "Rows", 0) or 0), int(getattr(ds, "Columns", 0) or 0)
    samples = int(getattr(ds, "SamplesPerPixel", 1) or 1)
    frames = int(getattr(ds, "NumberOfFrames", 1) or 1)
    return rows * columns * samples, max(frames, 1), rows * columns


def _parse_dicom(data: bytes, name: str, force: bool = False) -> object:
    """Parse a DICOM byte string; any parser failure becomes one readable EvidenceError."""
    import pydicom
    from pydicom import uid
    from pydicom.errors import InvalidDicomError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydicom warns about every tolerated deviation
            ds = _read_deflated(data, name) or pydicom.dcmread(io.BytesIO(data), force=force)
    except EvidenceError:
        raise
    except InvalidDicomError:
        raise not_an_image(name) from None
    except Exception as error:  # pydicom raises many types on damaged files
        raise EvidenceError(
            f"{name} is a damaged or truncated DICOM file and cannot be read ({reason_of(error)})."
        ) from None
    if force and not any(k in ds for k in ("PixelData", "SOPClassUID", "Modality", "Rows")):
        raise not_an_image(name)
    if "TransferSyntaxUID" not in ds.file_meta:  # written without a file meta header
        implicit, little = ds.original_encoding
        ds.file_meta.TransferSyntaxUID = (
            uid.ImplicitVRLittleEndian
            if implicit
            else uid.ExplicitVRLittleEndian
            if little
            else uid.ExplicitVRBigEndian
        )
    return ds


def _pixels_of(ds: object, name: str, frames: list[int] | None = None) -> np.ndarray:
    """Decoded stored values (of the `frames` listed, else all), with one clear error for no
    pixels, no decoder, damage, or a frame over the decode budget (checked on the header,
    before anything is decoded)."""
    from pydicom.pixels import get_decoder

    if not any(k in ds for k in ("PixelData", "FloatPixelData", "DoubleFloatPixelData")):
        kind = getattr(getattr(ds, "SOPClassUID", None), "name", "") or "non-image object"
        raise EvidenceError(f"{name} is a DICOM file without pixel data (it is a {kind}).")
    syntax = getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", None)
    if syntax is not None and syntax.is_compressed:
        try:
            decoder = get_decoder(syntax)
        except NotImplementedError:
            decoder = None
        if decoder is None or not decoder.is_available:
            needs = "; ".join(decoder.missing_dependencies) if decoder else "no known decoder"
            raise EvidenceError(
                f"{name} is compressed as {syntax.name} and no decoder for it is installed "
                f"({needs}). Export it uncompressed or install a decoder."
            )
    per_frame, n_frames, _ = declared_values(ds)
    check_declared(name, "one frame this large", per_frame)
    try:
        if frames is None or len(frames) == n_frames:
            return np.asarray(ds.pixel_array)
        from pydicom.pixels import pixel_array

        return np.stack([np.asarray(pixel_array(ds, index=i)) for i in frames])
    except Exception as error:
        raise EvidenceError(
            f"{name} has damaged or truncated pixel data and cannot be shown ({reason_of(error)})."
        ) from None


def _rescale(
    stored: np.ndarray, ds: object, n_frames: int, frames: list[int] | None = None
) -> np.ndarray:
    """Modality LUT: stored values -> calibrated values (HU for CT), per frame when enhanced."""
    from pydicom.pixels import apply_modality_lut

    if "ModalityLUTSequence" in ds:
        return np.asarray(apply_modality_lut(stored, ds), dtype=np.float32)
    values = stored.astype(np.float32)
    per_frame = getattr(ds, "PerFrameFunctionalGroupsSequence", None)
    if per_frame and n_frames > 1 and len(per_frame) == n_frames:
        chosen = frames if frames is not None else range(n_frames)
        for index, item in enumerate(per_frame[i] for i in chosen):
            slope, intercept = _find(item, "RescaleSlope"), _find(item, "RescaleIntercept")
            if slope is None and intercept is None:
                slope, intercept = _find(ds, "RescaleSlope"), _find(ds, "RescaleIntercept")
            values[index] = values[index] * float(slope or 1.0) + float(intercept or 0.0)
        return values
    slope, intercept = _find(ds, "RescaleSlope"), _find(ds, "RescaleIntercept")
    return values * float(slope or 1.0) + float(intercept or 0.0)


def _to_greyscale(rgb: np.ndarray) -> np.ndarray:
    return rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114


def _pixel_spacing(ds: object) -> tuple[float, float] | None:
    spacing = _find(ds, "PixelSpacing") or _find(ds, "ImagerPixelSpacing")
    if spacing is None or len(spacing) != 2:  # type: ignore[arg-type]
        return None
    rows, columns = float(spacing[0]), float(spacing[1])  # type: ignore[index]
    return (rows, columns) if rows > 0 and columns > 0 else None  # some CRs store 0\0


def read_dicom_bytes(data: bytes, name: str, force: bool = False) -> LoadedImage:
    return image_from_dataset(_parse_dicom(data, name, force=force), name)


def image_from_dataset(ds: object, name: str) -> LoadedImage:
    """One parsed DICOM dataset (single or multi-frame) -> LoadedImage. Frames beyond the
    decode budget are sampled uniformly (only those are decoded) and the meta says so."""
    per_frame, declared_frames, _ = declared_values(ds)
    kept = kept_positions(declared_frames, per_frame)
    with decoding(per_frame * len(kept)):
        return _image_from_dataset(ds, name, kept if len(kept) < declared_frames else None)


def _image_from_dataset(ds: object, name: str, frames: list[int] | None) -> LoadedImage:
    stored = _pixels_of(ds, name, frames)
    modality = str(getattr(ds, "Modality", "") or "OT")
    photometric = str(getattr(ds, "PhotometricInterpretation", "MONOCHROME2"))
    n_frames = int(getattr(ds, "NumberOfFrames", 1) or 1)
    meta = safe_meta_of(ds)
    if frames is not None:
        meta["NumberOfFrames"], meta["FramesKept"] = n_frames, len(frames)
    if photometric == "PALETTE COLOR":
        from pydicom.pixels import apply_color_lut

        stored, photometric = apply_color_lut(stored, ds), "RGB"
    colour = int(getattr(ds, "SamplesPerPixel", 1) or 1) == 3 or photometric == "RGB"
    if colour:
        values = stored.astype(np.float32)
        if n_frames > 1:
            values = _to_greyscale(values)  # a cine loop becomes a greyscale (D, H, W) volume
        pixels = normalise(values, (0.0, 100.0))
        if pixels.ndim == 3 and pixels.shape[-1] == 3 and n_frames == 1:
            same = np.allclose(pixels[..., 0], pixels[..., 1]) and np.allclose(
                pixels[..., 0], pixels[..., 2]
            )
            pixels = pixels[..., 0] if same else pixels
    else:
        values = _rescale(stored, ds, n_frames, frames)
        pixels = to_unit_range(values, modality, photometric, _window_of(ds))
    if pixels.size == 0:
        raise EvidenceError(f"{name} contains an empty image (shape {pixels.shape}).")
    in_plane = _pixel_spacing(ds)
    if n_frames > 1:
        between = _first_float(_find(ds, "SpacingBetweenSlices") or _find(ds, "SliceThickness"))
        spacing = (between, *in_plane) if in_plane and between else None
        return LoadedImage(pixels, "3d", modality, spacing, meta, "dicom")
    return LoadedImage(pixels, "2d", modality, in_plane, meta, "dicom")


def _slice_order(datasets: list[object]) -> list[int]:
    """Order by position along the slice normal (IPP . (row x col)), else by InstanceNumber."""
    try:
        positions = []
        for ds in datasets:
            orientation = np.asarray(_find(ds, "ImageOrientationPatient"), dtype=float)
            normal = np.cross(orientation[:3], orientation[3:])
            positions.append(float(np.dot(np.asarray(_find(ds, "ImagePositionPatient")), normal)))
        return list(np.argsort(positions, kind="stable"))
    except (TypeError, ValueError, IndexError):
        numbers = [int(getattr(ds, "InstanceNumber", 0) or 0) for ds in datasets]
        return list(np.argsort(numbers, kind="stable"))


def volume_from_datasets(datasets: list[object], name: str) -> LoadedImage:
    """Stack single-frame slices of one series into a (D, H, W) volume in slice order."""
    if not datasets:
        raise EvidenceError(f"{name} contains no DICOM images.")
    if len(datasets) == 1:
        return image_from_dataset(datasets[0], name)
    ordered = [datasets[i] for i in _slice_order(datasets)]
    slices = []
    for ds in ordered:
        stored = _pixels_of(ds, name)
        if stored.ndim != 2:
            raise EvidenceError(
                f"{name} mixes multi-frame or colour images into a slice series; "
                "upload one series of single-frame greyscale slices."
            )
        slices.append(_rescale(stored, ds, 1))
    shapes = {s.shape for s in slices}
    if len(shapes) > 1:
        raise EvidenceError(f"{name} has slices of different sizes {sorted(shapes)}.")
    first = ordered[0]
    modality = str(getattr(first, "Modality", "") or "OT")
    photometric = str(getattr(first, "PhotometricInterpretation", "MONOCHROME2"))
    pixels = to_unit_range(np.stack(slices), modality, photometric, _window_of(first))
    spacing = None
    in_plane = _pixel_spacing(first)
    positions = [_find(ds, "ImagePositionPatient") for ds in ordered]
    if in_plane and all(p is not None for p in positions):
        steps = np.linalg.norm(np.diff(np.asarray(positions, dtype=float), axis=0), axis=1)
        spacing = (float(np.median(steps)), *in_plane)
    meta = safe_meta_of(first)
    meta["NumberOfSlices"] = len(ordered)
    return LoadedImage(pixels, "3d", modality, spacing, meta, "dicom-series")


# A series upload (zip or folder) is read under a memory budget: members are streamed one at
# a time (headers first, then only the slices kept), never held all at once, so four parallel
# 480 MB zips keep the app under 2.5 GB (bench/bench_upload_rss.py, BENCHMARKS.md).
MAX_SERIES_MEMBERS = 4096
# Headers a series upload reads at most: an evenly spaced sample of its files beyond that
# (the embedders read 64 frames of a volume; MAX_VOLUME_BYTES keeps 64 slices of 512x512).
# Reading every header cost an anonymous caller's 1.4 MB zip of 3,000 deflated slices 16 s of
# CPU, and four at once slowed every other visitor (found by the adversarial pass).
MAX_SERIES_HEADERS = 256
# float32 voxels kept of one series (64 slices of 512x512); a longer series is sampled
# uniformly along the slice order (the embedders read 64 frames of it anyway) and the upload
# says how many were kept.
MAX_VOLUME_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class _Member:
    """One file of a series upload: its name, declared size and how to open it."""

    name: str
    size: int
    open: Callable[[], IO[bytes]]


def _series_members(path: Path, max_bytes: int | None) -> list[_Member]:
    """Every file of a folder (recursive) or a .zip, refused early when too many or too big.

    Nothing is decompressed here: the zip's declared sizes are checked against max_bytes
    (zipfile never decodes more than a member's declared size), so a zip bomb is refused
    before any byte of it is inflated."""
    kind = "folder" if path.is_dir() else "zip file"
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        members = [
            _Member(str(p.relative_to(path)), p.stat().st_size, functools.partial(open, p, "rb"))
            for p in files
        ]
    else:
        try:
            archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile:
            raise EvidenceError(f"{path.name} is a damaged zip file.") from None
        infos = [i for i in archive.infolist() if not i.is_dir() and "__MACOSX" not in i.filename]
        members = [
            _Member(i.filename, i.file_size, functools.partial(archive.open, i)) for i in infos
        ]
    if len(members) > MAX_SERIES_MEMBERS:
        raise EvidenceError(
            f"The {kind} {path.name} holds {len(members):,} files; at most "
            f"{MAX_SERIES_MEMBERS:,} can be read. Upload one series."
        )
    check_size(f"{path.name} (unpacked)", sum(m.size for m in members), max_bytes)
    return members


def _read_member(member: _Member) -> bytes:
    try:
        with member.open() as handle:
            return handle.read(member.size + 1)[: member.size]
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise EvidenceError(
            f"{member.name} in the upload is damaged ({reason_of(error)})."
        ) from None


def _header(member: _Member) -> object | None:
    """The member's DICOM header without its pixels, or None when it is no image slice."""
    import pydicom

    try:
        with member.open() as handle:
            if handle.read(132)[128:132] != b"DICM":
                return None  # README, DICOMDIR without preamble, thumbnails: not slices
            handle.seek(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = pydicom.dcmread(handle, stop_before_pixels=True)
    except Exception as error:  # pydicom raises many types; the rest may still form a series
        # the member's name may be a patient's: the log says its kind of damage only
        log.warning("skipped a damaged DICOM member of an upload (%s)", type(error).__name__)
        return None
    return ds if "Rows" in ds and "Columns" in ds else None  # DICOMDIR, SR, presentation states


def group_series(members: list[_Member]) -> dict[str, list[tuple[_Member, object]]]:
    """Headers of every DICOM image among the members, grouped by SeriesInstanceUID."""
    series: dict[str, list[tuple[_Member, object]]] = {}
    for member in members:
        ds = _header(member)
        if ds is None:
            continue
        key = str(getattr(ds, "SeriesInstanceUID", "") or "unknown-series")
        series.setdefault(key, []).append((member, ds))
    return series


def _kept_positions(n: int, slice_bytes: int) -> list[int]:
    """Which of n slices fit MAX_VOLUME_BYTES: all, or a uniform sample keeping both ends."""
    keep = max(1, min(n, MAX_VOLUME_BYTES // max(slice_bytes, 1)))
    return sorted(set(np.linspace(0, n - 1, keep).round().astype(int).tolist()))


def _budgeted_volume(entries: list[tuple[_Member, object]], name: str) -> LoadedImage:
    """Stack a series' slices in slice order, decoding one member at a time into a volume
    of at most MAX_VOLUME_BYTES."""
    headers = [ds for _, ds in entries]
    ordered = [entries[i] for i in _slice_order(headers)]
    first = ordered[0][1]
    rows, columns = int(first.Rows), int(first.Columns)
    frames = int(getattr(first, "NumberOfFrames", 1) or 1)
    samples = int(getattr(first, "SamplesPerPixel", 1) or 1)
    if len(ordered) == 1 and frames * rows * columns * samples * 4 > MAX_VOLUME_BYTES:
        limit = MAX_VOLUME_BYTES // (1024 * 1024)
        raise EvidenceError(
            f"{name} holds one image of {frames} frames of {columns}x{rows}, more than the "
            f"{limit} MB this app opens; upload it as a series of slices or fewer frames."
        )
    if len(ordered) == 1:
        ds = _parse_dicom(_read_member(ordered[0][0]), name)
        return image_from_dataset(ds, name)
    positions = _kept_positions(len(ordered), rows * columns * 4)
    with decoding(len(positions) * rows * columns):
        return _stack_series(ordered, positions, rows, columns, name)


def _stack_series(ordered, positions: list[int], rows: int, columns: int, name: str):
    first = ordered[0][1]
    volume = np.empty((len(positions), rows, columns), dtype=np.float32)
    kept_headers = []
    for slot, position in enumerate(positions):
        member, header = ordered[position]
        if (int(header.Rows), int(header.Columns)) != (rows, columns):  # before decoding it
            raise EvidenceError(f"{name} has slices of different sizes.")
        ds = _parse_dicom(_read_member(member), name)
        stored = _pixels_of(ds, name)
        if stored.ndim != 2:
            raise EvidenceError(
                f"{name} mixes multi-frame or colour images into a slice series; "
                "upload one series of single-frame greyscale slices."
            )
        if stored.shape != (rows, columns):
            raise EvidenceError(f"{name} has slices of different sizes.")
        volume[slot] = _rescale(stored, ds, 1)
        del ds, stored
        kept_headers.append(ordered[position][1])
    modality = str(getattr(first, "Modality", "") or "OT")
    photometric = str(getattr(first, "PhotometricInterpretation", "MONOCHROME2"))
    pixels = to_unit_range(volume, modality, photometric, _window_of(first))
    del volume
    spacing = None
    in_plane = _pixel_spacing(first)
    coordinates = [_find(ds, "ImagePositionPatient") for ds in kept_headers]
    if in_plane and all(p is not None for p in coordinates):
        steps = np.linalg.norm(np.diff(np.asarray(coordinates, dtype=float), axis=0), axis=1)
        spacing = (float(np.median(steps)), *in_plane) if len(steps) else None
    meta = safe_meta_of(first)
    meta["NumberOfSlices"] = len(ordered)
    if len(positions) < len(ordered):
        meta["SlicesKept"] = len(positions)
    return LoadedImage(pixels, "3d", modality, spacing, meta, "dicom-series")


def read_series(path: Path, max_bytes: int | None) -> LoadedImage:
    members = _series_members(path, max_bytes)
    kind = "folder" if path.is_dir() else "zip file"
    if not members:
        raise EvidenceError(f"The {kind} {path.name} is empty.")
    read = _header_sample(members)
    series = group_series(read)
    if not series:
        raise EvidenceError(f"The {kind} {path.name} contains no DICOM images.")
    largest = max(series.values(), key=len)  # a localizer or scout is the smaller series
    loaded = _budgeted_volume(largest, path.name)
    loaded.safe_meta["SeriesInUpload"] = len(series)
    loaded.safe_meta["ImagesInSeries"] = len(largest)
    if len(read) < len(members):
        loaded.safe_meta["FilesInUpload"] = len(members)
        loaded.safe_meta["FilesRead"] = len(read)
    return loaded


def _header_sample(members: list[_Member]) -> list[_Member]:
    """All members, or MAX_SERIES_HEADERS of them evenly spaced in name order (both ends
    kept), so the CPU a series upload costs does not grow with its number of files."""
    if len(members) <= MAX_SERIES_HEADERS:
        return members
    ordered = sorted(members, key=lambda member: member.name)
    picks = np.linspace(0, len(ordered) - 1, MAX_SERIES_HEADERS).round().astype(int)
    return [ordered[i] for i in sorted(set(picks.tolist()))]
