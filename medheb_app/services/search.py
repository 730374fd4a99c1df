"""Searching built indices for the tabs and the CLI (`services.search`): what is offered, the
defaults, and one search (the web page's anonymous one, or the operator's from the `search`
command), bound to the settings; the search itself is medheb_app.search's.

The answer's value types (SearchResponse, Score), the errors a caller turns into messages
(SearchError, EvidenceError) and the ranking names (RANKINGS) are re-exported here, so a tab
or a command needs no import past the services.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from medheb_app import search as search_module
from medheb_app.evidence.study import EvidenceError, Study
from medheb_app.index.catalog import list_indices
from medheb_app.models.registry import lineage
from medheb_app.query.parser import MAX_QUERY_CHARS
from medheb_app.search import MAX_PUBLIC_K, RANKINGS, Score, SearchError, SearchResponse
from medheb_app.serving import default_model, offered
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.study.items import open_study_models

__all__ = [
    "MAX_PUBLIC_K",
    "MAX_QUERY_CHARS",
    "RANKINGS",
    "EvidenceError",
    "Score",
    "SearchError",
    "SearchResponse",
    "SearchService",
]


BLINDING_CHECK_S = 2.0  # how long a read of the open studies' models is reused
BLINDED = (
    "{model}, or a model trained from the same towers, is being compared in an open reader "
    "study, so searching with it is paused until the study closes (its answers would show "
    "raters which side is which); an admin may still search it."
)


class SearchService:
    """The offered (index, model) pairs, the default model and a public search."""

    def __init__(self, settings: Settings, store: Store | None = None) -> None:
        self.settings = settings
        self.store = store
        self._blinded: tuple[float, frozenset[tuple]] = (-BLINDING_CHECK_S, frozenset())
        self._lock = threading.Lock()

    def blinded(self, model: str) -> str | None:
        """Why `model` may not be searched by anyone but an admin now (a sentence), or None.

        A rater could search a compared model over the same gallery and match a side's top
        images to its list (the adversarial pass at 7468bff: 9 of 9 sides named), so while a
        reader study is open its models are searched by admins only, on the page, its Gradio
        /search and the REST search alike. Specs are compared by family (registry.lineage):
        an alias of a compared model, and any checkpoint trained from the same towers (a
        fine-tune ranks the gallery alike), is refused too. Only studies a rater can be in
        count (study.items.open_study_models)."""
        if self.store is None or not self.settings.study_pauses_search:
            return None
        with self._lock:
            read_at, families = self._blinded
            if time.monotonic() - read_at > BLINDING_CHECK_S:
                models = open_study_models(self.store)
                families = frozenset(lineage(name, self.settings) for name in models)
                self._blinded = (time.monotonic(), families)
        if lineage(model, self.settings) in families:
            return BLINDED.format(model=model.strip())
        return None

    def offered(self) -> dict[str, list[str]]:
        """Index name -> the listed models built for it, strongest first (serving policy)."""
        return offered(self.settings)

    def default_model(self, index: str | None = None) -> str:
        """The strongest listed model built for `index` (the default index when None)."""
        return default_model(self.settings, index)

    def builds(self, name: str) -> list[dict[str, Any]]:
        """The catalog entries (one per model) of index `name`, read fresh."""
        return [entry for entry in list_indices(self.settings) if entry["name"] == name]

    def public(
        self,
        query_text: str | None,
        study: Study | None,
        model: str | None,
        index: str,
        k: float,
        ranking: str | None,
    ) -> SearchResponse:
        """One anonymous search (the web page's rights: offered pairs only, k at most
        MAX_PUBLIC_K, no model an open reader study compares); refusals raise SearchError
        with a message for the user."""
        chosen = model or default_model(self.settings, index)
        refused = self.blinded(chosen)
        if refused is not None:
            raise SearchError(refused, field="model")
        return search_module.search(  # through the module: one seam for tests
            query_text=query_text, study=study, model_spec=model, index=index, k=k,
            settings=self.settings, ranking=ranking, public=True,
        )  # fmt: skip

    def operator(
        self,
        query_text: str | None,
        file: str | Path | None,
        model: str | None,
        index: str | None,
        k: int,
        setting: str = "main",
        ranking: str = "auto",
        nprobe: int | None = None,
        ef_search: int | None = None,
        rerank: int | None = None,
        include_training: bool = False,
    ) -> SearchResponse:
        """One search with the operator's rights (the `search` command): any built index and
        model, a query file read from disk, the index's search parameters overridable and
        the probes' training studies includable; refusals raise SearchError."""
        return search_module.search(  # through the module: one seam for tests
            query_text=query_text, file=file, model_spec=model, index=index, k=k,
            settings=self.settings, setting=setting, ranking=ranking, nprobe=nprobe,
            ef_search=ef_search, rerank=rerank, include_training=include_training,
        )  # fmt: skip
