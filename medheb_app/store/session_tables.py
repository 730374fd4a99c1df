"""Server-side web sessions: one row per admin or rater sign-in (medheb_app.access.sessions).

The cookie holds a random session id sealed under the server's key; the row is keyed by the
SHA-256 of that id, so a copy of the database alone cannot be replayed as a cookie. Keeping
sign-ins here rather than in process memory is what lets an admin stay signed in across a
restart, lets two replicas on one database agree, and lets sign-out end a kept cookie
everywhere at once.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from medheb_app.store.db import Base, utcnow


class WebSession(Base):
    """One sign-in: who (an admin, or a study's rater), until when, and whether it was ended."""

    __tablename__ = "web_sessions"

    id_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(10), index=True)  # "admin" | "rater"
    who: Mapped[str] = mapped_column(String(200), default="")  # "password" or a HF user name
    study_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    rater_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(DateTime, index=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    ended_because: Mapped[str] = mapped_column(String(40), default="")  # e.g. "signed out"
