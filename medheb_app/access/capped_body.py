"""The one capped reader of an ASGI request body, shared by the /api/v1 body cap
(api/body_cap.py), the upload route (api/search_routes.py) and the Gradio queue guard
(access/queue_guard.py): each refuses a body past its own cap, declared or streamed, before
anything parses it, and answers the refusal in its own words.

A leaf: it imports nothing from medheb_app, so both api/ and access/ may import it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

Receive = Callable[[], Awaitable[Mapping[str, Any]]]


class ClientGone(Exception):
    """The client disconnected before its whole body arrived."""


def declared_length(scope: Mapping[str, Any]) -> int | None:
    """The request's Content-Length header as a number, or None when absent or not digits."""
    declared = dict(scope.get("headers") or []).get(b"content-length", b"")
    return int(declared) if declared.isdigit() else None


async def read_capped(receive: Receive, declared: int | None, cap: int) -> bytes | None:
    """The whole request body, or None as soon as it is known to pass `cap` bytes: the declared
    length first (nothing is read then), then the streamed total. Raises ClientGone when the
    client goes away first."""
    if declared is not None and declared > cap:
        return None
    chunks, total = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect: the client went away
            raise ClientGone
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > cap:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the application `body` whole once, then defers to `receive` (so
    the application still hears a later disconnect)."""
    replayed = False

    async def replay() -> Mapping[str, Any]:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
