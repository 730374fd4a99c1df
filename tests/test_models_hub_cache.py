"""Real models from a local Hugging Face cache, offline (HF_HUB_OFFLINE=1, as conftest sets).

Each test writes a tiny random model into a temporary cache in the hub's own layout
(models--ORG--NAME/{refs/main, snapshots/<commit>/...}) and loads it by hub id.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from medheb_app.evidence.study import Evidence
from medheb_app.models.registry import clear_cache, load_embedder
from tests.test_models_open_clip import TINY

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_folder(cache: Path, repo_id: str) -> Path:
    """An empty snapshot folder of `repo_id` in the hub cache layout, refs/main pointing to it."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    return snapshot


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import huggingface_hub.constants as constants

    assert os.environ.get("HF_HUB_OFFLINE") == "1" and constants.HF_HUB_OFFLINE
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    clear_cache()
    yield cache
    clear_cache()


def test_open_clip_hf_hub_id_loads_from_the_local_cache(hub_cache: Path, settings) -> None:
    import open_clip
    from safetensors.torch import save_file

    snapshot = hub_folder(hub_cache, "lab-mirror/tiny-clip")
    config = {
        "model_cfg": TINY,
        "preprocess_cfg": {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]},
    }
    (snapshot / "open_clip_config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    model = open_clip.CLIP(**TINY)
    save_file(model.state_dict(), snapshot / "open_clip_model.safetensors")
    embedder = load_embedder("open_clip:hf-hub:lab-mirror/tiny-clip", settings)
    image = np.random.default_rng(0).random((40, 48), dtype=np.float32)
    vectors = embedder.encode(["pleural effusion", Evidence(image=image)])
    assert vectors.shape == (2, 32)
    with torch.inference_mode():  # the cached weights, not a fresh random init, were loaded
        expected = model.eval().encode_text(
            embedder.tokenizer(["pleural effusion"]), normalize=True
        )
    np.testing.assert_allclose(vectors[0], expected[0].numpy(), atol=1e-5)


def test_mllm_hub_id_loads_from_the_local_cache(hub_cache: Path, settings, tmp_path) -> None:
    from tests.mllm_tiny import build_tiny_qwen2_vl

    built = build_tiny_qwen2_vl(tmp_path / "built")
    snapshot = hub_folder(hub_cache, "lab-mirror/tiny-qwen2-vl")
    for path in built.iterdir():
        shutil.copy(path, snapshot / path.name)
    embedder = load_embedder("mllm:lab-mirror/tiny-qwen2-vl", settings)
    by_path = load_embedder(f"mllm:{built}", settings)
    items = ["a small left pleural effusion"]
    np.testing.assert_allclose(embedder.encode(items), by_path.encode(items), atol=1e-5)
    with pytest.raises(FileNotFoundError, match="nor in the local Hugging Face cache"):
        load_embedder("mllm:lab-mirror/absent-model", settings)
