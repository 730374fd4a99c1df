"""The shards of an index build: fixed slices of a source, embedded and committed one by one.

The studies of a source are cut into fixed-size shards in a stable order (make_shards). Each
shard is embedded through the embedding cache (embed_shard: the local engine's step; the Ray
engine, index/ray_engine.py, does the same with actors and finishes with shard_result) and
committed atomically as a parquet file (id, key, vector, findings) plus an entry in the build
manifest (build.json, replaced with os.replace; commit_shard). A build started again with the
same source, model and shard size finds its committed shards through open_manifest.
Both engines and the builder (index/build.py) import these by their public names.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medheb_app.cancellation import Cancelled
from medheb_app.evidence.study import Study
from medheb_app.index.cache import EmbeddingCache
from medheb_app.index.catalog import check_index_name, study_content_key
from medheb_app.models.base import Embedder
from medheb_app.settings import Settings

if TYPE_CHECKING:  # an annotation only: index.sources imports pandas and the phantoms (1-3 s),
    from medheb_app.index.sources import SourceSpec  # which `index list` must not pay

log = logging.getLogger(__name__)
BUILD_MANIFEST = "build.json"
BUILD_VERSION = 1
DEFAULT_SHARD_SIZE = 512  # items per committed shard (the resume unit)
FAILED_FILE = "failed.jsonl"  # next to a built index: each item that could not be indexed


@dataclass
class Shard:
    """One fixed slice of the source's studies, in source order."""

    number: int
    studies: list[Study]
    keys: list[str]

    @property
    def digest(self) -> str:
        return hashlib.sha1("\n".join(self.keys).encode()).hexdigest()[:16]


@dataclass
class ShardResult:
    """What embedding a shard produced: vectors for the ids that worked, reasons for the rest."""

    number: int
    ids: list[str]
    keys: list[str]
    vectors: np.ndarray
    failed: list[dict[str, str]]
    embedded: int
    reused: int


def build_dir(settings: Settings, name: str, fingerprint: str) -> Path:
    """Where a build in progress keeps its shards (hidden: list_indices skips it)."""
    return settings.index_dir / check_index_name(name) / f".build-{fingerprint}"


def atomic_write(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def read_manifest(directory: Path) -> dict[str, Any]:
    path = directory / BUILD_MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def shard_file(directory: Path, number: int) -> Path:
    return directory / "shards" / f"shard-{number:06d}.parquet"


def write_shard(directory: Path, result: ShardResult, findings: dict[str, Any]) -> None:
    """Write the shard's parquet file (id, key, vector, findings) atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dims = result.vectors.shape[1] if result.vectors.ndim == 2 else 0
    flat = pa.array(np.ascontiguousarray(result.vectors, np.float32).reshape(-1))
    vectors = (
        pa.FixedSizeListArray.from_arrays(flat, dims)
        if dims
        else pa.array([], pa.list_(pa.float32()))
    )
    table = pa.table(
        {
            "id": pa.array(result.ids, pa.string()),
            "key": pa.array(result.keys, pa.string()),
            "vector": vectors,
            "findings": pa.array([json.dumps(findings[i]) for i in result.ids], pa.string()),
        }
    )
    path = shard_file(directory, result.number)
    path.parent.mkdir(parents=True, exist_ok=True)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    atomic_write(path, sink.getvalue().to_pybytes())


def read_shard(directory: Path, number: int) -> tuple[list[str], list[str], np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(shard_file(directory, number))
    ids = table.column("id").to_pylist()
    keys = table.column("key").to_pylist()
    column = table.column("vector").combine_chunks()
    if len(ids) == 0:
        return ids, keys, np.zeros((0, 0), np.float32)
    values = np.asarray(column.flatten().to_numpy(zero_copy_only=False), np.float32)
    return ids, keys, values.reshape(len(ids), -1)


def commit_shard(
    directory: Path, manifest: dict[str, Any], result: ShardResult, digest: str, findings: dict
) -> None:
    """Shard file first, then the manifest that names it: a reader never sees half a shard."""
    write_shard(directory, result, findings)
    manifest["shards"][str(result.number)] = {
        "digest": digest,
        "n": len(result.ids),
        "failed": result.failed,
    }
    atomic_write(directory / BUILD_MANIFEST, json.dumps(manifest, indent=1).encode())


def decode(study: Study) -> str | None:
    """Load the study's pixels; the reason it cannot be read, or None when it can."""
    if study.form == "text":
        return None if study.text else "empty text"
    try:
        pixels = study.load_pixels()
    except Exception as error:  # any reader failure is one failed item, never the build
        return failure_reason(error)
    return None if pixels is not None else "no pixels and no readable path"


def failure_reason(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


def _label(study: Study) -> str:
    """How failed.jsonl names a study: its path relative to the source (never the path as
    typed, which may name a patient's folder), else its id."""
    return str(study.meta.get("relative_path") or study.id)


def _failure(study: Study, detail: str, reason: str = "unreadable") -> dict[str, str]:
    return {"item": _label(study), "reason": reason, "detail": detail}


def _decode_batch(batch: list[tuple[Study, str]]) -> list[tuple[Study, str, str | None]]:
    return [(study, key, decode(study)) for study, key in batch]


def embed_shard(
    shard: Shard,
    embedder: Embedder,
    cache: EmbeddingCache,
    batch_size: int,
    stop: threading.Event | None = None,
) -> ShardResult:
    """Cached vectors are reused; the rest are decoded, embedded in batches and cached.

    The next batch is read and decoded on a second thread while this one is embedded (image
    decoding releases the GIL), so file reading no longer stalls the model. A batch that fails
    is retried one item at a time, so one bad file costs only itself.
    """
    fingerprint = embedder.card.fingerprint
    found = cache.get(fingerprint, shard.keys)
    failed: dict[str, str] = {}
    pending = [(s, k) for s, k in zip(shard.studies, shard.keys, strict=True) if k not in found]
    reused = len(shard.keys) - len(pending)
    embedded = 0
    batches = [pending[i : i + batch_size] for i in range(0, len(pending), batch_size)]
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode") as reader:
        upcoming = reader.submit(_decode_batch, batches[0]) if batches else None
        for number in range(len(batches)):
            if stop is not None and stop.is_set():
                raise Cancelled("The index build was cancelled.")
            decoded = upcoming.result()  # type: ignore[union-attr]
            if number + 1 < len(batches):
                upcoming = reader.submit(_decode_batch, batches[number + 1])
            readable = []
            for study, key, reason in decoded:
                if reason is None:
                    readable.append((study, key))
                else:
                    failed[study.id] = reason
            vectors = _encode_tolerant(embedder, readable, failed)
            for (study, key), vector in zip(readable, vectors, strict=True):
                if study.reloadable:
                    study.pixels = None  # keep memory flat on large sources
                if vector is not None:
                    found[key] = vector
            good = [(k, v) for (_s, k), v in zip(readable, vectors, strict=True) if v is not None]
            if good:
                cache.put(fingerprint, [k for k, _ in good], np.stack([v for _, v in good]))
                embedded += len(good)
    return shard_result(shard, found, failed, embedded, reused)


def _encode_tolerant(
    embedder: Embedder, batch: list[tuple[Study, str]], failed: dict[str, str]
) -> list[np.ndarray | None]:
    if not batch:
        return []
    try:
        vectors = np.asarray(embedder.encode([s for s, _ in batch]), np.float32)
        if vectors.shape[0] == len(batch):
            return list(vectors)
        log.warning("a batch of %d gave %d vectors; embedding one by one", len(batch), len(vectors))
    except Exception as error:  # any model failure: find the item(s) at fault one by one
        reason = failure_reason(error)
        log.info("a batch of %d failed (%s); embedding one by one", len(batch), reason)
    out: list[np.ndarray | None] = []
    for study, _key in batch:
        try:
            out.append(np.asarray(embedder.encode([study]), np.float32)[0])
        except Exception as error:
            failed[study.id] = f"cannot be embedded ({failure_reason(error)})"
            out.append(None)
    return out


def shard_result(
    shard: Shard, found: dict[str, np.ndarray], failed: dict[str, str], embedded: int, reused: int
) -> ShardResult:
    ids, keys, vectors = [], [], []
    for study, key in zip(shard.studies, shard.keys, strict=True):
        if key in found and study.id not in failed:
            ids.append(study.id)
            keys.append(key)
            vectors.append(found[key])
    array = np.stack(vectors).astype(np.float32) if vectors else np.zeros((0, 0), np.float32)
    return ShardResult(
        number=shard.number,
        ids=ids,
        keys=keys,
        vectors=array,
        failed=[_failure(study, failed[study.id]) for study in shard.studies if study.id in failed],
        embedded=embedded,
        reused=reused,
    )


def make_shards(studies: Sequence[Study], shard_size: int) -> list[Shard]:
    keys = [study_content_key(study) for study in studies]
    return [
        Shard(number, list(studies[start : start + shard_size]), keys[start : start + shard_size])
        for number, start in enumerate(range(0, len(studies), shard_size))
    ]


def open_manifest(
    directory: Path,
    spec: SourceSpec,
    fingerprint: str,
    shard_size: int,
    count: int,
    about: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The build manifest of a matching earlier attempt, or a fresh one (stale shards go).

    `about` (index name, model spec, kind, start time) is recorded, not matched: it is what
    `index list` needs to show an interrupted build and the command that resumes it."""
    wanted = {
        "version": BUILD_VERSION,
        # a digest, not the spec as typed: the staging folder must not name a patient's folder
        "source": hashlib.sha256(spec.text.encode("utf-8")).hexdigest()[:24],
        "fingerprint": fingerprint,
        "shard_size": shard_size,
        "count": count,
    }
    manifest = read_manifest(directory)
    if all(manifest.get(k) == v for k, v in wanted.items()):
        manifest.setdefault("shards", {})
        manifest.update(about or {})
        return manifest
    shutil.rmtree(directory, ignore_errors=True)
    (directory / "shards").mkdir(parents=True, exist_ok=True)
    manifest = {**wanted, **(about or {}), "shards": {}}
    atomic_write(directory / BUILD_MANIFEST, json.dumps(manifest).encode())
    return manifest


def incomplete_builds(settings: Settings) -> list[dict[str, Any]]:
    """Every build in progress or interrupted (a .build-* folder with its manifest): name,
    source, model spec, shard size, items committed of the total, and when it started. Reads
    only the manifests (no torch, no FAISS), so `index list` stays fast."""
    found = []
    if not settings.index_dir.is_dir():
        return found
    for path in sorted(settings.index_dir.glob(f"*/.build-*/{BUILD_MANIFEST}")):
        manifest = read_manifest(path.parent)
        if not manifest.get("source"):
            continue
        shards = manifest.get("shards", {})
        found.append(
            {
                "name": str(manifest.get("name") or path.parent.parent.name),
                "source": manifest["source"],
                "model_spec": manifest.get("model_spec") or "",
                "kind": manifest.get("kind") or "auto",
                "fingerprint": manifest.get("fingerprint", ""),
                "shard_size": int(manifest.get("shard_size", 0)),
                "done": sum(
                    int(entry.get("n", 0)) + len(entry.get("failed", []))
                    for entry in shards.values()
                ),
                "count": int(manifest.get("count", 0)),
                "started": manifest.get("started", ""),
                "path": str(path.parent),
            }
        )
    return found
