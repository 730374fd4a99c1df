"""The resize from a decoded image to a model's square input: antialiased bilinear, whole image.

dual-lite's preprocessing (models/towers.py) and the streamed DICOM source call this one
function: the source fits each film to the model's input as it decodes it (a batch then holds
224 x 224 films, not 2048 x 2048 ones), and the model's own resize of an image already at its
size is the identity, so fitting early gives the pixels that fitting at embedding time gives
(tests/test_ingest_dicom_stream.py compares the vectors).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from medheb_app.evidence.pixels import EvidenceError


def _interpolate(tensor: torch.Tensor, size: int) -> torch.Tensor:
    return F.interpolate(
        tensor, size=(size, size), mode="bilinear", antialias=True, align_corners=False
    )


def _checked(image: np.ndarray) -> np.ndarray:
    array = np.asarray(image, dtype=np.float32)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[-1] not in (3, 4)):
        raise EvidenceError(f"Expected a greyscale or RGB image; got shape {array.shape}.")
    return array


def _fitted(array: np.ndarray, size: int) -> torch.Tensor:
    """(size, size) for a greyscale array, (3, size, size) for a colour one."""
    if array.ndim == 2:  # one plane: equal to each plane of its 3-channel copy, 13x cheaper
        return _interpolate(torch.from_numpy(np.ascontiguousarray(array))[None, None], size)[0, 0]
    colour = torch.from_numpy(np.ascontiguousarray(array[..., :3])).permute(2, 0, 1)[None]
    return _interpolate(colour, size)[0]


def resized_tensor(image: np.ndarray, size: int) -> torch.Tensor:
    """(H, W), (H, W, 1), (H, W, 3) or (H, W, 4) -> (3, size, size) float32, no crop (findings
    at the borders of a radiograph, such as the costophrenic angles, are kept); a greyscale
    image is resized once and repeated over the three channels."""
    fitted = _fitted(_checked(image), size)
    return fitted.expand(3, size, size).contiguous() if fitted.ndim == 2 else fitted


def fit_image(image: np.ndarray, size: int) -> np.ndarray:
    """The image at the model's input size in its own layout: (size, size) greyscale or
    (size, size, 3) colour, as numpy (resized_tensor of it is the identity)."""
    fitted = _fitted(_checked(image), size)
    if fitted.ndim == 3:
        fitted = fitted.permute(1, 2, 0)
    return np.ascontiguousarray(fitted.numpy(), dtype=np.float32)


def fit_volume(volume: np.ndarray, size: int) -> np.ndarray:
    """(D, H, W) -> (D, size, size), each slice as fit_image fits it."""
    return np.stack([fit_image(frame, size) for frame in volume])
