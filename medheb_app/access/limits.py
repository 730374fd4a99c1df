"""Per-client sliding-window rate limits with a lockout, in memory and thread-safe.

Every Gradio handler is callable by `fn_index` from any session, so limits are enforced inside
the handlers, keyed by the client (see `client_key`), never by what the page shows. A client
that exceeds `max_events` within `window_s` seconds is locked out for `lockout_s` seconds and
told, in words, how long to wait.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Decision:
    """Whether one event is allowed now; when refused, how many seconds until it would be."""

    allowed: bool
    retry_after: float = 0.0

    def message(self, what: str) -> str:
        """A sentence for the user: 'Too many sign-in attempts; try again in 5 minutes.'"""
        return f"Too many {what} from this browser; try again in {wait_words(self.retry_after)}."


def wait_words(seconds: float) -> str:
    """'40 seconds', '1 minute', '15 minutes': rounded up, never '0 seconds'."""
    seconds = max(1, math.ceil(seconds))
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = math.ceil(seconds / 60)
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


class RateLimiter:
    """At most `max_events` per `window_s` seconds per key; past that, a lockout of `lockout_s`.

    `hit(key)` records an attempt and says whether it is allowed; `reset(key)` forgets a key
    (e.g. after a successful password). Memory is bounded: keys idle for longer than the window
    and the lockout are dropped, and at most `max_keys` are tracked (oldest dropped first).
    """

    def __init__(
        self,
        max_events: int,
        window_s: float,
        lockout_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        if max_events < 1 or window_s <= 0 or lockout_s < 0:
            raise ValueError("a rate limit needs max_events >= 1, window_s > 0, lockout_s >= 0")
        self.max_events = max_events
        self.window_s = float(window_s)
        self.lockout_s = float(lockout_s)
        self._clock = clock
        self._max_keys = max_keys
        self._events: dict[str, deque[float]] = {}
        self._locked_until: dict[str, float] = {}
        self._lock = threading.Lock()

    def hit(self, key: str) -> Decision:
        """Record one event for `key` and decide; a refused event is not counted again."""
        now = self._clock()
        with self._lock:
            until = self._locked_until.get(key, 0.0)
            if until > now:
                return Decision(False, until - now)
            events = self._events.setdefault(key, deque())
            while events and events[0] <= now - self.window_s:
                events.popleft()
            if len(events) >= self.max_events:
                if self.lockout_s > 0:
                    self._locked_until[key] = now + self.lockout_s
                    events.clear()
                    return Decision(False, self.lockout_s)
                return Decision(False, events[0] + self.window_s - now)
            events.append(now)
            self._prune(now)
            return Decision(True)

    def reset(self, key: str) -> None:
        with self._lock:
            self._events.pop(key, None)
            self._locked_until.pop(key, None)

    def _prune(self, now: float) -> None:
        if len(self._events) <= self._max_keys:
            return
        horizon = now - self.window_s
        for key in [k for k, v in self._events.items() if not v or v[-1] <= horizon]:
            if self._locked_until.get(key, 0.0) <= now:
                self._events.pop(key, None)
                self._locked_until.pop(key, None)
        while len(self._events) > self._max_keys:
            self._events.pop(next(iter(self._events)))


def _forwarded_for(headers: Any) -> list[str]:
    """Every X-Forwarded-For entry in order, across repeated headers (a proxy may append a
    second header line rather than extend the first)."""
    getlist = getattr(headers, "getlist", None)
    values = getlist("x-forwarded-for") if callable(getlist) else [headers.get("x-forwarded-for")]
    return [part.strip() for value in values if value for part in str(value).split(",")]


def _address(entry: str) -> str:
    """An X-Forwarded-For entry as a bare address: '[::1]:80' and '1.2.3.4:5' lose the port."""
    text = entry.strip()
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:
        text = text.split(":")[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text[:64]


def client_key(request: Any, proxy_hops: int) -> str:
    """Who a Gradio or Starlette request comes from, for rate limits and lockouts.

    With `proxy_hops` = 0 (TRUST_PROXY_HEADERS unset) the peer address, and X-Forwarded-For is
    ignored: any client can write it. Behind N proxies we control, each appends the address it
    received the request from, so the last N entries are theirs and the N-th from the right is
    the client as the outermost proxy saw it; everything to its left was written by the client
    and is never believed. A request with fewer than N entries did not pass through every proxy
    (or a proxy is misconfigured): its peer address counts.

    Never the session hash: that is chosen by the client and travels in URLs.
    """
    if request is None:
        return "local"
    if proxy_hops > 0:
        entries = _forwarded_for(getattr(request, "headers", None) or {})
        if len(entries) >= proxy_hops and entries[-proxy_hops]:
            return _address(entries[-proxy_hops])
    client = getattr(request, "client", None)
    host = getattr(client, "host", None)
    return str(host) if host else "unknown"
