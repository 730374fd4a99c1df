"""Named indices over collections of Studies, one per (name, model fingerprint).

Layout: settings.index_dir/<name>/<model fingerprint>/ holds the FAISS files written by
VectorIndex.save, metadata.jsonl (one row per item: findings, source, split, image path,
report text, synthetic flag, boxes) and catalog.json (the model card, kind, size, build time,
and where the corpus came from). A directory appears only when complete: builds write to a
temporary sibling and rename it into place, so the app never reads a half-built index.
"""

from __future__ import annotations

import copy
import hashlib
import json
import mmap
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from medheb_app.evidence.findings import CXR_RETRIEVE_10, Vocabulary
from medheb_app.evidence.study import Study
from medheb_app.index.provenance import ID_SCHEME, PATHS_BY_REFERENCE, source_files
from medheb_app.models.base import Embedder
from medheb_app.settings import Settings

if TYPE_CHECKING:  # FAISS is loaded by load_index only: `index list/info` read JSON files
    from medheb_app.index.faiss_index import VectorIndex

Progress = Callable[[float, str], None]
CATALOG_FILE = "catalog.json"
METADATA_FILE = "metadata.jsonl"
OFFSETS_FILE = "metadata.offsets.npy"  # byte offset of each metadata row, in index row order
# Above this many items the metadata rows stay on disk and are read per hit (MetadataRows):
# 10M rows as dicts would take many GB of RAM next to an IVF-PQ index of a few hundred MB.
LAZY_METADATA_ROWS = 200_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,99}$")


class IndexNotFoundError(FileNotFoundError):
    """The named index does not exist for the requested model; the message says what does."""


def check_index_name(name: str) -> str:
    """Index names become folder names: letters, digits and . _ @ + - only."""
    if not _NAME.match(name or ""):
        raise ValueError(
            f"Index name {name!r} is not allowed; use letters, digits and . _ @ + - "
            "(at most 100 characters, starting with a letter or digit)."
        )
    return name


def study_content_key(study: Study) -> str:
    """Cache key of what an embedder sees of a study: its id plus a hash of its content.

    The hash is over the image file's bytes (or the in-memory pixels, or the text for text
    studies), so two corpora that reuse an id for different content never share a vector.
    """
    digest = hashlib.sha1(study.form.encode())
    content = getattr(study, "content_digest", "")  # streamed DICOM: SOP instances + sizes
    if study.form == "text":
        digest.update((study.text or "").encode("utf-8"))
    elif content:
        digest.update(f"{content}:{getattr(study, 'fit_key', '')}".encode())
    elif study.pixels is not None:
        pixels = np.ascontiguousarray(study.pixels, dtype=np.float32)
        digest.update(str(pixels.shape).encode())
        digest.update(pixels.tobytes())
    elif study.path is not None and Path(study.path).is_file():
        with open(study.path, "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    else:
        digest.update(str(study.path).encode())
    return f"{study.id}@{digest.hexdigest()[:12]}"


def study_metadata(study: Study) -> dict[str, Any]:
    """The row stored for each indexed study: everything the UI shows about a hit."""
    return {
        "id": study.id,
        "form": study.form,
        "modality": study.modality,
        "findings": dict(study.findings),
        "source": study.source,
        "split": study.split,
        # folder, DICOM and manifest sources keep no path here: it may name a patient's
        # folder; the server finds the file through its source references (`index resolve`)
        "path": None if _path_by_reference(study) else study.path,
        "text": study.text,
        "synthetic": bool(study.synthetic),
        "boxes": [asdict(box) for box in study.boxes],
        "laterality": dict(study.laterality),
        "severity": dict(study.severity),
        "patient_id": study.patient_id,
    }


def _path_by_reference(study: Study) -> bool:
    """Whether the study's file is found through the server's source references, not the
    index folder (pseudonymous folder / DICOM items, manifest items with a file)."""
    return bool(study.meta.get("pseudonymous") or study.meta.get("path_by_reference"))


class MetadataRows(Mapping[str, dict[str, Any]]):
    """The metadata rows of a large index, read from the memory-mapped metadata.jsonl when a
    hit needs one (byte offsets from OFFSETS_FILE) instead of all held as dicts in RAM.

    Rows are in index row order (write_index writes the offsets only then), so the id of row
    r is ids[r]; the id -> row table is built on the first lookup."""

    def __init__(self, path: Path, offsets: np.ndarray, ids: Sequence[str]) -> None:
        if len(offsets) != len(ids) + 1:
            raise ValueError(f"{path}: {len(offsets) - 1} row offsets for {len(ids)} items.")
        self._offsets = offsets
        self._ids = ids
        self._rows: dict[str, int] | None = None
        self._lock = threading.Lock()
        with open(path, "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)

    def _row(self, key: str) -> int:
        if self._rows is None:
            with self._lock:
                if self._rows is None:
                    self._rows = {item: row for row, item in enumerate(self._ids)}
        return self._rows[key]

    def __getitem__(self, key: str) -> dict[str, Any]:
        row = self._row(key)
        start, end = int(self._offsets[row]), int(self._offsets[row + 1])
        return json.loads(self._map[start:end])

    def __contains__(self, key: object) -> bool:
        try:
            self._row(key)  # type: ignore[arg-type]
        except (KeyError, TypeError):
            return False
        return True

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)


@dataclass
class LoadedIndex:
    """A built index with its per-item metadata and its catalog entry."""

    name: str
    directory: Path
    index: VectorIndex
    items: Mapping[str, dict[str, Any]]
    info: dict[str, Any]
    files: Mapping[str, str] = field(default_factory=dict)  # referenced items' server files

    @property
    def fingerprint(self) -> str:
        return self.index.fingerprint

    @property
    def model_name(self) -> str:
        return str(self.info.get("model", {}).get("name", ""))

    def item(self, item_id: str) -> dict[str, Any]:
        """An item's metadata row; a referenced item's `path` comes from the server's source
        references (index/provenance.py), since its index folder names no file."""
        row = self.items[item_id]
        if row.get("path") is None and item_id in self.files:
            return {**row, "path": self.files[item_id]}
        return row

    def search(
        self,
        queries: np.ndarray,
        k: int = 10,
        nprobe: int | None = None,
        ef_search: int | None = None,
        rerank: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(queries, k, nprobe=nprobe, ef_search=ef_search, rerank=rerank)


def index_path(settings: Settings, name: str, fingerprint: str) -> Path:
    return settings.index_dir / check_index_name(name) / fingerprint


def index_vocabulary(loaded: LoadedIndex) -> Vocabulary | None:
    """The finding vocabulary the index's source labels (None for indices built before
    indices recorded one: the demo, labelled with the CXR-Retrieve ten)."""
    return Vocabulary.from_dict(loaded.info.get("vocabulary"))


def query_vocabulary(loaded: LoadedIndex) -> tuple[str, ...]:
    """Names a query is parsed against: the index's own labelled findings, else the ten."""
    vocabulary = index_vocabulary(loaded)
    return vocabulary.names if vocabulary is not None and vocabulary.labelled else CXR_RETRIEVE_10


def index_info(
    name: str,
    embedder: Embedder,
    index: VectorIndex,
    studies: Sequence[Study],
    **extra: Any,
) -> dict[str, Any]:
    """The catalog entry of a built index: model card, FAISS kind and parameters, size, the
    evidence forms it holds, whether it is synthetic, and `extra` (corpus, vocabulary, ...)."""
    return {
        "name": name,
        "model": embedder.card.to_dict(),
        "fingerprint": embedder.card.fingerprint,
        "kind": index.kind,
        "params": index.manifest()["params"],  # without local file paths (they move)
        "count": index.count,
        "dims": index.dims,
        "forms": sorted({study.form for study in studies}),
        "modalities": sorted({study.modality for study in studies if study.modality}),
        "synthetic": all(study.synthetic for study in studies),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        **extra,
    }


def write_index(
    name: str,
    index: VectorIndex,
    rows: Sequence[dict[str, Any]],
    info: dict[str, Any],
    settings: Settings,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Write the index, its metadata rows, its catalog entry (and any report files) into
    index_dir/<name>/<fingerprint>/ atomically: a reader sees the old build or the new one."""
    final = index_path(settings, name, index.fingerprint)
    staging = final.parent / f".staging-{index.fingerprint}-{uuid.uuid4().hex[:8]}"
    index.save(staging)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    in_order = len(rows) == len(index.ids)
    with open(staging / METADATA_FILE, "wb") as handle:
        for number, row in enumerate(rows):
            line = (json.dumps(row) + "\n").encode("utf-8")
            handle.write(line)
            offsets[number + 1] = offsets[number] + len(line)
            in_order = in_order and row.get("id") == index.ids[number]
    if in_order:  # rows in index order: a large index can read them per hit (MetadataRows)
        np.save(staging / OFFSETS_FILE, offsets)
    for file_name, text in (extra_files or {}).items():  # failed.jsonl can name a patient's
        (staging / file_name).write_text(text, encoding="utf-8")  # folder: owner only
        (staging / file_name).chmod(0o600)
    (staging / CATALOG_FILE).write_text(json.dumps(info, indent=2))
    _swap_into_place(staging, final)
    return final


_changes = 0  # indices swapped in or removed by this process (serving.offered's freshness)


def changes() -> int:
    """How many times this process has swapped an index into place or removed one."""
    return _changes


def _changed() -> None:
    global _changes
    _changes += 1


def remove_index(name: str, settings: Settings) -> list[str]:
    """Delete every build of the index `name` (all models); returns the models removed."""
    folder = settings.index_dir / check_index_name(name)
    removed = [entry["model"] for entry in list_indices(settings) if entry["name"] == name]
    if not folder.is_dir():
        raise IndexNotFoundError(missing_message(name, "", settings))
    retired = folder.parent / f".removed-{name}-{uuid.uuid4().hex[:8]}"
    os.replace(folder, retired)
    _changed()
    shutil.rmtree(retired, ignore_errors=True)
    return removed


def _swap_into_place(staging: Path, final: Path) -> None:
    """Rename the finished build over `final`; a reader sees the old or the new, never half."""
    retired = final.parent / f".retired-{final.name}-{uuid.uuid4().hex[:8]}"
    if final.exists():
        os.replace(final, retired)
    os.replace(staging, final)
    _changed()
    shutil.rmtree(retired, ignore_errors=True)


_loaded: dict[tuple[str, float], LoadedIndex] = {}
_loaded_lock = threading.Lock()


def load_index(
    name: str, model: Embedder | str, settings: Settings, spec: str | None = None
) -> LoadedIndex:
    """The index `name` built for `model` (an embedder or its fingerprint), memoised.

    Raises IndexNotFoundError naming the models the index does exist for, and the model as
    `spec` (what the caller asked for: dual-lite@label-aware) where given.
    """
    fingerprint = model if isinstance(model, str) else model.card.fingerprint
    directory = index_path(settings, name, fingerprint)
    catalog_file = directory / CATALOG_FILE
    if not catalog_file.is_file():
        model_name = spec or (fingerprint if isinstance(model, str) else model.card.name)
        raise IndexNotFoundError(missing_message(name, model_name, settings))
    key = (str(directory), catalog_file.stat().st_mtime)
    with _loaded_lock:
        if key in _loaded:
            return _loaded[key]
    info = json.loads(catalog_file.read_text())
    from medheb_app.index.faiss_index import VectorIndex  # deferred: see TYPE_CHECKING above

    index = VectorIndex.load(directory)
    items: Mapping[str, dict[str, Any]]
    if index.count >= LAZY_METADATA_ROWS and (directory / OFFSETS_FILE).is_file():
        offsets = np.load(directory / OFFSETS_FILE, mmap_mode="r")
        items = MetadataRows(directory / METADATA_FILE, offsets, index.ids)
    else:
        items = {}
        with open(directory / METADATA_FILE, encoding="utf-8") as handle:
            for line in handle:
                row = json.loads(line)
                items[row["id"]] = row
    corpus = info.get("corpus") or {}
    referenced = corpus.get("ids") == ID_SCHEME or corpus.get("paths") == PATHS_BY_REFERENCE
    files = source_files(settings, name) if referenced else {}
    loaded = LoadedIndex(name, directory, index, items, info, files)
    with _loaded_lock:
        for stale in [k for k in _loaded if k[0] == key[0]]:
            del _loaded[stale]
        _loaded[key] = loaded
    return loaded


def missing_message(name: str, model_name: str, settings: Settings) -> str:
    """Why `name` cannot be loaded for `model_name`, and what exists instead."""
    built = [entry for entry in list_indices(settings) if entry["name"] == name]
    if built:
        models = ", ".join(sorted({entry["model_spec"] for entry in built}))
        return (
            f"Index {name!r} has not been built for model {model_name!r}; it exists for: {models}."
        )
    names = sorted({entry["name"] for entry in list_indices(settings)})
    hint = f"Available indices: {', '.join(names)}." if names else "No index has been built yet."
    demo = "Build the demo with: python -m medheb_app demo build."
    return f"Index {name!r} does not exist. {hint} {demo}"


def index_exists(name: str, settings: Settings) -> bool:
    """Whether `name` is built for any model: a few stats of its own folder, no walk."""
    folder = settings.index_dir / check_index_name(name)
    if not folder.is_dir():
        return False
    return any(
        (build / CATALOG_FILE).is_file() for build in folder.iterdir() if build.name[0] != "."
    )


def list_indices(settings: Settings) -> list[dict[str, Any]]:
    """Every complete index on disk: name, model (the card's name), model_spec (what it was
    built with: dual-lite@label-aware), fingerprint, kind, count, forms, created."""
    entries = []
    if not settings.index_dir.is_dir():
        return entries
    for catalog_file in sorted(settings.index_dir.glob(f"*/*/{CATALOG_FILE}")):
        if catalog_file.parent.name.startswith("."):
            continue
        entry = _listed(catalog_file)
        if entry is not None:
            entries.append(entry)
    return entries


_LISTED: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}


def _listed(catalog_file: Path) -> dict[str, Any] | None:
    """The listing entry of one catalog file, parsed once per version of the file (its
    inode, size and mtime: a build is renamed into place whole, so a new build is a new
    file): an API search audits with the listing, and reading and parsing every catalog per
    request showed in its profile (BENCHMARKS.md, "HTTP API"). The caller gets its own copy."""
    try:
        status = catalog_file.stat()
    except OSError:
        return None  # removed right now; the next listing will see it
    version = (status.st_ino, status.st_size, status.st_mtime_ns)
    with _loaded_lock:
        held = _LISTED.get(str(catalog_file))
    if held is not None and held[0] == version:
        return _copied(held[1])
    try:
        info = json.loads(catalog_file.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # being replaced right now; the next listing will see it
    entry = _entry(info, catalog_file)
    with _loaded_lock:
        _LISTED[str(catalog_file)] = (version, entry)
    return _copied(entry)


def _entry(info: dict[str, Any], catalog_file: Path) -> dict[str, Any]:
    return {
        "name": info["name"],
        "model": info["model"]["name"],
        # the spec it was built with, tag included (older catalogs: the card's name)
        "model_spec": info.get("model_spec") or info["model"]["name"],
        "model_version": info["model"].get("version", ""),
        "fingerprint": info["fingerprint"],
        "kind": info["kind"],
        "count": info["count"],
        "dims": info["dims"],
        "forms": info.get("forms", []),
        "synthetic": info.get("synthetic", False),
        "created": info.get("created", ""),
        "vocabulary": info.get("vocabulary"),
        "source": info.get("corpus", {}).get("spec") or info.get("corpus", {}).get("kind"),
        "path": str(catalog_file.parent),
    }


def _copied(entry: dict[str, Any]) -> dict[str, Any]:
    vocabulary = entry["vocabulary"]
    return {**entry, "forms": list(entry["forms"]), "vocabulary": copy.deepcopy(vocabulary)}
