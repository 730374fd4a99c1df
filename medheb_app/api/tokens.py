"""API tokens: issued by an admin (CLI `token create`, the admin tab), shown once, stored as a
SHA-256 digest, checked on every request that sends `Authorization: Bearer <token>`.

Scopes nest: `search` may search any built index; `read` may also read study records, images
and runs; `admin` may also start and cancel jobs, manage reader studies and export the audit
log. No scope is a rater's: votes are cast only through the raters' page and its cookie.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import asdict, dataclass
from datetime import timedelta

from sqlalchemy import select, update

from medheb_app.store.api_tables import TOKEN_SCOPES, ApiToken
from medheb_app.store.db import Store, iso_seconds, utcnow

TOKEN_PREFIX = "mhb_"
SCOPE_RANK = {scope: rank for rank, scope in enumerate(TOKEN_SCOPES)}
MAX_DAYS = 3650


class TokenError(ValueError):
    """A token request that cannot be met (unknown scope, bad expiry, unknown id)."""


@dataclass(frozen=True)
class TokenInfo:
    """A token as listed: never its secret."""

    id: int
    name: str
    prefix: str
    scope: str
    created_by: str
    created_at: str
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None

    @property
    def active(self) -> bool:
        return self.revoked_at is None and (
            self.expires_at is None or self.expires_at > iso_seconds(utcnow())
        )

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "active": self.active}


def _info(row: ApiToken) -> TokenInfo:
    return TokenInfo(
        id=row.id,
        name=row.name,
        prefix=row.prefix,
        scope=row.scope,
        created_by=row.created_by,
        created_at=iso_seconds(row.created_at) or "",
        expires_at=iso_seconds(row.expires_at),
        revoked_at=iso_seconds(row.revoked_at),
        last_used_at=iso_seconds(row.last_used_at),
    )


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def grants(scope: str, needed: str) -> bool:
    """Whether a token of `scope` covers what `needed` asks (search < read < admin)."""
    return SCOPE_RANK.get(scope, -1) >= SCOPE_RANK[needed]


def create_token(
    store: Store, scope: str, days: float | None = 90, name: str = "", created_by: str = "cli"
) -> tuple[str, TokenInfo]:
    """Issue a token; returns (secret, info). The secret is not stored and cannot be shown
    again. `days` None: it never expires (an admin's choice, listed as such)."""
    if scope not in TOKEN_SCOPES:
        raise TokenError(f"Unknown scope {scope!r}; use one of: {', '.join(TOKEN_SCOPES)}.")
    if days is not None and not 0 < float(days) <= MAX_DAYS:
        raise TokenError(
            f"A token's lifetime is more than 0 and at most {MAX_DAYS} days; got {days}."
        )
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    expires = utcnow() + timedelta(days=float(days)) if days is not None else None
    with store.session() as session:
        row = ApiToken(
            name=str(name)[:200],
            digest=digest(secret),
            prefix=secret[: len(TOKEN_PREFIX) + 6],
            scope=scope,
            created_by=str(created_by)[:200],
            expires_at=expires,
        )
        session.add(row)
        session.flush()
        return secret, _info(row)


def list_tokens(store: Store) -> list[TokenInfo]:
    """Every token ever issued, newest first (revoked and expired ones too)."""
    with store.session() as session:
        return [
            _info(row) for row in session.scalars(select(ApiToken).order_by(ApiToken.id.desc()))
        ]


def revoke_token(store: Store, token_id: int) -> TokenInfo:
    """Revoke a token at once (idempotent); TokenError for an unknown id."""
    with store.session() as session:
        row = session.get(ApiToken, int(token_id))
        if row is None:
            raise TokenError(f"No token with id {token_id}.")
        if row.revoked_at is None:
            row.revoked_at = utcnow()
        session.flush()
        return _info(row)


@dataclass(frozen=True)
class Verdict:
    """What a presented secret is: a live token, or why not ("unknown", "revoked", "expired")."""

    token: TokenInfo | None
    problem: str = ""


def verify(store: Store, secret: str) -> Verdict:
    """Look a presented secret up by its digest and say whether it may be used now."""
    if not secret.startswith(TOKEN_PREFIX) or len(secret) > 200:
        return Verdict(None, "unknown")
    now = utcnow()
    with store.session() as session:
        row = session.scalars(select(ApiToken).where(ApiToken.digest == digest(secret))).first()
        if row is None:
            return Verdict(None, "unknown")
        if row.revoked_at is not None:
            return Verdict(None, "revoked")
        if row.expires_at is not None and row.expires_at <= now:
            return Verdict(None, "expired")
        info = _info(row)
        # at most one write a minute per token: a busy client must not serialise on the store
        if row.last_used_at is None or now - row.last_used_at > timedelta(minutes=1):
            session.execute(update(ApiToken).where(ApiToken.id == row.id).values(last_used_at=now))
        return Verdict(info)
