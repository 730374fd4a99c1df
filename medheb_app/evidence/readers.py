"""Read any image a clinician drops in (PNG/JPEG, DICOM file, series folder or zip, NIfTI, .npy).

Every reader returns a `LoadedImage` with float32 pixels in [0, 1], the modality, the voxel
spacing and a small dict of non-identifying DICOM tags. Every failure is one `EvidenceError`
whose message names the file and says what is wrong with it, never a pydicom traceback.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from medheb_app.evidence.study import EvidenceError, Study

SourceFormat = Literal["png", "jpg", "dicom", "dicom-series", "nifti", "npy"]

SOFT_TISSUE_WINDOW = (40.0, 400.0)  # (center, width) in HU
PERCENTILES = (0.5, 99.5)  # robust min-max for modalities without a calibrated scale
K_FRAMES = 64  # MedHEB section 3.1.3: volumes are represented by 64 uniformly sampled frames


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


def check_size(name: str, n_bytes: int, max_bytes: int | None) -> None:
    if max_bytes is not None and n_bytes > max_bytes:
        limit = _human_size(max_bytes).replace(".0 ", " ")
        raise EvidenceError(f"{name} is {_human_size(n_bytes)}; the limit is {limit}.")


def not_an_image(name: str) -> EvidenceError:
    return EvidenceError(f"{name} is not a PNG, JPEG, DICOM or NIfTI file.")


def _is_nifti_header(head: bytes) -> bool:
    """NIfTI-1 magic at byte 344, NIfTI-2 magic at byte 4."""
    return head[344:348] in (b"n+1\x00", b"ni1\x00") or head[4:8] in (b"n+2\x00", b"ni2\x00")


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
    if lower.endswith((".nii", ".nii.gz", ".img", ".hdr")) or _is_nifti_header(head):
        return "nifti"
    if lower.endswith((".dcm", ".dicom", ".ima")) or "." not in Path(name).name:
        return "dicom-nometa"  # DICOM written without the 128-byte preamble, or not DICOM
    return "unknown"


def to_unit_range(
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
    pixels = to_unit_range(volume, modality, "MONOCHROME2", None)
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
    from medheb_app.evidence.dicom import read_dicom_bytes, read_series  # dicom imports us

    path = Path(path)
    if not path.exists():
        raise EvidenceError(f"{path.name or path} does not exist.")
    if path.is_dir():
        return read_series(path, max_bytes)
    size = os.stat(path).st_size
    check_size(path.name, size, max_bytes)
    if size == 0:
        raise EvidenceError(f"{path.name} is empty (0 bytes).")
    with open(path, "rb") as handle:
        head = handle.read(352)
    gzipped = head.startswith(b"\x1f\x8b")
    if gzipped:  # look at what it holds: only NIfTI is read compressed
        try:
            with gzip.open(path, "rb") as handle:
                head = handle.read(352)
        except (OSError, EOFError):
            raise not_an_image(path.name) from None
    fmt = _sniff(head, path.name)
    named_nifti = path.name.lower().endswith((".nii", ".nii.gz", ".img", ".hdr"))
    if fmt == "nifti" and not named_nifti:
        raise EvidenceError(f"{path.name} is a NIfTI volume; name it .nii or .nii.gz to open it.")
    if fmt == "nifti":
        return _read_nifti(path)
    if gzipped:
        raise EvidenceError(f"{path.name} is gzip-compressed; unpack it first.")
    if fmt == "zip":
        return read_series(path, max_bytes)
    if fmt == "unknown":
        raise not_an_image(path.name)
    data = path.read_bytes()
    if fmt in ("png", "jpg"):
        return _read_raster(data, path.name, fmt)  # type: ignore[arg-type]
    if fmt == "npy":
        return _read_npy(data, path.name)
    return read_dicom_bytes(data, path.name, force=fmt == "dicom-nometa")


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
