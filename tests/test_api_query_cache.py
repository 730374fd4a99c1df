"""The query-embedding cache (medheb_app.models.query_cache): a repeated query text is encoded
once per model, a hit returns exactly the vector encoding gives, the cache is bounded (least
recently used first out) and keyed by model and exact text, MEDHEB_QUERY_CACHE=0 turns it off,
and over HTTP a repeated search answers the same ranking as the first one. Concurrent misses
share a forward pass (QueryBatcher): each request gets its own text's vector, a lone one is
encoded alone, an error reaches the whole batch, and with the real text tower a batched vector
is the one-at-a-time vector within float32 rounding, ranking a bank the same."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from medheb_app.models.baselines import RandomEmbedder
from medheb_app.models.query_cache import batcher_of, cache_of, encode_query_text
from medheb_app.settings import Settings


class CountingEmbedder(RandomEmbedder):
    """The random baseline (a vector per text, seeded by its content) counting its encodes."""

    def __init__(self) -> None:
        super().__init__(dims=16)
        self.encoded: list[str] = []

    def encode(self, items, instruction=None):
        self.encoded.extend(items)
        return super().encode(items, instruction)


def test_a_repeated_text_is_encoded_once_and_gets_the_same_vector():
    embedder = CountingEmbedder()
    first = encode_query_text(embedder, "pleural effusion", "random", capacity=8)
    first[0, 0] = 99.0  # the caller owns its copy: the cache keeps the original
    again = encode_query_text(embedder, "pleural effusion", "random", capacity=8)
    assert embedder.encoded == ["pleural effusion"]
    np.testing.assert_array_equal(again, RandomEmbedder(dims=16).encode(["pleural effusion"]))
    stats = cache_of(embedder).stats()
    assert (stats.hits, stats.misses, stats.size) == (1, 1, 1) and stats.hit_rate == 0.5


def test_keys_are_the_model_and_the_exact_text():
    embedder = CountingEmbedder()
    for text, spec in [("edema", "random"), ("Edema", "random"), ("edema ", "random"),
                       ("edema", "random@other")]:  # fmt: skip
        encode_query_text(embedder, text, spec, capacity=8)
    assert embedder.encoded == ["edema", "Edema", "edema ", "edema"]
    other = CountingEmbedder()  # another loaded model has its own cache
    encode_query_text(other, "edema", "random", capacity=8)
    assert other.encoded == ["edema"]


def test_the_cache_is_bounded_least_recently_used_first_out():
    embedder = CountingEmbedder()
    for text in ["a", "b", "c", "a", "d"]:  # "a" used again before "d": "b" is the oldest
        encode_query_text(embedder, text, "random", capacity=3)
    assert cache_of(embedder).stats().size == 3
    embedder.encoded.clear()
    for text in ["a", "c", "d", "b"]:
        encode_query_text(embedder, text, "random", capacity=3)
    assert embedder.encoded == ["b"]


def test_capacity_zero_encodes_every_time():
    embedder = CountingEmbedder()
    for _ in range(3):
        encode_query_text(embedder, "rib fracture", "random", capacity=0)
    assert embedder.encoded == ["rib fracture"] * 3
    assert Settings.from_env(query_cache=0).query_cache == 0


class GatedEmbedder(CountingEmbedder):
    """Its first encode waits for `gate`, so the test can queue requests behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.batches: list[list[str]] = []

    def encode(self, items, instruction=None):
        self.batches.append(list(items))
        self.entered.set()
        self.gate.wait(10)
        return super().encode(items, instruction)


def _queued(embedder, count: int) -> None:
    """Wait until `count` requests wait in the embedder's batcher queue."""
    batcher = batcher_of(embedder)
    deadline = time.monotonic() + 10
    while len(batcher._queue) < count and time.monotonic() < deadline:
        time.sleep(0.002)
    assert len(batcher._queue) == count


def _concurrently(embedder, texts: list[str], capacity: int = 0, batch: int = 16):
    """Encode texts[0] first, queue the rest behind it, then let the encodes run; each
    request's vector in order."""
    out: list[np.ndarray | BaseException | None] = [None] * len(texts)

    def ask(i: int) -> None:
        try:
            out[i] = encode_query_text(embedder, texts[i], "random", capacity, batch=batch)
        except BaseException as error:  # the test inspects it
            out[i] = error

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    threads[0].start()
    assert embedder.entered.wait(10)
    for i, thread in enumerate(threads[1:], start=1):
        thread.start()
        _queued(embedder, i)
    embedder.gate.set()
    for thread in threads:
        thread.join(10)
    return out


def test_concurrent_misses_share_one_forward_and_each_gets_its_own_vector():
    embedder = GatedEmbedder()
    texts = ["edema", "effusion", "rib fracture", "effusion", "pneumothorax", "no edema"]
    out = _concurrently(embedder, texts)
    # the first alone (the model was idle), then the five queued behind it as one batch,
    # the repeated "effusion" encoded once
    assert embedder.batches == [["edema"], ["effusion", "rib fracture", "pneumothorax", "no edema"]]
    reference = RandomEmbedder(dims=16)
    for text, vector in zip(texts, out, strict=True):
        np.testing.assert_array_equal(vector, reference.encode([text]))
    out[1][0, 0] = 5.0  # each request owns its array, also when two asked for one text
    assert out[3][0, 0] != 5.0
    batcher = batcher_of(embedder)
    assert (batcher.batches, batcher.texts) == (2, 5) and not batcher._busy


def test_the_batch_limit_splits_the_queue_into_several_forwards():
    embedder = GatedEmbedder()
    texts = ["a", "b", "c", "d", "e", "f"]
    out = _concurrently(embedder, texts, capacity=8, batch=2)
    assert embedder.batches == [["a"], ["b", "c"], ["d", "e"], ["f"]]
    for text, vector in zip(texts, out, strict=True):
        np.testing.assert_array_equal(vector, RandomEmbedder(dims=16).encode([text]))
    assert cache_of(embedder).stats().size == 6  # every batched vector was remembered


def test_a_lone_query_is_encoded_alone_and_batch_one_turns_batching_off():
    embedder = CountingEmbedder()
    for text in ["edema", "effusion"]:
        encode_query_text(embedder, text, "random", capacity=0)
    assert embedder.encoded == ["edema", "effusion"]  # one at a time, no waiting for company
    assert batcher_of(embedder).batches == 2
    other = CountingEmbedder()
    encode_query_text(other, "edema", "random", capacity=0, batch=1)
    assert batcher_of(other).batches == 0  # encoded directly, the batcher never used
    assert Settings.from_env().query_batch == 16
    assert Settings.from_env(query_batch=1).query_batch == 1


def test_two_slots_encode_two_lone_queries_at_once():
    from medheb_app.models.query_cache import QueryBatcher

    gate, inside = threading.Event(), threading.Semaphore(0)

    def encode(texts):
        inside.release()
        gate.wait(10)
        return RandomEmbedder(dims=16).encode(texts)

    batcher = QueryBatcher(slots=2)
    out: dict[str, np.ndarray] = {}
    threads = [
        threading.Thread(target=lambda t=t: out.update({t: batcher.encode(t, encode)}))
        for t in ("a", "b")
    ]
    for thread in threads:
        thread.start()
    assert inside.acquire(timeout=10) and inside.acquire(timeout=10)  # both inside at once
    assert batcher._busy == 2 and not batcher._queue
    gate.set()
    for thread in threads:
        thread.join(10)
    assert batcher._busy == 0 and (batcher.batches, batcher.texts) == (2, 2)
    np.testing.assert_array_equal(out["b"], RandomEmbedder(dims=16).encode(["b"]))


class FailingEmbedder(GatedEmbedder):
    """Its second forward (the queued batch) fails; later ones work."""

    def encode(self, items, instruction=None):
        vectors = super().encode(items, instruction)
        if len(self.batches) == 2:
            raise RuntimeError("the tower ran out of memory")
        return vectors


def test_an_error_reaches_every_request_of_its_batch_and_the_model_recovers():
    embedder = FailingEmbedder()
    out = _concurrently(embedder, ["a", "b", "c"])
    assert isinstance(out[0], np.ndarray)
    assert all(isinstance(o, RuntimeError) for o in out[1:])
    assert not batcher_of(embedder)._busy  # the failed batch handed the model back
    again = encode_query_text(embedder, "b", "random", 0)
    np.testing.assert_array_equal(again, RandomEmbedder(dims=16).encode(["b"]))


def test_many_threads_at_once_each_get_their_texts_vector():
    """No gate: 32 threads over 8 texts racing each other through the batcher."""
    embedder = CountingEmbedder()
    texts = [f"finding {i % 8}" for i in range(32)]
    out: list[np.ndarray | None] = [None] * len(texts)
    start = threading.Barrier(len(texts))

    def ask(i: int) -> None:
        start.wait()
        out[i] = encode_query_text(embedder, texts[i], "random", 0)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    reference = RandomEmbedder(dims=16)
    for text, vector in zip(texts, out, strict=True):
        np.testing.assert_array_equal(vector, reference.encode([text]))
    assert not batcher_of(embedder)._busy and not batcher_of(embedder)._queue


def test_the_real_text_tower_batched_equals_one_at_a_time_and_ranks_the_same():
    """MiniLM with untrained dual-lite heads: the queries of bench/bench_api.py encoded in
    batches of 16 against one at a time, and the top 10 of a 2,000-vector bank for each."""
    from bench.bench_api import query_space
    from medheb_app.models.dual_lite import untrained

    embedder = untrained()
    texts = query_space()[:64]
    alone = np.concatenate([embedder.encode([text]) for text in texts])
    batched = np.concatenate([embedder.encode(texts[i : i + 16]) for i in range(0, 64, 16)])
    np.testing.assert_allclose(batched, alone, rtol=0, atol=2e-6)
    rng = np.random.default_rng(0)
    bank = rng.standard_normal((2000, alone.shape[1])).astype(np.float32)
    bank /= np.linalg.norm(bank, axis=1, keepdims=True)
    top = [np.argsort(-(vectors @ bank.T), axis=1)[:, :10] for vectors in (alone, batched)]
    np.testing.assert_array_equal(top[0], top[1])


def test_the_environment_sets_the_capacity(monkeypatch):
    monkeypatch.setenv("MEDHEB_QUERY_CACHE", "17")
    assert Settings.from_env().query_cache == 17
    monkeypatch.delenv("MEDHEB_QUERY_CACHE")
    assert Settings.from_env().query_cache == 4096


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from tests.api_site import running_site

    with running_site(tmp_path_factory.mktemp("api-cache"), {"TRUST_PROXY_HEADERS": "1"}) as up:
        yield up


def test_a_repeated_text_over_http_hits_the_cache_and_ranks_the_same(site):
    from medheb_app.models.registry import load_embedder

    query = {
        "text": "w3 target lungs and no effusion", "index": "ward-cxr", "k": 4,
        "ranking": "similarity",  # ward-cxr has no labels: logic ranking is refused
    }  # fmt: skip
    cache = cache_of(load_embedder("random", site.settings))
    before = cache.stats()
    with site.client("search") as client:
        first = client.post("/search", json=query)
        # another k is another answer (api/answers.py keeps whole answers): encoded again?
        second = client.post("/search", json={**query, "k": 3})
    assert first.status_code == second.status_code == 200, first.text
    after = cache.stats()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 1)
    ranked = [[(h["id"], h["score"]) for h in r.json()["results"]] for r in (first, second)]
    assert ranked[0][:3] == ranked[1] and len(ranked[0]) == 4


def test_a_hits_json_is_what_asdict_gives_without_sharing_its_containers():
    from dataclasses import asdict

    from medheb_app.search import SearchHit, SearchResponse

    box = {"finding": "Pleural Effusion", "x": 33.0, "y": 140.0, "w": 80.0, "h": 44.0}
    hit = SearchHit(1, "s1", -0.2, {"Pleural Effusion": 1, "Edema": None}, "demo", True,
                    violations={"Edema": "present"}, boxes=[box], score_kind="log_p",
                    p_query=0.8, log_odds=1.4, text="report")  # fmt: skip
    document = SearchResponse("q", "text", "m", "f", "ix", 1, results=[hit]).to_json()
    assert document["results"] == [asdict(hit)]
    document["results"][0]["boxes"][0]["x"] = 0.0
    document["results"][0]["findings"]["Edema"] = 1
    assert box["x"] == 33.0 and hit.findings["Edema"] is None
