"""The decode budget every upload reader works under (issue 19 item 1).

A small file can declare an enormous image: a 732 KB NIfTI-gz once pushed the server to a
4.26 GB peak, a 196 KB deflated DICOM to 5.27 GB. So every reader checks what a file *declares*
(dimensions x samples x frames) against a voxel budget before any pixel data is inflated, and
decodes at most that many values:

- `MAX_DECODE_VOXELS` values per upload. A 2-D image or a single frame above it is refused; a
  volume above it is sampled uniformly along its slice axis (the embedders read 64 frames of a
  volume anyway, MedHEB section 3.1.3), and the upload says how many slices were kept.
- Inflation is capped in bytes (`inflate_capped`): a deflated DICOM's dataset is inflated
  only up to what its budget allows, a NIfTI-gz is streamed and read only up to its last kept
  slice, so no stream is ever decompressed past the declared, budgeted size.
- One budget in bytes across concurrent decodes (`DECODES`): each decode reserves its
  estimated peak (values x `PEAK_BYTES_PER_VALUE`) before it starts, so four bombs at once
  cannot add up; a decode that cannot get its share within `WAIT_S` is told the server is
  busy, in words.

Measured per format by bench/bench_upload_rss.py --bombs (BENCHMARKS.md).
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from medheb_app.evidence.pixels import EvidenceError, sample_frames

# ~16.8 million values: a 4,096 x 4,096 radiograph, or 64 slices of 512 x 512
MAX_DECODE_VOXELS = 16 * 2**20
# what a decode holds at its peak per value kept, measured (bench/bench_upload_rss.py
# --bombs): the stored values, the inflated bytes they came from, and the float32 copies
# made while rescaling, windowing and clipping
PEAK_BYTES_PER_VALUE = 24
# decodes in flight together hold at most this much: two worst cases at once, a third waits
GLOBAL_DECODE_BYTES = 1024 * 2**20
# what an upload keeps for its session once decoded: the page shows one image or slice and
# the embedders read 64 frames (MedHEB section 3.1.3) at a few hundred pixels a side
KEEP_MAX_SIDE_2D = 2048
KEEP_MAX_SIDE_3D = 512
KEEP_MAX_FRAMES = 64
WAIT_S = 30.0
BUSY = "The server is decoding other uploads right now; try again in a minute."


def millions(values: int) -> str:
    return f"{values / 1e6:,.0f} million" if values >= 1e6 else f"{values:,}"


def check_declared(name: str, what: str, values: int, limit: int = MAX_DECODE_VOXELS) -> None:
    """Refuse, before decoding, an image whose declared size is over the budget."""
    if values > limit:
        raise EvidenceError(
            f"{name} declares {what} ({millions(values)} values), more than the "
            f"{millions(limit)} this app decodes; upload a smaller image or fewer frames."
        )


def kept_positions(n: int, values_each: int, limit: int = MAX_DECODE_VOXELS) -> list[int]:
    """Which of n slices (or frames) of `values_each` values fit the budget: all, or a uniform
    sample keeping both ends. A single slice over the budget is the caller's to refuse."""
    keep = max(1, min(n, limit // max(values_each, 1)))
    return sorted(set(np.linspace(0, n - 1, keep).round().astype(int).tolist()))


def inflate_capped(data: bytes, cap: int, name: str) -> bytes:
    """Raw-deflate `data` (DICOM's Deflated Explicit VR Little Endian, PS3.5 A.5) into at most
    `cap` bytes; a stream that would inflate further is refused without inflating the rest."""
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, cap + 1)
    except zlib.error:
        raise EvidenceError(f"{name} has a damaged deflated dataset.") from None
    if len(out) > cap:
        raise EvidenceError(
            f"{name} inflates to more than {cap // 2**20} MB, more than this app decodes; "
            "upload it uncompressed or smaller."
        )
    return out


class DecodeBudget:
    """A semaphore in bytes: decodes reserve their estimated peak before they start."""

    def __init__(self, total_bytes: int = GLOBAL_DECODE_BYTES, wait_s: float = WAIT_S) -> None:
        self.total = int(total_bytes)
        self.wait_s = wait_s
        self.used = 0
        self._changed = threading.Condition()

    @contextmanager
    def reserve(self, n_bytes: int) -> Iterator[None]:
        """Hold `n_bytes` (at most the whole budget) while the block runs; EvidenceError(BUSY)
        when they do not come free within `wait_s`."""
        n = max(0, min(int(n_bytes), self.total))
        deadline = time.monotonic() + self.wait_s
        with self._changed:
            while self.used + n > self.total:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise EvidenceError(BUSY)
                self._changed.wait(left)
            self.used += n
        try:
            yield
        finally:
            with self._changed:
                self.used -= n
                self._changed.notify_all()


DECODES = DecodeBudget()


def _shrink(image: np.ndarray, max_side: int) -> np.ndarray:
    """Block-mean downsampling of the last two axes (rows, columns) by the smallest integer
    factor that brings the longer one to at most `max_side`."""
    rows, columns = image.shape[-2], image.shape[-1]
    factor = -(-max(rows, columns) // max_side)
    if factor <= 1:
        return image
    from skimage.transform import downscale_local_mean

    factors = (1,) * (image.ndim - 2) + (factor, factor)
    return downscale_local_mean(image, factors).astype(np.float32)


def kept_for_session(pixels: np.ndarray, form: str) -> tuple[np.ndarray, bool]:
    """What an upload keeps once decoded (see KEEP_*): (pixels, whether they were reduced).
    Colour images (H, W, 3) are shrunk over rows and columns only."""
    before = pixels.shape
    if form == "3d":
        kept = _shrink(sample_frames(pixels, KEEP_MAX_FRAMES), KEEP_MAX_SIDE_3D)
    elif pixels.ndim == 3:  # (H, W, 3)
        kept = np.moveaxis(_shrink(np.moveaxis(pixels, -1, 0), KEEP_MAX_SIDE_2D), 0, -1)
    else:
        kept = _shrink(pixels, KEEP_MAX_SIDE_2D)
    return np.ascontiguousarray(kept, dtype=np.float32), kept.shape != before


@contextmanager
def decoding(n_values: int, budget: DecodeBudget | None = None) -> Iterator[None]:
    """Reserve the peak of decoding `n_values` values in the process-wide budget."""
    with (budget or DECODES).reserve(n_values * PEAK_BYTES_PER_VALUE):
        yield
