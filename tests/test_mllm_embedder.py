"""The mllm: embedder on a tiny random-weight Qwen2-VL saved to disk and loaded by spec."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from medheb_app.evidence.study import Evidence
from medheb_app.models import registry
from medheb_app.models.mllm import DEFAULT_INSTRUCTION, MLLMEmbedder, last_token, parse_spec
from tests.mllm_tiny import build_tiny_qwen2_vl

RNG = np.random.default_rng(0)
IMAGE = RNG.random((40, 56)).astype(np.float32)
VOLUME = RNG.random((20, 32, 32)).astype(np.float32)
ITEMS = [
    "No pleural effusion.",
    Evidence(image=IMAGE),
    Evidence(volume=VOLUME),
    Evidence(image=IMAGE, text="left pleural effusion"),
]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen2-vl"))


@pytest.fixture
def embedder(tiny_dir, settings) -> MLLMEmbedder:
    registry.clear_cache()
    return registry.load_embedder(f"mllm:{tiny_dir}", settings)


def test_every_form_embeds_to_unit_float32_vectors(embedder):
    vectors = embedder.encode(ITEMS)
    assert vectors.shape == (4, 64) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert embedder.card.dims == 64 and embedder.card.modalities == ("text", "2d", "3d")
    # image alone and image + text are different inputs, so different vectors
    assert float(vectors[1] @ vectors[3]) < 0.9999


def test_instruction_goes_to_the_system_turn_of_queries_only(embedder):
    instruction = "Find the same category image with the provided image:"
    chat = embedder.processor.apply_chat_template(
        [[{"role": "system", "content": [{"type": "text", "text": instruction}]}]], tokenize=False
    )[0]
    assert instruction in chat
    queries = embedder.encode(ITEMS, instruction=instruction)
    candidates = embedder.encode(ITEMS)
    assert np.all(np.sum(queries * candidates, axis=1) < 0.9999)
    # a candidate is encoded with the neutral default, whatever task it belongs to
    np.testing.assert_allclose(candidates, embedder.encode(ITEMS, DEFAULT_INSTRUCTION), atol=1e-6)
    tokens = embedder.tokens([Evidence(text="x")], [None])
    text = embedder.processor.tokenizer.decode(tokens["input_ids"][0])
    assert DEFAULT_INSTRUCTION in text and instruction not in text


def test_batched_and_single_encodings_agree_despite_padding(embedder):
    together = embedder.encode(ITEMS)
    alone = np.concatenate([embedder.encode([item]) for item in ITEMS])
    np.testing.assert_allclose(together, alone, atol=1e-4)


def test_volume_is_sampled_frames_as_a_video(embedder):
    short = embedder.sequence_length(Evidence(volume=VOLUME[:4]), None)
    long = embedder.sequence_length(Evidence(volume=VOLUME), None)
    assert long > short
    other = Evidence(volume=RNG.random((20, 32, 32)).astype(np.float32))
    vectors = embedder.encode([Evidence(volume=VOLUME), other])
    assert float(vectors[0] @ vectors[1]) < 0.9999
    tokens = embedder.tokens([Evidence(volume=VOLUME)], [None])
    assert "pixel_values_videos" in tokens and "mm_token_type_ids" in tokens


def test_embedding_is_the_final_normed_state_of_the_last_token(embedder):
    captured = {}
    norm = embedder.backbone.language_model.norm
    handle = norm.register_forward_hook(lambda m, i, out: captured.setdefault("out", out))
    try:
        inputs = embedder.tokens([Evidence(text=str(ITEMS[0])), ITEMS[1]], [None, None])
        with torch.inference_mode():
            hidden = embedder.backbone(**inputs).last_hidden_state
    finally:
        handle.remove()
    assert torch.equal(hidden, captured["out"])  # last_hidden_state is after the final norm
    expected = torch.nn.functional.normalize(last_token(hidden, inputs["attention_mask"]), dim=-1)
    np.testing.assert_allclose(embedder.encode(ITEMS[:2]), expected.numpy(), atol=1e-5)


def test_pixel_budget_is_explicit(tiny_dir, settings):
    small = registry.load_embedder(f"mllm:{tiny_dir}?min_pixels=256&max_pixels=1024", settings)
    large = registry.load_embedder(f"mllm:{tiny_dir}?max_pixels=4096", settings)
    image = Evidence(image=RNG.random((128, 128)).astype(np.float32))
    assert small.sequence_length(image, None) < large.sequence_length(image, None)
    assert small.card.fingerprint != large.card.fingerprint


def test_last_token_handles_left_and_right_padding():
    hidden = torch.arange(12.0).view(2, 3, 2)
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    assert last_token(hidden, mask).tolist() == [[2.0, 3.0], [10.0, 11.0]]


def test_bad_specs_say_what_is_wrong(tiny_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        parse_spec(f"mllm:{tmp_path / 'absent'}")
    with pytest.raises(ValueError, match="Unknown mllm option"):
        parse_spec(f"mllm:{tiny_dir}?pixels=3")
    with pytest.raises(ValueError, match="integer"):
        parse_spec(f"mllm:{tiny_dir}?frames=many")
