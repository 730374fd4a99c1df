"""The rater's flow: sign in, get the next blinded item, vote, undo.

`record_vote` is the only function that writes a vote (FastChat's single vote writer). Blinding
lives here on the server: the left/right order is drawn per (item, rater) and stored on the
assignment, and the `ItemView` handed to the UI carries only an opaque random token, the query
and the two top-3 payload lists, never model names, gold ids, the task or the top-1 stratum.

Concurrency: slots are claimed with a conditional UPDATE (n_assigned < raters_per_item) and a
vote takes effect with a conditional UPDATE (vote_id IS NULL), so two raters or two browser
tabs racing cannot over-fill an item or vote twice; SQLite WAL serialises the writers.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from medheb_app.store.db import Store
from medheb_app.store.study_tables import (
    Assignment,
    PreferenceStudy,
    Rater,
    StudyItem,
    Vote,
    utcnow,
)
from medheb_app.study.errors import ItemGoneError, StudyError

CHOICES = ("A", "B", "tie", "both_poor")
UNDO_WINDOW_SECONDS = 30.0
CLAIM_TIMEOUT_SECONDS = 30 * 60.0


@dataclass(frozen=True)
class RaterInfo:
    id: int
    name: str
    token: str


@dataclass(frozen=True)
class ItemView:
    """What a rater is shown: nothing in it names a model, the gold, the task or the stratum."""

    token: str
    query: dict[str, Any]
    side_a: list[dict[str, Any]]
    side_b: list[dict[str, Any]]
    done: int
    total: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class VoteReceipt:
    """The outcome of a vote; `revealed` maps "A"/"B" to model names when the study allows."""

    vote_id: int
    choice: str
    revealed: dict[str, str] | None
    done: int
    total: int


def sign_in(store: Store, study_id: int, name_or_token: str) -> RaterInfo:
    """The rater with this token, else the one with this name (created on first sign-in)."""
    value = (name_or_token or "").strip()
    if not value:
        raise StudyError("Enter your name or rater token to sign in.")
    if len(value) > 200:
        raise StudyError("A rater name can be at most 200 characters.")
    with store.session() as session:
        _study(session, study_id)
        rater = session.scalar(select(Rater).where(Rater.token == value))
        rater = rater or session.scalar(select(Rater).where(Rater.name == value))
        if rater is None:
            rater = Rater(name=value, token=secrets.token_urlsafe(12))
            session.add(rater)
            try:
                session.flush()
            except IntegrityError:  # the same name signed in at the same moment elsewhere
                session.rollback()
                rater = session.scalar(select(Rater).where(Rater.name == value))
        return RaterInfo(rater.id, rater.name, rater.token)


def next_item(
    store: Store, study_id: int, rater_id: int, claim_timeout_s: float = CLAIM_TIMEOUT_SECONDS
) -> ItemView | None:
    """The rater's open item (same token and sides as before), else a newly claimed one, else
    None when nothing is left for this rater. Other raters' claims left unvoted for longer
    than `claim_timeout_s` (and never voted on) give their slot back first, so a rater who
    walks away does not hold items forever."""
    release_idle_claims(store, study_id, claim_timeout_s, keep_rater=rater_id)
    with store.session() as session:
        study = _study(session, study_id)
        assignment = _open_assignment(session, study_id, rater_id)
        if assignment is None:
            assignment = _claim(session, study, rater_id)
        if assignment is None:
            return None
        item = session.get(StudyItem, assignment.item_id)
        left, right = _sides(item, assignment)
        done, total = _progress(session, study_id, rater_id)
        return ItemView(
            token=assignment.token,
            query=dict(item.query_payload),
            side_a=[dict(entry["payload"]) for entry in left],
            side_b=[dict(entry["payload"]) for entry in right],
            done=done,
            total=total,
        )


def record_vote(store: Store, item_token: str, rater_id: int, choice: str) -> VoteReceipt:
    """Append the rater's vote on the item shown under `item_token`; locks it for them."""
    if choice not in CHOICES:
        raise StudyError(f"A vote must be one of {', '.join(CHOICES)}; got '{choice}'.")
    with store.session() as session:
        assignment = session.scalar(select(Assignment).where(Assignment.token == item_token))
        if assignment is None:
            raise ItemGoneError(
                "This item is no longer part of the study; your earlier votes are kept. "
                "Load the next item."
            )
        if assignment.rater_id != rater_id:
            raise StudyError("This item was given to another rater; load your next item.")
        if assignment.released_at is not None:
            raise ItemGoneError(
                "This item was idle too long and went back to the pool; your earlier votes "
                "are kept. Load the next item."
            )
        item = session.get(StudyItem, assignment.item_id)
        if item is None or item.withdrawn_at is not None:
            raise ItemGoneError(
                "This item was withdrawn from the study; your earlier votes are kept. "
                "Load the next item."
            )
        vote = Vote(
            kind="vote",
            study_id=assignment.study_id,
            assignment_id=assignment.id,
            item_id=assignment.item_id,
            rater_id=rater_id,
            choice=choice,
            model_left=assignment.model_left,
            model_right=assignment.model_right,
        )
        session.add(vote)
        session.flush()
        locked = session.execute(
            update(Assignment)
            .where(Assignment.id == assignment.id, Assignment.vote_id.is_(None))
            .values(vote_id=vote.id)
        ).rowcount
        if locked != 1:
            raise StudyError("You already voted on this item; its vote is locked.")
        study = session.get(PreferenceStudy, assignment.study_id)
        revealed = None
        if study.reveal_after_vote:
            revealed = {"A": assignment.model_left, "B": assignment.model_right}
        done, total = _progress(session, assignment.study_id, rater_id)
        return VoteReceipt(vote.id, choice, revealed, done, total)


def undo_last_vote(store: Store, rater_id: int, window_seconds: float = UNDO_WINDOW_SECONDS) -> str:
    """Retract the rater's latest vote if it is younger than the window (an "undo" row is
    appended; nothing is deleted). Returns the token of the re-opened item."""
    with store.session() as session:
        vote = session.scalar(
            select(Vote)
            .join(Assignment, Assignment.vote_id == Vote.id)
            .where(Vote.rater_id == rater_id, Vote.kind == "vote")
            .order_by(Vote.created_at.desc(), Vote.id.desc())
            .limit(1)
        )
        if vote is None:
            raise StudyError("There is no vote to undo.")
        if utcnow() - vote.created_at > timedelta(seconds=window_seconds):
            raise StudyError(f"Votes can only be undone within {window_seconds:g} seconds.")
        reopened = session.execute(
            update(Assignment)
            .where(Assignment.id == vote.assignment_id, Assignment.vote_id == vote.id)
            .values(vote_id=None)
        ).rowcount
        if reopened != 1:
            raise StudyError("That vote was already undone.")
        session.add(
            Vote(
                kind="undo",
                study_id=vote.study_id,
                assignment_id=vote.assignment_id,
                item_id=vote.item_id,
                rater_id=rater_id,
                model_left=vote.model_left,
                model_right=vote.model_right,
                retracts=vote.id,
            )
        )
        return session.get(Assignment, vote.assignment_id).token


def release_idle_claims(
    store: Store, study_id: int, older_than_s: float, keep_rater: int | None = None
) -> int:
    """Give back the slots of claims never voted on (not even a later-undone vote) that are
    older than `older_than_s`, except `keep_rater`'s own; returns how many were released.
    Nothing is deleted: the claim keeps its row, marked released."""
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    ever_voted = select(Vote.assignment_id).where(Vote.study_id == study_id)
    with store.session() as session:
        idle = session.scalars(
            select(Assignment).where(
                Assignment.study_id == study_id,
                Assignment.vote_id.is_(None),
                Assignment.released_at.is_(None),
                Assignment.created_at < cutoff,
                Assignment.id.not_in(ever_voted),
                Assignment.rater_id != (keep_rater if keep_rater is not None else -1),
            )
        ).all()
        released = 0
        for assignment in idle:
            done = session.execute(
                update(Assignment)
                .where(Assignment.id == assignment.id, Assignment.released_at.is_(None))
                .where(Assignment.vote_id.is_(None))
                .values(released_at=utcnow())
            ).rowcount
            if done:
                session.execute(
                    update(StudyItem)
                    .where(StudyItem.id == assignment.item_id)
                    .values(n_assigned=StudyItem.n_assigned - 1)
                )
                released += 1
        return released


def progress(store: Store, study_id: int, rater_id: int | None = None) -> dict[str, int]:
    """Votes in force: the rater's (done / items) and the study's (votes / items x raters)."""
    with store.session() as session:
        study = _study(session, study_id)
        n_items = _n_items(session, study_id)
        study_done = session.scalar(
            select(func.count())
            .select_from(Assignment)
            .where(Assignment.study_id == study_id, Assignment.vote_id.is_not(None))
        )
        result = {"study_done": study_done, "study_total": n_items * study.raters_per_item}
        if rater_id is not None:
            result["done"], result["total"] = _progress(session, study_id, rater_id)
        return result


def _study(session: Session, study_id: int) -> PreferenceStudy:
    study = session.get(PreferenceStudy, study_id)
    if study is None:
        raise StudyError(f"No study with id {study_id}.")
    return study


def _n_items(session: Session, study_id: int) -> int:
    return session.scalar(
        select(func.count())
        .select_from(StudyItem)
        .where(StudyItem.study_id == study_id, StudyItem.withdrawn_at.is_(None))
    )


def _progress(session: Session, study_id: int, rater_id: int) -> tuple[int, int]:
    done = session.scalar(
        select(func.count())
        .select_from(Assignment)
        .where(
            Assignment.study_id == study_id,
            Assignment.rater_id == rater_id,
            Assignment.vote_id.is_not(None),
        )
    )
    return done, _n_items(session, study_id)


def _open_assignment(session: Session, study_id: int, rater_id: int) -> Assignment | None:
    return session.scalar(
        select(Assignment)
        .join(StudyItem, StudyItem.id == Assignment.item_id)
        .where(
            Assignment.study_id == study_id,
            Assignment.rater_id == rater_id,
            Assignment.vote_id.is_(None),
            Assignment.released_at.is_(None),
            StudyItem.withdrawn_at.is_(None),
        )
        .order_by(Assignment.id)
        .limit(1)
    )


def _claim(session: Session, study: PreferenceStudy, rater_id: int) -> Assignment | None:
    """Take a free slot on the first item (in the study's shuffled order) the rater has not had."""
    seen = select(Assignment.item_id).where(Assignment.rater_id == rater_id)
    candidates = session.scalars(
        select(StudyItem.id)
        .where(
            StudyItem.study_id == study.id,
            StudyItem.withdrawn_at.is_(None),
            StudyItem.n_assigned < study.raters_per_item,
            StudyItem.id.not_in(seen),
        )
        .order_by(StudyItem.position)
        .limit(50)
    ).all()
    for item_id in candidates:
        claimed = session.execute(
            update(StudyItem)
            .where(StudyItem.id == item_id, StudyItem.n_assigned < study.raters_per_item)
            .values(n_assigned=StudyItem.n_assigned + 1)
        ).rowcount
        if claimed != 1:
            continue
        item = session.get(StudyItem, item_id)
        a_left = _a_on_left(study.seed, item_id, rater_id)
        assignment = Assignment(
            token=secrets.token_urlsafe(16),
            study_id=study.id,
            item_id=item_id,
            rater_id=rater_id,
            model_left=item.model_a if a_left else item.model_b,
            model_right=item.model_b if a_left else item.model_a,
        )
        session.add(assignment)
        session.flush()
        return assignment
    return None


def _a_on_left(seed: int, item_id: int, rater_id: int) -> bool:
    """The side draw for (item, rater): a fair coin, reproducible from the study seed."""
    digest = hashlib.sha256(f"{seed}:{item_id}:{rater_id}".encode()).digest()
    return digest[0] % 2 == 0


def _sides(item: StudyItem, assignment: Assignment) -> tuple[list[dict], list[dict]]:
    if assignment.model_left == item.model_a:
        return item.top_a, item.top_b
    return item.top_b, item.top_a
