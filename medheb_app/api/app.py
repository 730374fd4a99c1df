"""The /api/v1 application: a FastAPI sub-app mounted on the server's FastAPI app, beside the
Gradio pages, with its own OpenAPI document (/api/v1/openapi.json) and docs (/api/v1/docs)."""

from __future__ import annotations

from typing import Protocol

from fastapi import FastAPI

from medheb_app import __version__
from medheb_app.access.limits import RateLimiter
from medheb_app.api.admin_routes import router as admin_router
from medheb_app.api.answers import AnswerCache
from medheb_app.api.body_cap import MAX_JSON_BYTES, BodyCap
from medheb_app.api.problems import install_handlers
from medheb_app.api.read_routes import router as read_router
from medheb_app.api.schemas import Problem
from medheb_app.api.search_routes import router as search_router
from medheb_app.api.security import ApiLimits
from medheb_app.api.source_routes import router as source_router
from medheb_app.services import Services

API_PREFIX = "/api/v1"
DESCRIPTION = """JSON API of the clinical retrieval workbench: text and image search over
built indices, the catalog, study records, benchmark runs, and (admin scope) jobs, reader
studies and the audit log.

Send `Authorization: Bearer <token>` (an admin issues tokens with `python -m medheb_app token
create` or from the admin tab). Without a token a request gets what an anonymous visitor of the
web page gets: the offered indices and models, at the page's per-client limits. Errors are
`application/problem+json` (RFC 9457) with a stable `type`."""


class PageBudget(Protocol):
    """The page's per-client limiters (ui.search_upload.TabLimits)."""

    searches: RateLimiter
    uploads: RateLimiter


def build_api(services: Services, page: PageBudget | None = None) -> FastAPI:
    """The API app for `services` (mount it at API_PREFIX). `page`: the web page's per-client
    search and upload limiters, shared so that an anonymous client has one budget whichever
    door it uses (REST, the page, its Gradio /search), as the README states."""
    api = FastAPI(
        title="Clinical retrieval workbench API",
        version=__version__,
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    api.state.services = services
    limits = ApiLimits(token_rate=services.settings.api_token_rate)
    if page is not None:
        limits.searches, limits.uploads = page.searches, page.uploads
    api.state.limits = limits
    api.state.answers = AnswerCache(services.settings.answer_cache)
    install_handlers(api)
    api.add_middleware(BodyCap, cap=MAX_JSON_BYTES)  # uploads: their route's own cap
    api.include_router(search_router)
    api.include_router(read_router)
    api.include_router(source_router)
    api.include_router(admin_router)
    _bearer_scheme(api)
    _local_docs(api)
    return api


def _local_docs(api: FastAPI) -> None:
    """Interactive docs at /docs from Swagger UI files shipped in a package (swagger-ui-py),
    so they work on a hospital network without the CDN FastAPI's default page loads from."""
    from pathlib import Path

    import swagger_ui
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles

    static = Path(swagger_ui.__file__).parent / "static"
    api.mount("/docs-static", StaticFiles(directory=static), name="docs-static")

    @api.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=f"{API_PREFIX}/openapi.json",
            title=f"{api.title} - docs",
            swagger_js_url=f"{API_PREFIX}/docs-static/swagger-ui-bundle.js",
            swagger_css_url=f"{API_PREFIX}/docs-static/swagger-ui.css",
            swagger_favicon_url=f"{API_PREFIX}/docs-static/favicon-32x32.png",
        )


def _bearer_scheme(api: FastAPI) -> None:
    """Declare the bearer scheme in the document (optional on every route: anonymous works)."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict:
        if api.openapi_schema is None:
            schema = get_openapi(
                title=api.title,
                version=api.version,
                description=api.description,
                routes=api.routes,
                servers=api.servers or [{"url": API_PREFIX}],
            )
            components = schema.setdefault("components", {})
            components["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            _problem_responses(schema)
            schema["security"] = [{"bearer": []}, {}]
            api.openapi_schema = schema
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]


PROBLEM_CODES = ("400", "401", "403", "404", "422", "429", "500")


def _problem_responses(schema: dict) -> None:
    """Every error an operation can answer, documented as application/problem+json with the
    Problem schema (FastAPI's default 422 body is not what this API sends)."""
    components = schema["components"].setdefault("schemas", {})
    components["Problem"] = Problem.model_json_schema()
    problem = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            responses = operation.setdefault("responses", {})
            for code in {*PROBLEM_CODES, *(c for c in responses if c[0] in "45")}:
                described = responses.get(code, {}).get("description") or "A problem"
                responses[code] = {"description": described, "content": problem}
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)


def mount_api(app: FastAPI, services: Services, page: PageBudget | None = None) -> FastAPI:
    """Mount /api/v1 on the server app (before the Gradio page at "/", which catches all)."""
    app.mount(API_PREFIX, build_api(services, page))
    return app
