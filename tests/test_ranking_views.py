"""Zoomed crops let the probes see findings smaller than the model's input resolution."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest
import torch
from torch.nn import functional

from medheb_app.evidence.study import Evidence, EvidenceError, Study, as_evidence
from medheb_app.index.cache import EmbeddingCache
from medheb_app.models.base import ModelCard
from medheb_app.ranking.logic_aware import probe_features
from medheb_app.ranking.probes import FindingProbe, ProbeConfig, fit_probe
from medheb_app.ranking.views import crop_grid, crop_vectors

SIZE = 64
INPUT = 16  # the toy model's input resolution: a 2x2 pixel spot is a quarter pixel there


class LowResolutionEmbedder:
    """Like a CNN: resize to a fixed input, then mean-pooled responses of fixed detectors."""

    card = ModelCard(name="lowres", version="1", dims=4, modalities=("2d",), license="-")

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, items: Sequence[object], instruction: str | None = None) -> np.ndarray:
        self.calls += len(items)
        rows = []
        for item in items:
            image = torch.from_numpy(np.asarray(as_evidence(item).image, np.float32))[None, None]
            small = functional.interpolate(image, size=(INPUT, INPUT), mode="area")[0, 0].numpy()
            bright = np.maximum(small - 0.5, 0.0)  # a detector tuned to the input's pixel size
            rows.append([small.mean(), bright.mean(), small.min(), np.median(small)])
        return np.asarray(rows, dtype=np.float32)


def phantom(seed: int, spot: bool) -> Study:
    """Smooth random background; with `spot`, a bright 2x2 pixel nodule somewhere inside."""
    rng = np.random.default_rng(seed)
    image = 0.3 + 0.1 * rng.random((SIZE // 8, SIZE // 8)).repeat(8, 0).repeat(8, 1)
    image = image + rng.normal(0, 0.03, (SIZE, SIZE))
    if spot:
        y, x = rng.integers(4, SIZE - 6, size=2)
        image[y : y + 2, x : x + 2] = 1.0
    findings = {"Lung Lesion": 1 if spot else 0}
    return Study(id=f"p-{seed}", form="2d", pixels=image.astype(np.float32), findings=findings)  # type: ignore[arg-type]


def test_crop_grid_covers_the_image_with_overlap() -> None:
    image = np.arange(100 * 80, dtype=np.float32).reshape(100, 80)
    crops = crop_grid(image, fraction=0.55, grid=2)
    assert [c.shape for c in crops] == [(55, 44)] * 4
    assert crops[0][0, 0] == image[0, 0] and crops[3][-1, -1] == image[-1, -1]
    assert crops[1][0, -1] == image[0, -1] and crops[2][-1, 0] == image[-1, 0]
    assert crops[0][-1, -1] == image[54, 43] and crops[3][0, 0] == image[45, 36]  # overlap
    assert len(crop_grid(np.zeros((9, 9, 3)), 0.5, 3)) == 9
    with pytest.raises(EvidenceError, match="2D image"):
        crop_grid(np.zeros(5))
    with pytest.raises(ValueError, match="fraction"):
        crop_grid(image, fraction=0.0)


def test_crops_reveal_a_finding_below_the_input_resolution(tmp_path) -> None:
    train = [phantom(i, spot=i % 2 == 0) for i in range(160)]
    test = [phantom(1000 + i, spot=i % 2 == 0) for i in range(80)]
    truth = np.array([s.findings["Lung Lesion"] == 1 for s in test])
    rows = [s.findings for s in train]
    embedder = LowResolutionEmbedder()
    accuracy = {}
    for views in ("whole", "2x2"):
        config = ProbeConfig(views=views)
        features = probe_features(embedder, train, views)
        probe = fit_probe(features, rows, ("Lung Lesion",), "fp", config)
        assert probe.views == views
        logits = probe.logits(probe_features(embedder, test, views))[:, 0]
        accuracy[views] = float(np.mean((logits > 0) == truth))
    assert accuracy["2x2"] > 0.9
    assert accuracy["2x2"] > accuracy["whole"] + 0.2


def test_view_sets_concatenate_every_grid_after_the_whole_image(tmp_path) -> None:
    studies = [phantom(i, spot=bool(i % 2)) for i in range(3)]
    embedder = LowResolutionEmbedder()
    whole = probe_features(embedder, studies, "whole")
    coarse = probe_features(embedder, studies, "2x2")
    both = probe_features(embedder, studies, "2x2+3x3")
    assert whole.shape == (3, 4) and coarse.shape == (3, 4 * 5) and both.shape == (3, 4 * 14)
    np.testing.assert_allclose(both[:, :20], coarse)
    closer = crop_vectors(embedder, studies, None, fraction=0.4, grid=3)
    np.testing.assert_allclose(both[:, 20:], closer)
    assert ProbeConfig(views="2x2").key() != ProbeConfig(views="2x2+3x3").key()
    with pytest.raises(ValueError, match="Unknown probe views"):
        ProbeConfig(views="4x4")


def test_a_probe_saved_before_view_sets_loads_with_its_crops(tmp_path) -> None:
    rows = [{"Lung Lesion": i % 2} for i in range(8)]
    features = np.random.default_rng(0).normal(size=(8, 20))
    probe = fit_probe(features, rows, ("Lung Lesion",), "fp", ProbeConfig(views="2x2"))
    path = probe.save(tmp_path / "old.npz")
    meta = json.loads(path.with_suffix(".json").read_text())
    meta["crops"] = meta.pop("views") == "2x2"  # the session-2 file format
    del meta["cv_auc"]
    path.with_suffix(".json").write_text(json.dumps(meta))
    old = FindingProbe.load(path)
    assert old.views == "2x2" and old.cv_auc == ()  # files from before cv_auc still load


def test_probes_keep_their_cross_validated_auc_through_a_save(tmp_path) -> None:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(60, 3))
    rows = [{"Edema": int(f[0] > 0), "Fracture": int(i == 0)} for i, f in enumerate(features)]
    probe = fit_probe(features, rows, ("Edema", "Fracture"), "fp", ProbeConfig(views="whole"))
    assert probe.cv_auc[0] > 0.95 and np.isnan(probe.cv_auc[1])  # Fracture: 1 positive, unfitted
    loaded = FindingProbe.load(probe.save(tmp_path / "p.npz"))
    assert loaded.cv_auc[0] == probe.cv_auc[0] and np.isnan(loaded.cv_auc[1])


def test_crop_vectors_go_through_the_cache(tmp_path) -> None:
    studies = [phantom(i, spot=bool(i % 2)) for i in range(5)]
    cache = EmbeddingCache(tmp_path)
    embedder = LowResolutionEmbedder()
    first = crop_vectors(embedder, studies, cache)
    assert first.shape == (5, 4 * embedder.card.dims)
    assert embedder.calls == 20
    again = crop_vectors(embedder, studies, cache)
    assert embedder.calls == 20  # every crop came from the cache
    assert np.allclose(first, again)
    direct = embedder.encode([Evidence(image=studies[0].pixels[:35, :35])])  # type: ignore[index]
    assert np.allclose(first[0, :4], direct[0])


def test_disk_studies_are_read_once_for_every_grid_of_a_view_set(tmp_path, monkeypatch) -> None:
    from PIL import Image

    from medheb_app.ranking.views import view_vectors

    in_memory = [phantom(i, spot=bool(i % 2)) for i in range(4)]
    on_disk = []
    for study in in_memory:
        path = tmp_path / f"{study.id}.png"
        Image.fromarray((np.clip(study.pixels, 0, 1) * 255).astype(np.uint8)).save(path)
        on_disk.append(Study(id=study.id, form="2d", path=str(path), findings=study.findings))
    reads = []
    original = Study.load_pixels
    monkeypatch.setattr(Study, "load_pixels", lambda self: reads.append(self.id) or original(self))
    embedder = LowResolutionEmbedder()
    vectors = view_vectors(embedder, on_disk, "2x2+3x3", EmbeddingCache(tmp_path / "cache"))
    assert vectors.shape == (4, 13 * embedder.card.dims)
    assert sorted(reads) == sorted(s.id for s in on_disk)  # one read per study, not per grid
    assert all(study.pixels is None for study in on_disk)  # and not kept in memory
    expected = np.concatenate(
        [
            crop_vectors(embedder, on_disk, None),
            crop_vectors(embedder, on_disk, None, fraction=0.4, grid=3),
        ],
        axis=1,
    )
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
