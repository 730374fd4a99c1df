"""EmbeddingCache and embed_with_cache: each (model, item, instruction) is embedded once."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from medheb_app.evidence.study import EmbedItem, as_evidence
from medheb_app.index.cache import EmbeddingCache, cache_key, embed_with_cache
from medheb_app.models.base import ModelCard, l2_normalise


class HashingTextEmbedder:
    """A tiny real embedder: a text's vector is a seeded random unit vector of its bytes."""

    def __init__(self, version: str = "1") -> None:
        self.card = ModelCard(
            name="hash-text", version=version, dims=8, modalities=("text",), license="MIT"
        )
        self.encoded: list[str] = []

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        texts = [(instruction or "") + (as_evidence(item).text or "") for item in items]
        self.encoded.extend(texts)
        rows = []
        for text in texts:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            rows.append(np.random.default_rng(seed).standard_normal(8))
        return l2_normalise(np.stack(rows))


def test_cache_put_get_round_trip_and_fingerprint_isolation(tmp_path) -> None:
    cache = EmbeddingCache(tmp_path)
    vectors = l2_normalise(np.arange(12, dtype=np.float32).reshape(3, 4) + 1)
    cache.put("model-a", ["x", "y", "z"], vectors)
    got = cache.get("model-a", ["z", "x", "missing"])
    assert set(got) == {"x", "z"}
    np.testing.assert_array_equal(got["z"], vectors[2])
    assert cache.get("model-b", ["x"]) == {}
    assert cache.count("model-a") == 3
    assert cache.fingerprints() == ["model-a"]
    assert EmbeddingCache(tmp_path).count() == 3  # persisted on disk
    assert cache.clear("model-a") == 3
    assert cache.count() == 0


def test_instruction_changes_the_key() -> None:
    assert cache_key("q1") == "q1"
    assert cache_key("q1", "Find the image:") != cache_key("q1", "Find the report:")
    assert cache_key("q1", "Find the image:").startswith("q1|")


def test_embed_with_cache_embeds_only_misses(tmp_path) -> None:
    cache = EmbeddingCache(tmp_path)
    embedder = HashingTextEmbedder()
    texts = [f"report {i}" for i in range(10)]
    ids = [f"r{i}" for i in range(10)]
    first = embed_with_cache(embedder, texts[:6], ids[:6], cache, batch_size=4)
    assert len(embedder.encoded) == 6
    events: list[tuple[float, str]] = []
    both = embed_with_cache(
        embedder, texts, ids, cache, batch_size=4, progress=lambda f, m: events.append((f, m))
    )
    assert len(embedder.encoded) == 10  # only the 4 new ones were embedded
    np.testing.assert_array_equal(both[:6], first)
    np.testing.assert_allclose(both, embedder.encode(texts), atol=1e-6)
    assert events[0][0] == 0.0 and events[-1][0] == pytest.approx(1.0)
    assert "6 of 10 embeddings cached" in events[0][1]


def test_instruction_and_model_version_are_cached_separately(tmp_path) -> None:
    cache = EmbeddingCache(tmp_path)
    plain = embed_with_cache(HashingTextEmbedder(), ["a"], ["a"], cache)
    with_instruction = embed_with_cache(
        HashingTextEmbedder(), ["a"], ["a"], cache, instruction="Q: "
    )
    retrained = HashingTextEmbedder(version="2")
    embed_with_cache(retrained, ["a"], ["a"], cache)
    assert not np.allclose(plain, with_instruction)
    assert retrained.encoded == ["a"]  # a new fingerprint is a miss
    assert cache.count() == 3


def test_duplicate_ids_are_embedded_once_and_stop_cancels(tmp_path) -> None:
    embedder = HashingTextEmbedder()
    vectors = embed_with_cache(embedder, ["a", "a", "b"], ["1", "1", "2"], None)
    assert embedder.encoded == ["a", "b"]
    np.testing.assert_array_equal(vectors[0], vectors[1])
    stop = threading.Event()
    stop.set()
    with pytest.raises(InterruptedError):
        embed_with_cache(embedder, ["c"], ["3"], EmbeddingCache(tmp_path), stop=stop)
    with pytest.raises(ValueError, match="2 items but 1 ids"):
        embed_with_cache(embedder, ["a", "b"], ["1"], None)


def test_concurrent_writers_share_one_cache(tmp_path) -> None:
    cache = EmbeddingCache(tmp_path)
    errors: list[Exception] = []

    def write(worker: int) -> None:
        try:
            texts = [f"w{worker}-{i}" for i in range(50)]
            embed_with_cache(HashingTextEmbedder(), texts, texts, cache, batch_size=5)
        except Exception as error:  # surfaced below
            errors.append(error)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert cache.count() == 200
