"""Upload handling of the search tab on real files: previews, slice slider and clear errors."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
from pydicom.data import get_testdata_file

from medheb_app.services import create_services
from medheb_app.ui import search_tab


@pytest.fixture
def services(settings):
    return create_services(settings, start_bootstrap=False)


def test_single_frame_dicom_previews_without_slider(services):
    path = get_testdata_file("CT_small.dcm", download=False)
    state, preview, slider, mode, message = search_tab.on_upload(services, path)
    assert state.form == "2d" and preview["value"].shape == (128, 128, 3)
    assert preview["visible"] is True
    assert slider["visible"] is False and mode["visible"] is False
    assert "CT image, 128x128" in message


def test_multi_frame_dicom_gets_a_slice_slider(services):
    path = get_testdata_file("emri_small.dcm", download=False)
    state, preview, slider, mode, _ = search_tab.on_upload(services, path)
    depth = state.pixels.shape[0]
    assert state.form == "3d" and depth > 1
    assert slider["visible"] is True and slider["maximum"] == depth - 1
    first = search_tab.on_slice(state, 0)
    last = search_tab.on_slice(state, depth - 1)
    assert first.shape == preview["value"].shape and not np.array_equal(first, last)
    assert mode["visible"] is True and mode["value"] == "volume"
    assert "uses the whole volume" in slider["label"]


def test_the_slider_says_what_the_search_uses_and_offers_both(services):
    path = get_testdata_file("emri_small.dcm", download=False)
    state = search_tab.on_upload(services, path)[0]
    assert "uses this slice only" in search_tab.on_volume_mode("slice")["label"]
    assert "whole volume" in search_tab.on_volume_mode("volume")["label"]
    whole = search_tab.query_study(state, "volume", 3)
    one = search_tab.query_study(state, "slice", 3)
    assert whole.form == "3d" and whole.pixels.shape == state.pixels.shape
    assert one.form == "2d" and np.array_equal(one.pixels, state.pixels[3])


def test_nifti_volume_previews(services):
    import nibabel.testing

    path = Path(nibabel.testing.data_path) / "anatomical.nii"
    state, preview, slider, _, _ = search_tab.on_upload(services, str(path))
    assert state.form == "3d" and slider["visible"] is True and preview["value"].ndim == 3


def test_bad_uploads_give_one_clear_message(services, tmp_path):
    fake = tmp_path / "scan.dcm"
    fake.write_text("this is not a DICOM file")
    state, preview, _, _, message = search_tab.on_upload(services, str(fake))
    assert state is None and preview["value"] is None and preview["visible"] is False
    assert 'class="medheb-notice error"' in message and "Traceback" not in message
    real = Path(get_testdata_file("CT_small.dcm", download=False)).read_bytes()
    cut = tmp_path / "cut.dcm"
    cut.write_bytes(real[: len(real) // 2])
    assert search_tab.on_upload(services, str(cut))[0] is None
    empty_zip = tmp_path / "series.zip"
    zipfile.ZipFile(empty_zip, "w").close()
    assert "error" in search_tab.on_upload(services, str(empty_zip))[4]


def test_oversize_upload_is_refused_before_reading(settings, tmp_path):
    from dataclasses import replace

    small = create_services(replace(settings, max_upload_bytes=1000), start_bootstrap=False)
    path = get_testdata_file("CT_small.dcm", download=False)
    state, _, _, _, message = search_tab.on_upload(small, path)
    assert state is None and "limit" in message


def test_search_without_query_or_file_asks_for_one(services):
    outcome = search_tab.run_search(services, "  ", None, "random", "demo-cxr", 5)
    assert "Type a query or upload a study" in outcome.notice and not outcome.gallery
