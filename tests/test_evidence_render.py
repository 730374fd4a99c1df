"""The one pixel renderer (medheb_app/evidence/render.py) on real arrays: what the study's
media, the page's evidence view and the API's PNG route show of 16-bit, float, constant and
volume pixels."""

from __future__ import annotations

import numpy as np
import pytest

from medheb_app.evidence.render import Unrenderable, montage, to_rgb8, to_uint8
from medheb_app.ui import evidence_view


def test_floats_are_read_as_unit_range_clipped_with_nan_as_black() -> None:
    pixels = np.array([[0.0, 0.5, 1.0], [-0.3, 1.7, np.nan]], dtype=np.float32)
    assert to_uint8(pixels).tolist() == [[0, 128, 255], [0, 255, 0]]


def test_a_16_bit_image_keeps_its_contrast() -> None:
    pixels = np.array([[0, 16384, 32768, 65535]], dtype=np.uint16)
    assert to_uint8(pixels).tolist() == [[0, 64, 128, 255]]
    signed = np.array([[-1000, 0, 32767]], dtype=np.int16)
    assert to_uint8(signed).tolist() == [[0, 0, 255]]


def test_uint8_is_kept_and_a_constant_image_stays_constant() -> None:
    pixels = np.full((4, 5), 37, dtype=np.uint8)
    assert to_uint8(pixels) is pixels
    assert np.unique(to_uint8(np.full((4, 5), 0.25))).tolist() == [64]


def test_rgb8_repeats_grey_drops_alpha_and_refuses_a_volume() -> None:
    grey = to_rgb8(np.full((2, 3, 1), 1.0))
    assert grey.shape == (2, 3, 3) and grey.dtype == np.uint8 and np.all(grey == 255)
    rgba = np.zeros((2, 2, 4), dtype=np.uint8)
    rgba[..., 0] = 9
    assert to_rgb8(rgba)[..., 0].tolist() == [[9, 9], [9, 9]] and to_rgb8(rgba).shape[-1] == 3
    with pytest.raises(Unrenderable):
        to_rgb8(np.zeros((5, 4, 6)))


def _volume(depth: int = 10, side: int = 6) -> np.ndarray:
    """Slice k is constant k / depth, so a tile tells which slice it came from."""
    return np.stack([np.full((side, side), k / depth, dtype=np.float32) for k in range(depth)])


def test_the_study_montage_holds_every_frame_with_a_black_gutter() -> None:
    frames = to_uint8(_volume(5, 4))
    grid = montage(frames, gutter=2)
    assert grid.shape == (2 * 4 + 2, 3 * 4 + 4) and grid.dtype == np.uint8  # 3 columns, 2 rows
    tiles = [grid[r * 6 : r * 6 + 4, c * 6 : c * 6 + 4] for r in range(2) for c in range(3)]
    assert [int(t[0, 0]) for t in tiles[:5]] == frames[:, 0, 0].tolist()
    assert np.all(tiles[5] == 0) and np.all(grid[4:6] == 0) and np.all(grid[:, 4:6] == 0)


def test_the_page_montage_samples_nine_slices_and_frames_the_middle_one() -> None:
    volume = _volume(20, 8)
    grid = evidence_view.volume_montage(volume)
    assert grid.shape == (3 * 8, 3 * 8)  # nine tiles, no gutter
    picks = sorted({int(np.rint(i)) for i in np.linspace(0, 19, 9)})
    tiles = [grid[r * 8 : (r + 1) * 8, c * 8 : (c + 1) * 8] for r in range(3) for c in range(3)]
    middle = min(picks, key=lambda i: abs(i - 10))
    for index, tile in zip(picks, tiles, strict=True):
        inner = to_uint8(volume[index])[2:-2, 2:-2]
        assert np.array_equal(tile[2:-2, 2:-2], inner)
        framed = np.all(tile[0] == 255) and np.all(tile[:, -1] == 255)
        assert framed == (index == middle)
    # what the page inlines: the same pixels in three channels
    assert np.array_equal(to_rgb8(grid)[..., 1], grid)


def test_a_four_dimensional_volume_shows_its_first_channel() -> None:
    volume = np.repeat(_volume(4, 5)[..., None], 3, axis=-1)
    volume[..., 1:] = 1.0
    assert np.array_equal(evidence_view.volume_montage(volume), montage(_volume(4, 5), 9, 0, True))


def test_montage_refuses_what_is_not_a_volume() -> None:
    with pytest.raises(Unrenderable):
        montage(np.zeros((4, 4)))
    with pytest.raises(Unrenderable):
        montage(np.zeros((0, 4, 4)))


def test_the_page_and_the_drilldown_draw_labels_with_one_chip_markup() -> None:
    from medheb_app.ui import drilldown_view

    payload = {"text": "Small left effusion.", "labels": ["Pleural effusion", "<b>x</b>"]}
    chips = '<div class="ev-labels"><span>Pleural effusion</span><span>&lt;b&gt;x&lt;/b&gt;</span>'
    assert chips in evidence_view.render_payload(payload)
    assert chips in drilldown_view.evidence_html(payload, "hit")
    assert evidence_view.labels_html([]) == ""


def test_the_page_and_the_drilldown_draw_one_volume_slider(tmp_path) -> None:
    from medheb_app.ui import drilldown_view

    path = tmp_path / "ct.npy"
    np.save(path, _volume(12, 8))
    page = drilldown_view.volume_slider_html(path, "CT", synthetic=True)
    assert page is not None and page.count('class="ev-zoomable ev-frame"') == 8
    assert 'aria-label="slice of CT"' in page and '<div class="ev-mark">SYNTHETIC</div>' in page
    assert page.count('style="display:none"') == 7 and 'max="7" value="4"' in page
    assert 'ev-slice">slice 7 of 12</div>' in page  # the middle of slices 1, 3, 4, 6, 7, 9...
