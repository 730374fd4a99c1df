"""Where sign-ins are recorded: the database for the served app, memory for a bare
Authenticator (library use and unit tests).

A session is created at sign-in with an expiry, looked up on every request that carries its
cookie, and ended by sign-out (or any other reason an operator records). `state` tells the
cases apart, so a page can say "you signed out" rather than only "you are not signed in".
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from medheb_app.store.db import utcnow
from medheb_app.store.session_tables import WebSession

if TYPE_CHECKING:
    from medheb_app.store.db import Store

ACTIVE = "active"
SIGNED_OUT = "signed out"
EXPIRED = "expired"
UNKNOWN = "unknown"  # never issued here (or swept long after it expired)
# rows that ended or expired are deleted this long afterwards, so the table stays small while
# a replayed cookie is still told what happened to it for a while
KEEP_ENDED = timedelta(days=7)


@dataclass(frozen=True)
class SessionRecord:
    """What a session id stands for."""

    kind: str
    who: str = ""
    study_id: int | None = None
    rater_id: int | None = None
    state: str = ACTIVE


def _hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class MemorySessions:
    """Sessions in this process only (lost at restart; not shared between processes)."""

    def __init__(self) -> None:
        self._rows: dict[str, dict] = {}
        self._lock = threading.Lock()

    def create(self, session_id: str, record: SessionRecord, max_age_s: float) -> None:
        with self._lock:
            self._rows[_hash(session_id)] = {
                "record": record,
                "expires": utcnow() + timedelta(seconds=max_age_s),
                "ended": "",
            }

    def lookup(self, session_id: str, kind: str) -> SessionRecord:
        with self._lock:
            row = self._rows.get(_hash(session_id))
        if row is None or row["record"].kind != kind:
            return SessionRecord(kind, state=UNKNOWN)
        state = row["ended"] or (EXPIRED if row["expires"] <= utcnow() else ACTIVE)
        return _with_state(row["record"], state)

    def end(self, session_id: str, reason: str = SIGNED_OUT) -> None:
        with self._lock:
            row = self._rows.get(_hash(session_id))
            if row is not None and not row["ended"]:
                row["ended"] = reason


class StoreSessions:
    """Sessions in the app's database (table web_sessions): they survive a restart and every
    replica on the same database sees the same sign-ins and sign-outs."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def create(self, session_id: str, record: SessionRecord, max_age_s: float) -> None:
        from sqlalchemy import delete

        now = utcnow()
        with self.store.session() as session:
            session.execute(delete(WebSession).where(WebSession.expires_at < now - KEEP_ENDED))
            session.add(
                WebSession(
                    id_hash=_hash(session_id),
                    kind=record.kind,
                    who=record.who[:200],
                    study_id=record.study_id,
                    rater_id=record.rater_id,
                    created_at=now,
                    expires_at=now + timedelta(seconds=max_age_s),
                )
            )

    def lookup(self, session_id: str, kind: str) -> SessionRecord:
        with self.store.session() as session:
            row = session.get(WebSession, _hash(session_id))
            if row is None or row.kind != kind:
                return SessionRecord(kind, state=UNKNOWN)
            if row.ended_at is not None:
                state = row.ended_because or SIGNED_OUT
            else:
                state = EXPIRED if row.expires_at <= utcnow() else ACTIVE
            return SessionRecord(row.kind, row.who, row.study_id, row.rater_id, state)

    def end(self, session_id: str, reason: str = SIGNED_OUT) -> None:
        from sqlalchemy import update

        with self.store.session() as session:
            session.execute(
                update(WebSession)
                .where(WebSession.id_hash == _hash(session_id), WebSession.ended_at.is_(None))
                .values(ended_at=utcnow(), ended_because=reason[:40])
            )


def _with_state(record: SessionRecord, state: str) -> SessionRecord:
    return SessionRecord(record.kind, record.who, record.study_id, record.rater_id, state)
