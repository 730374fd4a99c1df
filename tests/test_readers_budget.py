"""Every upload format decodes under the budget (issue 19 item 1): the bombs of the issue,
read through the same entry point the upload handler uses, refused or sampled without ever
holding their declared size (peak traced by tracemalloc, which sees numpy's and zlib's
buffers). Process-level RSS per format is bench/bench_upload_rss.py --bombs."""

from __future__ import annotations

import threading
import time
import tracemalloc

import numpy as np
import pytest

from medheb_app.evidence.budget import BUSY, MAX_DECODE_VOXELS, DecodeBudget
from medheb_app.evidence.readers import read_any
from medheb_app.evidence.study import EvidenceError
from tests import bombs

MB = 2**20


def _refused(path):
    with pytest.raises(EvidenceError) as error:
        read_any(path)
    return error


def _traced(fn):
    tracemalloc.start()
    try:
        result = fn()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_nifti_gz_declaring_a_gigabyte_is_streamed_and_sampled(tmp_path):
    bomb = bombs.nifti_gz(tmp_path / "bomb.nii.gz", (1024, 1024, 512))  # 1 GB of int16
    assert bomb.stat().st_size < 8 * MB
    loaded, peak = _traced(lambda: read_any(bomb, max_bytes=512 * MB))
    assert loaded.form == "3d" and loaded.pixels.shape[1:] == (1024, 1024)
    kept = loaded.pixels.shape[0]
    assert kept * 1024 * 1024 <= MAX_DECODE_VOXELS and kept >= 16
    assert loaded.safe_meta["SlicesKept"] == kept and loaded.safe_meta["NumberOfSlices"] == 512
    assert peak < 600 * MB, peak / MB


def test_a_nifti_declaring_huge_slices_is_refused_before_inflating(tmp_path):
    bomb = bombs.nifti_gz(tmp_path / "wide.nii.gz", (8192, 8192, 1))  # 128 MB, one slice
    started = time.perf_counter()
    (error, peak) = _traced(lambda: _refused(bomb))
    assert "declares slices of 8192x8192" in str(error.value)
    assert peak < 32 * MB and time.perf_counter() - started < 5


def test_a_deflated_dicom_bomb_is_refused_with_its_inflation_capped(tmp_path):
    bomb = bombs.deflated_dicom(tmp_path / "bomb.dcm", 16384, 16384)  # 512 MB of pixels
    assert bomb.stat().st_size < 2 * MB
    error, peak = _traced(lambda: _refused(bomb))
    assert "inflates to more than" in str(error.value)
    assert peak < 300 * MB, peak / MB


def test_a_small_deflated_dicom_still_reads(tmp_path):
    small = bombs.deflated_dicom(tmp_path / "small.dcm", 64, 48)
    loaded = read_any(small)
    assert loaded.pixels.shape == (64, 48) and loaded.modality == "CT"


def test_a_deflated_multi_frame_dicom_within_the_cap_is_sampled(tmp_path):
    ct = bombs.deflated_dicom(tmp_path / "frames.dcm", 512, 512, frames=120)  # 31M values
    loaded, peak = _traced(lambda: read_any(ct))
    assert loaded.form == "3d" and loaded.safe_meta["FramesKept"] == loaded.pixels.shape[0]
    assert loaded.pixels.shape[0] * 512 * 512 <= MAX_DECODE_VOXELS
    assert peak < 600 * MB, peak / MB


@pytest.mark.parametrize("kind", ["png", "jpeg"])
def test_raster_bombs_are_refused_on_their_declared_size(tmp_path, kind):
    make = bombs.png if kind == "png" else bombs.jpeg
    for side, words in ((20000, "declares an image of more than"), (5000, "declares 5000x5000")):
        bomb = make(tmp_path / f"bomb-{side}.{kind}", side, side)
        error, peak = _traced(lambda: _refused(bomb))  # noqa: B023 - called at once
        assert words in str(error.value), str(error.value)
        assert peak < 64 * MB, peak / MB


def test_a_npy_declaring_a_huge_array_is_refused(tmp_path):
    path = tmp_path / "bomb.npy"
    header = {"descr": "<f4", "fortran_order": False, "shape": (4096, 4096, 64)}
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.write(b"\0" * 1024)
    with pytest.raises(EvidenceError, match="declares an array of shape"):
        read_any(path)


def test_the_global_budget_is_in_bytes_across_concurrent_decodes():
    budget = DecodeBudget(total_bytes=100, wait_s=2.0)
    order = []
    with budget.reserve(60):
        waiting = threading.Thread(
            target=lambda: (budget.reserve(60).__enter__(), order.append("second"))
        )
        waiting.start()
        time.sleep(0.3)
        assert order == [] and budget.used == 60  # 60 + 60 > 100: the second waits
        order.append("first done")
    waiting.join(timeout=5)
    assert order == ["first done", "second"]
    quick = DecodeBudget(total_bytes=100, wait_s=0.1)
    with quick.reserve(100), pytest.raises(EvidenceError) as busy, quick.reserve(1):
        pass
    assert str(busy.value) == BUSY
