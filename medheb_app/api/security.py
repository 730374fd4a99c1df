"""Who is calling and how often: bearer tokens, scopes and the per-client / per-token limits.

No `Authorization` header is an anonymous request, which gets exactly what an anonymous visitor
of the page gets: the offered (index, model) pairs, the page's per-client limits (the same
numbers as the search tab's), no heavy work. A token lifts the limit to its own per-token
budget (Settings.api_token_rate a minute) and its scope decides the routes (api/tokens.py).
Clients are keyed like the page keys them (access.limits.client_key), never by anything the
client chooses.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from medheb_app.access.limits import RateLimiter, client_key, wait_words
from medheb_app.api.problems import ApiProblem
from medheb_app.api.tokens import TokenInfo, grants, verify
from medheb_app.services import Services

# The search tab's anonymous limits (ui/search_tab.TabLimits): 30 searches a minute, then a
# minute's lockout; 6 uploads in 10 minutes, then 10 minutes' lockout. Reads are cheap: 120.
ANON_SEARCHES = (30, 60.0, 60.0)
ANON_UPLOADS = (6, 600.0, 600.0)
ANON_READS = (120, 60.0, 60.0)
UPLOAD_SLOTS = 4  # uploads decoded at once (each holds one study in memory)
REFUSALS = {
    "unknown": "This token is not known here; ask an admin for a new one.",
    "revoked": "This token has been revoked; ask an admin for a new one.",
    "expired": "This token has expired; ask an admin for a new one.",
}


@dataclass(frozen=True)
class Principal:
    """The caller of one request."""

    client: str
    token: TokenInfo | None = None
    # False when the token's scope does not cover the route it called, so the request is
    # answered with an anonymous visitor's rights; it is still counted and audited as the token
    granted: bool = True

    @property
    def anonymous(self) -> bool:
        """Answered with an anonymous visitor's rights (public indices only): no token, or a
        token whose scope does not cover this route."""
        return self.token is None or not self.granted

    @property
    def scope(self) -> str | None:
        return self.token.scope if self.token else None

    @property
    def who(self) -> str:
        """How the audit log names the caller: by its token whenever it sent one."""
        return f"token:{self.token.id}" if self.token else f"anonymous:{self.client}"

    def allows(self, needed: str) -> bool:
        return self.token is not None and grants(self.token.scope, needed)

    def refuse_narrow_token(self, needed: str, what: str) -> None:
        """403 for a token whose scope is too narrow for `what` (on a route open to anonymous
        callers, where such a token otherwise gets anonymous rights); nothing for others."""
        if self.token is not None and not self.allows(needed):
            raise ApiProblem(
                "forbidden",
                f"{what} needs a token with the '{needed}' scope; this token's scope is "
                f"'{self.token.scope}'.",
            )

    @property
    def admin(self) -> bool:
        return self.allows("admin")


@dataclass
class ApiLimits:
    """The limiters of one API app (one set per process, like the page's)."""

    token_rate: int
    searches: RateLimiter = field(default_factory=lambda: RateLimiter(*ANON_SEARCHES))
    uploads: RateLimiter = field(default_factory=lambda: RateLimiter(*ANON_UPLOADS))
    reads: RateLimiter = field(default_factory=lambda: RateLimiter(*ANON_READS))
    upload_slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(UPLOAD_SLOTS)
    )
    tokens: RateLimiter = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = RateLimiter(self.token_rate, 60.0)


def services_of(request: Request) -> Services:
    return request.app.state.services


def bearer(request: Request) -> str | None:
    """The presented secret, None without an Authorization header; 401 for another scheme."""
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise ApiProblem("unauthenticated", "Send the token as 'Authorization: Bearer <token>'.")
    return secret.strip()


def principal(request: Request) -> Principal:
    """The caller, from the bearer token (401 for a token that is unknown, revoked or expired)."""
    cached = getattr(request.state, "principal", None)
    if cached is not None:
        return cached
    secret = bearer(request)
    client = client_key(request, services_of(request).settings.trusted_proxy_hops)
    if secret is None:
        found = Principal(client)
    else:
        verdict = verify(services_of(request).store, secret)
        if verdict.token is None:
            raise ApiProblem("unauthenticated", REFUSALS[verdict.problem])
        found = Principal(client, verdict.token)
    request.state.principal = found
    return found


def _limit(request: Request, caller: Principal, bucket: str) -> None:
    limits: ApiLimits = request.app.state.limits
    if caller.token is not None:
        decision, what = limits.tokens.hit(f"token:{caller.token.id}"), "requests with this token"
    else:
        decision, what = getattr(limits, bucket).hit(caller.client), f"{bucket} from this client"
    if not decision.allowed:
        wait = max(1, int(decision.retry_after + 0.999))
        raise ApiProblem(
            "rate-limited",
            f"Too many {what}; try again in {wait_words(decision.retry_after)}.",
            headers={"Retry-After": str(wait)},
        )


def access(needed: str, anonymous: bool, bucket: str = "reads") -> Callable[[Request], Principal]:
    """A route dependency: the caller, refused unless a token of scope `needed` (or, when
    `anonymous`, no token at all) was sent, and counted against its limit. On a route open to
    anonymous callers, a token without the scope is answered with anonymous rights (public
    indices only), but counted against its own limit and audited as itself."""

    async def dependency(request: Request) -> Principal:
        if "authorization" in request.headers:  # a token is looked up in the store
            caller = await run_in_threadpool(principal, request)
        else:  # nothing to read: answered on the event loop, no thread hop
            caller = principal(request)
        if caller.anonymous and not anonymous:
            raise ApiProblem(
                "unauthenticated",
                f"This route needs a token with the '{needed}' scope: send "
                "'Authorization: Bearer <token>' (an admin issues tokens).",
            )
        if not caller.anonymous and not caller.allows(needed):
            if not anonymous:
                raise ApiProblem(
                    "forbidden",
                    f"This token's scope '{caller.scope}' does not include '{needed}'.",
                )
            # a token never gets less than no token: answered with anonymous rights
            caller = Principal(caller.client, caller.token, granted=False)
        _limit(request, caller, bucket)
        return caller

    dependency.__name__ = f"access_{needed}_{'anon' if anonymous else 'token'}_{bucket}"
    return dependency
