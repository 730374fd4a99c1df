"""The page's one public Gradio endpoint, `/search`: a text search answered as the JSON
document of `POST /api/v1/search` (hits with id, rank, typed score, findings, report text,
links; no server path), for programs that speak Gradio (gradio_client) rather than REST.

The page's own events (its Search button renders a gallery and HTML) are private; this
endpoint takes what the page's pickers show (model and index names, ranking, k) as plain
strings and numbers, is held to the page's per-visitor search limit (the same TabLimits), runs
as an anonymous request (the offered pairs only, `public=True`) and is audited as the API's
searches are. Programs that can use HTTP should prefer `/api/v1` (tokens, OpenAPI).
"""

from __future__ import annotations

from typing import Literal

import gradio as gr

from medheb_app.access.limits import client_key
from medheb_app.api.problems import ApiProblem
from medheb_app.api.schemas import SearchResult
from medheb_app.api.search_routes import searched
from medheb_app.api.security import Principal
from medheb_app.services import Services
from medheb_app.ui.search_upload import SEARCH_CONCURRENCY, TabLimits

ROUTE = "gradio /search"
DESCRIPTION = (
    "Search an offered index with a text query (the page's Search, answered as JSON: the "
    "document of POST /api/v1/search, with each hit's id, rank, score and score kind, "
    "findings, report text and links to its record and image). Model and index take the "
    "names the page's pickers show; empty means the page's default."
)


def add_search_api(services: Services, limits: TabLimits) -> None:
    """Register `/search` in the Blocks being built (call inside its context)."""
    hops = services.settings.trusted_proxy_hops

    def search(
        query: str,
        model: str = "",
        index: str = "",
        k: int = 10,
        ranking: Literal["auto", "similarity", "logic"] = "auto",
        setting: Literal["main", "strict"] = "main",
        request: gr.Request = None,  # type: ignore[assignment]  # Gradio fills it in
    ) -> dict:
        client = client_key(request, hops)
        decision = limits.searches.hit(client)
        if not decision.allowed:
            raise gr.Error(decision.message("searches"))
        try:
            k = int(k)
        except (TypeError, ValueError):
            raise gr.Error("k must be a whole number.") from None
        try:
            answer = searched(
                services,
                Principal(client),
                ROUTE,
                text=str(query or ""),
                model=(model or "").strip() or None,
                index=(index or "").strip() or None,
                k=k,
                ranking=str(ranking or "auto"),
                setting=str(setting or "main"),
            )
        except ApiProblem as problem:  # a sentence for the caller, as the REST route says it
            raise gr.Error(problem.detail) from None
        # the REST answer exactly: its schema checked, fields it does not name dropped
        return SearchResult.model_validate(answer).model_dump(mode="json")

    gr.api(
        search,
        api_name="search",
        api_description=DESCRIPTION,
        concurrency_limit=SEARCH_CONCURRENCY,
        concurrency_id="search",  # shares the page's search slots
    )


__all__ = ["add_search_api"]
