"""The rater flow: blinding, side randomisation, locks, reveal, undo, raters_per_item, claims
and concurrency (each test on SQLite and on a real PostgreSQL)."""

from __future__ import annotations

import json
import threading
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update
from test_study_items import write_run

from medheb_app.store.db import Store, make_engine
from medheb_app.store.study_tables import Assignment, StudyItem, Vote
from medheb_app.study import (
    ItemGoneError,
    StudyError,
    create_invitations,
    create_study,
    list_studies,
    next_item,
    progress,
    record_vote,
    reveal,
    sign_in_with_invitation,
    undo_last_vote,
    withdraw_items,
)

MODELS = ["oracle", "open_clip:secret/model"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The benchmark run the studies are drawn from, written once for the module: a study
    only reads it, and writing it again for each of the 26 tests that use it cost 44 ms of
    CPU each (most of it the runner's `git describe` for every result file)."""
    return write_run(
        tmp_path_factory.mktemp("session") / "run", models=tuple(MODELS), payloads=True
    )


def make_study(
    store: Store, run_dir: Path, n: int = 6, raters: int = 1, reveal=True, name="pilot"
) -> int:
    return create_study(store, name, MODELS, run_dir, n, raters, reveal, seed=7).id


def browser_store(database_url: str) -> Store:
    """The store through a connection pool of its own, as another browser's requests reach
    the database: a new engine on the schema the test's `store` already created (Store.open
    would reflect every table again for each browser, 45 ms of CPU each on PostgreSQL)."""
    return Store(make_engine(database_url))


def join(store: Store, study_id: int, name: str = "") -> int:
    """A new rater of the study, signed in with a fresh invitation; returns the rater id."""
    invitation = create_invitations(store, study_id, 1, label=name)[0]
    return sign_in_with_invitation(store, invitation.code, name).rater_id


def test_item_view_hides_models_gold_task_and_stratum(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    rater = join(store, study_id, "dr-a")
    seen_tokens = set()
    while (view := next_item(store, study_id, rater)) is not None:
        assert set(asdict(view)) == {
            "token",
            "query",
            "side_a",
            "side_b",
            "done",
            "total",
            "instruction",
        }
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
        record_vote(store, view.token, rater, "tie")
    assert len(seen_tokens) == 6


def test_vote_records_shown_sides_reveals_and_locks(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    rater = join(store, study_id, "dr-a")
    view = next_item(store, study_id, rater)
    assert (view.done, view.total) == (0, 6)
    receipt = record_vote(store, view.token, rater, "A")
    assert receipt.can_reveal and "revealed" not in str(receipt)
    assert (receipt.done, receipt.total) == (1, 6)
    revealed = reveal(store, view.token, rater)
    assert set(revealed.values()) == set(MODELS)
    with store.session() as session:
        vote = session.get(Vote, receipt.vote_id)
        assignment = session.scalar(select(Assignment).where(Assignment.token == view.token))
        assert (vote.model_left, vote.model_right) == (
            assignment.model_left,
            assignment.model_right,
        )
        assert revealed == {"A": vote.model_left, "B": vote.model_right}
        assert vote.created_at is not None and vote.choice == "A"
    with pytest.raises(StudyError, match="already voted"):
        record_vote(store, view.token, rater, "B")
    with pytest.raises(StudyError, match="must be one of"):
        record_vote(store, view.token, rater, "left")
    other = join(store, study_id, "dr-b")
    with pytest.raises(StudyError, match="another rater"):
        record_vote(store, view.token, other, "A")
    assert next_item(store, study_id, rater).token != view.token


def test_no_reveal_when_study_forbids(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir, reveal=False)
    rater = join(store, study_id, "dr-a")
    view = next_item(store, study_id, rater)
    receipt = record_vote(store, view.token, rater, "B")
    assert not receipt.can_reveal
    with pytest.raises(StudyError, match="keeps the systems anonymous"):
        reveal(store, view.token, rater)


def test_reveal_only_after_a_vote_and_then_the_vote_is_final(store: Store, run_dir: Path):
    """Attack: with reveal on, vote A, see the names, undo within 30 s, vote B."""
    study_id = make_study(store, run_dir)
    rater = join(store, study_id, "dr-a")
    view = next_item(store, study_id, rater)
    with pytest.raises(StudyError, match="Vote on this item first"):
        reveal(store, view.token, rater)
    first = record_vote(store, view.token, rater, "A")
    other = join(store, study_id, "dr-b")
    with pytest.raises(StudyError, match="another rater"):
        reveal(store, view.token, other)
    assert set(reveal(store, view.token, rater).values()) == set(MODELS)
    with pytest.raises(StudyError, match="vote is final"):
        undo_last_vote(store, study_id, rater)
    with pytest.raises(StudyError, match="already voted"):
        record_vote(store, view.token, rater, "B")
    with store.session() as session:
        log = session.scalars(select(Vote).order_by(Vote.id)).all()
        assert [(v.kind, v.choice, v.retracts) for v in log] == [
            ("vote", "A", None),
            ("reveal", "", first.vote_id),
        ]
    # a vote undone before any reveal can be changed, and cannot be revealed while undone
    second = next_item(store, study_id, rater)
    record_vote(store, second.token, rater, "A")
    assert undo_last_vote(store, study_id, rater) == second.token
    with pytest.raises(StudyError, match="Vote on this item first"):
        reveal(store, second.token, rater)


def test_undo_acts_only_on_the_study_it_is_asked_for(store: Store, run_dir: Path):
    """Attack: an undo from a session in one study withdrew the rater's vote in another."""
    first_study = make_study(store, run_dir, name="first")
    second_study = make_study(store, run_dir, name="second")
    rater = join(store, first_study, "dr-a")
    view = next_item(store, first_study, rater)
    record_vote(store, view.token, rater, "A")
    with pytest.raises(StudyError, match="not signed in to this study"):
        undo_last_vote(store, second_study, rater)
    with pytest.raises(StudyError, match="not signed in to this study"):
        next_item(store, second_study, rater)
    second_rater = join(store, second_study, "dr-a")
    with pytest.raises(StudyError, match="no vote to undo"):
        undo_last_vote(store, second_study, second_rater)
    assert progress(store, first_study, rater)["done"] == 1


def test_sides_are_randomised_per_item_and_rater(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir, n=12, raters=2)
    lefts = []
    for name in ("dr-a", "dr-b"):
        rater = join(store, study_id, name)
        while (view := next_item(store, study_id, rater)) is not None:
            record_vote(store, view.token, rater, "A")
    with store.session() as session:
        rows = session.execute(select(Assignment, StudyItem).join(StudyItem)).all()
        for assignment, item in rows:
            lefts.append(assignment.model_left == item.model_a)
            assert {assignment.model_left, assignment.model_right} == {item.model_a, item.model_b}
    assert len(lefts) == 24
    assert 0 < sum(lefts) < 24  # both orders occur


def test_undo_within_window_reopens_item_and_keeps_history(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    rater = join(store, study_id, "dr-a")
    view = next_item(store, study_id, rater)
    receipt = record_vote(store, view.token, rater, "A")
    assert undo_last_vote(store, study_id, rater) == view.token
    assert progress(store, study_id, rater)["done"] == 0
    again = next_item(store, study_id, rater)
    assert (again.token, again.side_a, again.side_b) == (view.token, view.side_a, view.side_b)
    record_vote(store, again.token, rater, "B")
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
        undo_last_vote(store, study_id, rater)
    other = join(store, study_id, "dr-b")
    with pytest.raises(StudyError, match="no vote to undo"):
        undo_last_vote(store, study_id, other)


def test_raters_per_item_respected_and_no_item_twice(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir, n=4, raters=2)
    counts = {}
    for name in ("a", "b", "c"):
        rater = join(store, study_id, name)
        tokens = []
        while (view := next_item(store, study_id, rater)) is not None:
            tokens.append(view.token)
            record_vote(store, view.token, rater, "tie")
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
    rater = join(store, study_id, "dr-a")
    first = next_item(store, study_id, rater)
    record_vote(store, first.token, rater, "A")
    pending = next_item(store, study_id, rater)
    assert withdraw_items(store, study_id) == 3
    with pytest.raises(ItemGoneError, match=r"withdrawn.*earlier votes are kept"):
        record_vote(store, pending.token, rater, "B")
    with pytest.raises(ItemGoneError, match="no longer part of the study"):
        record_vote(store, "not-a-token", rater, "B")
    assert next_item(store, study_id, rater) is None
    with store.session() as session:
        assert [v.choice for v in session.scalars(select(Vote))] == ["A"]


def test_concurrent_raters_lose_no_votes(store: Store, tmp_path: Path, database_url: str):
    """20 raters in parallel (each its own connection pool, like 20 browsers) fill 50 items x
    2 raters: every slot exactly once, no rater twice on an item, and every vote the service
    accepted is in the log; a vote refused because another rater completed a shared item
    first is reported to that rater, never silently dropped."""
    run = write_run(
        tmp_path / "big", models=tuple(MODELS), tasks={"t-a": 25, "t-b": 25}, payloads=True
    )
    study_id = create_study(store, "crowd", MODELS, run, 50, 2, True, seed=3).id
    errors: list[BaseException] = []
    accepted: dict[str, list[int]] = {}
    refused: list[str] = []

    def rate(name: str) -> None:
        own_store = browser_store(database_url)
        try:
            rater = join(own_store, study_id, name)
            ids = accepted.setdefault(name, [])
            while (view := next_item(own_store, study_id, rater)) is not None:
                try:
                    ids.append(record_vote(own_store, view.token, rater, "A").vote_id)
                except ItemGoneError as lost:
                    refused.append(str(lost))
        except BaseException as error:  # reported below, a thread cannot fail the test itself
            errors.append(error)
        finally:
            own_store.engine.dispose()

    threads = [threading.Thread(target=rate, args=(f"rater-{i}",)) for i in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors, errors
    assert all("completed this item first" in message for message in refused)
    receipts = sorted(v for ids in accepted.values() for v in ids)
    assert len(receipts) == 50 * 2  # every slot filled exactly once
    with store.session() as session:
        votes = session.scalars(select(Vote).where(Vote.kind == "vote")).all()
        assert sorted(v.id for v in votes) == receipts
        per_item: dict[int, list[int]] = {}
        for vote in votes:
            per_item.setdefault(vote.item_id, []).append(vote.rater_id)
        assert len(per_item) == 50
        assert all(len(raters) == len(set(raters)) == 2 for raters in per_item.values())
    assert progress(store, study_id) == {"study_done": 100, "study_total": 100}


def test_idle_claims_go_back_to_the_pool(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir, n=3, raters=1)
    walker = join(store, study_id, "walks-away")
    record_vote(store, next_item(store, study_id, walker).token, walker, "A")
    stale = next_item(store, study_id, walker)  # a rater who voted, then walked away
    voter = join(store, study_id, "stays")
    first = next_item(store, study_id, voter)
    record_vote(store, first.token, voter, "A")
    assert next_item(store, study_id, voter) is None  # the last item is held, not idle yet
    with store.session() as session:
        claim = session.scalar(select(Assignment).where(Assignment.token == stale.token))
        claim.served_at -= timedelta(minutes=11)  # the default timeout is 10 minutes
    # the walker's own idle claim is kept for them when they come back ...
    assert next_item(store, study_id, walker).token == stale.token
    with store.session() as session:  # ... which counts as activity: make it idle again
        claim = session.scalar(select(Assignment).where(Assignment.token == stale.token))
        claim.served_at -= timedelta(minutes=11)
    # ... but another rater asking for work frees it
    freed = next_item(store, study_id, voter)
    assert freed is not None and freed.query == stale.query
    record_vote(store, freed.token, voter, "B")
    with pytest.raises(ItemGoneError, match="idle too long"):
        record_vote(store, stale.token, walker, "A")
    assert progress(store, study_id) == {"study_done": 3, "study_total": 3}


def test_idle_timeout_is_a_study_setting(store: Store, run_dir: Path):
    study_id = create_study(
        store, "quick", MODELS, run_dir, 2, 1, True, seed=1, claim_timeout_s=120
    ).id
    walker = join(store, study_id, "walker")
    record_vote(store, next_item(store, study_id, walker).token, walker, "A")
    stale = next_item(store, study_id, walker)
    with store.session() as session:
        claim = session.scalar(select(Assignment).where(Assignment.token == stale.token))
        claim.served_at -= timedelta(seconds=130)  # past this study's 2 minutes, not 10
    voter = join(store, study_id, "voter")
    assert next_item(store, study_id, voter).query == stale.query
    with store.session() as session:
        claim = session.scalar(select(Assignment).where(Assignment.token == stale.token))
        assert claim.released_reason == "idle"
    assert list_studies(store)[0]["claim_timeout_s"] == 120
    with pytest.raises(StudyError, match="at least 30 seconds"):
        create_study(store, "too-quick", MODELS, run_dir, 1, claim_timeout_s=5)


def test_three_throwaway_sign_ins_cannot_drain_a_study(store: Store, run_dir: Path):
    """Attack: three throwaway sign-ins claimed every item of a one-rater-per-item study; the
    real rater was told the study was complete and claims came back only after 30 min."""
    study_id = make_study(store, run_dir, n=3, raters=1)
    throwaways = [join(store, study_id, f"junk-{i}") for i in range(3)]
    held = [next_item(store, study_id, junk) for junk in throwaways]
    assert all(view is not None for view in held)
    # each throwaway holds at most one open claim: asking again returns the same item
    assert [next_item(store, study_id, junk).token for junk in throwaways] == [
        view.token for view in held
    ]
    with store.session() as session:
        open_claims = session.scalars(select(Assignment).where(Assignment.vote_id.is_(None))).all()
        assert len(open_claims) == 3
    real = join(store, study_id, "real rater")
    rated = 0
    while (view := next_item(store, study_id, real)) is not None:
        record_vote(store, view.token, real, "tie")
        rated += 1
    assert rated == 3  # the real rater rated every item, at once, no 30-minute wait
    assert progress(store, study_id) == {"study_done": 3, "study_total": 3}
    for junk, view in zip(throwaways, held, strict=True):
        with pytest.raises(ItemGoneError, match="completed this item first"):
            record_vote(store, view.token, junk, "A")
        assert next_item(store, study_id, junk) is None
    with store.session() as session:
        votes = session.scalars(select(Vote).where(Vote.kind == "vote")).all()
        assert {v.rater_id for v in votes} == {real} and len(votes) == 3


def test_a_rater_holds_one_open_claim_even_from_two_tabs(
    store: Store, run_dir: Path, database_url: str
):
    study_id = make_study(store, run_dir, n=6, raters=1)
    rater = join(store, study_id, "two tabs")
    tokens: list[str] = []

    def tab() -> None:
        own_store = browser_store(database_url)
        tokens.append(next_item(own_store, study_id, rater).token)
        own_store.engine.dispose()

    threads = [threading.Thread(target=tab) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(tokens) == 4 and len(set(tokens)) == 1
    with store.session() as session:
        assert len(session.scalars(select(Assignment)).all()) == 1
