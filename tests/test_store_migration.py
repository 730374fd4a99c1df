"""Starting on a database written by an older version adds the new columns and keeps the rows."""

from __future__ import annotations

import sqlite3

import pytest
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


STUDY_COLUMNS_ADDED = {
    "studies": ["public_title", "open_enrolment", "gold_share", "claim_timeout_s", "closed_at"],
    "study_items": ["is_gold"],
    "raters": ["study_id", "display_name", "resume_hash", "invitation_id"],
    "study_assignments": ["released_reason", "served_at", "revealed_at"],
}


def _downgrade_study_tables(store: Store) -> None:
    """The study tables as the release before invitations wrote them, with one legacy study,
    item, rater, claim and vote."""
    with store.engine.begin() as connection:
        connection.exec_driver_sql('DROP TABLE "study_invitations"')
        for index in inspect(connection).get_indexes("raters"):
            if set(index["column_names"]) & set(STUDY_COLUMNS_ADDED["raters"]):
                connection.exec_driver_sql(f'DROP INDEX "{index["name"]}"')
        for table, columns in STUDY_COLUMNS_ADDED.items():
            for column in columns:
                connection.exec_driver_sql(f'ALTER TABLE "{table}" DROP COLUMN "{column}"')
        connection.exec_driver_sql(
            "INSERT INTO studies (id, name, models, n_queries, raters_per_item, "
            "reveal_after_vote, seed, source, created_at) VALUES (1, 'legacy', "
            "'[\"a\", \"b\"]', 1, 1, TRUE, 0, '', '2026-01-01 00:00:00')"
        )
        connection.exec_driver_sql(
            "INSERT INTO study_items (id, study_id, position, task, family, split, query_id, "
            "query_payload, model_a, model_b, top_a, top_b, gold, hit_a, hit_b, n_assigned, "
            "created_at) VALUES (1, 1, 0, 't', 'T-T', 'ID', 'q', '{\"text\": \"q\"}', 'a', "
            "'b', '[]', '[]', '[]', TRUE, FALSE, 1, '2026-01-01 00:00:00')"
        )
        connection.exec_driver_sql(
            "INSERT INTO raters (id, name, token, created_at) VALUES "
            "(1, 'Dr Legacy', 'plain-token', '2026-01-01 00:00:00')"
        )
        connection.exec_driver_sql(
            "INSERT INTO study_assignments (id, token, study_id, item_id, rater_id, model_left, "
            "model_right, vote_id, created_at) VALUES (1, 'tok', 1, 1, 1, 'a', 'b', 1, "
            "'2026-01-01 00:00:00')"
        )
        connection.exec_driver_sql(
            "INSERT INTO study_votes (id, kind, study_id, assignment_id, item_id, rater_id, "
            "choice, model_left, model_right, created_at) VALUES (1, 'vote', 1, 1, 1, 1, 'A', "
            "'a', 'b', '2026-01-01 00:00:00')"
        )
    store.engine.dispose()


def _check_study_migration(url: str) -> None:
    from medheb_app.study import list_open_studies, resume, sign_in_with_invitation
    from medheb_app.study.export import votes_frame

    reopened = Store.open(url)
    inspector = inspect(reopened.engine)
    for table, columns in STUDY_COLUMNS_ADDED.items():
        present = {c["name"] for c in inspector.get_columns(table)}
        assert set(columns) <= present, table
    assert "study_invitations" in inspector.get_table_names()
    votes = votes_frame(reopened, "legacy")
    assert votes[["rater_name", "choice", "gold"]].values.tolist() == [["Dr Legacy", "A", False]]
    assert [(s.id, s.open_enrolment) for s in list_open_studies(reopened)] == [(1, False)]
    assert resume(reopened, "plain-token") is None  # legacy tokens are no credential now
    with pytest.raises(ValueError, match="not valid"):
        sign_in_with_invitation(reopened, "Dr Legacy")
    assert create_schema(reopened.engine) == []


def test_study_tables_of_an_older_version_migrate(tmp_path):
    url = f"sqlite:///{tmp_path / 'old-study.sqlite'}"
    _downgrade_study_tables(Store.open(url))
    _check_study_migration(url)


def test_study_tables_of_an_older_version_migrate_on_postgresql(postgres_url):
    _downgrade_study_tables(Store.open(postgres_url))
    _check_study_migration(postgres_url)
