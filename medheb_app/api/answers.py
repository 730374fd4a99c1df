"""A bounded LRU cache of text-search answers: a repeated search skips ranking, shaping and
serialising its document (the logic ranking alone is 3-5 ms of a 2-core machine's time).

An answer is a function of the request as validated (search.validate: the trimmed text, model
spec, index, k, ranking, setting, the index knobs, include_training, public), the caller's
rights (anonymous, or a token's scope), the model and its weights fingerprint, the index
build searched and that build's logic state (ranking/index_logic.generation). The key holds
every one of these, and an entry keeps weak references to the model object and the index
build it was made from: it is used only while the registry and the catalog still hand out
those same objects, which they replace when a checkpoint or a build changes on disk
(registry.load_embedder, catalog.load_index). An answer made while a build was still being
prepared for logic ranking (its warnings say so) is never kept: the next search may rank
differently. Limits and the audit log are not this cache's business: the route counts and
audits every search, answered from here or not.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from typing import Any

from medheb_app.bounded_lru import BoundedLRU
from medheb_app.ranking import index_logic
from medheb_app.search import IN_SAMPLE_WARNING, PROBES_NOT_READY, Prepared

# Warnings of a build whose logic ranking is not fully prepared yet: such answers are not kept.
TRANSIENT = (PROBES_NOT_READY, IN_SAMPLE_WARNING.split(":", 1)[0].removeprefix("{count}"))


@dataclass(frozen=True)
class Answer:
    """A cached answer: its JSON without `timings_ms` (added per request) and its hit count."""

    body: bytes
    count: int
    model: weakref.ref
    build: weakref.ref


def key_of(prepared: Prepared, rights: str) -> tuple:
    """Everything an answer depends on, but the objects (checked by identity on a hit)."""
    return (
        prepared.request,
        rights,
        prepared.embedder.card.fingerprint,
        str(prepared.loaded.directory),
        index_logic.generation(),
    )


def keepable(warnings: list[str]) -> bool:
    """Whether an answer with these warnings may be reused (no preparation still pending)."""
    return not any(part in warning for warning in warnings for part in TRANSIENT)


def with_timings(body: bytes, timings: dict[str, float]) -> bytes:
    """The answer's JSON with `timings_ms` appended as its last member."""
    return body[:-1] + b',"timings_ms":' + json.dumps(timings).encode() + b"}"


class AnswerCache:
    """Thread-safe LRU (bounded_lru.BoundedLRU) of key_of(...) -> Answer; a capacity below 1
    keeps nothing."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._answers: BoundedLRU[tuple, Answer] = BoundedLRU(capacity)

    @property
    def hits(self) -> int:
        return self._answers.stats().hits

    @property
    def misses(self) -> int:
        return self._answers.stats().misses

    def get(self, prepared: Prepared, rights: str) -> Answer | None:
        """The answer kept for this request and caller, made from these very model and build
        objects; None otherwise (and one made from others is dropped)."""
        if self.capacity < 1 or prepared.request.text is None:
            return None

        def current(found: Answer) -> bool:
            return found.model() is prepared.embedder and found.build() is prepared.loaded

        return self._answers.get(key_of(prepared, rights), current)

    def put(self, prepared: Prepared, rights: str, document: dict[str, Any], body: bytes) -> None:
        """Keep `body` (the answer's JSON without timings) for this request and caller."""
        if self.capacity < 1 or prepared.request.text is None:
            return
        if not keepable(list(document.get("warnings") or [])):
            return
        answer = Answer(
            body,
            len(document.get("results") or []),
            weakref.ref(prepared.embedder),
            weakref.ref(prepared.loaded),
        )
        self._answers.put(key_of(prepared, rights), answer)

    def clear(self) -> None:
        self._answers.clear()


__all__ = ["Answer", "AnswerCache", "keepable", "key_of", "with_timings"]
