"""The DICOM folder source streams (issue 23.2): headers first, pixels one batch at a time.

The streamed build must give the same index as decoding every film up front did: the same
ids (keyed pseudonyms of the SeriesInstanceUIDs, checked against stored values) and the same
vectors (the random model hashes the exact pixels it is given, so equal vectors mean equal
pixels). Memory: at no time are more films decoded than two batches (the one embedded and the
one read ahead), whatever the size of the archive.
"""

from __future__ import annotations

import numpy as np
import pydicom
import pytest

from medheb_app.evidence.dicom import image_from_dataset
from medheb_app.evidence.sources import dicom_folder
from medheb_app.evidence.sources.dicom_folder import WORKING_SIDE, DicomStudy, downsample
from medheb_app.evidence.study import Evidence
from medheb_app.index.build import build_from_source
from medheb_app.index.catalog import load_index
from medheb_app.index.sources import load_source
from medheb_app.models.registry import load_embedder
from medheb_app.settings import Settings
from tests.ingest_fixtures import film

KEY = "test-pseudonym-key"
# HMAC-SHA256(KEY, "1.2.826.0.1.3680043.8.498.<n>"), first 16 hex digits: stored so that a
# change of the id scheme (which would orphan every run and study of a DICOM index) fails.
EXPECTED_IDS = {
    1: "dicom-c7c249d2694e27d2",
}


@pytest.fixture
def keyed(tmp_path, monkeypatch) -> Settings:
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("MEDHEB_PSEUDONYM_KEY", KEY)
    return Settings.from_env()


def archive(root, n: int, side: int = 48) -> list:
    return [
        film(root / f"p{i % 3}" / f"IM{i:04d}.dcm", seed=i, side=side,
             series_uid=f"1.2.826.0.1.3680043.8.498.{i + 1}")
        for i in range(n)
    ]  # fmt: skip


def test_streamed_build_has_the_ids_and_vectors_of_decoding_everything_first(
    keyed, tmp_path
) -> None:
    root = tmp_path / "pacs"
    archive(root, 7)
    report = build_from_source(f"dicom:{root}", "random", "pacs", keyed, batch_size=3)
    assert report.n_items == 7 and report.failed == 0
    loaded = load_index("pacs", "8edde42cb6a477b6", keyed)
    first = loaded.index.ids[0]
    assert EXPECTED_IDS[1] == first  # sorted paths: p0/IM0000.dcm, series ...498.1
    # the old path: every film decoded up front, in the same order, embedded at once
    files = sorted(root.rglob("*.dcm"))
    eager = [image_from_dataset(pydicom.dcmread(f), f.name).pixels for f in files]
    expected = load_embedder("random", keyed).encode([Evidence(image=p) for p in eager])
    np.testing.assert_array_equal(loaded.index.vectors(), expected)


def test_no_more_than_two_batches_of_films_are_decoded_at_once(
    keyed, tmp_path, monkeypatch
) -> None:
    root = tmp_path / "pacs"
    archive(root, 12, side=32)
    live: set[str] = set()
    peak = [0]
    original = DicomStudy.load_pixels

    def counting(self):  # counts the films whose pixels are held right now
        pixels = original(self)
        live.add(self.id)
        peak[0] = max(peak[0], sum(1 for s in studies if s.pixels is not None))
        return pixels

    loaded_source = load_source(f"dicom:{root}", keyed)
    studies = loaded_source.studies
    assert all(s.pixels is None for s in studies)  # headers only: nothing decoded yet
    monkeypatch.setattr(DicomStudy, "load_pixels", counting)
    report = build_from_source(
        f"dicom:{root}", "random", "pacs", keyed, batch_size=2, loaded_source=loaded_source
    )
    assert report.n_items == 12 and len(live) == 12
    assert peak[0] <= 4  # the batch embedded + the batch read ahead, never the archive
    assert all(s.pixels is None for s in studies)  # dropped after their batch


def test_large_films_are_decoded_at_the_working_size(tmp_path) -> None:
    side = 2 * WORKING_SIDE
    pixels = np.random.default_rng(0).integers(0, 4096, (side, side), dtype=np.uint16)
    film(tmp_path / "big" / "IM0001.dcm", pixels=pixels)
    folder = dicom_folder.load_dicom_folder(tmp_path / "big")
    study = folder.studies[0]
    decoded = study.load_pixels()
    assert decoded.shape == (WORKING_SIDE, WORKING_SIDE) and decoded.dtype == np.float32
    full = image_from_dataset(pydicom.dcmread(tmp_path / "big" / "IM0001.dcm"), "x").pixels
    np.testing.assert_allclose(decoded, full.reshape(side // 2, 2, side // 2, 2).mean((1, 3)),
                               atol=1e-6)  # fmt: skip
    assert downsample(full[:100, :100], WORKING_SIDE) is not None
    assert downsample(full[:100, :100], WORKING_SIDE).shape == (100, 100)


def test_reading_headers_prints_progress_lines(keyed, tmp_path, monkeypatch) -> None:
    root = tmp_path / "pacs"
    archive(root, 5, side=16)
    monkeypatch.setattr(dicom_folder, "HEADER_PROGRESS_EVERY", 2)
    lines: list[str] = []
    load_source(f"dicom:{root}", keyed, lines.append)
    assert [line.split(" files")[0] for line in lines] == [
        "DICOM headers read: 2 of 5",
        "DICOM headers read: 4 of 5",
        "DICOM headers read: 5 of 5",
    ]


def test_the_cli_prints_the_first_header_line_after_reading_source(capsys) -> None:
    """`index build` prints one line per new step: the header lines must not read as the
    "reading source" step that precedes them, or a fast header pass prints none."""
    from medheb_app.cli import StderrProgress

    progress = StderrProgress()
    progress(0.0, "reading source dicom:")
    progress(0.0, "DICOM headers read: 500 of 2,000 files (900/s)")
    printed = capsys.readouterr().err.splitlines()
    assert printed == [
        "[  0%] reading source dicom:",
        "[  0%] DICOM headers read: 500 of 2,000 files (900/s)",
    ]


def test_the_image_forward_chunk_does_not_change_a_dual_lite_build(keyed, tmp_path, monkeypatch):
    """dual-lite runs its image tower 8 films at a time on a CPU (less memory than 32, and
    faster); a streamed build's vectors are those of one 32-film pass, or of one film a pass,
    to within 1e-6."""
    from medheb_app.models import dual_lite

    root = tmp_path / "pacs"
    archive(root, 12, side=300)  # larger than the model's 224: each film is resized too
    passes: list[int] = []
    preprocess = dual_lite.preprocess_images

    def counted(images, side):
        passes.append(len(images))
        return preprocess(images, side)

    monkeypatch.setattr(dual_lite, "preprocess_images", counted)
    report = build_from_source(f"dicom:{root}", "dual-lite", "pacs", keyed, batch_size=20)
    assert report.n_items == 12 and passes == [8, 4]  # one full chunk and the rest
    embedder = load_embedder("dual-lite", keyed)
    built = load_index("pacs", embedder.card.fingerprint, keyed)
    studies = {s.id: s for s in load_source(f"dicom:{root}", keyed).studies}
    films = [studies[item] for item in built.index.ids]
    for study in films:  # fitted to the model's input as the build fits them
        study.input_side = embedder.input_side
    for chunk, expected_passes in ((32, [12]), (1, [1] * 12)):
        monkeypatch.setattr(dual_lite, "CPU_IMAGE_CHUNK", chunk)
        passes.clear()
        vectors = embedder.encode(films)
        assert passes == expected_passes
        assert np.abs(vectors - built.index.vectors()).max() <= 1e-6
