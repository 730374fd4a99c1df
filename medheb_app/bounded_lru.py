"""The one bounded, thread-safe LRU map of the package, with hit and miss counts: the API's
answer cache (api/answers.py) and the query-vector cache (models/query_cache.py) both keep
their entries in one.

A leaf: it imports nothing from medheb_app, so both the api/ and models/ layers may import it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


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


class BoundedLRU(Generic[Key, Value]):
    """A map of at most `capacity` entries that drops the least recently used first; every
    method holds one lock, so threads may share it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[Key, Value] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def get(self, key: Key, current: Callable[[Value], bool] | None = None) -> Value | None:
        """The value kept for `key`, now the most recently used; None (a miss) when there is
        none, or when `current(value)` says it is stale, which also drops it."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None and current is not None and not current(found):
                del self._entries[key]
                found = None
            if found is None:
                self._misses += 1
                return None
            self._entries.move_to_end(key)
            self._hits += 1
            return found

    def put(self, key: Key, value: Value, capacity: int | None = None) -> None:
        """Keep `value` as the most recently used, first taking `capacity` as the new bound
        when given, then drop the oldest entries past the bound."""
        with self._lock:
            if capacity is not None:
                self.capacity = capacity
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, len(self._entries), self.capacity)

    def clear(self) -> None:
        """Drop every entry and zero the counts."""
        with self._lock:
            self._entries.clear()
            self._hits = self._misses = 0
