"""dual-lite: shapes, unit norms, determinism, field-wise pooling and checkpoint round trip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medheb_app.evidence.pixels import sample_frames
from medheb_app.evidence.study import Evidence, Study
from medheb_app.models.base import Embedder, l2_normalise
from medheb_app.models.dual_lite import (
    DualLiteEmbedder,
    HeadConfig,
    checkpoint_sha256,
    read_checkpoint_config,
    untrained,
)


@pytest.fixture(scope="module")
def embedder() -> DualLiteEmbedder:
    return untrained(HeadConfig(embed_dim=64), seed=0)


def _image(seed: int, shape: tuple[int, int] = (96, 80)) -> np.ndarray:
    return np.random.default_rng(seed).random(shape, dtype=np.float32)


def test_is_an_embedder_with_unit_float32_rows(embedder: DualLiteEmbedder) -> None:
    assert isinstance(embedder, Embedder)
    vectors = embedder.encode(["pleural effusion", Evidence(image=_image(0)), _image_study()])
    assert vectors.shape == (3, 64)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def _image_study() -> Study:
    return Study(id="s1", form="2d", pixels=_image(3), text="Cardiomegaly.")


def test_encoding_is_deterministic(embedder: DualLiteEmbedder) -> None:
    items = ["no pneumothorax", Evidence(image=_image(1))]
    np.testing.assert_array_equal(embedder.encode(items), embedder.encode(items))
    # the result of one item does not depend on what else is in the batch
    alone = embedder.encode([items[1]])
    np.testing.assert_allclose(embedder.encode(items)[1], alone[0], atol=1e-5)


def test_mixed_input_is_normalised_mean_of_fields(embedder: DualLiteEmbedder) -> None:
    image, text = _image(2), "Small left pleural effusion."
    mixed = embedder.encode([Evidence(text=text, image=image)])[0]
    fields = embedder.encode([text, Evidence(image=image)])
    expected = l2_normalise(fields.mean(axis=0, keepdims=True))[0]
    np.testing.assert_allclose(mixed, expected, atol=1e-5)


def test_volume_is_pooled_over_sampled_frames(embedder: DualLiteEmbedder) -> None:
    embedder = DualLiteEmbedder(embedder.heads, embedder.card, frames=6, image_size=64)
    volume = np.random.default_rng(4).random((20, 32, 32), dtype=np.float32)
    pooled = embedder.encode([Evidence(volume=volume)])[0]
    frames = sample_frames(volume, 6)
    assert len(frames) == 6
    expected = l2_normalise(embedder.encode_images(list(frames)).mean(axis=0, keepdims=True))[0]
    np.testing.assert_allclose(pooled, expected, atol=1e-5)


def test_instruction_prefixes_text_only(embedder: DualLiteEmbedder) -> None:
    instruction = "Find the chest radiograph that matches:"
    with_inst = embedder.encode(["edema"], instruction=instruction)
    np.testing.assert_allclose(with_inst, embedder.encode([f"{instruction} edema"]), atol=1e-6)
    image = Evidence(image=_image(5))
    np.testing.assert_array_equal(
        embedder.encode([image], instruction=instruction), embedder.encode([image])
    )


def test_checkpoint_round_trip(embedder: DualLiteEmbedder, tmp_path: Path) -> None:
    folder = tmp_path / "my-tag"
    card = embedder.save_checkpoint(folder, {"tag": "my-tag", "data_fingerprint": "abc"})
    assert card.version == "my-tag"
    assert card.weights_sha256 == checkpoint_sha256(folder)
    assert read_checkpoint_config(folder)["heads"]["embed_dim"] == 64
    loaded = DualLiteEmbedder.from_checkpoint(folder)
    assert loaded.card.fingerprint == card.fingerprint
    items = ["atelectasis", Evidence(image=_image(6))]
    np.testing.assert_allclose(loaded.encode(items), embedder.encode(items), atol=1e-6)


def test_not_a_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a dual-lite checkpoint"):
        DualLiteEmbedder.from_checkpoint(tmp_path)
