"""The rater flow: blinding, side randomisation, locks, undo, raters_per_item, concurrency."""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update
from test_study_items import write_run

from medheb_app.store.db import Store
from medheb_app.store.study_tables import Assignment, StudyItem, Vote
from medheb_app.study import (
    ItemGoneError,
    StudyError,
    create_study,
    list_studies,
    next_item,
    progress,
    record_vote,
    sign_in,
    undo_last_vote,
    withdraw_items,
)

MODELS = ["oracle", "open_clip:secret/model"]


@pytest.fixture
def store(database_url: str) -> Store:
    """The store on SQLite and on a real PostgreSQL server (each test runs on both)."""
    return Store.open(database_url)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", models=tuple(MODELS), payloads=True)


def make_study(store: Store, run_dir: Path, n: int = 6, raters: int = 1, reveal=True) -> int:
    return create_study(store, "pilot", MODELS, run_dir, n, raters, reveal, seed=7)


def test_item_view_hides_models_gold_task_and_stratum(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    rater = sign_in(store, study_id, "dr-a")
    seen_tokens = set()
    while (view := next_item(store, study_id, rater.id)) is not None:
        assert set(asdict(view)) == {"token", "query", "side_a", "side_b", "done", "total"}
        shown = json.dumps([view.query, view.side_a, view.side_b])
        with store.session() as session:
            assignment = session.scalar(select(Assignment).where(Assignment.token == view.token))
            item = session.get(StudyItem, assignment.item_id)
            secrets = [*MODELS, "secret", "oracle", item.task, item.family, *item.gold]
            secrets += [item.query_id, "both_hit", "only_a", "only_b", "neither", "hit"]
        for secret in secrets:
            assert secret not in shown, f"{secret!r} leaked into the rater's view"
        assert len(view.side_a) == len(view.side_b) == 3
        assert view.token not in seen_tokens
        seen_tokens.add(view.token)
        record_vote(store, view.token, rater.id, "tie")
    assert len(seen_tokens) == 6


def test_vote_records_shown_sides_reveals_and_locks(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    rater = sign_in(store, study_id, "dr-a")
    view = next_item(store, study_id, rater.id)
    assert (view.done, view.total) == (0, 6)
    receipt = record_vote(store, view.token, rater.id, "A")
    assert set(receipt.revealed.values()) == set(MODELS)
    assert (receipt.done, receipt.total) == (1, 6)
    with store.session() as session:
        vote = session.get(Vote, receipt.vote_id)
        assignment = session.scalar(select(Assignment).where(Assignment.token == view.token))
        assert (vote.model_left, vote.model_right) == (
            assignment.model_left,
            assignment.model_right,
        )
        assert receipt.revealed == {"A": vote.model_left, "B": vote.model_right}
        assert vote.created_at is not None and vote.choice == "A"
    with pytest.raises(StudyError, match="already voted"):
        record_vote(store, view.token, rater.id, "B")
    with pytest.raises(StudyError, match="must be one of"):
        record_vote(store, view.token, rater.id, "left")
    other = sign_in(store, study_id, "dr-b")
    with pytest.raises(StudyError, match="another rater"):
        record_vote(store, view.token, other.id, "A")
    assert next_item(store, study_id, rater.id).token != view.token


def test_no_reveal_when_study_forbids(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir, reveal=False)
    rater = sign_in(store, study_id, "dr-a")
    receipt = record_vote(store, next_item(store, study_id, rater.id).token, rater.id, "B")
    assert receipt.revealed is None


def test_sign_in_by_name_or_token(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    first = sign_in(store, study_id, "  Dr Ada  ")
    assert first.name == "Dr Ada"
    assert sign_in(store, study_id, first.token) == first
    assert sign_in(store, study_id, "Dr Ada") == first
    with pytest.raises(StudyError, match="name or rater token"):
        sign_in(store, study_id, "   ")
    with pytest.raises(StudyError, match="No study"):
        sign_in(store, 999, "Dr Ada")


def test_sides_are_randomised_per_item_and_rater(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir, n=12, raters=2)
    lefts = []
    for name in ("dr-a", "dr-b"):
        rater = sign_in(store, study_id, name)
        while (view := next_item(store, study_id, rater.id)) is not None:
            record_vote(store, view.token, rater.id, "A")
    with store.session() as session:
        rows = session.execute(select(Assignment, StudyItem).join(StudyItem)).all()
        for assignment, item in rows:
            lefts.append(assignment.model_left == item.model_a)
            assert {assignment.model_left, assignment.model_right} == {item.model_a, item.model_b}
    assert len(lefts) == 24
    assert 0 < sum(lefts) < 24  # both orders occur


def test_undo_within_window_reopens_item_and_keeps_history(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    rater = sign_in(store, study_id, "dr-a")
    view = next_item(store, study_id, rater.id)
    receipt = record_vote(store, view.token, rater.id, "A")
    assert undo_last_vote(store, rater.id) == view.token
    assert progress(store, study_id, rater.id)["done"] == 0
    again = next_item(store, study_id, rater.id)
    assert (again.token, again.side_a, again.side_b) == (view.token, view.side_a, view.side_b)
    record_vote(store, again.token, rater.id, "B")
    with store.session() as session:
        log = session.scalars(select(Vote).order_by(Vote.id)).all()
        assert [(v.kind, v.choice, v.retracts) for v in log] == [
            ("vote", "A", None),
            ("undo", "", receipt.vote_id),
            ("vote", "B", None),
        ]
    # too late: push the latest vote's time back past the window
    with store.session() as session:
        latest = session.scalars(select(Vote).order_by(Vote.id.desc())).first()
        session.execute(
            update(Vote)
            .where(Vote.id == latest.id)
            .values(created_at=latest.created_at - timedelta(seconds=31))
        )
    with pytest.raises(StudyError, match="within 30 seconds"):
        undo_last_vote(store, rater.id)
    other = sign_in(store, study_id, "dr-b")
    with pytest.raises(StudyError, match="no vote to undo"):
        undo_last_vote(store, other.id)


def test_raters_per_item_respected_and_no_item_twice(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir, n=4, raters=2)
    counts = {}
    for name in ("a", "b", "c"):
        rater = sign_in(store, study_id, name)
        tokens = []
        while (view := next_item(store, study_id, rater.id)) is not None:
            tokens.append(view.token)
            record_vote(store, view.token, rater.id, "tie")
        counts[name] = len(tokens)
    assert counts == {"a": 4, "b": 4, "c": 0}  # every item already has its two raters
    with store.session() as session:
        per_item = session.execute(select(StudyItem.id, StudyItem.n_assigned)).all()
        assert all(n == 2 for _, n in per_item)
        pairs = session.execute(select(Assignment.item_id, Assignment.rater_id)).all()
        assert len(pairs) == len(set(pairs)) == 8
    assert progress(store, study_id) == {"study_done": 8, "study_total": 8}
    assert list_studies(store)[0]["votes"] == 8


def test_vote_on_withdrawn_or_unknown_item_is_a_clear_error(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir, n=3)
    rater = sign_in(store, study_id, "dr-a")
    first = next_item(store, study_id, rater.id)
    record_vote(store, first.token, rater.id, "A")
    pending = next_item(store, study_id, rater.id)
    assert withdraw_items(store, study_id) == 3
    with pytest.raises(ItemGoneError, match=r"withdrawn.*earlier votes are kept"):
        record_vote(store, pending.token, rater.id, "B")
    with pytest.raises(ItemGoneError, match="no longer part of the study"):
        record_vote(store, "not-a-token", rater.id, "B")
    assert next_item(store, study_id, rater.id) is None
    with store.session() as session:
        assert [v.choice for v in session.scalars(select(Vote))] == ["A"]


def test_concurrent_raters_lose_no_votes(store: Store, run_dir: Path, database_url: str):
    study_id = make_study(store, run_dir, n=12, raters=3)
    errors: list[BaseException] = []
    voted: dict[str, int] = {}

    def rate(name: str) -> None:
        own_store = Store.open(database_url)  # one connection pool per "browser"
        try:
            rater = sign_in(own_store, study_id, name)
            n = 0
            while (view := next_item(own_store, study_id, rater.id)) is not None:
                record_vote(own_store, view.token, rater.id, ("A", "B", "tie")[n % 3])
                n += 1
            voted[name] = n
        except BaseException as error:  # reported below, a thread cannot fail the test itself
            errors.append(error)

    threads = [threading.Thread(target=rate, args=(f"rater-{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sum(voted.values()) == 12 * 3  # every slot filled exactly once
    with store.session() as session:
        votes = session.scalars(select(Vote).where(Vote.kind == "vote")).all()
        assert len(votes) == 36
        per_item: dict[int, set[int]] = {}
        for vote in votes:
            per_item.setdefault(vote.item_id, set()).add(vote.rater_id)
        assert all(len(raters) == 3 for raters in per_item.values())


def test_idle_claims_go_back_to_the_pool(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir, n=2, raters=1)
    walker = sign_in(store, study_id, "walks-away")
    stale = next_item(store, study_id, walker.id)
    voter = sign_in(store, study_id, "stays")
    first = next_item(store, study_id, voter.id)
    record_vote(store, first.token, voter.id, "A")
    assert next_item(store, study_id, voter.id) is None  # the other item is held
    with store.session() as session:
        claim = session.scalar(select(Assignment).where(Assignment.token == stale.token))
        claim.created_at -= timedelta(hours=1)
    # the walker's own idle claim is kept for them when they come back ...
    assert next_item(store, study_id, walker.id).token == stale.token
    # ... but another rater asking for work frees it
    freed = next_item(store, study_id, voter.id)
    assert freed is not None and freed.query == stale.query
    record_vote(store, freed.token, voter.id, "B")
    with pytest.raises(ItemGoneError, match="idle too long"):
        record_vote(store, stale.token, walker.id, "A")
    assert progress(store, study_id) == {"study_done": 2, "study_total": 2}
