"""GET /indices/{name}/items/{item_id}/source: which file or DICOM UIDs a hit is (read scope).

Item ids of folder and DICOM indices are keyed pseudonyms (index/provenance.py); this route
reads the server-side source references (store/source_refs.py) for callers holding a token of
resolve scope or more, never for anonymous callers (401) or search and read tokens (403): a
token that reads records is not one that re-identifies them. The answer
names the source root and the path relative to it, never the server's absolute path, and every
resolution is written to the audit log.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from medheb_app.api import audit
from medheb_app.api.problems import ApiProblem
from medheb_app.api.search_routes import ERRORS
from medheb_app.api.security import Principal, access, services_of
from medheb_app.store.source_refs import find_reference

router = APIRouter(tags=["catalog and runs"])
Resolver = Annotated[Principal, Depends(access("resolve", anonymous=False))]


class ItemSource(BaseModel):
    """Where one indexed item came from."""

    index: str
    item_id: str
    kind: str  # "file" | "dicom"
    root: str  # the source root's name (MEDHEB_SOURCE_ROOTS, "shared" or "local")
    relative_path: str  # the item's (first) file, relative to the source
    files: list[str]
    study_uid: str | None = None
    series_uid: str | None = None
    instance_uids: list[str] = []


@router.get(
    "/indices/{name}/items/{item_id}/source",
    response_model=ItemSource,
    summary="The file or DICOM UIDs of an indexed item (resolve scope)",
    responses=ERRORS,
)
def item_source(name: str, item_id: str, request: Request, caller: Resolver) -> dict[str, Any]:
    services = services_of(request)
    found = find_reference(services.store, name, item_id)
    if found is None:
        raise ApiProblem(
            "not-found",
            f"Index {name!r} has no source reference for item {item_id!r} (references are "
            "kept for folder, DICOM and manifest sources).",
        )
    audit.record(
        services.store,
        who=caller.who,
        action="resolve",
        route="/indices/{name}/items/{item_id}/source",
        index=name,
        query=item_id,
        count=1,
    )
    return {
        "index": name,
        "item_id": item_id,
        "kind": found["kind"],
        "root": found["root_name"],
        "relative_path": found["relative_path"],
        "files": found["files"],
        "study_uid": found["study_uid"],
        "series_uid": found["series_uid"],
        "instance_uids": found["instance_uids"],
    }
