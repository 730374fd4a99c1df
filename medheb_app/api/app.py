"""The /api/v1 application: a FastAPI sub-app mounted on the server's FastAPI app, beside the
Gradio pages, with its own OpenAPI document (/api/v1/openapi.json) and docs (/api/v1/docs)."""

from __future__ import annotations

from fastapi import FastAPI

from medheb_app import __version__
from medheb_app.api.admin_routes import router as admin_router
from medheb_app.api.problems import install_handlers
from medheb_app.api.read_routes import router as read_router
from medheb_app.api.search_routes import router as search_router
from medheb_app.api.security import ApiLimits
from medheb_app.services import Services

API_PREFIX = "/api/v1"
DESCRIPTION = """JSON API of the clinical retrieval workbench: text and image search over
built indices, the catalog, study records, benchmark runs, and (admin scope) jobs, reader
studies and the audit log.

Send `Authorization: Bearer <token>` (an admin issues tokens with `python -m medheb_app token
create` or from the admin tab). Without a token a request gets what an anonymous visitor of the
web page gets: the offered indices and models, at the page's per-client limits. Errors are
`application/problem+json` (RFC 9457) with a stable `type`."""


def build_api(services: Services) -> FastAPI:
    """The API app for `services` (mount it at API_PREFIX)."""
    api = FastAPI(
        title="Clinical retrieval workbench API",
        version=__version__,
        description=DESCRIPTION,
        openapi_url="/openapi.json",
        docs_url="/docs",
        redoc_url=None,
    )
    api.state.services = services
    api.state.limits = ApiLimits(token_rate=services.settings.api_token_rate)
    install_handlers(api)
    api.include_router(search_router)
    api.include_router(read_router)
    api.include_router(admin_router)
    _bearer_scheme(api)
    return api


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
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"}
            }
            schema["security"] = [{"bearer": []}, {}]
            api.openapi_schema = schema
        return api.openapi_schema

    api.openapi = openapi  # type: ignore[method-assign]


def mount_api(app: FastAPI, services: Services) -> FastAPI:
    """Mount /api/v1 on the server app (before the Gradio page at "/", which catches all)."""
    app.mount(API_PREFIX, build_api(services))
    return app
