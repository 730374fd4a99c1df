"""The study and job tables exist after Store.open and compile for PostgreSQL as well as SQLite."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateTable

from medheb_app.settings import Settings
from medheb_app.store.db import Base, Store
from medheb_app.store.jobs_table import Job, JobLogLine
from medheb_app.store.study_tables import Assignment, PreferenceStudy, Rater, StudyItem, Vote

TABLES = [PreferenceStudy, StudyItem, Rater, Assignment, Vote, Job, JobLogLine]


def test_store_open_creates_every_study_and_job_table(settings: Settings):
    store = Store.open(settings.database_url)
    names = set(inspect(store.engine).get_table_names())
    assert {table.__tablename__ for table in TABLES} <= names
    columns = {c["name"] for c in inspect(store.engine).get_columns("study_votes")}
    assert {"kind", "choice", "model_left", "model_right", "retracts", "created_at"} <= columns


@pytest.mark.parametrize("dialect", [postgresql.dialect(), sqlite.dialect()], ids=["pg", "sqlite"])
def test_tables_compile_for_both_backends(dialect):
    for table in TABLES:
        ddl = str(CreateTable(table.__table__).compile(dialect=dialect))
        assert f"CREATE TABLE {table.__tablename__}" in ddl
    assert Base.metadata.tables["study_assignments"].c.token.unique
