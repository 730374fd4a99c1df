"""Upload handling of the search tab on real files: previews, slice slider and clear errors."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
from pydicom.data import get_testdata_file

from medheb_app.services import create_services
from medheb_app.ui import search_tab, search_upload


@pytest.fixture
def services(settings):
    return create_services(settings, start_bootstrap=False)


def test_single_frame_dicom_previews_without_slider(services):
    path = get_testdata_file("CT_small.dcm", download=False)
    state, preview, slider, mode, message = search_upload.on_upload(services, path)
    assert state.form == "2d" and preview["value"].shape == (128, 128, 3)
    assert preview["visible"] is True
    assert slider["visible"] is False and mode["visible"] is False
    assert "CT image, 128x128" in message


def test_multi_frame_dicom_gets_a_slice_slider(services):
    path = get_testdata_file("emri_small.dcm", download=False)
    state, preview, slider, mode, _ = search_upload.on_upload(services, path)
    depth = state.pixels.shape[0]
    assert state.form == "3d" and depth > 1
    assert slider["visible"] is True and slider["maximum"] == depth - 1
    first = search_upload.on_slice(state, 0)
    last = search_upload.on_slice(state, depth - 1)
    assert first.shape == preview["value"].shape and not np.array_equal(first, last)
    assert mode["visible"] is True and mode["value"] == "volume"
    assert "uses the whole volume" in slider["label"]


def test_the_slider_says_what_the_search_uses_and_offers_both(services):
    path = get_testdata_file("emri_small.dcm", download=False)
    state = search_upload.on_upload(services, path)[0]
    assert "uses this slice only" in search_upload.on_volume_mode("slice")["label"]
    assert "whole volume" in search_upload.on_volume_mode("volume")["label"]
    whole = search_upload.query_study(state, "volume", 3)
    one = search_upload.query_study(state, "slice", 3)
    assert whole.form == "3d" and whole.pixels.shape == state.pixels.shape
    assert one.form == "2d" and np.array_equal(one.pixels, state.pixels[3])


def test_nifti_volume_previews(services):
    import nibabel.testing

    path = Path(nibabel.testing.data_path) / "anatomical.nii"
    state, preview, slider, _, _ = search_upload.on_upload(services, str(path))
    assert state.form == "3d" and slider["visible"] is True and preview["value"].ndim == 3


def test_bad_uploads_give_one_clear_message(services, tmp_path):
    fake = tmp_path / "scan.dcm"
    fake.write_text("this is not a DICOM file")
    state, preview, _, _, message = search_upload.on_upload(services, str(fake))
    assert state is None and preview["value"] is None and preview["visible"] is False
    assert 'class="medheb-notice error"' in message and "Traceback" not in message
    real = Path(get_testdata_file("CT_small.dcm", download=False)).read_bytes()
    cut = tmp_path / "cut.dcm"
    cut.write_bytes(real[: len(real) // 2])
    assert search_upload.on_upload(services, str(cut))[0] is None
    empty_zip = tmp_path / "series.zip"
    zipfile.ZipFile(empty_zip, "w").close()
    assert "error" in search_upload.on_upload(services, str(empty_zip))[4]


def test_oversize_upload_is_refused_before_reading(settings, tmp_path):
    from dataclasses import replace

    small = create_services(replace(settings, max_upload_bytes=1000), start_bootstrap=False)
    path = get_testdata_file("CT_small.dcm", download=False)
    state, _, _, _, message = search_upload.on_upload(small, path)
    assert state is None and "limit" in message


def test_search_without_query_or_file_asks_for_one(services):
    outcome = search_tab.run_search(services, "  ", None, "random", "demo-cxr", 5)
    assert "Type a query or upload a study" in outcome.notice and not outcome.gallery


@pytest.fixture
def gradio_upload(tmp_path, monkeypatch):
    """Put a file where Gradio puts an upload (GRADIO_TEMP_DIR/<hash>/<the visitor's name>)."""
    root = tmp_path / "gradio-cache"
    monkeypatch.setenv("GRADIO_TEMP_DIR", str(root))

    def place(source: Path | bytes, name: str) -> Path:
        folder = root / "3f9a1c0b7d2e"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / name
        target.write_bytes(source if isinstance(source, bytes) else Path(source).read_bytes())
        return target

    return place


SECRET_NAME = "Doe_Jane_MRN0012345_chest.dcm"


def test_the_temporary_upload_is_gone_and_its_name_never_shown(services, gradio_upload):
    path = gradio_upload(get_testdata_file("CT_small.dcm", download=False), SECRET_NAME)
    outputs = search_upload.on_upload(services, str(path))
    state, message = outputs[0], outputs[4]
    assert state is not None and state.form == "2d"
    assert not path.exists() and not path.parent.exists()
    assert state.path is None and state.study.path is None  # nothing on disk to point at
    assert "Doe_Jane" not in repr(outputs) and "MRN" not in message
    # another session sending the same path gets nothing: the file is gone
    again = search_upload.on_upload(services, str(path))
    assert again[0] is None and "Doe_Jane" not in again[4]


def test_a_bad_upload_is_deleted_and_its_message_does_not_name_it(services, gradio_upload):
    path = gradio_upload(b"not a dicom file at all" * 10, SECRET_NAME)
    state, _, _, _, message = search_upload.on_upload(services, str(path))
    assert state is None and "error" in message
    assert "Doe_Jane" not in message and "gradio-cache" not in message
    assert not path.exists()


def test_rate_limited_uploads_are_refused_and_deleted(services, gradio_upload):
    from medheb_app.access.limits import RateLimiter

    limits = search_upload.TabLimits(uploads=RateLimiter(1, 600.0, lockout_s=60.0))
    source = get_testdata_file("CT_small.dcm", download=False)
    first = gradio_upload(source, "a.dcm")
    assert search_upload.on_upload(services, str(first), "9.9.9.9", limits)[0] is not None
    second = gradio_upload(source, "b.dcm")
    state, _, _, _, message = search_upload.on_upload(services, str(second), "9.9.9.9", limits)
    assert state is None and "Too many uploads" in message and not second.exists()


def _series_zip(path: Path, n: int, size: int = 64, compress: int = zipfile.ZIP_STORED) -> Path:
    """A zip of n single-frame CT slices of one series (real DICOM, distinct positions)."""
    import io

    import pydicom

    template = pydicom.dcmread(get_testdata_file("CT_small.dcm", download=False))
    template.Rows = template.Columns = size
    template.PixelRepresentation, template.RescaleSlope, template.RescaleIntercept = 1, 1, 0
    template.WindowCenter, template.WindowWidth = 40, 400  # HU -160..240 map to 0..1
    with zipfile.ZipFile(path, "w", compress) as archive:
        for i in range(n):
            template.InstanceNumber = i + 1
            template.ImagePositionPatient = [0.0, 0.0, float(i)]
            template.PixelData = np.full((size, size), -150 + 15 * i, dtype=np.int16).tobytes()
            buffer = io.BytesIO()
            template.save_as(buffer, enforce_file_format=True)
            archive.writestr(f"slice{i:04d}.dcm", buffer.getvalue())
    return path


def test_a_zip_with_too_many_members_is_refused_before_reading(services, tmp_path, monkeypatch):
    from medheb_app.evidence import dicom

    monkeypatch.setattr(dicom, "MAX_SERIES_MEMBERS", 5)
    path = _series_zip(tmp_path / "series.zip", 6)
    state, _, _, _, message = search_upload.on_upload(services, str(path))
    assert state is None and "holds 6 files; at most 5" in message


def test_a_series_of_many_files_reads_a_sample_of_their_headers(tmp_path, monkeypatch):
    """The adversarial pass: a 1.4 MB zip of 3,000 deflated slices cost 16 s of CPU, because
    every header was read. Past MAX_SERIES_HEADERS files an even sample is read, both ends kept,
    and the upload says so."""
    from medheb_app.evidence import dicom
    from medheb_app.evidence.readers import read_any

    monkeypatch.setattr(dicom, "MAX_SERIES_HEADERS", 12)
    headers = []
    real_header = dicom._header
    monkeypatch.setattr(dicom, "_header", lambda m: headers.append(m.name) or real_header(m))
    path = _series_zip(tmp_path / "long.zip", 40, size=16, compress=zipfile.ZIP_DEFLATED)
    loaded = read_any(path)
    assert len(headers) == 12 and {"slice0000.dcm", "slice0039.dcm"} <= set(headers)
    assert loaded.form == "3d" and loaded.pixels.shape[0] == 12
    assert loaded.safe_meta["FilesInUpload"] == 40 and loaded.safe_meta["FilesRead"] == 12
    first, last = loaded.pixels[0].mean(), loaded.pixels[-1].mean()
    assert first < last  # slice order kept: the intensity rises with the position


def test_a_zip_bomb_is_refused_from_its_declared_sizes(settings, tmp_path):
    from dataclasses import replace

    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("a.dcm", b"\0" * (8 * 1024 * 1024))
    assert bomb.stat().st_size < 100_000
    small = create_services(replace(settings, max_upload_bytes=1024 * 1024), start_bootstrap=False)
    state, _, _, _, message = search_upload.on_upload(small, str(bomb))
    assert state is None and "unpacked" in message and "limit" in message


def test_a_long_series_is_sampled_evenly_to_the_memory_budget(services, tmp_path, monkeypatch):
    from medheb_app.evidence import dicom

    monkeypatch.setattr(dicom, "MAX_VOLUME_BYTES", 10 * 64 * 64 * 4)
    path = _series_zip(tmp_path / "series.zip", 25)
    state, _, slider, _, message = search_upload.on_upload(services, str(path))
    assert state.form == "3d" and state.pixels.shape == (10, 64, 64)
    assert state.study.meta["NumberOfSlices"] == 25 and state.study.meta["SlicesKept"] == 10
    assert "sampled evenly from 25" in message and slider["maximum"] == 9
    means = state.pixels.mean(axis=(1, 2))
    assert means[0] < means[-1] and np.all(np.diff(means) >= 0)  # kept in slice order
