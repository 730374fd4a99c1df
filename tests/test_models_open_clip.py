"""open_clip specs with a tiny random-weight model saved to disk in the real formats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from medheb_app.evidence.study import Evidence
from medheb_app.models.open_clip_embedder import (
    OpenClipEmbedder,
    OpenClipSpecError,
    _model_name,
    parse_spec,
)
from medheb_app.models.registry import load_embedder
from medheb_app.settings import Settings

TINY = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 64, "patch_size": 8, "head_width": 32},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2},
}


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A user's config JSON (named tiny-clip-test) and its random weights, as torch.save."""
    import open_clip  # deferred: with transformers and timm it is ~5 s of every worker's collection

    folder = tmp_path_factory.mktemp("open_clip")
    config = folder / "tiny-clip-test.json"
    config.write_text(json.dumps(TINY))
    torch.manual_seed(0)
    model = open_clip.CLIP(**TINY)
    weights = folder / "tiny.pt"
    torch.save(model.state_dict(), weights)
    return config, weights


def test_parse_spec_forms() -> None:
    assert parse_spec("open_clip:ViT-B-32@/w.pt") == ("ViT-B-32", "/w.pt")
    assert parse_spec("open_clip:/c/m.json@/w.pt") == ("/c/m.json", "/w.pt")
    assert parse_spec("open_clip:hf-hub:org/name") == ("hf-hub:org/name", None)
    with pytest.raises(OpenClipSpecError, match=r"open_clip:<ARCH>@<weights\.pt>"):
        parse_spec("open_clip:ViT-B-32")


def test_tiny_model_round_trip(tiny_model: tuple[Path, Path], settings: Settings) -> None:
    config, weights = tiny_model
    spec = f"open_clip:{config}@{weights}"
    embedder = load_embedder(spec, settings)
    assert embedder is load_embedder(spec, settings)
    image = np.random.default_rng(0).random((40, 48), dtype=np.float32)
    items = ["pleural effusion", Evidence(image=image), Evidence(volume=np.stack([image] * 5))]
    vectors = embedder.encode(items)
    assert vectors.shape == (3, 32) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # same weights, fresh instance -> same vectors; and the card fingerprints the file
    again = OpenClipEmbedder(spec)
    np.testing.assert_allclose(again.encode(items), vectors, atol=1e-6)
    assert again.card.fingerprint == embedder.card.fingerprint
    # a volume of identical frames pools to that frame's embedding
    np.testing.assert_allclose(vectors[2], vectors[1], atol=1e-5)


def test_architecture_names_resolve(tiny_model: tuple[Path, Path], tmp_path: Path) -> None:
    config, weights = tiny_model
    assert _model_name("RN50") == "RN50"  # built-in: used as is with the local weights
    assert _model_name(str(config)) == "tiny-clip-test"  # user config: registered by stem
    with pytest.raises(OpenClipSpecError, match="Unknown open_clip architecture"):
        OpenClipEmbedder(f"open_clip:NotAModel@{weights}")
    with pytest.raises(FileNotFoundError, match="config not found"):
        OpenClipEmbedder(f"open_clip:{tmp_path / 'absent.json'}@{weights}")


def test_hf_hub_offline_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(OpenClipSpecError, match="Cannot download hf-hub:"):
        OpenClipEmbedder("open_clip:hf-hub:example-org/no-such-model")
