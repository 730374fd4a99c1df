"""medemb-lite: one BERT sequence for text, image, volume and mixed inputs; checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medheb_app.evidence.study import Evidence
from medheb_app.models import registry
from medheb_app.models.feature_cache import FeatureCache
from medheb_app.models.medemb_lite import (
    MedEmbLiteConfig,
    MedEmbLiteEmbedder,
    pool,
    read_checkpoint_config,
)

RNG = np.random.default_rng(0)
IMAGE = RNG.random((96, 96)).astype(np.float32)
VOLUME = RNG.random((10, 48, 48)).astype(np.float32)
ITEMS = [
    "No pleural effusion.",
    Evidence(image=IMAGE),
    Evidence(volume=VOLUME),
    Evidence(image=IMAGE, text="Is there a pleural effusion?"),
]
INSTRUCTION = "Find the same category image with the provided image:"


@pytest.fixture(scope="module")
def model() -> MedEmbLiteEmbedder:
    return MedEmbLiteEmbedder.untrained(MedEmbLiteConfig(image_size=96, frame_size=64), seed=0)


def test_pooling_reads_the_final_real_token_or_the_mean():
    hidden = torch.arange(12.0).view(2, 3, 2)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert pool(hidden, mask, "last").tolist() == [[2.0, 3.0], [10.0, 11.0]]
    assert pool(hidden, mask, "mean").tolist() == [[1.0, 2.0], [8.0, 9.0]]


def test_feature_cache_keys_by_content_and_evicts_the_oldest():
    cache = FeatureCache(max_bytes=2 * 2 * 10)  # room for two 10-element float16 tensors
    keys = [FeatureCache.key(np.full((2, 2), v, np.float32), 224) for v in (0, 1, 2)]
    assert keys[0] == FeatureCache.key(np.zeros((2, 2), np.float32), 224)
    assert keys[0] != FeatureCache.key(np.zeros((2, 2), np.float32), 160)
    for key in keys:
        cache.put(key, torch.ones(10))
    assert cache.get(keys[0]) is None and cache.get(keys[2]).dtype == torch.float32
    assert cache.used == 40


def test_feature_cache_survives_a_save_and_load(tmp_path):
    cache = FeatureCache()
    cache.put("a", torch.arange(4.0))
    path = tmp_path / "features" / "visual.pt"
    cache.save(path)
    restored = FeatureCache()
    assert restored.load(path) == 1 and restored.load(tmp_path / "absent.pt") == 0
    assert "a" in restored and restored.get("a").tolist() == [0.0, 1.0, 2.0, 3.0]


def test_precompute_fills_the_cache_once_for_images_and_volumes(model):
    items = [
        Evidence(image=IMAGE * 0.5),
        Evidence(image=IMAGE * 0.5),
        Evidence(volume=VOLUME * 0.5),
    ]
    assert model.precompute_visual(items) == 2  # one distinct image, one volume
    assert model.precompute_visual(items) == 0
    single = model._tower_tokens([IMAGE * 0.5], model.config.image_size, model.config.grid)[0]
    torch.testing.assert_close(model.visual_features(items[0]), single, atol=2e-3, rtol=2e-3)


def test_every_form_shares_one_unit_space(model):
    vectors = model.encode(ITEMS)
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[1] @ vectors[3]) < 0.9999  # the question changes the image's vector


def test_sequence_holds_instruction_visual_tokens_and_text(model):
    text = Evidence(text="No pleural effusion.")
    words = len(model.tokenizer("No pleural effusion.", add_special_tokens=False)["input_ids"])
    assert model.sequence_length(text, None) == words + 2  # [CLS] text [SEP]
    grid = model.config.grid**2
    assert model.sequence_length(Evidence(image=IMAGE), None) == grid + 2
    assert model.sequence_length(Evidence(volume=VOLUME), None) == len(VOLUME) + 2
    instruction = len(model.tokenizer(INSTRUCTION, add_special_tokens=False)["input_ids"])
    with_inst = model.sequence_length(Evidence(image=IMAGE), INSTRUCTION)
    assert with_inst == grid + 2 + instruction + 1  # ... [SEP] closes the instruction
    long_volume = Evidence(volume=RNG.random((100, 32, 32)).astype(np.float32))
    assert model.sequence_length(long_volume, None) == model.config.frames + 2


def test_instruction_changes_queries_and_candidates_carry_none(model):
    queries = model.encode(ITEMS, instruction=INSTRUCTION)
    candidates = model.encode(ITEMS)
    assert np.all(np.sum(queries * candidates, axis=1) < 0.9999)
    np.testing.assert_allclose(candidates, model.encode(ITEMS, instruction=None), atol=1e-6)
    np.testing.assert_allclose(candidates, model.encode(ITEMS, instruction="  "), atol=1e-6)


def test_batched_and_single_encodings_agree(model):
    together = model.encode(ITEMS)
    alone = np.concatenate([model.encode([item]) for item in ITEMS])
    np.testing.assert_allclose(together, alone, atol=1e-4)


def test_checkpoint_round_trip_through_the_registry(model, settings, tmp_path):
    from peft import LoraConfig, get_peft_model

    trained = MedEmbLiteEmbedder(model.config, model.card)
    trained.backbone = get_peft_model(
        trained.backbone, LoraConfig(r=8, lora_alpha=32, target_modules=trained.lora_targets)
    )
    with torch.no_grad():  # move the adapter and projection off their initial values
        for name, parameter in trained.named_parameters():
            if "lora_B" in name or name.startswith("projection"):
                parameter.add_(0.01 * torch.randn_like(parameter))
    expected = trained.encode(ITEMS, instruction=INSTRUCTION)
    folder = settings.trained_models_dir / "medemb-lite"
    card = trained.save_checkpoint(folder, {"description": "test"})
    assert read_checkpoint_config(folder)["model"]["image_size"] == 96
    assert (folder / "adapter" / "adapter_config.json").is_file()

    registry.clear_cache()
    # By path: the plain "medemb-lite" spec names the committed checkpoint in models/.
    loaded = registry.load_embedder(f"medemb-lite@{folder}", settings)
    assert loaded.card.fingerprint == card.fingerprint
    np.testing.assert_allclose(loaded.encode(ITEMS, instruction=INSTRUCTION), expected, atol=1e-4)
    assert loaded.card.dims == 384
    assert "medemb-lite" in registry.valid_specs(settings)
    assert any(m["spec"] == "medemb-lite" for m in registry.list_models(settings))


def test_missing_checkpoint_says_how_to_train_one(settings):
    registry.clear_cache()
    with pytest.raises(FileNotFoundError, match="train medemb"):
        registry.load_embedder("medemb-lite@no-such-tag", settings)
