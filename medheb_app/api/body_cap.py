"""A cap on the size of a request body, before FastAPI reads or parses it.

FastAPI reads a JSON body whole and parses it before the schema can refuse it, so one
anonymous 300 MB `POST /api/v1/search` held 450 MB of the server's memory (the adversarial
pass at 2e21a9a). Every /api/v1 body is small (a query of at most 1,000 characters, a job's
parameters) except an upload, which its own route streams under MAX_UPLOAD_BYTES
(search_routes._capped_body); this middleware holds any other body to MAX_JSON_BYTES. Both
read through access/capped_body.read_capped.
"""

from __future__ import annotations

from typing import Any

from medheb_app.access.capped_body import ClientGone, declared_length, read_capped, replaying
from medheb_app.api.problems import problem_response

MAX_JSON_BYTES = 64 * 1024
UPLOAD_PATHS = ("/search/image",)  # capped by the route itself, at MAX_UPLOAD_BYTES


def too_large_words(cap: int) -> str:
    return f"The request body is larger than this route accepts ({cap // 1024} KB)."


class BodyCap:
    """Pure ASGI middleware: a body past `cap` bytes (declared or streamed) is answered 413
    problem+json; a smaller one is read here and handed on whole."""

    def __init__(self, app: Any, cap: int = MAX_JSON_BYTES) -> None:
        self.app = app
        self.cap = cap

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = str(scope.get("path", ""))
        if scope.get("type") != "http" or path.endswith(UPLOAD_PATHS):
            await self.app(scope, receive, send)
            return
        try:
            body = await read_capped(receive, declared_length(scope), self.cap)
        except ClientGone:
            return
        if body is None:
            await self._refuse(scope, receive, send, path)
            return
        await self.app(scope, replaying(body, receive), send)

    async def _refuse(self, scope: dict, receive: Any, send: Any, path: str) -> None:
        response = problem_response("too-large", too_large_words(self.cap), path)
        response.headers["connection"] = "close"  # the rest of the body is not read
        await response(scope, receive, send)
