"""A bounded LRU cache of query text -> embedding, one per loaded embedder.

A search service sees the same queries again ("pleural effusion", "cardiomegaly and no
edema"): a worklist script polls, a page is reloaded, colleagues type the common findings.
Encoding a query with the text tower is most of a text search's time on a CPU (the MiniLM
forward pass: about 15 of 18 ms on the demo; BENCHMARKS.md "HTTP API"), and the vector of a
text under fixed weights never changes, so the service keeps the last `capacity` of them.

The key is the model spec, the embedder's card fingerprint (its weights and preprocessing:
a checkpoint retrained in place gets a new one) and the exact text encoded, after the
whitespace trim the search makes; nothing looser (no case folding or word reordering), so a
hit returns exactly what encoding would. The cache lives with the embedder object (a weak
reference), so a model the registry drops takes its cache with it. A capacity below 1
disables it (MEDHEB_QUERY_CACHE=0).

Misses that arrive while this model is already encoding a query wait and are then encoded
together in one forward pass (QueryBatcher): on a CPU a batch of eight short queries costs
little more than one, so under load the queue of misses drains in a few forwards instead of
one each. A lone query is encoded at once, never held back for company. A batched vector
equals the one-at-a-time encode within float32 rounding (padding and matrix shapes differ),
not bit for bit; tests/test_api_query_cache.py checks both and that rankings agree.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from medheb_app.bounded_lru import BoundedLRU, CacheStats
from medheb_app.models.base import Embedder
from medheb_app.models.device import intra_op_threads

DEFAULT_CAPACITY = 4096  # 4,096 x 384 float32 = 6 MB for MiniLM-sized vectors
DEFAULT_BATCH = 16  # most query texts one forward pass encodes (MEDHEB_QUERY_BATCH; 1: none)
BATCH_SLOTS = 1  # forward passes one model runs at once under QueryBatcher


class QueryVectorCache(BoundedLRU[tuple[str, str, str], np.ndarray]):
    """A thread-safe LRU map of (spec, fingerprint, text) -> a read-only (1, dims) vector."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        super().__init__(capacity)

    def put(
        self, key: tuple[str, str, str], vector: np.ndarray, capacity: int | None = None
    ) -> None:
        """Keep a read-only float32 copy of `vector` (the caller may go on changing its own)."""
        stored = np.array(vector, dtype=np.float32, copy=True)
        stored.flags.writeable = False
        super().put(key, stored, capacity)


class _Waiter:
    """One query text waiting for its vector; the first of a batch is the thread encoding it."""

    __slots__ = ("batch", "done", "error", "text", "vector")

    def __init__(self, text: str) -> None:
        self.text = text
        self.done = threading.Event()
        self.batch: list[_Waiter] | None = None  # set when this waiter's thread is to encode
        self.vector: np.ndarray | None = None
        self.error: BaseException | None = None


class QueryBatcher:
    """Encode concurrent query misses of one model in shared forward passes.

    No thread of its own and no timer: a request that finds the model idle encodes its text
    at once; one that finds it busy queues. When an encode finishes, its thread hands the
    queued texts (up to `limit`, distinct texts once) to the first queued request's thread,
    which encodes them as one batch, and returns its own vector. So at most `slots` encodes per
    model run at a time (1: the other core is left to the requests answered from caches; 2
    measured no better on 2 cores, BENCHMARKS.md).
    """

    def __init__(self, slots: int = BATCH_SLOTS) -> None:
        self.slots = max(1, slots)
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._busy = 0  # forward passes running
        self.batches = 0  # forward passes run, and texts they encoded (for tests and benches)
        self.texts = 0

    def encode(
        self, text: str, encode: Callable[[list[str]], np.ndarray], limit: int = DEFAULT_BATCH
    ) -> np.ndarray:
        """The (1, dims) vector of `text`, encoded by `encode(texts) -> (n, dims)` alone or
        in one batch with the texts queued beside it. An error of a batch's encode is raised
        in every request of that batch."""
        waiter = _Waiter(text)
        with self._lock:
            self._queue.append(waiter)
            if self._busy < self.slots:
                self._busy += 1
                waiter.batch = self._take(limit)
        if waiter.batch is None:
            waiter.done.wait()  # set with a vector or an error, or with a batch to encode
        if waiter.batch is not None:
            self._run(waiter.batch, encode, limit)
        if waiter.error is not None:
            raise waiter.error
        assert waiter.vector is not None
        return waiter.vector

    def _take(self, limit: int) -> list[_Waiter]:
        """The next batch off the queue (the lock is held): its first `limit` distinct texts
        and every other waiter for one of them."""
        texts: set[str] = set()
        batch, rest = [], []
        for waiter in self._queue:
            if waiter.text in texts or len(texts) < max(1, limit):
                texts.add(waiter.text)
                batch.append(waiter)
            else:
                rest.append(waiter)
        self._queue = rest
        return batch

    def _run(
        self, batch: list[_Waiter], encode: Callable[[list[str]], np.ndarray], limit: int
    ) -> None:
        """Encode `batch`, hand the queue to its next thread (or mark the model idle), then
        wake the batch's other requests."""
        texts = list(dict.fromkeys(waiter.text for waiter in batch))
        try:
            vectors = np.asarray(encode(texts), dtype=np.float32)
            if vectors.shape[0] != len(texts):
                raise ValueError(f"{vectors.shape[0]} vectors for {len(texts)} texts")
            rows = {text: vectors[i : i + 1] for i, text in enumerate(texts)}
            for waiter in batch:
                waiter.vector = rows[waiter.text].copy()
        except BaseException as error:  # every request of the batch answers with it
            for waiter in batch:
                waiter.error = error
        finally:
            with self._lock:
                self.batches += 1
                self.texts += len(texts)
                successor = None
                if self._queue:
                    successor = self._queue[0]
                    successor.batch = self._take(limit)
                else:
                    self._busy -= 1
            if successor is not None:
                successor.done.set()
            for waiter in batch:
                waiter.batch = None
                waiter.done.set()


_CACHES: weakref.WeakKeyDictionary[Embedder, QueryVectorCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _per_embedder(table: weakref.WeakKeyDictionary, embedder: Embedder, make: Any) -> Any:
    """table[embedder], made by `make()` on first use; None for an object that cannot be weakly
    referenced or hashed (such an embedder is simply encoded every time, one at a time)."""
    with _CACHES_LOCK:
        try:
            held = table.get(embedder)
            if held is None:
                held = table[embedder] = make()
        except TypeError:
            return None
        return held


def cache_of(embedder: Embedder) -> QueryVectorCache | None:
    """This embedder's cache (made on first use); None where it cannot be weakly referenced."""
    return _per_embedder(_CACHES, embedder, QueryVectorCache)


_BATCHERS: weakref.WeakKeyDictionary[Embedder, QueryBatcher] = weakref.WeakKeyDictionary()


def batcher_of(embedder: Embedder) -> QueryBatcher | None:
    """This embedder's batcher (made on first use); None where it cannot be weakly referenced."""
    return _per_embedder(_BATCHERS, embedder, QueryBatcher)


def encode_query_text(
    embedder: Embedder,
    text: str,
    spec: str,
    capacity: int = DEFAULT_CAPACITY,
    threads: int = 0,
    batch: int = DEFAULT_BATCH,
) -> np.ndarray:
    """The (1, dims) embedding of one query text: from the cache when this exact text was
    encoded by this model lately, else encoded (with `threads` torch intra-op threads,
    models.device.intra_op_threads; with up to `batch` texts other requests are waiting on
    at the same time, QueryBatcher) and remembered. The caller may modify the array."""
    cache = cache_of(embedder) if capacity > 0 else None
    key = (spec, embedder.card.fingerprint, text)
    if cache is not None:
        vector = cache.get(key)
        if vector is not None:
            return vector.copy()

    def encode(texts: list[str]) -> np.ndarray:
        with intra_op_threads(threads):
            return embedder.encode(texts)

    batcher = batcher_of(embedder) if batch > 1 else None
    vector = batcher.encode(text, encode, batch) if batcher is not None else encode([text])
    if cache is not None:
        cache.put(key, vector, capacity)
    return vector


__all__ = [
    "CacheStats",
    "QueryBatcher",
    "QueryVectorCache",
    "batcher_of",
    "cache_of",
    "encode_query_text",
]
