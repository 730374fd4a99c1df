"""Tables of the HTTP API: bearer tokens and the append-only audit log.

A token's secret is shown once when it is issued and stored only as its SHA-256 digest (the
secret is 32 random bytes, so a fast digest is enough: nothing to brute-force, unlike a
password). A token is never deleted: revoking it stamps `revoked_at`, so the audit log's
"who" keeps pointing at a row. Audit events are only ever inserted.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from medheb_app.store.db import Base, utcnow

# each scope includes those before it; `resolve` (pseudonym -> file or DICOM UIDs) is apart from
# `read` so that a worklist script that reads records cannot re-identify them
TOKEN_SCOPES = ("search", "read", "resolve", "admin")


class ApiToken(Base):
    """One issued token: its digest, what it may do (scope), until when, and by whom."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    digest: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    prefix: Mapped[str] = mapped_column(String(16), default="")  # to recognise it in a list
    scope: Mapped[str] = mapped_column(String(20))
    created_by: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)


class AuditEvent(Base):
    """One audited action: when, who (token id, admin or anonymous client), what it touched."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime, default=utcnow, index=True)
    who: Mapped[str] = mapped_column(String(200))  # "token:7", "admin", "anonymous:1.2.3.4"
    channel: Mapped[str] = mapped_column(String(20))  # "api" | "ui" | "cli"
    action: Mapped[str] = mapped_column(String(40))  # "search", "record", "job", "study", ...
    route: Mapped[str] = mapped_column(String(200), default="")
    index_name: Mapped[str] = mapped_column(String(200), default="")
    query: Mapped[str] = mapped_column(Text, default="")  # query text, record id or study id
    result_count: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
