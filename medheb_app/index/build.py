"""`index build` for any source: resumable, sharded, and tolerant of unreadable files.

The studies of a source are cut into fixed-size shards in a stable order. Each shard is
embedded (through the embedding cache, the single source of truth for what has been
embedded: vectors go there after every batch) and then committed atomically as a parquet file
(id, key, vector, findings) plus an entry in the build manifest (build.json, replaced with
os.replace). A build killed at any moment and started again with the same source, model and
shard size reads committed shards back and finds the rest of its finished batches in the
cache, so it re-embeds nothing; `reused` counts those items. The index is then built from the
shards in order, so a resumed build ends with the same index as an uninterrupted one.

Safe defaults (issue 23 item 6): a build holds its index name's lock (index/lock.py) so a
second build of the same name is refused instead of sharing the staging folder; through
build_from_source (the CLI and the admin's job) it refuses to replace a finished build of the
same name and model unless asked (`replace`); the kind is fitted to the collection's size
(faiss_index.fit_kind: a tiny IVF-PQ is built exact, with a note), and the model is recorded
as the spec it was named by (`dual-lite@label-aware`, not the card's "dual-lite").

A file that cannot be read or embedded is recorded with its reason (failed.jsonl next to the
index) and never aborts the build; the build fails only when nothing could be indexed.
The embedding step is an engine: "local" (this process) or "ray" (index/ray_engine.py).

This is the one index builder: the demo bootstrap, `index build`, the admin's index job and
the benchmarks all call build_index (a loaded source and an embedder) or build_from_source (a
source spec and a model spec). The same step that writes the index fits its logic-aware
probes on the index's own vocabulary (ranking/index_logic.py), so a logic-aware search of a
fresh index answers at once whoever built it, or the report says why it cannot.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from medheb_app.evidence.study import EmbedItem, Study
from medheb_app.index.cache import EmbeddingCache
from medheb_app.index.catalog import (
    CATALOG_FILE,
    LoadedIndex,
    check_index_name,
    index_info,
    index_path,
    load_index,
    query_vocabulary,
    study_metadata,
    write_index,
)
from medheb_app.index.faiss_index import VectorIndex, fit_kind, pq_bits, resolve_kind
from medheb_app.index.lock import build_lock
from medheb_app.index.provenance import SHIPPED_LAYOUTS, save_references, source_files
from medheb_app.index.ray_engine import ray_engine  # deferred: ray is heavy, optional
from medheb_app.index.shards import (
    DEFAULT_SHARD_SIZE,
    FAILED_FILE,
    Shard,
    ShardResult,
    build_dir,
    commit_shard,
    embed_shard,
    make_shards,
    open_manifest,
    read_shard,
    shard_file,
)
from medheb_app.index.sources import (
    LoadedSource,
    SourceSpec,
    count_reasons,
    describe_failures,
    load_source,
    parse_source,
)
from medheb_app.models import registry
from medheb_app.models.base import CardOnly, Embedder, input_side
from medheb_app.models.device import check_device_text
from medheb_app.ranking.index_logic import prepare_index_logic
from medheb_app.settings import Settings

Progress = Callable[[float, str], None]
ENGINES = ("local", "ray")


class BuildError(ValueError):
    """A build that cannot produce an index (e.g. every file failed)."""


class IndexExistsError(BuildError):
    """The index already exists for this model and the build was not asked to replace it."""


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
    model: str = ""  # the model card's name
    model_spec: str = ""  # the spec it was loaded by, with its tag: dual-lite@label-aware
    notes: list[str] = field(default_factory=list)  # fallbacks and takeovers, one line each
    logic: bool = False  # the index is ready for logic-aware search (its probes are fit)
    logic_note: str = ""  # why it is not, in words, when logic is False
    failures: list[dict[str, str]] = field(default_factory=list)
    failed_by_reason: dict[str, int] = field(default_factory=dict)  # failed.jsonl, counted

    def to_json(self) -> dict[str, Any]:
        payload = asdict(self)
        payload.pop("failures")
        return payload


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
    replace: bool = False,
    roots_only: bool = False,
) -> BuildReport:
    """Index every readable item of `source` with `model_spec` as the index `name` (the
    source is read and the model loaded here; build_index does the rest).

    The entry point of `index build` and the admin's index job: under the name's build lock,
    and refusing (IndexExistsError) to replace a finished build of `name` for this model
    unless `replace`. An interrupted build resumes without `replace`. `roots_only` (the
    server's jobs, never the CLI): no file outside the server's source roots is read
    (index/sources.load_source)."""

    _check_build(name, engine, batch_size, shard_size)
    spec = parse_source(source) if isinstance(source, str) else source
    # a Ray build's actors run where the cluster has GPUs, not where the driver does: the
    # engine resolves the device from the cluster, and the driver never imports torch to ask
    wanted = device or settings.device
    resolved_device = (
        check_device_text(wanted) if engine == "ray" else registry.device_for([model_spec], wanted)
    )
    notes: list[str] = []
    with build_lock(settings, name, _noting(notes, progress)):
        # with Ray the actors hold the model; the driver needs only its card
        embedder = (
            registry.card_only(model_spec, settings)
            if engine == "ray"
            else registry.load_embedder(model_spec, settings, device=resolved_device)
        )
        check_replace(name, embedder.card.fingerprint, model_spec, settings, replace)
        if progress:  # the kind only: the path typed may name a patient's folder
            progress(0.0, f"reading source {spec.kind}:")
        lines = (lambda message: progress(0.0, message)) if progress else None
        loaded = loaded_source or load_source(spec, settings, lines, roots_only=roots_only)
        report = build_index(
            loaded,
            embedder,
            name,
            settings,
            model_spec=model_spec,
            engine=engine,
            ray_address=ray_address,
            device=resolved_device,
            batch_size=batch_size,
            kind=kind,
            shard_size=shard_size,
            progress=progress,
            stop=stop,
            ray_actors=ray_actors,
            index_params=index_params,
        )
    report.notes[:0] = notes
    return report


PUBLIC_SOURCE_KINDS = ("phantom", *SHIPPED_LAYOUTS)


def _noting(notes: list[str], progress: Progress | None) -> Callable[[str], None]:
    def note(message: str) -> None:
        notes.append(message)
        if progress:
            progress(0.0, f"note: {message}")

    return note


CLI_REPLACE_ADVICE = "pass --replace to rebuild it, or choose another --name"


def check_replace(
    name: str,
    fingerprint: str,
    model_spec: str,
    settings: Settings,
    replace: bool,
    advice: str = CLI_REPLACE_ADVICE,
) -> None:
    """Refuse to rebuild a finished index of `name` for this model unless `replace`;
    `advice` says how in the caller's terms (the CLI's flags by default)."""
    catalog_file = index_path(settings, name, fingerprint) / CATALOG_FILE
    if replace or not catalog_file.is_file():
        return
    try:
        info = json.loads(catalog_file.read_text())
    except (OSError, json.JSONDecodeError):
        info = {}
    source = (info.get("corpus") or {}).get("spec") or "its source"
    raise IndexExistsError(
        f"Index {name!r} already exists for {info.get('model_spec') or model_spec} "
        f"({info.get('count', '?')} items from {source}, built {info.get('created', '?')}); "
        f"{advice}."
    )


def _check_build(name: str, engine: str, batch_size: int, shard_size: int) -> None:
    check_index_name(name)
    if engine not in ENGINES:
        raise ValueError(f"Unknown engine {engine!r}; use {' or '.join(ENGINES)}.")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1; got {batch_size}.")
    if shard_size < 1:
        raise ValueError(f"shard size must be at least 1; got {shard_size}.")


def build_index(
    loaded: LoadedSource,
    embedder: Embedder,
    name: str,
    settings: Settings,
    *,
    model_spec: str | None = None,
    engine: str = "local",
    ray_address: str | None = None,
    device: str | None = None,
    batch_size: int = 32,
    kind: str = "auto",
    shard_size: int = DEFAULT_SHARD_SIZE,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    ray_actors: int | None = None,
    index_params: dict[str, Any] | None = None,
) -> BuildReport:
    """Embed `loaded`'s studies with `embedder` shard by shard (resumable), write the index
    `name` with the source's vocabulary, and prepare it for logic-aware search.

    The Ray engine loads the model in its actors, so it needs `model_spec`.
    """
    _check_build(name, engine, batch_size, shard_size)
    if engine == "ray" and model_spec is None:
        raise ValueError("The ray engine loads the model in its actors: name its model_spec.")
    notes: list[str] = []
    with build_lock(settings, name, _noting(notes, progress)):
        report = _build_locked(
            loaded, embedder, name, settings, model_spec or embedder.card.name, engine,
            ray_address, device, batch_size, kind, shard_size, progress, stop, ray_actors,
            index_params,
        )  # fmt: skip
    report.notes[:0] = notes
    return report


def _build_locked(
    loaded: LoadedSource,
    embedder: Embedder,
    name: str,
    settings: Settings,
    model_spec: str,
    engine: str,
    ray_address: str | None,
    device: str | None,
    batch_size: int,
    kind: str,
    shard_size: int,
    progress: Progress | None,
    stop: threading.Event | None,
    ray_actors: int | None,
    index_params: dict[str, Any] | None,
) -> BuildReport:
    started = time.perf_counter()
    say = progress or (lambda fraction, message: None)
    fingerprint = embedder.card.fingerprint
    studies = _unique(loaded.studies)
    _fit_to_model(studies, embedder)
    shards = make_shards(studies, shard_size)
    directory = build_dir(settings, name, fingerprint)
    about = {
        "name": name,
        "model_spec": model_spec,
        "kind": kind,
        "engine": engine,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "source_kind": loaded.spec.kind,
        # the spec as typed only where it names no patient (phantoms, shipped public layouts)
        "source_text": loaded.spec.text if loaded.spec.kind in PUBLIC_SOURCE_KINDS else "",
    }
    manifest = open_manifest(directory, loaded.spec, fingerprint, shard_size, len(studies), about)
    committed = {
        s.number
        for s in shards
        if manifest["shards"].get(str(s.number), {}).get("digest") == s.digest
        and shard_file(directory, s.number).is_file()
    }
    pending = [s for s in shards if s.number not in committed]
    findings = {s.id: s.findings for s in studies}
    reused = sum(manifest["shards"][str(n)]["n"] for n in committed)
    embedded = 0
    rate = _Rate(sum(len(s.studies) for s in pending))
    say(0.05, f"{len(studies)} items in {len(shards)} shards; {len(committed)} shards committed")
    resolved_device = device or settings.device
    if engine == "ray":

        def on_device(chosen: str) -> None:
            nonlocal resolved_device
            resolved_device = chosen

        results = ray_engine(
            pending, str(model_spec), settings, batch_size, resolved_device, ray_address, stop,
            ray_actors, on_device,
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
    written, failures, notes = _write(
        name, loaded, studies, shards, directory, manifest, embedder, kind, settings,
        index_params, model_spec,
    )  # fmt: skip
    for note in notes:
        say(0.92, f"note: {note}")
    shutil.rmtree(directory, ignore_errors=True)
    say(0.95, f"preparing logic-aware ranking of {name}")
    logic_note = prepare_index_logic(
        written, _weights_on_use(embedder, model_spec, settings, resolved_device), settings,
        query_vocabulary(written),
    )  # fmt: skip
    report = BuildReport(
        name=name,
        n_items=written.index.count,
        embedded=embedded,
        reused=reused,
        failed=len(failures),
        seconds=round(time.perf_counter() - started, 3),
        engine=engine,
        device=resolved_device,
        kind=written.index.kind,
        vocabulary=loaded.vocabulary.to_dict(),
        directory=str(written.directory),
        model=embedder.card.name,
        model_spec=model_spec,
        notes=notes,
        logic=logic_note is None,
        logic_note=logic_note or "",
        failures=failures,
        failed_by_reason=count_reasons(failures),
    )
    if loaded.references:  # server-side: which file or DICOM UIDs each pseudonym is
        save_references(settings, name, loaded.references, list(written.index.ids))
        written.files = source_files(settings, name)  # the memoised load, read before they were
    say(
        1.0,
        f"index {name} built: {report.n_items} items ({report.failed} failed: "
        f"{describe_failures(failures)}), {report.kind}",
    )
    return report


class _LoadOnUse:
    """A Ray build's card-only model that loads its weights the first time it encodes.

    The logic-aware step reads an unfitted probe's finding name with the text tower. By then
    the build's Ray cluster is stopped, so the weights loaded here (on the CPU: a few names)
    never sit beside the actors' copies, and an index whose probes all fit never loads them."""

    def __init__(self, card_only: CardOnly, spec: str, settings: Settings, device: str) -> None:
        self.card = card_only.card
        self.input_side = card_only.input_side
        self._load = lambda: registry.load_embedder(spec, settings, device=device)
        self._model: Embedder | None = None

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        if self._model is None:
            self._model = self._load()
        return self._model.encode(items, instruction)


def _weights_on_use(
    embedder: Embedder, model_spec: str, settings: Settings, device: str
) -> Embedder:
    """`embedder` itself, or for a card-only driver (Ray) one that loads the model if asked."""
    if isinstance(embedder, CardOnly):
        return _LoadOnUse(embedder, model_spec, settings, "cpu")
    return embedder


def _fit_to_model(studies: Sequence[Study], embedder: Embedder) -> None:
    """Streamed studies (DICOM) reduce their pixels to the embedder's own input size as they
    decode, where it declares one: a batch then holds model-sized films, same vectors."""
    side = input_side(embedder)
    for study in studies:
        if hasattr(study, "input_side"):
            study.input_side = side  # type: ignore[attr-defined]


def _unique(studies: Sequence[Study]) -> list[Study]:
    """Studies with distinct ids, in source order. The same study listed twice counts once;
    two different studies with one id are an error, never a merge (one would vanish)."""
    seen: dict[str, Study] = {}
    for study in studies:
        earlier = seen.setdefault(study.id, study)
        if earlier is not study and not _same(earlier, study):
            raise BuildError(
                f"Two different items share the id {study.id!r}; nothing was merged. Give "
                "each item its own id (folder and DICOM sources do so themselves)."
            )
    return list(seen.values())


def _same(a: Study, b: Study) -> bool:
    """Whether two Study objects are the same item (same file, text or pixels)."""
    if (a.form, a.path, a.text, getattr(a, "files", ())) != (
        b.form, b.path, b.text, getattr(b, "files", ())
    ):  # fmt: skip
        return False
    if a.pixels is None or b.pixels is None:
        return a.pixels is None and b.pixels is None
    return a.pixels.shape == b.pixels.shape and bool(np.array_equal(a.pixels, b.pixels))


def _write(
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
    model_spec: str = "",
) -> tuple[LoadedIndex, list[dict[str, str]], list[str]]:
    """Read the shards in order and write the index, its metadata and failed.jsonl; returns
    the index loaded back, every failure (the source's and the shards'), and notes (a kind
    that did not fit the collection, FAISS's training warnings), one line each."""
    ids: list[str] = []
    failures = list(loaded.failed)
    for shard in shards:  # ids first; vectors are streamed from the shards below
        entry = manifest["shards"][str(shard.number)]
        failures.extend(entry["failed"])
        if entry["n"]:
            import pyarrow.parquet as pq

            ids.extend(pq.read_table(shard_file(directory, shard.number), columns=["id"])
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
    fitted, note = fit_kind(kind, len(ids), params)
    notes = [note] if note else []
    if fitted == "ivfpq":  # filled shard by shard, never all in RAM
        if settings.index_memory_mb is not None:
            params.setdefault("memory_budget_mb", settings.index_memory_mb)
        params.setdefault("nbits", pq_bits(len(ids)))
        index = VectorIndex.build_ivfpq(
            chunks, ids, dims, fingerprint, work_dir=directory / "ivfpq", **params
        )
    else:
        vectors = np.concatenate(list(chunks()))
        if fitted != resolve_kind(kind, len(ids)):
            params = {}  # the requested kind's parameters do not apply to the fallback
        index = VectorIndex.build(vectors, ids, kind=fitted, fingerprint=fingerprint, **params)
    notes += index.notes
    info = index_info(
        name,
        embedder,
        index,
        [by_id[i] for i in ids],
        corpus=loaded.describe(),
        vocabulary=loaded.vocabulary.to_dict(),
        failed=len(failures),
        model_spec=model_spec or embedder.card.name,
        requested_kind=kind,
        notes=notes,
    )
    report_text = "".join(json.dumps(f) + "\n" for f in failures)
    write_index(
        name,
        index,
        [study_metadata(by_id[i]) for i in ids],
        info,
        settings,
        extra_files={FAILED_FILE: report_text},
    )
    return load_index(name, fingerprint, settings), failures, notes
