"""The one place the API meets the search service and the index catalog.

medheb_app/search.py and index/catalog.py are being restructured; routes call only these
functions, so a change there is absorbed here. Nothing is reimplemented: every call goes to
the same function the CLI (`search`, `index list/info`) and the search tab call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medheb_app.evidence.file_study import study_from_file
from medheb_app.evidence.study import EvidenceError, Study
from medheb_app.index.catalog import IndexNotFoundError, LoadedIndex, list_indices, load_index
from medheb_app.search import Prepared, SearchError, check_offered, prepare, run, search, validate
from medheb_app.serving import default_model, offered, reach
from medheb_app.settings import Settings

__all__ = [
    "EvidenceError",
    "IndexNotFoundError",
    "SearchError",
    "builds",
    "check_offered",
    "default_model",
    "find_build",
    "offered",
    "prepare_text",
    "reach",
    "read_upload",
    "run_prepared",
    "run_search",
]


def run_search(
    settings: Settings,
    *,
    text: str | None = None,
    study: Study | None = None,
    model: str | None,
    index: str | None,
    k: int,
    ranking: str,
    setting: str,
    public: bool,
    nprobe: int | None = None,
    ef_search: int | None = None,
    rerank: int | None = None,
    include_training: bool = False,
) -> dict[str, Any]:
    """The CLI's `search --json` document for a text query or a read study."""
    return search(
        query_text=text,
        study=study,
        model_spec=model,
        index=index,
        k=k,
        settings=settings,
        setting=setting,
        ranking=ranking,
        public=public,
        nprobe=nprobe,
        ef_search=ef_search,
        rerank=rerank,
        include_training=include_training,
    ).to_json()


def prepare_text(
    settings: Settings,
    *,
    text: str,
    model: str | None,
    index: str | None,
    k: int,
    ranking: str,
    setting: str,
    public: bool,
    nprobe: int | None = None,
    ef_search: int | None = None,
    rerank: int | None = None,
    include_training: bool = False,
) -> Prepared:
    """A text search validated and resolved to its model and index build, as `search`
    does before ranking (the same checks, the same refusals)."""
    request = validate(
        text, None, model, index, k, settings, setting, ranking, None, public,
        nprobe, ef_search, rerank, include_training,
    )  # fmt: skip
    return prepare(request, settings)


def run_prepared(prepared: Prepared, settings: Settings) -> dict[str, Any]:
    """The `search --json` document of a prepared search."""
    return run(prepared, settings).to_json()


def builds(settings: Settings, name: str | None = None) -> list[dict[str, Any]]:
    """Every complete index build (`index list`), or those of index `name`."""
    return [entry for entry in list_indices(settings) if name is None or entry["name"] == name]


def find_build(settings: Settings, name: str, fingerprint: str | None = None) -> LoadedIndex:
    """A built index loaded by model fingerprint (no model is loaded): the given build, else
    the first. IndexNotFoundError when there is none."""
    found = builds(settings, name)
    if fingerprint is not None:
        found = [entry for entry in found if entry["fingerprint"] == fingerprint]
    if not found:
        raise IndexNotFoundError(f"Index {name!r} does not exist.")
    return load_index(name, str(found[0]["fingerprint"]), settings)


def read_upload(path: Path, settings: Settings) -> Study:
    """An uploaded file read in memory by the project's readers, within their size limit."""
    from dataclasses import replace

    study = study_from_file(path, max_bytes=settings.max_upload_bytes)
    study.load_pixels()
    return replace(study, path=None)
