"""`index build` for any source: resumable, sharded, and tolerant of unreadable files.

The studies of a source are cut into fixed-size shards in a stable order. Each shard is
embedded (through the embedding cache, the single source of truth for what has been
embedded: vectors go there after every batch) and then committed atomically as a parquet file
(id, key, vector, findings) plus an entry in the build manifest (build.json, replaced with
os.replace). A build killed at any moment and started again with the same source, model and
shard size reads committed shards back and finds the rest of its finished batches in the
cache, so it re-embeds nothing; `reused` counts those items. The index is then built from the
shards in order, so a resumed build ends with the same index as an uninterrupted one.

A file that cannot be read or embedded is recorded with its reason (failed.jsonl next to the
index) and never aborts the build; the build fails only when nothing could be indexed.
The embedding step is an engine: "local" (this process) or "ray" (index/ray_engine.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from medheb_app.evidence.study import Study
from medheb_app.index.cache import EmbeddingCache
from medheb_app.index.catalog import (
    check_index_name,
    index_info,
    study_content_key,
    study_metadata,
    write_index,
)
from medheb_app.index.faiss_index import VectorIndex, resolve_kind
from medheb_app.index.sources import LoadedSource, SourceSpec, load_source, parse_source
from medheb_app.models.base import Embedder
from medheb_app.settings import Settings

Progress = Callable[[float, str], None]
ENGINES = ("local", "ray")
BUILD_MANIFEST = "build.json"
FAILED_FILE = "failed.jsonl"
DEFAULT_SHARD_SIZE = 512
BUILD_VERSION = 1


class BuildError(ValueError):
    """A build that cannot produce an index (e.g. every file failed)."""


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


@dataclass
class BuildReport:
    """The `index build --json` contract."""

    name: str
    n_items: int
    embedded: int
    reused: int
    failed: int
    seconds: float
    engine: str
    device: str
    kind: str
    vocabulary: dict[str, Any]
    directory: str = ""
    model: str = ""
    failures: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        payload = asdict(self)
        payload.pop("failures")
        return payload


# ---------------------------------------------------------------- shards on disk


def build_dir(settings: Settings, name: str, fingerprint: str) -> Path:
    """Where a build in progress keeps its shards (hidden: list_indices skips it)."""
    return settings.index_dir / check_index_name(name) / f".build-{fingerprint}"


def _atomic_write(path: Path, data: bytes) -> None:
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


def _shard_file(directory: Path, number: int) -> Path:
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
    path = _shard_file(directory, result.number)
    path.parent.mkdir(parents=True, exist_ok=True)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    _atomic_write(path, sink.getvalue().to_pybytes())


def read_shard(directory: Path, number: int) -> tuple[list[str], list[str], np.ndarray]:
    import pyarrow.parquet as pq

    table = pq.read_table(_shard_file(directory, number))
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
    _atomic_write(directory / BUILD_MANIFEST, json.dumps(manifest, indent=1).encode())


# ---------------------------------------------------------------- embedding (local engine)


def decode(study: Study) -> str | None:
    """Load the study's pixels; the reason it cannot be read, or None when it can."""
    if study.form == "text":
        return None if study.text else "empty text"
    try:
        pixels = study.load_pixels()
    except Exception as error:  # any reader failure is one failed item, never the build
        return _reason(error)
    return None if pixels is not None else "no pixels and no readable path"


def _reason(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]


def _label(study: Study) -> str:
    return study.path or study.id


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
                raise InterruptedError("The index build was cancelled.")
            decoded = upcoming.result()  # type: ignore[union-attr]
            if number + 1 < len(batches):
                upcoming = reader.submit(_decode_batch, batches[number + 1])
            readable = []
            for study, key, reason in decoded:
                if reason is None:
                    readable.append((study, key))
                else:
                    failed[study.id] = f"{_label(study)}: {reason}"
            vectors = _encode_tolerant(embedder, readable, failed)
            for (study, key), vector in zip(readable, vectors, strict=True):
                if study.path is not None:
                    study.pixels = None  # keep memory flat on large sources
                if vector is not None:
                    found[key] = vector
            good = [(k, v) for (_s, k), v in zip(readable, vectors, strict=True) if v is not None]
            if good:
                cache.put(fingerprint, [k for k, _ in good], np.stack([v for _, v in good]))
                embedded += len(good)
    return _result(shard, found, failed, embedded, reused)


def _encode_tolerant(
    embedder: Embedder, batch: list[tuple[Study, str]], failed: dict[str, str]
) -> list[np.ndarray | None]:
    if not batch:
        return []
    try:
        vectors = np.asarray(embedder.encode([s for s, _ in batch]), np.float32)
        if vectors.shape[0] == len(batch):
            return list(vectors)
    except Exception:
        pass
    out: list[np.ndarray | None] = []
    for study, _key in batch:
        try:
            out.append(np.asarray(embedder.encode([study]), np.float32)[0])
        except Exception as error:
            failed[study.id] = f"{_label(study)}: cannot be embedded ({_reason(error)})"
            out.append(None)
    return out


def _result(
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
        failed=[{"item": k, "reason": v} for k, v in failed.items()],
        embedded=embedded,
        reused=reused,
    )


def local_engine(
    shards: Sequence[Shard],
    embedder: Embedder,
    settings: Settings,
    batch_size: int,
    stop: threading.Event | None = None,
) -> Iterator[ShardResult]:
    cache = EmbeddingCache(settings.cache_dir)
    for shard in shards:
        yield embed_shard(shard, embedder, cache, batch_size, stop)


# ---------------------------------------------------------------- the build


def _shards(studies: Sequence[Study], shard_size: int) -> list[Shard]:
    keys = [study_content_key(study) for study in studies]
    return [
        Shard(number, list(studies[start : start + shard_size]), keys[start : start + shard_size])
        for number, start in enumerate(range(0, len(studies), shard_size))
    ]


class _Rate:
    """Items/s and ETA for progress messages, over the items embedded in this run."""

    def __init__(self, total: int) -> None:
        self.total, self.done, self.started = total, 0, time.perf_counter()

    def message(self, done: int) -> str:
        self.done = done
        elapsed = max(time.perf_counter() - self.started, 1e-6)
        rate = done / elapsed
        left = (self.total - done) / rate if rate > 0 else float("inf")
        eta = f"{left:.0f} s" if np.isfinite(left) else "unknown"
        return f"{done} of {self.total} items ({rate:.1f} items/s, ETA {eta})"


def build_from_source(
    source: str | SourceSpec,
    model_spec: str,
    name: str,
    settings: Settings,
    engine: str = "local",
    ray_address: str | None = None,
    device: str | None = None,
    batch_size: int = 32,
    kind: str = "auto",
    shard_size: int = DEFAULT_SHARD_SIZE,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    loaded_source: LoadedSource | None = None,
    ray_actors: int | None = None,
    index_params: dict[str, Any] | None = None,
) -> BuildReport:
    """Index every readable item of `source` with `model_spec` as the index `name`."""
    from medheb_app.models.device import resolve_device
    from medheb_app.models.registry import load_embedder

    started = time.perf_counter()
    check_index_name(name)
    if engine not in ENGINES:
        raise ValueError(f"Unknown engine {engine!r}; use {' or '.join(ENGINES)}.")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1; got {batch_size}.")
    if shard_size < 1:
        raise ValueError(f"shard size must be at least 1; got {shard_size}.")
    spec = parse_source(source) if isinstance(source, str) else source
    resolved_device = resolve_device(device or settings.device)
    say = progress or (lambda fraction, message: None)
    say(0.0, f"reading source {spec.text}")
    loaded = loaded_source or load_source(spec, settings)
    embedder = load_embedder(model_spec, settings, device=resolved_device)
    fingerprint = embedder.card.fingerprint
    studies = _unique(loaded.studies)
    shards = _shards(studies, shard_size)
    directory = build_dir(settings, name, fingerprint)
    manifest = _open_manifest(directory, spec, fingerprint, shard_size, len(studies))
    committed = {
        s.number
        for s in shards
        if manifest["shards"].get(str(s.number), {}).get("digest") == s.digest
        and _shard_file(directory, s.number).is_file()
    }
    pending = [s for s in shards if s.number not in committed]
    findings = {s.id: s.findings for s in studies}
    reused = sum(manifest["shards"][str(n)]["n"] for n in committed)
    embedded = 0
    rate = _Rate(sum(len(s.studies) for s in pending))
    say(0.05, f"{len(studies)} items in {len(shards)} shards; {len(committed)} shards committed")
    if engine == "ray":
        from medheb_app.index.ray_engine import ray_engine

        results = ray_engine(
            pending, model_spec, settings, batch_size, resolved_device, ray_address, stop,
            ray_actors,
        )  # fmt: skip
    else:
        results = local_engine(pending, embedder, settings, batch_size, stop)
    digests = {s.number: s.digest for s in shards}
    done = 0
    for result in results:
        commit_shard(directory, manifest, result, digests[result.number], findings)
        embedded += result.embedded
        reused += result.reused
        done += len(result.ids) + len(result.failed)
        say(0.05 + 0.85 * done / max(rate.total, 1), f"embedded {rate.message(done)}")
    report = _finish(
        name, loaded, studies, shards, directory, manifest, embedder, kind, settings, index_params
    )
    report.embedded, report.reused = embedded, reused
    report.seconds = round(time.perf_counter() - started, 3)
    report.engine, report.device = engine, resolved_device
    shutil.rmtree(directory, ignore_errors=True)
    say(1.0, f"index {name} built: {report.n_items} items ({report.failed} failed), {report.kind}")
    return report


def _unique(studies: Sequence[Study]) -> list[Study]:
    """Studies with distinct ids, in source order (a repeated id would break the index)."""
    seen: dict[str, Study] = {}
    for study in studies:
        seen.setdefault(study.id, study)
    return list(seen.values())


def _open_manifest(
    directory: Path, spec: SourceSpec, fingerprint: str, shard_size: int, count: int
) -> dict[str, Any]:
    """The build manifest of a matching earlier attempt, or a fresh one (stale shards go)."""
    wanted = {
        "version": BUILD_VERSION,
        "source": spec.text,
        "fingerprint": fingerprint,
        "shard_size": shard_size,
        "count": count,
    }
    manifest = read_manifest(directory)
    if all(manifest.get(k) == v for k, v in wanted.items()):
        manifest.setdefault("shards", {})
        return manifest
    shutil.rmtree(directory, ignore_errors=True)
    (directory / "shards").mkdir(parents=True, exist_ok=True)
    manifest = {**wanted, "shards": {}}
    _atomic_write(directory / BUILD_MANIFEST, json.dumps(manifest).encode())
    return manifest


def _finish(
    name: str,
    loaded: LoadedSource,
    studies: list[Study],
    shards: list[Shard],
    directory: Path,
    manifest: dict[str, Any],
    embedder: Embedder,
    kind: str,
    settings: Settings,
    params: dict[str, Any] | None = None,
) -> BuildReport:
    """Read the shards in order and write the index, its metadata and failed.jsonl."""
    ids: list[str] = []
    failures = list(loaded.failed)
    for shard in shards:  # ids first; vectors are streamed from the shards below
        entry = manifest["shards"][str(shard.number)]
        failures.extend(entry["failed"])
        if entry["n"]:
            import pyarrow.parquet as pq

            ids.extend(pq.read_table(_shard_file(directory, shard.number), columns=["id"])
                       .column("id").to_pylist())  # fmt: skip
    if not ids:
        first = failures[0]["reason"] if failures else "no items"
        raise BuildError(
            f"Nothing could be indexed from {loaded.spec.text}: all {len(failures)} item(s) "
            f"failed (first: {first})."
        )
    by_id = {s.id: s for s in studies}
    fingerprint = embedder.card.fingerprint

    def chunks() -> Iterator[np.ndarray]:
        for shard in shards:
            if manifest["shards"][str(shard.number)]["n"]:
                yield read_shard(directory, shard.number)[2]

    dims = next(chunks()).shape[1]
    params = dict(params or {})
    if resolve_kind(kind, len(ids)) == "ivfpq":  # filled shard by shard, never all in RAM
        if settings.index_memory_mb is not None:
            params.setdefault("memory_budget_mb", settings.index_memory_mb)
        index = VectorIndex.build_ivfpq(
            chunks, ids, dims, fingerprint, work_dir=directory / "ivfpq", **params
        )
    else:
        vectors = np.concatenate(list(chunks()))
        index = VectorIndex.build(
            vectors, ids, kind=kind, fingerprint=fingerprint, **(params or {})
        )
    info = index_info(
        name,
        embedder,
        index,
        [by_id[i] for i in ids],
        corpus=loaded.spec.describe(),
        vocabulary=loaded.vocabulary.to_dict(),
        failed=len(failures),
    )
    report_text = "".join(json.dumps(f) + "\n" for f in failures)
    final = write_index(
        name,
        index,
        [study_metadata(by_id[i]) for i in ids],
        info,
        settings,
        extra_files={FAILED_FILE: report_text},
    )
    return BuildReport(
        name=name,
        n_items=index.count,
        embedded=0,
        reused=0,
        failed=len(failures),
        seconds=0.0,
        engine="local",
        device="cpu",
        kind=index.kind,
        vocabulary=loaded.vocabulary.to_dict(),
        directory=str(final),
        model=embedder.card.name,
        failures=failures,
    )
