"""Same-origin, not merely same-site: every request that can change state is refused unless it
comes from this server's own pages.

SameSite=Strict cookies are sent by the browser to any request from the same *site*, and a
site is a registrable domain, not an origin: a page on another port of the same host, or
another app under a shared parent domain that the browser's public-suffix list does not know
(other `*.hf.space` apps, per issue 19), is same-site. Such a page could drive the admin
handlers with the admin's cookie. So the server itself checks, for every request whose method
can change state (POST, PUT, PATCH, DELETE: Gradio's queue joins, uploads, the sign-in forms):

- `Sec-Fetch-Site` (sent by every current browser): `same-site` or `cross-site` is refused;
- `Origin` (sent by browsers on every such request): it must name this server, i.e. the
  request's own `Host` (the browser writes it; a page cannot forge it), the proxy's
  `X-Forwarded-Host` behind trusted proxies, or one of the configured PUBLIC_ORIGIN values;
  `null` (sandboxed frames, local files) is refused; behind HTTPS (`SECURE_COOKIES`) it must be
  https.

A request with neither header is not from a browser (a script, the CLI, gradio_client): it
carries no victim's cookie, so there is nothing to forge, and it passes to the handlers, which
check rights as always. Reading answers across origins is closed by CORS (medheb_app.ui.server
installs Starlette's CORS middleware with no allowed origin, which also switches Gradio's own
off: that one lets any localhost origin read a localhost app's answers with credentials).

A server bound to a loopback address also checks every request's `Host` (TrustedHostMiddleware):
a page on a rebinding domain (one that resolves to 127.0.0.1) is same-origin with itself in
the browser, so only the Host name tells its requests apart.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
REFUSED = "This request must come from this site's own page."
_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _host(netloc: str, scheme: str) -> str:
    """A host[:port] in one spelling: lower case, the scheme's default port dropped."""
    text = netloc.strip().lower()
    default = _DEFAULT_PORTS.get(scheme)
    if default and text.endswith(f":{default}") and not text.endswith("]"):
        text = text[: -len(default) - 1]
    return text


def parse_origin(origin: str) -> tuple[str, str] | None:
    """('https', 'example.org:8443') for an Origin value, or None when it is not one."""
    parts = urllib.parse.urlsplit(origin.strip())
    if parts.scheme not in _DEFAULT_PORTS or not parts.netloc or parts.path not in ("", "/"):
        return None
    return parts.scheme, _host(parts.netloc, parts.scheme)


@dataclass(frozen=True)
class OriginPolicy:
    """Which origins count as this server's own (see the module docstring)."""

    proxy_hops: int = 0  # TRUST_PROXY_HEADERS: believe X-Forwarded-Host only behind proxies
    public_origins: tuple[str, ...] = ()  # PUBLIC_ORIGIN, e.g. "https://owner-app.hf.space"
    https_only: bool = False  # SECURE_COOKIES: the site is served over HTTPS

    def __post_init__(self) -> None:
        for origin in self.public_origins:
            if parse_origin(origin) is None:
                raise ValueError(
                    f"PUBLIC_ORIGIN must list origins like https://example.org, not {origin!r}"
                )

    def _own(self, scheme: str, headers: Mapping[str, str]) -> set[str]:
        hosts = {_host(headers.get("host", ""), scheme)}
        if self.proxy_hops:
            forwarded = headers.get("x-forwarded-host", "").split(",")[0]
            hosts.add(_host(forwarded, scheme))
        return hosts - {""}

    def refusal(self, method: str, headers: Mapping[str, str]) -> str | None:
        """Why a request may not run (a short reason for the log), or None when it may."""
        if method.upper() in SAFE_METHODS:
            return None
        fetch_site = (headers.get("sec-fetch-site") or "").lower()
        if fetch_site in ("same-site", "cross-site"):
            return f"Sec-Fetch-Site {fetch_site}"
        origin = headers.get("origin")
        if origin is None:
            return None  # not a browser's cross-origin request (see the module docstring)
        parsed = parse_origin(origin)
        if parsed is None:
            return "an opaque or malformed Origin"
        scheme, host = parsed
        if self.https_only and scheme != "https":
            return "an http Origin on an https site"
        if any(parse_origin(own) == parsed for own in self.public_origins):
            return None
        if host in self._own(scheme, headers):
            return None
        return "another Origin"


class SameOriginMiddleware:
    """Pure ASGI middleware answering 403 to a state-changing request from another origin,
    before any route (Gradio's queue, uploads, the sign-in forms) sees it."""

    def __init__(self, app: Any, policy: OriginPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers
        from starlette.responses import PlainTextResponse

        headers = Headers(scope=scope)
        reason = self.policy.refusal(scope.get("method", "GET"), headers)
        if reason is None:
            await self.app(scope, receive, send)
            return
        log.warning(
            "refused %s %s: %s (%.80s)",
            scope.get("method"),
            str(scope.get("path", ""))[:120],
            reason,
            headers.get("origin", ""),
        )
        response = PlainTextResponse(REFUSED, status_code=403)
        await response(scope, receive, send)


LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
UNKNOWN_HOST = "This server does not answer for that host name."


def host_name(netloc: str) -> str:
    """The name part of a Host header: 'LOCALHOST:7860' -> 'localhost', '[::1]:80' -> '::1'."""
    text = netloc.strip().lower()
    if text.startswith("["):
        return text[1 : text.find("]")] if "]" in text else text
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


def allowed_host_names(
    bind_host: str, public_origins: tuple[str, ...], proxy_hops: int
) -> frozenset[str] | None:
    """The Host names a server answers for, or None for any. A server bound to a loopback
    address answers only loopback names and the PUBLIC_ORIGIN hosts, so a web page on a
    rebinding domain (evil.example resolving to 127.0.0.1) cannot drive it from the user's
    browser; behind trusted proxies (TRUST_PROXY_HEADERS) or on every interface, the Host a
    proxy or a LAN sends is not known in advance, so any is answered."""
    if proxy_hops or host_name(bind_host) not in LOOPBACK_NAMES:
        return None
    named = {host_name(parsed[1]) for o in public_origins if (parsed := parse_origin(o))}
    return LOOPBACK_NAMES | named


class TrustedHostMiddleware:
    """Pure ASGI middleware answering 400 to an HTTP or websocket request whose Host is not
    one of `names` (allowed_host_names), before any route sees it."""

    def __init__(self, app: Any, names: frozenset[str]) -> None:
        self.app = app
        self.names = names

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers
        from starlette.responses import PlainTextResponse

        host = Headers(scope=scope).get("host", "")
        if host_name(host) in self.names:
            await self.app(scope, receive, send)
            return
        log.warning("refused %s for host %.80s", str(scope.get("path", ""))[:120], host)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        await PlainTextResponse(UNKNOWN_HOST, status_code=400)(scope, receive, send)
