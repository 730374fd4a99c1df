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
import warnings
from pathlib import Path

import numpy as np

from medheb_app.evidence.budget import (
    MAX_DECODE_VOXELS,
    check_declared,
    decoding,
    kept_positions,
    millions,
)
from medheb_app.evidence.dicom import read_dicom_bytes, read_series
from medheb_app.evidence.pixels import (
    EvidenceError,
    LoadedImage,
    SourceFormat,
    check_size,
    normalise,
    not_an_image,
    reason_of,
    to_unit_range,
)


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


# ----------------------------------------------------------------------------- raster images
def _read_raster(data: bytes, name: str, fmt: SourceFormat) -> LoadedImage:
    """A PNG or JPEG: its declared size is checked against the decode budget before a pixel
    is inflated (Image.open reads only the header), then decoded under the global budget."""
    from PIL import Image, ImageOps, UnidentifiedImageError

    # PIL's own bomb check at the same budget (it warns above it and refuses at twice it)
    Image.MAX_IMAGE_PIXELS = MAX_DECODE_VOXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # checked below
            with Image.open(io.BytesIO(data)) as opened:
                width, height = opened.size
                bands = len(opened.getbands())
                check_declared(
                    name,
                    f"{width}x{height} pixels of {bands} channel{'s' if bands != 1 else ''}",
                    width * height * bands,
                )
                with decoding(width * height * max(bands, 3)):
                    image = ImageOps.exif_transpose(opened)
                    image.load()
                    return _raster_image(image, name, fmt)
    except EvidenceError:
        raise
    except Image.DecompressionBombError:  # over twice the budget: PIL refuses on the header
        raise EvidenceError(
            f"{name} declares an image of more than {millions(2 * MAX_DECODE_VOXELS)} pixels, "
            "more than this app decodes; upload a smaller image."
        ) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as error:
        raise EvidenceError(
            f"{name} looks like a {fmt.upper()} file but cannot be read ({reason_of(error)})."
        ) from None


def _raster_image(image, name: str, fmt: SourceFormat) -> LoadedImage:
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


def _nifti_header(head: bytes, name: str):
    """(header, header size) of the NIfTI-1 or NIfTI-2 header at the start of `head`."""
    import nibabel as nib

    for kind, size in ((nib.Nifti1Header, 348), (nib.Nifti2Header, 540)):
        for order in ("<", ">"):
            if len(head) >= size and int(np.frombuffer(head[:4], f"{order}i4")[0]) == size:
                try:
                    return kind.from_fileobj(io.BytesIO(head[:size])), size
                except Exception as error:
                    raise EvidenceError(
                        f"{name} has a damaged NIfTI header ({reason_of(error)})."
                    ) from None
    raise EvidenceError(f"{name} is not a readable NIfTI file (no NIfTI header).")


class _Stream:
    """Sequential reads from bytes already read, then from an open (gzip) file; `skip` reads
    past data in bounded chunks, since a gzip stream cannot jump."""

    def __init__(self, buffered: bytes, handle, name: str) -> None:
        self.buffered, self.handle, self.name = buffered, handle, name

    def read(self, n: int) -> bytes:
        out = self.buffered[:n]
        self.buffered = self.buffered[n:]
        if len(out) < n:
            out += self.handle.read(n - len(out))
        if len(out) < n:
            raise EvidenceError(f"{self.name} is truncated (its data ends early).")
        return out

    def skip(self, n: int) -> None:
        while n > 0:
            step = min(n, 1 << 22)
            self.read(step)
            n -= step


def _read_nifti_slices(path: Path) -> tuple[np.ndarray, object, int, int]:
    """The first volume's slices kept under the decode budget, read in one pass from the
    (possibly gzip) stream and never past the last kept slice: (data (X, Y, kept), header,
    slices in the file, volumes in the file). The declared dimensions are checked before a
    voxel is inflated, so a small .nii.gz declaring gigabytes inflates only what is kept."""
    with open(path, "rb") as probe:
        gzipped = probe.read(2) == b"\x1f\x8b"
    try:
        with (gzip.open if gzipped else open)(path, "rb") as handle:
            head = handle.read(540)
            header, size = _nifti_header(head, path.name)
            shape = tuple(int(d) for d in header.get_data_shape())
            if not shape or min(shape) < 1:
                raise EvidenceError(f"{path.name} contains an empty volume (shape {shape}).")
            dtype = header.get_data_dtype()
            x, y = shape[0], shape[1] if len(shape) > 1 else 1
            z = shape[2] if len(shape) > 2 else 1
            volumes = int(np.prod(shape[3:])) if len(shape) > 3 else 1
            check_declared(path.name, f"slices of {x}x{y}", x * y)
            kept = kept_positions(z, x * y)
            slab = x * y * dtype.itemsize
            offset = max(int(header.get_data_offset()), size)
            stream = _Stream(head[offset:], handle, path.name)
            stream.skip(max(0, offset - len(head)))
            with decoding(x * y * len(kept)):
                data = np.empty((x, y, len(kept)), dtype=np.float32)
                cursor = 0
                for slot, index in enumerate(kept):
                    stream.skip((index - cursor) * slab)
                    raw = stream.read(slab)
                    data[..., slot] = np.frombuffer(raw, dtype=dtype).reshape((x, y), order="F")
                    cursor = index + 1
    except EvidenceError:
        raise
    except (OSError, EOFError, ValueError, TypeError) as error:
        raise EvidenceError(
            f"{path.name} is not a readable NIfTI file ({reason_of(error)})."
        ) from None
    slope, inter = header.get_slope_inter()
    if slope is not None and np.isfinite(slope) and slope != 0:
        data = data * np.float32(slope) + np.float32(inter or 0.0)
    return data, header, z, volumes


def _read_nifti(path: Path) -> LoadedImage:
    import nibabel as nib

    data, header, n_slices, volumes = _read_nifti_slices(path)
    kept = data.shape[2]
    zooms = [float(z) for z in header.get_zooms()[:3]]
    while len(zooms) < 3:
        zooms.append(1.0)
    if kept < n_slices and kept > 1:
        zooms[2] *= (n_slices - 1) / (kept - 1)  # the kept slices are this far apart
    # to the closest canonical (RAS+) orientation, as nibabel's as_closest_canonical does
    orientation = nib.orientations.io_orientation(header.get_best_affine())
    data = nib.orientations.apply_orientation(data, orientation)
    canonical_zooms = [0.0, 0.0, 0.0]
    for axis, (target, _flip) in enumerate(orientation):
        canonical_zooms[int(target)] = zooms[axis]
    # RAS+ (x to the right, y to anterior, z up) -> axial slices in radiological display:
    # depth = inferior->superior, rows = anterior->posterior, columns = patient right->left.
    volume = np.ascontiguousarray(data.transpose(2, 1, 0)[:, ::-1, ::-1])
    del data
    modality = _guess_volume_modality(volume)
    pixels = to_unit_range(volume, modality, "MONOCHROME2", None)
    shape = [int(d) for d in header.get_data_shape()]
    meta: dict[str, object] = {"Shape": shape[:3], "Orientation": "RAS+ axial"}
    if volumes > 1 or len(shape) > 3:
        meta["VolumesInFile"] = volumes
    if kept < n_slices:
        meta["NumberOfSlices"], meta["SlicesKept"] = n_slices, kept
    zx, zy, zz = canonical_zooms
    spacing = (zz, zy, zx)
    if pixels.shape[0] == 1:
        return LoadedImage(pixels[0], "2d", modality, spacing[1:], meta, "nifti")
    return LoadedImage(pixels, "3d", modality, spacing, meta, "nifti")


def _read_npy(data: bytes, name: str) -> LoadedImage:
    """A .npy array; its header's declared shape is checked against the decode budget first."""
    try:
        stream = io.BytesIO(data)
        version = np.lib.format.read_magic(stream)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, _, _ = read_header(stream)
        check_declared(name, f"an array of shape {tuple(shape)}", int(np.prod(shape)))
        with decoding(int(np.prod(shape))):
            array = np.load(io.BytesIO(data), allow_pickle=False)
    except EvidenceError:
        raise
    except Exception as error:
        raise EvidenceError(f"{name} is not a readable .npy array ({reason_of(error)}).") from None
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
