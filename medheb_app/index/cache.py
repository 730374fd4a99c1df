"""An embedding cache keyed by (model fingerprint, item key), so nothing is embedded twice.

One SQLite file (WAL mode) per cache directory: readers never block the writer, and a web
app plus a background job can share it. Vectors are stored as float32 bytes. The fingerprint
(ModelCard.fingerprint) changes whenever a model's weights or preprocessing do, so a
retrained model never reads stale vectors.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from pathlib import Path

import numpy as np

from medheb_app.cancellation import Cancelled
from medheb_app.evidence.study import EmbedItem, Study
from medheb_app.models.base import Embedder

Progress = Callable[[float, str], None]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS embeddings (
    fingerprint TEXT NOT NULL,
    key TEXT NOT NULL,
    dims INTEGER NOT NULL,
    vector BLOB NOT NULL,
    PRIMARY KEY (fingerprint, key)
) WITHOUT ROWID
"""
_CHUNK = 500  # keys per SELECT, below SQLite's bound-parameter limit


def cache_key(item_id: str, instruction: str | None = None) -> str:
    """The item id, plus a short hash of the instruction when one is given.

    An instruction (a task's query prefix) changes the vector, so it must change the key.
    """
    if not instruction:
        return str(item_id)
    digest = hashlib.sha1(instruction.encode("utf-8")).hexdigest()[:8]
    return f"{item_id}|{digest}"


class EmbeddingCache:
    """Vectors stored under (fingerprint, key) in `directory`/embeddings.sqlite."""

    def __init__(self, directory: Path, timeout_s: float = 60.0) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "embeddings.sqlite"
        self.timeout_s = timeout_s
        with self._connect() as connection:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        """A fresh connection; SQLite connections must not cross threads."""
        connection = sqlite3.connect(self.path, timeout=self.timeout_s)
        connection.execute("PRAGMA synchronous=NORMAL")
        return connection

    def get(self, fingerprint: str, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors among `keys` (missing keys are simply absent)."""
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(keys))
        with closing(self._connect()) as connection:
            for start in range(0, len(unique), _CHUNK):
                chunk = unique[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = connection.execute(
                    f"SELECT key, dims, vector FROM embeddings "
                    f"WHERE fingerprint = ? AND key IN ({marks})",
                    [fingerprint, *chunk],
                )
                for key, dims, blob in rows:
                    found[key] = np.frombuffer(blob, dtype=np.float32, count=dims).copy()
        return found

    def put(self, fingerprint: str, keys: Sequence[str], vectors: np.ndarray) -> None:
        """Store (or replace) one vector per key, in one transaction."""
        array = np.ascontiguousarray(vectors, dtype=np.float32)
        if array.ndim != 2 or array.shape[0] != len(keys):
            raise ValueError(f"Expected {len(keys)} vectors as a 2D array; got {array.shape}.")
        rows = [
            (fingerprint, key, array.shape[1], row.tobytes())
            for key, row in zip(keys, array, strict=True)
        ]
        with closing(self._connect()) as connection, connection:
            connection.executemany(
                "INSERT OR REPLACE INTO embeddings (fingerprint, key, dims, vector) "
                "VALUES (?, ?, ?, ?)",
                rows,
            )

    def count(self, fingerprint: str | None = None) -> int:
        with closing(self._connect()) as connection:
            if fingerprint is None:
                return connection.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
            return connection.execute(
                "SELECT COUNT(*) FROM embeddings WHERE fingerprint = ?", (fingerprint,)
            ).fetchone()[0]

    def fingerprints(self) -> list[str]:
        with closing(self._connect()) as connection:
            rows = connection.execute("SELECT DISTINCT fingerprint FROM embeddings").fetchall()
        return sorted(row[0] for row in rows)

    def clear(self, fingerprint: str | None = None) -> int:
        """Delete one model's vectors (or all); returns how many rows went."""
        with closing(self._connect()) as connection, connection:
            if fingerprint is None:
                cursor = connection.execute("DELETE FROM embeddings")
            else:
                cursor = connection.execute(
                    "DELETE FROM embeddings WHERE fingerprint = ?", (fingerprint,)
                )
            return cursor.rowcount


def _batches(indices: Sequence[int], size: int) -> Iterable[list[int]]:
    for start in range(0, len(indices), size):
        yield list(indices[start : start + size])


def embed_with_cache(
    embedder: Embedder,
    items: Sequence[EmbedItem],
    ids: Sequence[str],
    cache: EmbeddingCache | None,
    instruction: str | None = None,
    batch_size: int = 64,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> np.ndarray:
    """Embed `items` (n, dims), reading hits from `cache` and embedding only the misses.

    Misses are written back after every batch, so an interrupted job keeps its work. Studies
    whose pixels were loaded from disk only for embedding are unloaded again afterwards, so
    embedding a large corpus does not hold every image in memory. `stop` cancels between
    batches (raises medheb_app.cancellation.Cancelled). With cache None everything is embedded.
    """
    if len(items) != len(ids):
        raise ValueError(f"Got {len(items)} items but {len(ids)} ids.")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1; got {batch_size}.")
    fingerprint = embedder.card.fingerprint
    keys = [cache_key(item_id, instruction) for item_id in ids]
    found = cache.get(fingerprint, keys) if cache is not None else {}
    # one embedding per distinct key, even if the same id is passed twice
    first_position: dict[str, int] = {}
    for position, key in enumerate(keys):
        if key not in found:
            first_position.setdefault(key, position)
    misses = list(first_position.values())
    total = len(misses)
    if progress:
        progress(0.0, f"{len(keys) - total} of {len(keys)} embeddings cached; embedding {total}")
    done = 0
    for batch in _batches(misses, batch_size):
        if stop is not None and stop.is_set():
            raise Cancelled("Embedding was cancelled.")
        batch_items = [items[position] for position in batch]
        unload = [
            item
            for item in batch_items
            if isinstance(item, Study) and item.pixels is None and item.path is not None
        ]
        vectors = np.asarray(embedder.encode(batch_items, instruction=instruction), np.float32)
        for study in unload:
            study.pixels = None
        batch_keys = [keys[position] for position in batch]
        if vectors.shape[0] != len(batch):
            raise ValueError(
                f"Model {embedder.card.name} returned {vectors.shape[0]} vectors "
                f"for {len(batch)} items."
            )
        if cache is not None:
            cache.put(fingerprint, batch_keys, vectors)
        found.update(zip(batch_keys, vectors, strict=True))
        done += len(batch)
        if progress:
            progress(done / total, f"embedded {done} of {total} with {embedder.card.name}")
    if not keys:
        return np.zeros((0, embedder.card.dims), dtype=np.float32)
    return np.stack([found[key] for key in keys]).astype(np.float32)
