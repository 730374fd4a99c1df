"""Catalog: build, list and load named indices; metadata round-trips; builds are cached."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from PIL import Image

from medheb_app.evidence.study import Box, EmbedItem, Study, as_evidence
from medheb_app.index.cache import EmbeddingCache
from medheb_app.index.catalog import (
    IndexNotFoundError,
    list_indices,
    load_index,
    study_content_key,
)
from medheb_app.models.base import ModelCard, l2_normalise
from tests.index_helpers import build_studies as build_index


class ThumbnailEmbedder:
    """A tiny real image embedder: the 4x4 block means of the image, centred, unit length."""

    def __init__(self, version: str = "1") -> None:
        self.card = ModelCard(
            name="thumb", version=version, dims=16, modalities=("2d",), license="MIT"
        )
        self.calls = 0

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        self.calls += len(items)
        rows = []
        for item in items:
            image = as_evidence(item).image
            blocks = image.reshape(4, image.shape[0] // 4, 4, image.shape[1] // 4).mean(axis=(1, 3))
            rows.append(blocks.ravel() - blocks.mean() + 1e-3)
        return l2_normalise(np.stack(rows))


def _studies(tmp_path, n: int = 12) -> list[Study]:
    rng = np.random.default_rng(0)
    studies = []
    for i in range(n):
        pixels = rng.random((32, 32)).astype(np.float32)
        path = tmp_path / f"img{i}.png"
        Image.fromarray((pixels * 255).astype(np.uint8)).save(path)
        studies.append(
            Study(
                id=f"cxr-{i:03d}",
                form="2d",
                path=str(path),
                text=f"Report {i}. No pleural effusion.",
                findings={"Pleural Effusion": 0, "Cardiomegaly": 1 if i % 2 else None},
                boxes=[Box("Cardiomegaly", 4, 5, 10, 8, side="bilateral", severity="mild")]
                if i % 2
                else [],
                split="test" if i < 4 else "train",
                source="phantom",
                synthetic=True,
            )
        )
    return studies


def test_build_then_load_round_trips_vectors_and_metadata(settings, tmp_path) -> None:
    studies = _studies(tmp_path)
    embedder = ThumbnailEmbedder()
    events: list[float] = []
    built = build_index(
        "demo-test", studies, embedder, settings, progress=lambda f, m: events.append(f)
    )
    assert events[-1] == 1.0
    # pixels loaded only for embedding are dropped again, so a corpus is not held in memory
    assert all(study.pixels is None for study in studies)
    assert built.directory == settings.index_dir / "demo-test" / embedder.card.fingerprint
    loaded = load_index("demo-test", embedder, settings)
    assert loaded.index.count == 12
    assert loaded.info["model"]["name"] == "thumb"
    row = loaded.item("cxr-001")
    assert row["findings"] == {"Pleural Effusion": 0, "Cardiomegaly": 1}
    assert loaded.item("cxr-000")["findings"]["Cardiomegaly"] is None  # blank stays blank
    assert row["boxes"][0] == {
        "finding": "Cardiomegaly", "x": 4, "y": 5, "w": 10, "h": 8,
        "side": "bilateral", "severity": "mild",
    }  # fmt: skip
    assert row["split"] == "test" and row["synthetic"] is True
    assert row["text"].startswith("Report 1.")
    # a study's own embedding finds itself first
    query = ThumbnailEmbedder().encode([studies[5]])
    scores, ids = loaded.search(query, k=3)
    assert ids[0, 0] == "cxr-005"
    assert scores[0, 0] == pytest.approx(1.0, abs=1e-5)


def test_rebuild_reuses_the_embedding_cache_and_lists_both_models(settings, tmp_path) -> None:
    studies = _studies(tmp_path)
    first = ThumbnailEmbedder()
    build_index("demo-test", studies, first, settings)
    again = ThumbnailEmbedder()
    build_index("demo-test", studies, again, settings, kind="hnsw")
    assert again.calls == 0  # every vector came from the cache
    assert load_index("demo-test", again, settings).index.kind == "hnsw"
    build_index("demo-test", studies, ThumbnailEmbedder(version="2"), settings)
    entries = list_indices(settings)
    assert len(entries) == 2
    assert {e["model_version"] for e in entries} == {"1", "2"}
    assert all(e["count"] == 12 and e["synthetic"] for e in entries)
    assert EmbeddingCache(settings.cache_dir).count() == 24


def test_content_key_changes_when_the_image_does(tmp_path) -> None:
    studies = _studies(tmp_path, n=2)
    before = study_content_key(studies[0])
    Image.fromarray(np.zeros((32, 32), np.uint8)).save(studies[0].path)
    assert study_content_key(studies[0]) != before
    assert study_content_key(studies[0]).startswith("cxr-000@")


def test_missing_index_errors_say_what_exists(settings, tmp_path) -> None:
    with pytest.raises(IndexNotFoundError, match="demo build"):
        load_index("demo-cxr", ThumbnailEmbedder(), settings)
    build_index("demo-test", _studies(tmp_path, n=4), ThumbnailEmbedder(), settings)
    with pytest.raises(IndexNotFoundError, match="exists for: thumb"):
        load_index("demo-test", ThumbnailEmbedder(version="9"), settings)
    with pytest.raises(ValueError, match="not allowed"):
        load_index("../escape", ThumbnailEmbedder(), settings)


def test_a_large_index_reads_metadata_rows_from_disk_per_hit(tmp_path, settings, monkeypatch):
    """Above LAZY_METADATA_ROWS the rows stay in metadata.jsonl (memory-mapped, by byte offset)
    and read the same as the eager dict; the modalities a file search checks come from the
    catalog entry, not from a pass over every row."""
    from medheb_app.index import catalog
    from medheb_app.search import upload_mismatch

    studies = _studies(tmp_path)
    eager = build_index("big", studies, ThumbnailEmbedder(), settings)
    assert isinstance(eager.items, dict)
    assert (eager.directory / catalog.OFFSETS_FILE).is_file()
    monkeypatch.setattr(catalog, "LAZY_METADATA_ROWS", 5)
    lazy = build_index("big", studies, ThumbnailEmbedder("2"), settings)
    assert isinstance(lazy.items, catalog.MetadataRows)
    assert len(lazy.items) == len(studies) and list(lazy.items) == list(eager.items)
    for item_id, row in eager.items.items():
        assert lazy.item(item_id) == row
    assert "cxr-003" in lazy.items and "nope" not in lazy.items and lazy.items.get("nope") is None
    with pytest.raises(KeyError):
        lazy.item("nope")
    assert lazy.info["modalities"] == sorted({s.modality for s in studies if s.modality})

    def no_row_pass():
        raise AssertionError("upload_mismatch read every row")

    monkeypatch.setattr(lazy.items, "values", no_row_pass)
    odd = Study(id="u", form="2d", modality="MR", path=None)
    warned = upload_mismatch(odd, lazy)
    assert warned and warned == upload_mismatch(odd, eager)  # an MR study vs chest radiographs
