"""MedMNIST adapter on .npz files written with the real keys, shapes and dtypes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medheb_app.evidence.sources.medmnist import MEDMNIST, load_medmnist
from medheb_app.evidence.study import EvidenceError


def write_npz(path: Path, image_shape: tuple[int, ...], labels: dict[str, np.ndarray]) -> None:
    rng = np.random.default_rng(0)
    arrays = {}
    for split, rows in labels.items():
        arrays[f"{split}_images"] = rng.integers(0, 256, (len(rows), *image_shape), np.uint8)
        arrays[f"{split}_labels"] = rows
    np.savez_compressed(path, **arrays)


def test_chestmnist_multilabel_maps_like_nih(tmp_path: Path) -> None:
    rows = np.zeros((3, 14), np.uint8)
    rows[0, 2] = 1  # effusion
    rows[1, [4, 10]] = 1  # mass, emphysema
    write_npz(tmp_path / "chestmnist.npz", (28, 28), {s: rows for s in ("train", "val", "test")})
    studies = load_medmnist(tmp_path / "chestmnist.npz")
    assert len(studies) == 9 and {s.split for s in studies} == {"train", "valid", "test"}
    first, second, third = studies[:3]
    assert first.findings["Pleural Effusion"] == 1 and first.meta["labels"] == ["Effusion"]
    assert second.findings["Lung Lesion"] == 1 and "Emphysema" in second.meta["labels"]
    assert third.positives() == [] and all(v is None for v in third.findings.values())
    assert first.form == "2d" and first.pixels.shape == (28, 28) and first.pixels.max() <= 1.0
    raw = np.load(tmp_path / "chestmnist.npz")["train_images"][0]
    np.testing.assert_allclose(first.pixels, raw / 255.0)


def test_organmnist3d_volumes_and_class_names(tmp_path: Path) -> None:
    labels = np.array([[0], [10], [6]])
    write_npz(
        tmp_path / "organmnist3d_64.npz",
        (8, 8, 8),
        {"train": labels, "val": labels, "test": labels},
    )
    studies = load_medmnist(tmp_path / "organmnist3d_64.npz", splits=("test",), limit=2)
    assert [s.meta["label"] for s in studies] == ["liver", "pancreas"]
    assert studies[0].form == "3d" and studies[0].pixels.shape == (8, 8, 8)
    assert studies[0].modality == "CT" and studies[1].findings == {"pancreas": 1}
    assert studies[0].evidence().volume is not None


def test_colour_2d(tmp_path: Path) -> None:
    write_npz(tmp_path / "dermamnist.npz", (28, 28, 3), {"train": np.array([[4]])})
    (study,) = load_medmnist(tmp_path / "dermamnist.npz", splits=("train",))
    assert study.pixels.shape == (28, 28, 3) and study.meta["label"] == "melanoma"


def test_label_tables_are_complete() -> None:
    assert len(MEDMNIST["organmnist3d"].labels) == len(MEDMNIST["organamnist"].labels) == 11
    assert len(MEDMNIST["pathmnist"].labels) == 9 and len(MEDMNIST["bloodmnist"].labels) == 8


def test_bad_files(tmp_path: Path) -> None:
    write_npz(tmp_path / "pneumoniamnist.npz", (28, 28), {"train": np.array([[1]])})
    with pytest.raises(EvidenceError, match="lacks val_images, val_labels"):
        load_medmnist(tmp_path / "pneumoniamnist.npz")
    write_npz(tmp_path / "mystery.npz", (28, 28), {"train": np.array([[1]])})
    with pytest.raises(EvidenceError, match="unknown MedMNIST data set 'mystery'"):
        load_medmnist(tmp_path / "mystery.npz")
    write_npz(tmp_path / "nodulemnist3d.npz", (28, 28), {"train": np.array([[1]])})
    with pytest.raises(EvidenceError, match=r"expected \(N, D, H, W\)"):
        load_medmnist(tmp_path / "nodulemnist3d.npz", splits=("train",))
