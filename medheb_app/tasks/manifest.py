"""Tasks as data: a JSONL or parquet manifest of query rows plus a TaskMetadata sidecar.

Any MedHEB task can be added without code. Layout, for a task named NAME:

    NAME.jsonl (or NAME.parquet)  one row per query:
        {"query": {"id": "q1", "text": "...", "image": "images/q1.png"},
         "candidates": [{"id": "c1", "text": "..."}, "c2", ...],   # items or ids
         "positive": "c1" | ["c1", "c3"],                           # single-positive tasks
         "gains": {"c1": 1.0, "c3": 0.5}}                           # graded tasks
    NAME.json                     the TaskMetadata (validated, unknown keys rejected)

An item has an id and any of "text", "image" (a 2D file) and "volume" (a 3D file or DICOM
series folder); file paths are relative to the manifest and read through readers.read_any.
A candidate given as a bare id refers to an item spelled out in another row. Candidates of
all rows form one pool; a row only ranks its own candidates (the rest are excluded), so
per-query candidate lists (as in MMEB-style manifests) keep their meaning. In parquet, the
nested columns may be JSON strings.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from medheb_app.evidence.readers import read_any
from medheb_app.evidence.study import EmbedItem, Evidence, EvidenceError
from medheb_app.settings import Settings
from medheb_app.tasks.base import (
    Item,
    Part,
    Query,
    Suite,
    Task,
    TaskMetadata,
    TaskSpec,
    TaskUnavailable,
)

MANIFEST_SUFFIXES = (".jsonl", ".parquet")


class ManifestItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    text: str | None = None
    image: str | None = None
    volume: str | None = None

    @model_validator(mode="after")
    def _has_content(self) -> ManifestItem:
        if self.text is None and self.image is None and self.volume is None:
            raise ValueError(f"item {self.id!r} needs text, image or volume")
        return self


class ManifestRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: ManifestItem
    candidates: list[ManifestItem | str] = Field(min_length=1)
    positive: str | list[str] | None = None
    gains: dict[str, float] | None = None

    @property
    def positives(self) -> tuple[str, ...]:
        if self.positive is None:
            return ()
        return (self.positive,) if isinstance(self.positive, str) else tuple(self.positive)


def sidecar_path(manifest: Path) -> Path:
    return manifest.with_suffix(".json")


def read_rows(manifest: Path) -> list[dict[str, Any]]:
    """The manifest's raw rows (JSONL lines or parquet records)."""
    if manifest.suffix == ".jsonl":
        rows = []
        for number, line in enumerate(manifest.read_text().splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(
                        f"{manifest.name} line {number} is not JSON: {error}"
                    ) from None
        return rows
    if manifest.suffix == ".parquet":
        import pandas as pd

        records = pd.read_parquet(manifest).to_dict("records")
        return [{key: _decode(value) for key, value in row.items()} for row in records]
    raise ValueError(f"{manifest.name}: a task manifest is .jsonl or .parquet.")


def _decode(value: Any) -> Any:
    """Parquet cells: JSON strings and numpy arrays become plain Python values."""
    if isinstance(value, str) and value[:1] in "{[":
        return json.loads(value)
    if hasattr(value, "tolist"):
        return value.tolist()
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value


def _load_item(item: ManifestItem, root: Path, digest: Any) -> EmbedItem:
    """Text stays a string; files are read (and hashed into the task revision)."""
    if item.image is None and item.volume is None:
        return item.text or ""
    arrays: dict[str, Any] = {}
    for field_name in ("image", "volume"):
        relative = getattr(item, field_name)
        if relative is None:
            continue
        path = (root / relative).resolve()
        if not path.exists():
            raise EvidenceError(f"Item {item.id!r}: {relative} not found next to the manifest.")
        loaded = read_any(path)
        wanted = "2d" if field_name == "image" else "3d"
        if loaded.form != wanted:
            raise EvidenceError(f"Item {item.id!r}: {relative} is {loaded.form}, not {wanted}.")
        digest.update(loaded.pixels.tobytes())
        arrays[field_name] = loaded.pixels
    return Evidence(text=item.text, **arrays)


def load_manifest_task(manifest: Path | str) -> Task:
    """Build a Task from NAME.jsonl|parquet and NAME.json; errors name the row and field."""
    manifest = Path(manifest)
    if not manifest.exists():
        raise TaskUnavailable(f"task manifest {manifest} not found")
    sidecar = sidecar_path(manifest)
    if not sidecar.exists():
        raise ValueError(f"{manifest.name} needs its metadata in {sidecar.name}.")
    try:
        metadata = TaskMetadata.model_validate_json(sidecar.read_text())
    except ValidationError as error:
        raise ValueError(f"{sidecar.name}: {_first_error(error)}") from None
    rows: list[ManifestRow] = []
    for number, raw in enumerate(read_rows(manifest), start=1):
        try:
            rows.append(ManifestRow.model_validate(raw))
        except ValidationError as error:
            raise ValueError(f"{manifest.name} row {number}: {_first_error(error)}") from None
    if not rows:
        raise ValueError(f"{manifest.name} has no rows.")
    defined: dict[str, ManifestItem] = {}
    for row in rows:
        for entry in row.candidates:
            if isinstance(entry, ManifestItem):
                if defined.get(entry.id, entry) != entry:
                    raise ValueError(f"Candidate {entry.id!r} is defined twice, differently.")
                defined[entry.id] = entry
    digest = hashlib.sha256(manifest.read_bytes() + sidecar.read_bytes())
    root = manifest.parent
    loaded = {cid: _load_item(item, root, digest) for cid, item in sorted(defined.items())}
    queries_raw = []
    for number, row in enumerate(rows, start=1):
        ids = [e if isinstance(e, str) else e.id for e in row.candidates]
        missing = [cid for cid in ids if cid not in loaded]
        if missing:
            raise ValueError(f"{manifest.name} row {number}: candidates never defined: {missing}")
        queries_raw.append((row, set(ids)))
    query_items = [_load_item(row.query, root, digest) for row, _ in queries_raw]
    revision = digest.hexdigest()[:12]

    def scoped(local_id: str) -> str:
        return f"{metadata.name}@{revision}:{local_id}"

    queries = [
        Query(
            id=scoped(row.query.id),
            item=item,
            positives=tuple(scoped(p) for p in row.positives),
            gains={scoped(c): g for c, g in (row.gains or {}).items()},
            exclude=frozenset(scoped(c) for c in loaded if c not in ids),
        )
        for (row, ids), item in zip(queries_raw, query_items, strict=True)
    ]
    candidates = [Item(scoped(cid), item) for cid, item in loaded.items()]
    metadata = metadata.model_copy(update={"data_revision": revision})
    return Task(metadata, queries, candidates)


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


def find_manifests(directory: Path) -> list[Path]:
    """Manifests (with a sidecar) in a folder, sorted by name."""
    return sorted(
        path
        for path in Path(directory).iterdir()
        if path.suffix in MANIFEST_SUFFIXES and sidecar_path(path).exists()
    )


def manifest_suite(directory: Path | str) -> Suite:
    """Every manifest in a folder as a suite (evaluation only: manifests have no train part)."""
    directory = Path(directory)
    manifests = find_manifests(directory)
    if not manifests:
        raise ValueError(f"No task manifests (NAME.jsonl|parquet + NAME.json) in {directory}.")
    suite = Suite(str(directory), f"task manifests in {directory}")
    for path in manifests:
        metadata = TaskMetadata.model_validate_json(sidecar_path(path).read_text())

        def build(settings: Settings, part: Part = "test", _path: Path = path) -> Task:
            if part != "test":
                raise TaskUnavailable(f"{_path.name} has no training part")
            return load_manifest_task(_path)

        suite.register(
            TaskSpec(metadata.name, metadata.family, metadata.split, metadata.source, build)
        )
    return suite
