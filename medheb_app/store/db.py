"""Engine, declarative Base and sessions; SQLite in DATA_DIR by default, any URL by DATABASE_URL.

Every table module in medheb_app/store imports `Base` from here; `create_schema` imports them
all (so their classes are registered), creates missing tables and adds missing columns, so
a database written by an older version keeps its rows when the app starts on a newer one.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Column, Engine, create_engine, event, inspect
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.schema import CreateColumn

import medheb_app.store as package


def utcnow() -> datetime:
    """Naive UTC now: SQLite drops time zones, so every timestamp is stored as naive UTC."""
    return datetime.now(UTC).replace(tzinfo=None)


def iso_seconds(value: datetime | None) -> str | None:
    """A stored time stamp as ISO 8601 to the second, as every listing shows it; None stays."""
    return value.isoformat(timespec="seconds") if value else None


def iso_utc(value: datetime) -> str:
    """A stored (naive UTC) time stamp as ISO 8601 with its zone, "2026-12-04T21:00:00+00:00",
    as run summaries write theirs, so a caller comparing the two compares times."""
    return value.replace(tzinfo=UTC).isoformat(timespec="seconds")


class Base(DeclarativeBase):
    """Declarative base shared by every table."""


def owner_only_sqlite(path: Path) -> None:
    """Create the database file readable by the server's user only (0600), or narrow an
    existing one and its WAL / shared-memory files: it holds the audit log's query texts and
    the source references that lead from a pseudonym to a patient's file (SQLite gives the
    journal files the database's permissions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    for member in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            if member.exists() and member.stat().st_mode & 0o077:
                member.chmod(0o600)
        except PermissionError:  # another user's file: SQLite itself will say if it cannot open
            continue


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets WAL, a busy timeout so concurrent writers wait, and a
    file only the server's user can read (owner_only_sqlite)."""
    if url.startswith("sqlite:///"):
        database = url.removeprefix("sqlite:///").split("?", 1)[0]
        if database and database != ":memory:":
            owner_only_sqlite(Path(database))
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def create_schema(engine: Engine) -> list[str]:
    """Create missing tables and add missing columns (safe at each start); returns what it added.

    Only additive changes are migrated: a new column must be nullable or carry a server
    default, which is how table modules should grow. Nothing is dropped or rewritten.
    """
    for module in pkgutil.iter_modules(package.__path__):
        if module.name != "db":
            importlib.import_module(f"{package.__name__}.{module.name}")
    existing_tables = set(inspect(engine).get_table_names())
    Base.metadata.create_all(engine)
    added: list[str] = []
    inspector = inspect(engine)
    for table in Base.metadata.sorted_tables:
        if table.name not in existing_tables:
            continue
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present:
                _add_column(engine, table.name, column)
                added.append(f"{table.name}.{column.name}")
    return added


def _add_column(engine: Engine, table_name: str, column: Column) -> None:
    """ALTER TABLE ... ADD COLUMN in the engine's dialect (SQLite and PostgreSQL both accept it)."""
    if not column.nullable and column.server_default is None:
        raise RuntimeError(
            f"Cannot add required column {table_name}.{column.name} to an existing database: "
            "give it a server_default or make it nullable."
        )
    definition = CreateColumn(column).compile(dialect=engine.dialect)
    with engine.begin() as connection:
        connection.exec_driver_sql(f'ALTER TABLE "{table_name}" ADD COLUMN {definition}')


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
