"""Where an indexed item came from, without telling anyone who may not know.

Items of folder and DICOM sources are named by a keyed pseudonym: HMAC-SHA256 of the item's
reference (its path relative to the source, extension included, or its SeriesInstanceUID)
under a secret (Settings.pseudonym_key, else a random key kept in DATA_DIR/pseudonym.key).
Without the key nobody can go from a hit back to a file or a UID, not even by hashing every
UID of the archive; with the server's key the source-reference table (store/source_refs.py)
maps the pseudonym back for admins and read-scope tokens (`index resolve`).

Catalogs never hold a source path as it was typed: a source is recorded as the name of its
source root (Settings.source_roots, "shared" for the shipped data folder, else "local") and a
keyed digest of its location, so a patient-named folder (`DOE^JANE_MRN900042`) cannot reach
catalog.json. The path relative to its root is kept server-side with the references.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.store.source_refs import files_of, find_reference, replace_references

KEY_FILE = "pseudonym.key"
ID_SCHEME = "hmac-sha256-v1"  # recorded in catalog.json of indices whose ids are pseudonyms
# recorded in catalog.json ("paths") of indices whose metadata.jsonl names no file: the
# server's source references do (folder, DICOM and manifest sources)
PATHS_BY_REFERENCE = "source-references"
SHIPPED_LAYOUTS = ("nih", "mimic", "chexpert", "medmnist")  # public data sets: paths harmless


def pseudonym_key(settings: Settings) -> bytes:
    """The secret of the pseudonyms: MEDHEB_PSEUDONYM_KEY, else DATA_DIR/pseudonym.key (32
    random bytes made on first use, mode 0600), so pseudonyms stay stable across builds."""
    if settings.pseudonym_key:
        return settings.pseudonym_key.encode("utf-8")
    path = settings.data_dir / KEY_FILE
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first: read theirs
            pass
        else:
            with os.fdopen(descriptor, "w") as handle:
                handle.write(secrets.token_hex(32))
    return path.read_text().strip().encode("utf-8")


def pseudonym(key: bytes, prefix: str, reference: str) -> str:
    """`prefix-` + 16 hex digits of HMAC-SHA256(key, reference): stable, not reversible."""
    digest = hmac.new(key, reference.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"{prefix}-{digest[:16]}"


def source_root(path: Path, settings: Settings) -> tuple[str, Path]:
    """(root name, root folder) of a source path: the configured root that holds it (the
    deepest), "shared" for the shipped data folder, else "local" with the path's parent."""
    resolved = path.expanduser().resolve()
    roots = [*settings.source_roots, ("shared", settings.shared_data_dir)]
    best: tuple[str, Path] | None = None
    for name, root in roots:
        root = root.expanduser().resolve()
        deeper = best is None or len(root.parts) > len(best[1].parts)
        if deeper and inside_roots(resolved, (root,)):
            best = (name, root)
    return best or ("local", resolved.parent)


def served_roots(settings: Settings) -> tuple[Path, ...]:
    """The folders a server-started job may read under (MEDHEB_SOURCE_ROOTS and the shipped
    data folder), symbolic links resolved once, so each file can be checked against them."""
    roots = [root for _, root in settings.source_roots] + [settings.shared_data_dir]
    return tuple(root.expanduser().resolve() for root in roots)


def inside_roots(path: Path, roots: tuple[Path, ...]) -> bool:
    """Whether `path`, every symbolic link on the way followed, lies in one of `roots`."""
    resolved = path.expanduser().resolve()
    return any(resolved.is_relative_to(root) for root in roots)


def source_record(
    kind: str, path: Path | None, settings: Settings, labels: Path | None = None
) -> dict[str, object]:
    """What a catalog records of a source: kind, root name and a keyed digest of where it
    is; the path relative to the root only for the shipped public layouts (NIH, MIMIC-CXR-JPG,
    CheXpert, MedMNIST), whose folder names name no patient."""
    if path is None:
        return {"kind": kind, "path": None, "labels": None}
    root, folder = source_root(path, settings)
    resolved = path.expanduser().resolve()
    relative = resolved.relative_to(folder).as_posix() if resolved != folder else "."
    location = pseudonym(pseudonym_key(settings), "source", str(resolved))
    shown = f"{root}/{relative}" if kind in SHIPPED_LAYOUTS else f"{root}/{location}"
    return {
        "kind": kind,
        "root": root,
        "location": location,
        "path": shown,
        "labels": "labels CSV" if labels is not None else None,
        "spec": f"{kind}:{shown}",
    }


def save_references(
    settings: Settings, index_name: str, references: dict[str, dict[str, object]], ids: list[str]
) -> int:
    """Write the source references of the items `ids` of `index_name` to the server's store
    (replacing the index's earlier rows); returns how many were written."""
    rows = [{"item_id": item_id, **references[item_id]} for item_id in ids if item_id in references]
    store = Store.open(settings.database_url)
    try:
        return replace_references(store, index_name, rows)
    finally:
        store.engine.dispose()


def resolve_reference(settings: Settings, index_name: str, item_id: str) -> dict[str, object]:
    """The source of one item of an index (root, relative path, file, UIDs); LookupError
    with a sentence when the index or item has no reference (built before references were
    kept, a phantom or shipped-layout index, or a wrong id)."""
    store = Store.open(settings.database_url)
    try:
        found = find_reference(store, index_name, item_id)
    finally:
        store.engine.dispose()
    if found is None:
        raise LookupError(
            f"Index {index_name!r} has no source reference for item {item_id!r}. References "
            "are kept for folder, DICOM and manifest sources built by this version; shipped "
            "layouts (NIH, MIMIC-CXR-JPG, CheXpert) name their files in their own ids."
        )
    root = Path(str(found["root_path"]))
    found["file"] = str(root / str(found["relative_path"])) if found["relative_path"] else None
    return found


def source_files(settings: Settings, index_name: str) -> dict[str, str]:
    """item id -> server file of a pseudonymous index's items, so the server can show a hit's
    image although the index folder names no file (never sent to a visitor: only pixels are)."""
    store = Store.open(settings.database_url)
    try:
        return files_of(store, index_name)
    finally:
        store.engine.dispose()
