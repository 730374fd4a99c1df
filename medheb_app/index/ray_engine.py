"""The Ray engine of `index build --engine ray`: an actor pool for what outgrows one machine.

  pending items (cache misses only; a study leaves the driver as its path, not its pixels)
  -> batches sent in order to a pool of embedding actors (one model per actor; num_gpus=1 per
     actor when the cluster has GPUs), at most IN_FLIGHT batches per actor
  -> back to the driver in order, where each shard is written to the embedding cache and
     committed (index/build.py).

Each actor reads and decodes its own batch, so pixels never travel through the object store
and the store holds only pickled paths and vectors: a local cluster is started with a small
one (OBJECT_STORE_MB). The pool is plain Ray actors, not Ray Data: on a 2-core machine Ray
Data's coordinator, stats and location actors cost ~500 MB more than the build they served,
and its pipeline added nothing that an ordered pool with bounded in-flight batches lacks.

How many actors (issue 23 item 8, BENCHMARKS.md "Ray engine memory"): every actor is another
process holding torch and the model (~0.6-1.6 GB for dual-lite), beside the driver, which
holds them too. On a cluster the build starts itself (one machine) that only pays with GPUs,
so it gets one actor per GPU, else ONE 1-thread actor; joining a real cluster
(`--ray-address`), one actor per GPU, else one 1-thread actor per CPU (default_actors);
`--ray-actors N` chooses. The local engine with OMP_NUM_THREADS=1 is the one-machine CPU path.

The driver keeps the embedding cache (one SQLite file) as the single source of truth; actors
only compute. `address` joins a running cluster ("auto" or host:port, as `ray start --head`
prints); without one a local cluster is started for the build and stopped after it. On a real
cluster the source files and model checkpoints must be readable at the same paths on every
node (a shared filesystem).
"""

from __future__ import annotations

import copy
import os
import pickle
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from medheb_app.cancellation import Cancelled
from medheb_app.index.cache import EmbeddingCache
from medheb_app.index.shards import Shard, ShardResult, decode, failure_reason, shard_result
from medheb_app.models import registry
from medheb_app.models.device import DeviceError
from medheb_app.settings import Settings
from medheb_app.startup_heap import startup_phase

CPUS_PER_ACTOR = 1  # and as many torch threads: an actor never oversubscribes its share
OBJECT_STORE_MB = 256  # a local cluster's object store: batches of paths and vectors only
IN_FLIGHT = 2  # batches queued per actor: one embedding, one waiting (no idle gap, no pile-up)
ACTOR_BATCH = 4  # items per actor call: each decoded batch and its activations stay small
# an actor runs Ray's many core-worker threads: glibc would give each its own malloc arena,
# and the freed pixels of decoded batches stay resident in them
ACTOR_ENV = {"MALLOC_ARENA_MAX": "2"}


def _columns(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """A batch of rows as the actor's columns (what EmbedActor.__call__ reads)."""
    return {
        column: np.array([row[column] for row in rows], dtype=object)
        for column in ("shard", "key", "id", "label", "study")
    }


def _without_pixels(study: Any) -> bytes:
    """The study pickled for the object store: a study with a path travels without pixels
    (whoever needs them reads the file), so a batch costs bytes, not megabytes."""
    if getattr(study, "path", None) is not None and getattr(study, "pixels", None) is not None:
        study = copy.copy(study)
        study.pixels = None
    return pickle.dumps(study)


class EmbedActor:
    """One model per actor, loaded once; reads, decodes and embeds a batch, one item at a
    time if the batch fails."""

    def __init__(
        self, spec: str, settings: Settings, device: str, threads: int = 1, decode: bool = True
    ) -> None:
        self.decode = decode
        with startup_phase():  # the actor's process exists to hold this model
            import torch

            torch.set_num_threads(max(1, threads))
            self.embedder = registry.load_embedder(spec, settings, device=device)

    def embed(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
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
    """Join `address` or start a local cluster; True when this call started it.

    A local cluster gets the machine's CPUs, no dashboard, a small object store
    (OBJECT_STORE_MB) and no idle workers started ahead (each is a ~80 MB Python process)."""
    import logging

    import ray

    for name in ("ray", "ray.data"):  # the build prints its own progress; keep stderr readable
        logging.getLogger(name).setLevel(logging.WARNING)
    if ray.is_initialized():
        return False
    if address:
        ray.init(address=address, log_to_driver=False)
        return False
    ray.init(
        num_cpus=os.cpu_count(),
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=OBJECT_STORE_MB * 2**20,
        _system_config={"enable_worker_prestart": False, "prestart_worker_first_driver": False},
    )
    return True


def default_actors(resources: dict[str, float]) -> tuple[int, float]:
    """(actors, GPUs per actor) on a cluster the build joined: one actor per GPU, else one
    1-thread actor per CPU (actors scale almost linearly at one torch thread each:
    BENCHMARKS.md, "Scale: `index build` engines")."""
    gpus = int(resources.get("GPU", 0))
    if gpus:
        return gpus, 1.0
    return max(1, int(resources.get("CPU", 1))), 0.0


def own_cluster_actors(resources: dict[str, float]) -> tuple[int, float]:
    """(actors, GPUs per actor) on the one-machine cluster a build started itself: one actor
    per GPU, else one. Each CPU actor is another copy of torch and the model next to the
    driver's, so on one machine more CPU actors cost memory the local engine does not
    (BENCHMARKS.md, "Ray engine memory"); `--ray-actors` still asks for more."""
    gpus = int(resources.get("GPU", 0))
    return (gpus, 1.0) if gpus else (1, 0.0)


def cluster_device(wanted: str, resources: dict[str, float]) -> str:
    """The device the actors embed on: "auto" is CUDA when the cluster has a GPU, else CPU;
    "cuda" / "cuda:N" needs one (each actor gets a whole GPU, so N only asks for CUDA)."""
    gpus = int(resources.get("GPU", 0))
    if wanted == "auto":
        return "cuda" if gpus else "cpu"
    if wanted.startswith("cuda") and not gpus:
        raise DeviceError(f"Device {wanted!r} was asked for but the Ray cluster has no GPU.")
    return wanted


def ray_engine(
    shards: Sequence[Shard],
    model_spec: str,
    settings: Settings,
    batch_size: int,
    device: str,
    address: str | None = None,
    stop: threading.Event | None = None,
    actors: int | None = None,
    on_device: Callable[[str], None] | None = None,
) -> Iterator[ShardResult]:
    """Embed the shards' cache misses on a Ray cluster; yield each shard's result in order.

    `device` ("auto", "cpu", "cuda[:N]") is resolved against the cluster's resources and
    told to `on_device` once connected."""
    import ray

    started_here = connect(address)
    try:
        device = cluster_device(device, ray.cluster_resources())
        if on_device is not None:
            on_device(device)
        yield from _run(
            shards, model_spec, settings, batch_size, device, stop, actors, started_here
        )
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
    own_cluster: bool = False,
) -> Iterator[ShardResult]:
    import ray

    fingerprint = registry.card_only(model_spec, settings).card.fingerprint
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
        sizing = own_cluster_actors if own_cluster else default_actors
        count, gpus = sizing(ray.cluster_resources())
        count = actors or count
        use_gpu = gpus if device.startswith("cuda") else 0.0
        remote = ray.remote(
            num_cpus=CPUS_PER_ACTOR, num_gpus=use_gpu, runtime_env={"env_vars": ACTOR_ENV}
        )(EmbedActor)
        batch_size = min(batch_size, ACTOR_BATCH) if not use_gpu else batch_size
        pool = [
            remote.remote(model_spec, settings, device if use_gpu else "cpu", CPUS_PER_ACTOR)
            for _ in range(count)
        ]
        batches = [_columns(rows[i : i + batch_size]) for i in range(0, len(rows), batch_size)]
        queued: deque[Any] = deque()
        submitted = 0

        def submit() -> None:  # in order, round robin over the pool
            nonlocal submitted
            queued.append(pool[submitted % count].embed.remote(batches[submitted]))
            submitted += 1

        try:
            while submitted < len(batches) and len(queued) < count * IN_FLIGHT:
                submit()
            while queued:
                if stop is not None and stop.is_set():
                    raise Cancelled("The index build was cancelled.")
                batch = ray.get(queued.popleft())
                if submitted < len(batches):
                    submit()
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
                # shards arrive in order: every shard before the first unfinished one is done
                unfinished = [n for n in pending if misses[n] > 0]
                yield from flush(unfinished[0] if unfinished else None)
        finally:
            for actor in pool:
                ray.kill(actor)
    yield from flush(None)
