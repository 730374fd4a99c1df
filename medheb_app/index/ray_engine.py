"""The Ray engine of `index build --engine ray`: a Ray Data pipeline for what outgrows one machine.

  pending items (cache misses only; a study leaves the driver as its path, not its pixels)
  -> [GPU actors only: read + decode on CPU tasks (map_batches)]
  -> embed in an actor pool (one model per actor; num_gpus=1 per actor when the cluster has
     GPUs; concurrency = GPUs, else one 1-thread actor per CPU) -> back to the driver in order,
  where each shard is written to the embedding cache and committed (index/build.py).

CPU actors read and decode their own batches: a separate decode task needs a CPU that the
actors already hold and ships every image's pixels through the object store. (On the shared
2-core machine the change was within the load's noise: BENCHMARKS.md, engines section.) A GPU
actor leaves decoding to CPU tasks so that its GPU is not idle while files are read. Each
actor runs torch on as many threads as CPUs it holds (the local engine uses the machine's).

The driver keeps the embedding cache (one SQLite file) as the single source of truth; actors
only compute. `address` joins a running cluster ("auto" or host:port, as `ray start --head`
prints); without one a local cluster is started for the build and stopped after it. On a real
cluster the source files and model checkpoints must be readable at the same paths on every
node (a shared filesystem), as Ray Data's own file readers assume.
"""

from __future__ import annotations

import copy
import os
import pickle
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from medheb_app.cancellation import Cancelled
from medheb_app.index.cache import EmbeddingCache
from medheb_app.index.shards import Shard, ShardResult, decode, failure_reason, shard_result
from medheb_app.models import registry
from medheb_app.settings import Settings

CPUS_PER_ACTOR = 1  # and as many torch threads: an actor never oversubscribes its share


def _decode_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Unpickle each study, read its pixels; the reason when it cannot be read. A CPU task
    in front of GPU actors (the decoded pixels travel on); inside a CPU actor otherwise."""
    studies, errors = [], []
    for blob in batch["study"]:
        study = pickle.loads(blob)
        reason = decode(study)
        errors.append(reason or "")
        studies.append(pickle.dumps(study) if reason is None else b"")
    return {**batch, "study": np.array(studies, dtype=object), "error": np.array(errors)}


def _without_pixels(study: Any) -> bytes:
    """The study pickled for the object store: a study with a path travels without pixels
    (whoever needs them reads the file), so a batch costs bytes, not megabytes."""
    if getattr(study, "path", None) is not None and getattr(study, "pixels", None) is not None:
        study = copy.copy(study)
        study.pixels = None
    return pickle.dumps(study)


class EmbedActor:
    """One model per actor, loaded once; embeds a batch, one item at a time if it fails.
    With `decode`, the actor also reads and decodes its batch (CPU actors)."""

    def __init__(
        self, spec: str, settings: Settings, device: str, threads: int = 1, decode: bool = False
    ) -> None:
        import torch

        torch.set_num_threads(max(1, threads))
        self.decode = decode
        self.embedder = registry.load_embedder(spec, settings, device=device)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        errors = [str(e) for e in batch["error"]] if "error" in batch else [""] * len(batch["id"])
        readable = [i for i, error in enumerate(errors) if not error]
        studies = [pickle.loads(batch["study"][i]) for i in readable]
        if self.decode:  # read here: the pixels never leave this process
            for i, study in zip(list(readable), studies, strict=True):
                errors[i] = decode(study) or ""
            studies = [s for i, s in zip(readable, studies, strict=True) if not errors[i]]
            readable = [i for i in readable if not errors[i]]
        vectors: list[bytes] = [b""] * len(errors)
        try:
            encoded = np.asarray(self.embedder.encode(studies), np.float32) if studies else []
            for i, vector in zip(readable, encoded, strict=True):
                vectors[i] = vector.tobytes()
        except Exception:
            for i, study in zip(readable, studies, strict=True):
                try:
                    vectors[i] = np.asarray(self.embedder.encode([study]), np.float32)[0].tobytes()
                except Exception as error:
                    errors[i] = f"cannot be embedded ({failure_reason(error)})"
        return {
            "shard": batch["shard"],
            "key": batch["key"],
            "id": batch["id"],
            "label": batch["label"],
            "vector": np.array(vectors, dtype=object),
            "error": np.array(errors),
        }


def connect(address: str | None) -> bool:
    """Join `address` or start a local cluster; True when this call started it."""
    import logging

    import ray

    for name in ("ray", "ray.data"):  # the build prints its own progress; keep stderr readable
        logging.getLogger(name).setLevel(logging.WARNING)
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False)
        return False
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    return True


def default_actors(resources: dict[str, float]) -> tuple[int, float]:
    """(actors, GPUs per actor): one actor per GPU, else one 1-thread actor per CPU.

    On CPUs, actors scale almost linearly while each runs torch on one thread (BENCHMARKS.md,
    "Scale: `index build` engines"), and a torch thread per core is what a single process would
    use anyway; a CPU actor reads and decodes its own batches, so no CPU waits for tasks.
    """
    gpus = int(resources.get("GPU", 0))
    if gpus:
        return gpus, 1.0
    return max(1, int(resources.get("CPU", 1))), 0.0


def ray_engine(
    shards: Sequence[Shard],
    model_spec: str,
    settings: Settings,
    batch_size: int,
    device: str,
    address: str | None = None,
    stop: threading.Event | None = None,
    actors: int | None = None,
) -> Iterator[ShardResult]:
    """Embed the shards' cache misses on a Ray cluster; yield each shard's result in order."""
    import ray

    started_here = connect(address)
    try:
        yield from _run(shards, model_spec, settings, batch_size, device, stop, actors)
    finally:
        if started_here:
            ray.shutdown()


def _run(
    shards: Sequence[Shard],
    model_spec: str,
    settings: Settings,
    batch_size: int,
    device: str,
    stop: threading.Event | None,
    actors: int | None,
) -> Iterator[ShardResult]:
    import ray
    import ray.data

    fingerprint = registry.load_embedder(model_spec, settings, device="cpu").card.fingerprint
    cache = EmbeddingCache(settings.cache_dir)
    found: dict[int, dict[str, np.ndarray]] = {}
    rows: list[dict[str, Any]] = []
    for shard in shards:
        found[shard.number] = cache.get(fingerprint, shard.keys)
        for study, key in zip(shard.studies, shard.keys, strict=True):
            if key not in found[shard.number]:
                rows.append(
                    {
                        "shard": shard.number,
                        "key": key,
                        "id": study.id,
                        "label": study.path or study.id,
                        "study": _without_pixels(study),
                    }
                )
    misses = {s.number: sum(r["shard"] == s.number for r in rows) for s in shards}
    results: dict[str, dict[int, Any]] = {"vectors": {}, "failed": {}}
    by_number = {s.number: s for s in shards}
    pending = [s.number for s in shards]

    def flush(complete_up_to: int | None) -> Iterator[ShardResult]:
        while pending and (complete_up_to is None or pending[0] < complete_up_to):
            number = pending.pop(0)
            shard = by_number[number]
            vectors = results["vectors"].pop(number, {})
            failed = results["failed"].pop(number, {})
            if vectors:
                cache.put(fingerprint, list(vectors), np.stack(list(vectors.values())))
            hits = found.pop(number)
            reused = len(hits)
            hits.update(vectors)
            yield shard_result(shard, hits, failed, len(vectors), reused)

    if rows:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False
        count, gpus = default_actors(ray.cluster_resources())
        if actors:
            count = actors
        use_gpu = gpus if device.startswith("cuda") else 0.0
        dataset = ray.data.from_items(rows)
        if use_gpu:  # CPU tasks decode so that the GPU actors only embed
            dataset = dataset.map_batches(
                _decode_batch, batch_size=batch_size, batch_format="numpy"
            )
        dataset = dataset.map_batches(
            EmbedActor,
            fn_constructor_kwargs={
                "spec": model_spec,
                "settings": settings,
                "device": device if use_gpu else "cpu",
                "threads": CPUS_PER_ACTOR,
                "decode": not use_gpu,
            },
            batch_size=batch_size,
            batch_format="numpy",
            concurrency=count,
            num_gpus=use_gpu,
            num_cpus=CPUS_PER_ACTOR,
        )
        for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
            if stop is not None and stop.is_set():
                raise Cancelled("The index build was cancelled.")
            for shard, key, item_id, label, vector, error in zip(
                batch["shard"], batch["key"], batch["id"], batch["label"],
                batch["vector"], batch["error"], strict=True,
            ):  # fmt: skip
                shard = int(shard)
                if error:
                    results["failed"].setdefault(shard, {})[str(item_id)] = f"{label}: {error}"
                else:
                    array = np.frombuffer(vector, dtype=np.float32).copy()
                    results["vectors"].setdefault(shard, {})[str(key)] = array
                misses[shard] -= 1
            # shards arrive in order: every shard before the first unfinished one is complete
            unfinished = [n for n in pending if misses[n] > 0]
            yield from flush(unfinished[0] if unfinished else None)
    yield from flush(None)
