"""Read any image a clinician drops in (PNG/JPEG, DICOM file, series folder or zip, NIfTI, .npy).

Every reader returns a `LoadedImage` with float32 pixels in [0, 1], the modality, the voxel
spacing and a small dict of non-identifying DICOM tags. Every failure is one `EvidenceError`
whose message names the file and says what is wrong with it, never a pydicom traceback.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from medheb_app.evidence.study import EvidenceError, Study

SourceFormat = Literal["png", "jpg", "dicom", "dicom-series", "nifti", "npy"]

SOFT_TISSUE_WINDOW = (40.0, 400.0)  # (center, width) in HU
PERCENTILES = (0.5, 99.5)  # robust min-max for modalities without a calibrated scale
K_FRAMES = 64  # MedHEB section 3.1.3: volumes are represented by 64 uniformly sampled frames

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


@dataclass(frozen=True, eq=False)
class LoadedImage:
    """Pixels in [0, 1]: (H, W) or (H, W, 3) for "2d", (D, H, W) for "3d"."""

    pixels: np.ndarray
    form: Literal["2d", "3d"]
    modality: str
    spacing: tuple[float, ...] | None = None
    safe_meta: dict[str, object] = field(default_factory=dict)
    source_format: SourceFormat = "png"


def window(hu: np.ndarray, center: float, width: float) -> np.ndarray:
    """Linear VOI window (DICOM PS3.3 C.11.2.1.2): center - width/2 -> 0, center + width/2 -> 1."""
    width = max(float(width), 1e-6)
    low = float(center) - width / 2.0
    return np.clip((np.asarray(hu, dtype=np.float32) - low) / width, 0.0, 1.0).astype(np.float32)


def normalise(values: np.ndarray, percentiles: tuple[float, float] = PERCENTILES) -> np.ndarray:
    """Robust min-max to [0, 1] between two percentiles; a constant image becomes zeros."""
    values = np.nan_to_num(np.asarray(values, dtype=np.float32))
    low, high = np.percentile(values, percentiles)
    if high <= low:
        low, high = float(values.min()), float(values.max())
    if high <= low:
        return np.zeros_like(values, dtype=np.float32)
    return np.clip((values - low) / (high - low), 0.0, 1.0).astype(np.float32)


def sample_frames(volume: np.ndarray, k: int = K_FRAMES) -> np.ndarray:
    """K uniformly spaced frames along axis 0 (MedHEB section 3.1.3); all frames if fewer."""
    if k < 1:
        raise ValueError("k must be at least 1")
    depth = volume.shape[0]
    if depth <= k:
        return volume
    return volume[np.linspace(0, depth - 1, k).round().astype(int)]


def _human_size(n_bytes: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n_bytes < 1024 or unit == "GB":
            return f"{n_bytes:.0f} {unit}" if unit in ("bytes", "KB") else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1024
    raise AssertionError("unreachable")


def _check_size(name: str, n_bytes: int, max_bytes: int | None) -> None:
    if max_bytes is not None and n_bytes > max_bytes:
        limit = _human_size(max_bytes).replace(".0 ", " ")
        raise EvidenceError(f"{name} is {_human_size(n_bytes)}; the limit is {limit}.")


def _not_an_image(name: str) -> EvidenceError:
    return EvidenceError(f"{name} is not a PNG, JPEG, DICOM or NIfTI file.")


def _sniff(head: bytes, name: str) -> str:
    """The file's format from its magic bytes, else from its extension."""
    lower = name.lower()
    if head.startswith(b"\x89PNG"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpg"
    if head[128:132] == b"DICM":
        return "dicom"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "zip"
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if lower.endswith((".nii", ".nii.gz", ".img", ".hdr")) or head.startswith(b"\x1f\x8b"):
        return "nifti"
    if len(head) >= 348 and head[344:348] in (b"n+1\x00", b"ni1\x00"):
        return "nifti"
    if lower.endswith((".dcm", ".dicom", ".ima")) or "." not in Path(name).name:
        return "dicom-nometa"  # DICOM written without the 128-byte preamble, or not DICOM
    return "unknown"


def _finish(
    values: np.ndarray,
    modality: str,
    photometric: str,
    window_cw: tuple[float, float] | None,
) -> np.ndarray:
    """Calibrated values -> [0, 1]: CT windowed, others robustly normalised, MONOCHROME1 flipped."""
    if values.size == 0:
        raise EvidenceError("The image is empty (it has zero pixels).")
    if modality == "CT":
        center, width = window_cw or SOFT_TISSUE_WINDOW
        out = window(values, center, width)
    else:
        out = normalise(values)
    if photometric == "MONOCHROME1":
        out = 1.0 - out
    return out.astype(np.float32)


# ----------------------------------------------------------------------------- raster images
def _read_raster(data: bytes, name: str, fmt: SourceFormat) -> LoadedImage:
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as opened:
            image = ImageOps.exif_transpose(opened)
            image.load()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise EvidenceError(
            f"{name} looks like a {fmt.upper()} file but cannot be read ({error})."
        ) from None
    if image.mode in ("P", "PA", "CMYK", "YCbCr", "LAB", "HSV", "RGBA", "LA"):
        image = image.convert("RGBA" if "A" in image.mode else "RGB")
    array = np.asarray(image)
    if array.ndim == 3:
        array = array[..., :3] if array.shape[2] >= 3 else array[..., 0]
    if (
        array.ndim == 3
        and np.array_equal(array[..., 0], array[..., 1])
        and np.array_equal(array[..., 0], array[..., 2])
    ):
        array = array[..., 0]  # greyscale stored as RGB (e.g. the NIH PNGs)
    if array.size == 0:
        raise EvidenceError(f"{name} is an empty image (0 pixels).")
    if array.dtype == np.uint8:
        pixels = array.astype(np.float32) / 255.0
    else:
        pixels = normalise(array, (0.0, 100.0))
    meta = {"Rows": int(array.shape[0]), "Columns": int(array.shape[1]), "Mode": image.mode}
    return LoadedImage(pixels, "2d", "OT", None, meta, fmt)


# ----------------------------------------------------------------------------- DICOM
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


def _parse_dicom(data: bytes, name: str, force: bool = False) -> object:
    """Parse a DICOM byte string; any parser failure becomes one readable EvidenceError."""
    import pydicom
    from pydicom import uid
    from pydicom.errors import InvalidDicomError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pydicom warns about every tolerated deviation
            ds = pydicom.dcmread(io.BytesIO(data), force=force)
    except InvalidDicomError:
        raise _not_an_image(name) from None
    except Exception as error:  # pydicom raises many types on damaged files
        raise EvidenceError(
            f"{name} is a damaged or truncated DICOM file and cannot be read ({error})."
        ) from None
    if force and not any(k in ds for k in ("PixelData", "SOPClassUID", "Modality", "Rows")):
        raise _not_an_image(name)
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


def _pixels_of(ds: object, name: str) -> np.ndarray:
    """Decoded stored values, with one clear error for no pixels, no decoder or damage."""
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
    try:
        return np.asarray(ds.pixel_array)
    except Exception as error:
        raise EvidenceError(
            f"{name} has damaged or truncated pixel data and cannot be shown ({error})."
        ) from None


def _rescale(stored: np.ndarray, ds: object, n_frames: int) -> np.ndarray:
    """Modality LUT: stored values -> calibrated values (HU for CT), per frame when enhanced."""
    from pydicom.pixels import apply_modality_lut

    if "ModalityLUTSequence" in ds:
        return np.asarray(apply_modality_lut(stored, ds), dtype=np.float32)
    values = stored.astype(np.float32)
    per_frame = getattr(ds, "PerFrameFunctionalGroupsSequence", None)
    if per_frame and n_frames > 1 and len(per_frame) == n_frames:
        for index, item in enumerate(per_frame):
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


def _read_dicom(data: bytes, name: str, force: bool = False) -> LoadedImage:
    return image_from_dataset(_parse_dicom(data, name, force=force), name)


def image_from_dataset(ds: object, name: str) -> LoadedImage:
    """One parsed DICOM dataset (single or multi-frame) -> LoadedImage."""
    stored = _pixels_of(ds, name)
    modality = str(getattr(ds, "Modality", "") or "OT")
    photometric = str(getattr(ds, "PhotometricInterpretation", "MONOCHROME2"))
    n_frames = int(getattr(ds, "NumberOfFrames", 1) or 1)
    meta = safe_meta_of(ds)
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
        values = _rescale(stored, ds, n_frames)
        pixels = _finish(values, modality, photometric, _window_of(ds))
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
    pixels = _finish(np.stack(slices), modality, photometric, _window_of(first))
    spacing = None
    in_plane = _pixel_spacing(first)
    positions = [_find(ds, "ImagePositionPatient") for ds in ordered]
    if in_plane and all(p is not None for p in positions):
        steps = np.linalg.norm(np.diff(np.asarray(positions, dtype=float), axis=0), axis=1)
        spacing = (float(np.median(steps)), *in_plane)
    meta = safe_meta_of(first)
    meta["NumberOfSlices"] = len(ordered)
    return LoadedImage(pixels, "3d", modality, spacing, meta, "dicom-series")


def _series_members(path: Path, max_bytes: int | None) -> list[tuple[str, bytes]]:
    """(member name, bytes) of every file in a folder (recursive) or a .zip, size-checked."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        _check_size(path.name, sum(p.stat().st_size for p in files), max_bytes)
        return [(str(p.relative_to(path)), p.read_bytes()) for p in files]
    try:
        with zipfile.ZipFile(path) as archive:
            infos = [
                i for i in archive.infolist() if not i.is_dir() and "__MACOSX" not in i.filename
            ]
            _check_size(f"{path.name} (unpacked)", sum(i.file_size for i in infos), max_bytes)
            return [(i.filename, archive.read(i)) for i in infos]
    except zipfile.BadZipFile:
        raise EvidenceError(f"{path.name} is a damaged zip file.") from None


def group_series(members: list[tuple[str, bytes]]) -> dict[str, list[object]]:
    """Parse every DICOM image among the members and group them by SeriesInstanceUID."""
    import pydicom

    series: dict[str, list[object]] = {}
    for _member, data in members:
        if data[128:132] != b"DICM":
            continue  # README, DICOMDIR without preamble, thumbnails: not slices
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ds = pydicom.dcmread(io.BytesIO(data))
        except Exception:  # damaged member: skip it, the rest may form a series
            continue
        if "PixelData" not in ds:
            continue  # DICOMDIR, structured reports, presentation states
        key = str(getattr(ds, "SeriesInstanceUID", "") or "unknown-series")
        series.setdefault(key, []).append(ds)
    return series


def _read_series(path: Path, max_bytes: int | None) -> LoadedImage:
    members = _series_members(path, max_bytes)
    kind = "folder" if path.is_dir() else "zip file"
    if not members:
        raise EvidenceError(f"The {kind} {path.name} is empty.")
    series = group_series(members)
    if not series:
        raise EvidenceError(f"The {kind} {path.name} contains no DICOM images.")
    largest = max(series.values(), key=len)  # a localizer or scout is the smaller series
    loaded = volume_from_datasets(largest, path.name)
    loaded.safe_meta["SeriesInUpload"] = len(series)
    return loaded


# ----------------------------------------------------------------------------- NIfTI and .npy
def _guess_volume_modality(values: np.ndarray) -> str:
    """NIfTI has no modality tag: values well below -500 are Hounsfield units, else MR."""
    return "CT" if float(np.percentile(values, 1)) < -500 else "MR"


def _read_nifti(path: Path) -> LoadedImage:
    import nibabel as nib

    try:
        image = nib.as_closest_canonical(nib.load(str(path)))
        data = np.asarray(image.dataobj, dtype=np.float32)
    except Exception as error:
        raise EvidenceError(f"{path.name} is not a readable NIfTI file ({error}).") from None
    zooms = tuple(float(z) for z in image.header.get_zooms()[:3])
    extra = data.shape[3:]
    if data.ndim > 3:
        data = data.reshape(*data.shape[:3], -1)[..., 0]  # first volume of a time series
    if data.size == 0 or data.ndim < 2:
        raise EvidenceError(f"{path.name} contains an empty volume (shape {data.shape}).")
    while data.ndim < 3:
        data = data[..., None]
    # RAS+ (x to the right, y to anterior, z up) -> axial slices in radiological display:
    # depth = inferior->superior, rows = anterior->posterior, columns = patient right->left.
    volume = np.ascontiguousarray(data.transpose(2, 1, 0)[:, ::-1, ::-1])
    modality = _guess_volume_modality(volume)
    pixels = _finish(volume, modality, "MONOCHROME2", None)
    meta: dict[str, object] = {"Shape": list(data.shape), "Orientation": "RAS+ axial"}
    if extra:
        meta["VolumesInFile"] = int(np.prod(extra))
    spacing = (zooms[2], zooms[1], zooms[0]) if len(zooms) == 3 else None
    if pixels.shape[0] == 1:
        return LoadedImage(pixels[0], "2d", modality, spacing and spacing[1:], meta, "nifti")
    return LoadedImage(pixels, "3d", modality, spacing, meta, "nifti")


def _read_npy(data: bytes, name: str) -> LoadedImage:
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except Exception as error:
        raise EvidenceError(f"{name} is not a readable .npy array ({error}).") from None
    if array.size == 0:
        raise EvidenceError(f"{name} contains an empty array (shape {array.shape}).")
    if not np.issubdtype(array.dtype, np.number) or array.ndim not in (2, 3):
        raise EvidenceError(
            f"{name} holds a {array.dtype} array of shape {array.shape}; expected a numeric "
            "(H, W), (H, W, 3) or (D, H, W) array."
        )
    values = array.astype(np.float32)
    in_unit = float(np.nanmin(values)) >= 0.0 and float(np.nanmax(values)) <= 1.0
    pixels = np.nan_to_num(values) if in_unit else normalise(values, (0.0, 100.0))
    meta = {"Shape": list(array.shape), "DType": str(array.dtype)}
    if array.ndim == 2 or (array.ndim == 3 and array.shape[2] == 3):
        return LoadedImage(pixels, "2d", "OT", None, meta, "npy")
    return LoadedImage(pixels, "3d", "OT", None, meta, "npy")


# ----------------------------------------------------------------------------- public entry
def read_any(path: Path | str, max_bytes: int | None = None) -> LoadedImage:
    """Read an image, volume, DICOM series folder or zip; size-checked before any byte is read."""
    path = Path(path)
    if not path.exists():
        raise EvidenceError(f"{path.name or path} does not exist.")
    if path.is_dir():
        return _read_series(path, max_bytes)
    size = os.stat(path).st_size
    _check_size(path.name, size, max_bytes)
    if size == 0:
        raise EvidenceError(f"{path.name} is empty (0 bytes).")
    with open(path, "rb") as handle:
        head = handle.read(352)
    fmt = _sniff(head, path.name)
    if fmt == "nifti":
        return _read_nifti(path)
    if fmt == "zip":
        return _read_series(path, max_bytes)
    if fmt == "unknown":
        raise _not_an_image(path.name)
    data = path.read_bytes()
    if fmt in ("png", "jpg"):
        return _read_raster(data, path.name, fmt)  # type: ignore[arg-type]
    if fmt == "npy":
        return _read_npy(data, path.name)
    return _read_dicom(data, path.name, force=fmt == "dicom-nometa")


def content_id(path: Path | str, prefix: str = "upload") -> str:
    """A stable id from the file's bytes (a folder: its files' names and bytes, in order)."""
    path = Path(path)
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode())
        with open(file, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    return f"{prefix}-{digest.hexdigest()[:16]}"


def study_from_file(path: Path | str, max_bytes: int | None = None) -> Study:
    """A Study for an uploaded file (UI upload, CLI --file); no file name or patient tag is kept."""
    loaded = read_any(path, max_bytes=max_bytes)
    meta: dict[str, object] = dict(loaded.safe_meta)
    meta["source_format"] = loaded.source_format
    if loaded.spacing is not None:
        meta["spacing"] = list(loaded.spacing)
    return Study(
        id=content_id(path),
        form=loaded.form,
        modality=loaded.modality,
        pixels=loaded.pixels,
        source="upload",
        meta=meta,
    )
