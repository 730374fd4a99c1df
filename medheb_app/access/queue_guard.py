"""Fair, quiet Gradio queues (issue 19 items 5 and 8).

- `QueueCallGuard` (ASGI middleware) reads every `/gradio_api/queue/join` and
  `/gradio_api/component_server` body before Gradio does: a body that is not a JSON object,
  an `fn_index` this page does not have, the wrong number of input values, or a component
  server call naming no server function of this page get 400 and one log line, not a
  25-line traceback and a reset connection (Gradio raises KeyError on an unknown fn_index);
  an event stream of a session with no events gets 404 before Gradio starts streaming (it
  raised mid-stream).
- `quiet_gradio_tracebacks`: an event that fails inside Gradio (a value not among a
  dropdown's choices) logs one line instead of a traceback.
- `fair_queue` wraps a Blocks' queue: each client (medheb_app.access.limits.client_key) may
  have at most `per_client` events waiting or running, and only its own joins are told "busy"
  past that; the page-load events bypass the global size limit, so a page always loads while
  searches fill the queue (each handler already has its own concurrency group, so a load never
  waits behind a search).
- `poll_gently`: an idle queue looks for events every QUEUE_POLL_MS instead of every 1 ms.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from medheb_app.access.capped_body import ClientGone, read_capped, replaying
from medheb_app.access.limits import client_key

log = logging.getLogger(__name__)

MAX_JOIN_BYTES = 1 << 20  # a join carries component values and file references, never files
CLIENT_BUSY = "You have several requests waiting already; wait for them to finish, then try again."


def _json_object(body: bytes) -> dict | str:
    """The body's JSON object, or why it is none."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return "not JSON"
    return parsed if isinstance(parsed, dict) else "not a JSON object"


def _join_problem(body: bytes, blocks: Any) -> str | None:
    """Why a queue join body is not a call this page can run, or None when it is."""
    parsed = _json_object(body)
    if isinstance(parsed, str):
        return parsed
    index = parsed.get("fn_index")
    if not isinstance(index, int) or isinstance(index, bool):
        return "no fn_index"
    fn = blocks.fns.get(index)
    if fn is None:
        return f"unknown fn_index {index}"
    if not isinstance(parsed.get("session_hash", ""), str):
        return "a session_hash that is not a string"
    data = parsed.get("data", [])
    if not isinstance(data, list):
        return "data that is not a list"
    expected = len(getattr(fn, "inputs", None) or [])
    if len(data) != expected:
        return f"{len(data)} input values for fn_index {index}, which takes {expected}"
    return None


def _component_call_problem(body: bytes, blocks: Any) -> str | None:
    """Why a /gradio_api/component_server body names no server function of this page (Gradio
    looks the component up unguarded: an unknown id answered 500 with a traceback), or None."""
    parsed = _json_object(body)
    if isinstance(parsed, str):
        return parsed
    component, name = parsed.get("component_id"), parsed.get("fn_name")
    if not isinstance(component, int) or isinstance(component, bool) or not isinstance(name, str):
        return "no component_id or fn_name"
    block = blocks.blocks.get(component)
    if block is None or not getattr(getattr(block, name, None), "_is_server_fn", False):
        return f"no server function {name[:40]!r} on component {component}"
    return None


class QueueCallGuard:
    """Pure ASGI middleware: refuses malformed queue joins of the pages mounted at `pages`
    ({path prefix: Blocks}) with 400 and one log line; the rest passes untouched."""

    def __init__(self, app: Any, pages: dict[str, Any]) -> None:
        self.app = app
        self.pages = pages
        self._last_log = 0.0
        self._quiet = 0

    def _page(self, path: str, route: str) -> Any:
        for prefix in sorted(self.pages, key=len, reverse=True):
            if path == f"{prefix}/gradio_api/queue/{route}":
                return self.pages[prefix]
        return None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        path, method = str(scope.get("path", "")), scope.get("method")
        if method == "POST" and self._named_direct_call(path):
            # Gradio's /run/<name> and /api/<name> run a named (queued) event outside the
            # queue, past its per-client cap, and answered a bare 500 (adversarial pass);
            # programs use the queue, /call/<name> or /api/v1. The page itself posts only
            # /run/predict (events that skip the queue), which passes.
            await self._refuse(scope, send, 404, "a direct call past the queue")
            return
        streamed = self._page(path, "data") if method == "GET" else None
        if streamed is not None:
            # Gradio answers an unknown session with an exception after the event stream has
            # started (a traceback and a reset connection): 404 here, before it starts
            from urllib.parse import parse_qs

            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            session = (query.get("session_hash") or [""])[0]
            if session not in streamed._queue.pending_messages_per_session:
                await self._refuse(scope, send, 404, "an event stream of no session")
                return
        check = _join_problem
        blocks = self._page(path, "join") if method == "POST" else None
        if blocks is None and method == "POST":
            blocks, check = self._component_page(path), _component_call_problem
        if blocks is None:
            await self.app(scope, receive, send)
            return
        try:
            body = await read_capped(receive, None, MAX_JOIN_BYTES)  # the streamed size only
        except ClientGone:
            return
        if body is None:
            await self._refuse(scope, send, 413, "a queue call over 1 MB")
            return
        problem = check(body, blocks)
        if problem is not None:
            await self._refuse(scope, send, 400, problem)
            return
        await self.app(scope, replaying(body, receive), send)

    def _component_page(self, path: str) -> Any:
        for prefix in sorted(self.pages, key=len, reverse=True):
            if path == f"{prefix}/gradio_api/component_server":
                return self.pages[prefix]
        return None

    def _named_direct_call(self, path: str) -> bool:
        for prefix in self.pages:
            for route in ("run", "api"):
                start = f"{prefix}/gradio_api/{route}/"
                if path.startswith(start) and path[len(start) :].strip("/") != "predict":
                    return True
        return False

    async def _refuse(self, scope: dict, send: Any, status: int, problem: str) -> None:
        from starlette.responses import JSONResponse

        now = time.monotonic()
        if now - self._last_log >= 1.0:  # one line a second at most, however many arrive
            extra = f" (and {self._quiet} more)" if self._quiet else ""
            log.warning("refused a queue call to %s: %s%s", scope.get("path"), problem, extra)
            self._last_log, self._quiet = now, 0
        else:
            self._quiet += 1
        response = JSONResponse({"error": "This request is not a call this page accepts."}, status)

        async def nothing() -> dict:
            return {"type": "http.disconnect"}

        await response(scope, nothing, send)


class _OneLineTracebacks:
    """Stands in for the `traceback` module inside Gradio's queue: what Gradio would print
    as a traceback for a failed event (a value not among a dropdown's choices, a handler's
    exception) becomes one log line; the full traceback stays available at DEBUG level."""

    def __getattr__(self, name: str) -> Any:
        import traceback

        return getattr(traceback, name)

    @staticmethod
    def print_exc(*_args: Any, **_kwargs: Any) -> None:
        import sys

        error = sys.exc_info()[1]
        log.warning("an event failed: %s: %.300s", type(error).__name__, error)
        log.debug("the failed event's traceback", exc_info=True)


def quiet_gradio_tracebacks() -> None:
    """One line instead of a traceback for each failed queue event (see _OneLineTracebacks)."""
    import gradio.queueing
    import gradio.route_utils
    import gradio.utils

    for module in (gradio.queueing, gradio.route_utils, gradio.utils):
        module.traceback = _OneLineTracebacks()  # type: ignore[attr-defined]


def load_fn_indices(blocks: Any) -> set[int]:
    """The fn_index of every event the page fires on load."""
    return {
        index
        for index, fn in blocks.fns.items()
        if any(target[1] == "load" for target in getattr(fn, "targets", []) or [])
    }


def fair_queue(blocks: Any, max_size: int, per_client: int, proxy_hops: int, busy: str) -> None:
    """Wrap `blocks._queue.push` with the per-client cap and the page-load bypass (see the
    module docstring). `max_size` takes over from Gradio's own limit, which is switched off
    so that page loads can pass it."""
    queue = blocks._queue
    queue.max_size = None  # enforced here, with page loads exempt
    push = queue.push
    loads = load_fn_indices(blocks)

    def events_of(key: str) -> int:
        waiting = [e for q in queue.event_queue_per_concurrency_id.values() for e in q.queue]
        running = [e for job in queue.active_jobs if job for e in job]
        return sum(1 for e in (*waiting, *running) if client_key(e.request, proxy_hops) == key)

    async def push_fairly(body: Any, request: Any, username: Any):
        key = client_key(request, proxy_hops)
        if events_of(key) >= per_client:
            return False, CLIENT_BUSY, "queue_full"
        if body.fn_index not in loads and len(queue) >= max_size:
            return False, busy, "queue_full"
        return await push(body, request, username)

    queue.push = push_fairly  # type: ignore[method-assign]


def poll_gently(blocks: Any, interval_s: float) -> None:
    """Have `blocks`' queue look for new events every `interval_s` while it is idle, and for
    progress to send every 10 intervals, instead of Gradio's 1 ms and 10 ms on Linux: with the
    workbench and the raters' page mounted, those two loops woke ~2,200 times a second and
    took ~9% of a core from an app serving nobody (BENCHMARKS.md, "Idle server"). An event
    waits at most `interval_s` longer to start."""
    queue = blocks._queue
    queue.sleep_when_free = interval_s
    queue.progress_update_sleep_when_free = interval_s * 10
