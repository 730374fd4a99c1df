"""Starting on a database written by an older version adds the new columns and keeps the rows."""

from __future__ import annotations

import sqlite3

from sqlalchemy import inspect

from medheb_app.store.db import Store, create_schema
from medheb_app.store.jobs_table import Job


def test_missing_column_is_added_and_rows_survive(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    store = Store.open(url)
    columns = [c["name"] for c in inspect(store.engine).get_columns(Job.__tablename__)]
    dropped = next(c.name for c in Job.__table__.columns if c.nullable and not c.primary_key)
    kept = [c for c in columns if c != dropped]
    store.engine.dispose()

    # Rebuild the table as an older version would have written it: one column fewer, one row.
    connection = sqlite3.connect(tmp_path / "old.sqlite")
    connection.execute("PRAGMA foreign_keys=OFF")
    connection.execute(
        f"CREATE TABLE old_jobs AS SELECT {', '.join(kept)} FROM {Job.__tablename__}"
    )
    connection.execute(f"DROP TABLE {Job.__tablename__}")
    connection.execute(f"ALTER TABLE old_jobs RENAME TO {Job.__tablename__}")
    connection.execute(f"INSERT INTO {Job.__tablename__} (id) VALUES ('legacy-job')")
    connection.commit()
    connection.close()

    reopened = Store.open(url)
    names = [c["name"] for c in inspect(reopened.engine).get_columns(Job.__tablename__)]
    assert dropped in names
    with reopened.engine.connect() as connection:
        ids = [row[0] for row in connection.exec_driver_sql(f"SELECT id FROM {Job.__tablename__}")]
    assert ids == ["legacy-job"]
    assert create_schema(reopened.engine) == []  # a second start has nothing left to add


def test_missing_column_is_added_on_postgresql(postgres_url):
    store = Store.open(postgres_url)
    with store.session() as session:
        session.add(Job(kind="benchmark", params={"suite": "medheb-lite"}))
    dropped = next(c.name for c in Job.__table__.columns if c.nullable and not c.primary_key)
    with store.engine.begin() as connection:  # the table as an older version wrote it
        connection.exec_driver_sql(f'ALTER TABLE "{Job.__tablename__}" DROP COLUMN "{dropped}"')
    store.engine.dispose()

    reopened = Store.open(postgres_url)
    names = [c["name"] for c in inspect(reopened.engine).get_columns(Job.__tablename__)]
    assert dropped in names
    with reopened.session() as session:
        jobs = session.query(Job).all()
    assert [(job.kind, job.params) for job in jobs] == [("benchmark", {"suite": "medheb-lite"})]
    assert create_schema(reopened.engine) == []
