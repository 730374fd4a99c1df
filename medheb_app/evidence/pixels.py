"""The pieces every upload decoder shares (readers.py, dicom.py, budget.py and the DICOM-folder
source): the one error type, the decoded-image record, value scaling to [0, 1], volume frame
sampling and the byte-size check.

A leaf but for the leaf medheb_app.public_text (the patterns of what a user may read), so the
decoders can share it without importing each other (evidence.study re-exports `EvidenceError`
for its long-standing importers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from medheb_app.public_text import OBJECT_REPR, SERVER_PATH


class EvidenceError(ValueError):
    """Input that cannot be read as clinical evidence; the message is meant for the user."""


def _file_name(path: re.Match[str]) -> str:
    return re.split(r"[\\/]", path.group(0).rstrip("\\/"))[-1]


def reason_of(error: BaseException, most: int = 160) -> str:
    """A decoding library's complaint, fit to show a user: object reprs (class names, memory
    addresses) and file paths left out, at most `most` characters. The adversarial pass at
    994e87c read `<_io.BytesIO object at 0x7fab...>` in a truncated PNG's refusal. The
    patterns are public_text's; a path keeps its file name, which the uploader chose."""
    text = OBJECT_REPR.sub("the data", str(error))
    text = SERVER_PATH.sub(_file_name, text)
    text = " ".join(text.split()).strip(" :")
    return (text[: most - 1] + "…" if len(text) > most else text) or "unreadable data"


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
