"""The one bounded LRU (medheb_app/bounded_lru.py) under the answer and query-vector caches."""

from __future__ import annotations

import threading

from medheb_app.bounded_lru import BoundedLRU


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: BoundedLRU[str, int] = BoundedLRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recent, so "b" goes next
    cache.put("c", 3)
    assert [cache.get(key) for key in "abc"] == [1, None, 3]
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.size, stats.capacity) == (3, 1, 2, 2)


def test_a_stale_entry_is_a_miss_and_is_dropped() -> None:
    cache: BoundedLRU[str, int] = BoundedLRU(4)
    cache.put("a", 1)
    assert cache.get("a", current=lambda value: value == 2) is None
    assert cache.stats().size == 0
    assert cache.get("a") is None
    assert (cache.stats().hits, cache.stats().misses) == (0, 2)


def test_a_put_may_change_the_bound_and_clear_zeroes_the_counts() -> None:
    cache: BoundedLRU[int, int] = BoundedLRU(8)
    for key in range(5):
        cache.put(key, key)
    cache.put(5, 5, capacity=2)
    assert cache.stats().size == 2 and cache.capacity == 2
    assert cache.get(4) == 4 and cache.get(0) is None
    cache.clear()
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.size) == (0, 0, 0)


def test_threads_sharing_it_keep_it_within_its_bound() -> None:
    cache: BoundedLRU[tuple[int, int], int] = BoundedLRU(50)

    def work(thread: int) -> None:
        for i in range(2000):
            cache.put((thread, i % 100), i)
            cache.get((thread, (i * 7) % 100))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = cache.stats()
    assert stats.size == 50
    assert stats.hits + stats.misses == 4 * 2000
