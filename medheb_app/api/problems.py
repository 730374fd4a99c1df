"""Errors as RFC 9457 problem details (`application/problem+json`).

Every refusal the API gives is a `Problem`: a stable `type` URI a program can switch on, a
short `title`, the HTTP `status` and a `detail` sentence a person can act on. No exception
class name, traceback or server path ever reaches a body: details from the service layer pass
through `public_detail`, and anything unexpected becomes a generic 500 logged on the server.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from medheb_app.public_text import public_message

log = logging.getLogger(__name__)
PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_BASE = "https://medheb.invalid/problems/"  # stable identifiers, not a page to fetch

TITLES = {
    "bad-request": "The request cannot be read",
    "unauthenticated": "A valid token is needed",
    "forbidden": "Not allowed for this token",
    "not-found": "Not found",
    "blinded": "Hidden while a reader study is open",
    "method-not-allowed": "Method not allowed",
    "too-large": "Request too large",
    "unsupported-media": "Unsupported upload",
    "invalid-request": "The request does not validate",
    "search-refused": "The search cannot run as asked",
    "rate-limited": "Too many requests",
    "not-ready": "Not ready yet",
    "busy": "The server is busy",
    "server-error": "Internal error",
}
STATUS = {
    "bad-request": 400,
    "unauthenticated": 401,
    "forbidden": 403,
    "blinded": 403,
    "not-found": 404,
    "method-not-allowed": 405,
    "too-large": 413,
    "unsupported-media": 415,
    "invalid-request": 422,
    "search-refused": 422,
    "rate-limited": 429,
    "not-ready": 503,
    "busy": 503,
    "server-error": 500,
}


def public_detail(text: object) -> str:
    """A service message with server paths and exception class names taken out."""
    return public_message(text, "The request could not be completed.")


class ApiProblem(Exception):
    """Raised by a route to answer with a problem document of `kind` (a key of TITLES)."""

    def __init__(
        self, kind: str, detail: str, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = public_detail(detail)
        self.headers = headers or {}
        self.extra = extra


def problem_response(
    kind: str, detail: str, instance: str = "", headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    body = {
        "type": TYPE_BASE + kind,
        "title": TITLES[kind],
        "status": STATUS[kind],
        "detail": detail,
        **({"instance": instance} if instance else {}),
        **extra,
    }
    if kind == "unauthenticated":
        headers = {"WWW-Authenticate": 'Bearer realm="medheb"', **(headers or {})}
    return JSONResponse(
        body, status_code=STATUS[kind], headers=headers, media_type=PROBLEM_MEDIA_TYPE
    )


_STATUS_KINDS = {
    400: "bad-request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    413: "too-large",
    415: "unsupported-media",
    422: "invalid-request",
    429: "rate-limited",
    503: "busy",
}
_STATUS_DETAILS = {
    404: "There is nothing at this address; see /api/v1/docs for the routes.",
    405: "This route does not accept that method; see /api/v1/docs.",
}


def _validation_detail(error: RequestValidationError) -> tuple[str, list[dict[str, str]]]:
    """A sentence naming the first bad field, and every error as {field, message}."""
    errors = []
    for item in error.errors():
        where = ".".join(str(part) for part in item.get("loc", ()) if part not in ("body",))
        errors.append({"field": where or "body", "message": str(item.get("msg", "invalid"))})
    if not errors:
        return "The request does not match the documented schema.", []
    raw = error.errors()[0]
    if raw.get("type") == "json_invalid":  # pydantic names the character offset as the field
        context = raw.get("ctx") or {}
        reason = str(context.get("error") or "").strip().rstrip(".")
        return f"The request body is not valid JSON ({reason or 'cannot be parsed'}).", errors
    first = errors[0]
    return f"Field '{first['field']}': {first['message']}.", errors


def install_handlers(app: FastAPI) -> None:
    """Answer every error of `app` (ours, FastAPI's, Starlette's, unexpected) as a problem."""

    @app.exception_handler(ApiProblem)
    async def _ours(request: Request, error: ApiProblem) -> JSONResponse:
        return problem_response(
            error.kind, error.detail, request.url.path, error.headers, **error.extra
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        detail, errors = _validation_detail(error)
        return problem_response("invalid-request", detail, request.url.path, errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, error: StarletteHTTPException) -> JSONResponse:
        kind = _STATUS_KINDS.get(error.status_code, "bad-request")
        detail = _STATUS_DETAILS.get(error.status_code) or public_detail(error.detail)
        return problem_response(kind, detail, request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, error: Exception) -> JSONResponse:
        log.exception("API request %s %s failed", request.method, request.url.path)
        return problem_response(
            "server-error",
            "The server could not complete this request; it has been logged.",
            request.url.path,
        )
