"""Engine, declarative Base and sessions; SQLite in DATA_DIR by default, any URL by DATABASE_URL.

Every table module in medheb_app/store imports `Base` from here; `create_schema` imports them
all (so their classes are registered) and creates what is missing.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker


def utcnow() -> datetime:
    """Naive UTC now: SQLite drops time zones, so every timestamp is stored as naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    """Declarative base shared by every table."""


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL and a busy timeout so concurrent writers wait."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def create_schema(engine: Engine) -> None:
    """Create every registered table that does not exist yet (safe to call at each start)."""
    import medheb_app.store as package

    for module in pkgutil.iter_modules(package.__path__):
        if module.name != "db":
            importlib.import_module(f"{package.__name__}.{module.name}")
    Base.metadata.create_all(engine)


class Store:
    """One database: an engine plus a session factory; create with `Store.open(url)`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str) -> Store:
        store = cls(make_engine(url))
        create_schema(store.engine)
        return store

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session that commits on success and rolls back on error."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()
