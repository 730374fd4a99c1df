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
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from medheb_app.models.base import Embedder
from medheb_app.models.device import intra_op_threads

DEFAULT_CAPACITY = 4096  # 4,096 x 384 float32 = 6 MB for MiniLM-sized vectors


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    size: int
    capacity: int

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class QueryVectorCache:
    """A thread-safe LRU map of (spec, fingerprint, text) -> a read-only (1, dims) vector."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._vectors: OrderedDict[tuple[str, str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def get(self, key: tuple[str, str, str]) -> np.ndarray | None:
        with self._lock:
            vector = self._vectors.get(key)
            if vector is None:
                self._misses += 1
                return None
            self._vectors.move_to_end(key)
            self._hits += 1
            return vector

    def put(self, key: tuple[str, str, str], vector: np.ndarray, capacity: int) -> None:
        stored = np.array(vector, dtype=np.float32, copy=True)
        stored.flags.writeable = False
        with self._lock:
            self.capacity = capacity
            self._vectors[key] = stored
            self._vectors.move_to_end(key)
            while len(self._vectors) > self.capacity:
                self._vectors.popitem(last=False)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, len(self._vectors), self.capacity)

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()
            self._hits = self._misses = 0


_CACHES: weakref.WeakKeyDictionary[Embedder, QueryVectorCache] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def cache_of(embedder: Embedder) -> QueryVectorCache | None:
    """This embedder's cache (made on first use); None for an object that cannot be weakly
    referenced or hashed (such an embedder is simply encoded every time)."""
    with _CACHES_LOCK:
        try:
            cache = _CACHES.get(embedder)
            if cache is None:
                cache = _CACHES[embedder] = QueryVectorCache()
        except TypeError:
            return None
        return cache


def encode_query_text(
    embedder: Embedder, text: str, spec: str, capacity: int = DEFAULT_CAPACITY, threads: int = 0
) -> np.ndarray:
    """The (1, dims) embedding of one query text: from the cache when this exact text was
    encoded by this model lately, else encoded (with `threads` torch intra-op threads,
    models.device.intra_op_threads) and remembered. The caller may modify the array."""
    cache = cache_of(embedder) if capacity > 0 else None
    key = (spec, embedder.card.fingerprint, text)
    if cache is not None:
        vector = cache.get(key)
        if vector is not None:
            return vector.copy()
    with intra_op_threads(threads):
        vector = embedder.encode([text])
    if cache is not None:
        cache.put(key, vector, capacity)
    return vector


__all__ = ["CacheStats", "QueryVectorCache", "cache_of", "encode_query_text"]
