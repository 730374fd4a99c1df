"""The rater's flow once signed in (see `identity` for who a rater is): get the next blinded
item, vote, reveal the models, undo.

`record_vote` is the only function that records a vote (FastChat's single vote writer); `reveal`
and `undo_last_vote` append their own events to the same append-only log. Blinding
lives here on the server: the left/right order is a CSPRNG draw (`secrets`) made when a rater
claims an item and stored on the assignment, the item a rater gets next is drawn the same way
among the free ones (so gold items fall at unpredictable positions), and the `ItemView`
handed to the UI carries only an opaque random token, the query and the two top-3 lists,
never model names, gold ids, the task, the stratum or whether the item is a quality-control
(gold) item. Model names come only from `reveal`, after a vote and only once the item has all
its `raters_per_item` votes (else a rater, or a second identity of theirs, meeting the same item
later would know its sides from an earlier reveal), and revealing makes that vote final: it can
no longer be undone, nor can any other vote on a named item.

Claims: a rater holds at most one open claim per study; an unvoted claim idle for the study's
`claim_timeout_s` (default 10 minutes) gives its slot back. When no free slot is left, a rater
is handed an item someone else holds but has not voted on (held by a rater who never voted in
the study, or idle for a minute; never-voters first, then the longest idle), and the first vote
wins: the item row is locked while votes in
force are counted, so an item never gets more than `raters_per_item` votes, and the loser is
told to load the next item (their claim is released; nothing they voted is silently dropped).
Throwaway sign-ins therefore cannot drain a study.

Concurrency: slots are claimed with a conditional UPDATE (n_assigned < raters_per_item), a vote
takes effect with a conditional UPDATE (vote_id IS NULL) under a lock of the item row (SELECT
... FOR UPDATE on PostgreSQL; SQLite serialises writers), so raters or browser tabs racing
cannot over-fill an item or vote twice.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.orm import Session, aliased

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
from medheb_app.study.identity import active_rater

CHOICES = ("A", "B", "tie", "both_poor", "cannot_judge")
# why an item cannot be judged (Flamingo-CXR's per-case image-quality gate, and more)
CANNOT_JUDGE_REASONS = {
    "image_quality": "image quality too poor",
    "wrong_anatomy": "wrong anatomy or view",
    "identical": "both lists are identical",
    "other": "other (say why in the comment)",
}
MAX_COMMENT_CHARS = 1000
UNDO_WINDOW_SECONDS = 30.0
DEFAULT_CLAIM_TIMEOUT_SECONDS = 10 * 60.0
SHARE_AFTER_SECONDS = 60.0  # a rater who has voted keeps a claim to themselves this long
# a rater who never voted in the study loses an unvoted claim after this long when another
# rater finds nothing free (throwaway sign-ins cannot hold items; issue 19 item 5)
FIRST_VOTE_TIMEOUT_SECONDS = 120.0
CLAIM_DRAW_POOL = 200  # a new claim is drawn uniformly among this many free items
_CSPRNG = random.SystemRandom()  # os.urandom underneath: no seed, no state a rater can learn


@dataclass(frozen=True)
class ItemView:
    """What a rater is shown: nothing in it names a model, the gold, the task or the stratum,
    and a quality-control item looks exactly like any other."""

    token: str
    query: dict[str, Any]
    side_a: list[dict[str, Any]]
    side_b: list[dict[str, Any]]
    done: int
    total: int
    instruction: str = ""  # what "better" means for the task's kind (names no task)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class VoteReceipt:
    """The outcome of a vote. `can_reveal`: the study lets the rater see the model names now
    (through `reveal`, which makes the vote final); `named_later`: it reveals names, but only
    once every rater of this item has voted, which has not happened yet."""

    vote_id: int
    choice: str
    can_reveal: bool
    done: int
    total: int
    named_later: bool = False


def next_item(
    store: Store, study_id: int, rater_id: int, claim_timeout_s: float | None = None
) -> ItemView | None:
    """The rater's open item (same token and sides as before), else a newly claimed one, else
    None when nothing is left for this rater right now (`progress` tells whether the study is
    complete or its remaining items are being rated by others). Idle claims of other raters
    (older than `claim_timeout_s`, by default the study's) give their slot back first."""
    with store.session() as session:
        study = _open_study(session, study_id)
        active_rater(session, study_id, rater_id)
        timeout = study.claim_timeout_s if claim_timeout_s is None else claim_timeout_s
    release_idle_claims(store, study_id, timeout, keep_rater=rater_id)
    with store.session() as session:
        study = _study(session, study_id)
        _lock(session, Rater, rater_id)  # two tabs of one rater cannot claim two items
        assignment = _open_assignment(session, study_id, rater_id)
        if assignment is None and _capped(session, study, rater_id):
            return None  # the study's votes-per-rater cap is reached
        if assignment is None:
            assignment = _claim(session, study, rater_id)
        if assignment is None and _release_idle(
            session, study_id, min(timeout, FIRST_VOTE_TIMEOUT_SECONDS), rater_id, True
        ):  # throwaway sign-ins that never voted give their items back when someone needs one
            assignment = _claim(session, study, rater_id)
        if assignment is None:
            assignment = _share(session, study, rater_id)
        if assignment is None:
            return None
        assignment.served_at = utcnow()
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
            instruction=item.instruction or "",
        )


def record_vote(
    store: Store,
    item_token: str,
    rater_id: int,
    choice: str,
    *,
    reason: str | None = None,
    comment: str = "",
    significant: bool | None = None,
) -> VoteReceipt:
    """Append the rater's vote on the item shown under `item_token`; locks it for them.

    `choice` "cannot_judge" needs a `reason` (a key of CANNOT_JUDGE_REASONS; "other" also a
    comment); such a vote completes the rater's item but is left out of the preference
    analysis and counted. `comment` (free text) and `significant` (the difference between the
    lists matters clinically) are optional on any vote.

    When another rater completed a shared item first, this vote is not recorded: the rater's
    claim is released and an ItemGoneError tells them to load the next item."""
    if choice not in CHOICES:
        raise StudyError(f"A vote must be one of {', '.join(CHOICES)}; got '{choice}'.")
    comment = " ".join(str(comment or "").split())
    if len(comment) > MAX_COMMENT_CHARS:
        raise StudyError(f"A comment can be at most {MAX_COMMENT_CHARS} characters.")
    if choice == "cannot_judge":
        if reason not in CANNOT_JUDGE_REASONS:
            raise StudyError(
                "Say why this item cannot be judged: "
                + ", ".join(CANNOT_JUDGE_REASONS.values())
                + "."
            )
        if reason == "other" and not comment:
            raise StudyError("Add a short comment saying why this item cannot be judged.")
    else:
        reason = None
    lost = False
    with store.session() as session:
        assignment = _rater_assignment(session, item_token, rater_id)
        study = _open_study(session, assignment.study_id)
        active_rater(session, assignment.study_id, rater_id)
        if assignment.released_at is not None:
            raise ItemGoneError(_released_message(assignment.released_reason))
        item = session.get(StudyItem, assignment.item_id)
        if item is None or item.withdrawn_at is not None:
            raise ItemGoneError(
                "This item was withdrawn from the study; your earlier votes are kept. "
                "Load the next item."
            )
        if assignment.vote_id is not None:
            raise StudyError("You already voted on this item; its vote is locked.")
        _lock(session, StudyItem, item.id)
        in_force = _votes_in_force(session, item.id)
        if in_force >= study.raters_per_item:
            _release(session, assignment, "taken")
            lost = True
        else:
            vote = _event(
                "vote",
                assignment,
                rater_id,
                choice=choice,
                reason=reason,
                comment=comment,
                significant=None if significant is None else bool(significant),
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
            if in_force + 1 >= study.raters_per_item:
                _release_others(session, item.id, assignment.id)
            done, total = _progress(session, assignment.study_id, rater_id)
            complete = in_force + 1 >= study.raters_per_item
            reveals = bool(study.reveal_after_vote)
            receipt = VoteReceipt(
                vote.id, choice, reveals and complete, done, total, reveals and not complete
            )
    if lost:
        raise ItemGoneError(_released_message("taken"))
    return receipt


def reveal(store: Store, item_token: str, rater_id: int) -> dict[str, str]:
    """The models behind sides A and B of an item the rater has voted on (when the study
    allows it). Appends a "reveal" event; from then on that vote is final (no undo)."""
    with store.session() as session:
        assignment = _rater_assignment(session, item_token, rater_id)
        study = _study(session, assignment.study_id)
        active_rater(session, assignment.study_id, rater_id)
        if not study.reveal_after_vote:
            raise StudyError("This study keeps the systems anonymous, even after a vote.")
        if assignment.vote_id is None:
            raise StudyError("Vote on this item first; the systems are shown only after a vote.")
        if _votes_in_force(session, assignment.item_id) < study.raters_per_item:
            raise StudyError(NAMED_WHEN_COMPLETE)
        session.execute(
            update(Assignment)
            .where(Assignment.id == assignment.id, Assignment.vote_id.is_not(None))
            .where(Assignment.revealed_at.is_(None))
            .values(revealed_at=utcnow())
        )
        session.refresh(assignment)
        if assignment.vote_id is None:  # undone at the same moment in another tab
            raise StudyError("Vote on this item first; the systems are shown only after a vote.")
        session.add(_event("reveal", assignment, rater_id, retracts=assignment.vote_id))
        item = session.get(StudyItem, assignment.item_id)
        if item.is_gold:  # a quality check: named like any item, by its stored cover pair
            cover = assignment.cover or {}
            models = list(study.models)
            return {"A": cover.get("A", models[0]), "B": cover.get("B", models[-1])}
        return {"A": assignment.model_left, "B": assignment.model_right}


NAMED_WHEN_COMPLETE = (
    "The systems are named once every rater of this item has voted, so that no later rater "
    "can learn them from an earlier one."
)


def _in_force_per_item() -> Any:
    """A correlated count of an item's votes in force, for queries over StudyItem."""
    voted = aliased(Assignment)
    return (
        select(func.count())
        .select_from(voted)
        .where(voted.item_id == StudyItem.id, voted.vote_id.is_not(None))
        .correlate(StudyItem)
        .scalar_subquery()
    )


def _votes_in_force(session: Session, item_id: int) -> int:
    return session.scalar(
        select(func.count())
        .select_from(Assignment)
        .where(Assignment.item_id == item_id, Assignment.vote_id.is_not(None))
    )


def _item_revealed(session: Session, item_id: int) -> bool:
    """Whether any rater was shown the names of this item (undoing a vote would re-open it to
    a rater who could learn them from that one)."""
    return (
        session.scalar(
            select(func.count())
            .select_from(Assignment)
            .where(Assignment.item_id == item_id, Assignment.revealed_at.is_not(None))
        )
        > 0
    )


def undo_last_vote(
    store: Store, study_id: int, rater_id: int, window_seconds: float = UNDO_WINDOW_SECONDS
) -> str:
    """Retract the rater's latest vote in this study if it is younger than the window and the
    models were not revealed for it (an "undo" row is appended; nothing is deleted). Returns
    the token of the re-opened item."""
    with store.session() as session:
        _study(session, study_id)
        active_rater(session, study_id, rater_id)
        vote = session.scalar(
            select(Vote)
            .join(Assignment, Assignment.vote_id == Vote.id)
            .where(Vote.rater_id == rater_id, Vote.study_id == study_id, Vote.kind == "vote")
            .order_by(Vote.created_at.desc(), Vote.id.desc())
            .limit(1)
        )
        if vote is None:
            raise StudyError("There is no vote to undo.")
        if utcnow() - vote.created_at > timedelta(seconds=window_seconds):
            raise StudyError(f"Votes can only be undone within {window_seconds:g} seconds.")
        assignment = session.get(Assignment, vote.assignment_id)
        if assignment.revealed_at is not None:
            raise StudyError(
                "You have seen which systems these were, so this vote is final and cannot be "
                "undone."
            )
        if _item_revealed(session, assignment.item_id):
            raise StudyError(
                "The systems of this item were already named to a rater, so its votes are "
                "final and cannot be undone."
            )
        reopened = session.execute(
            update(Assignment)
            .where(Assignment.id == vote.assignment_id, Assignment.vote_id == vote.id)
            .where(Assignment.revealed_at.is_(None))
            .values(vote_id=None)
        ).rowcount
        if reopened != 1:
            raise StudyError("That vote was already undone or is final.")
        session.add(_event("undo", assignment, rater_id, retracts=vote.id))
        return assignment.token


def release_idle_claims(
    store: Store, study_id: int, older_than_s: float, keep_rater: int | None = None
) -> int:
    """Give back the slots of claims never voted on (not even a later-undone vote) that were
    last served more than `older_than_s` ago, except `keep_rater`'s own; returns how many were
    released. Nothing is deleted: the claim keeps its row, marked released."""
    with store.session() as session:
        return _release_idle(session, study_id, older_than_s, keep_rater)


def _release_idle(
    session: Session,
    study_id: int,
    older_than_s: float,
    keep_rater: int | None,
    never_voters_only: bool = False,
) -> int:
    """`release_idle_claims` inside a transaction; with `never_voters_only`, only the claims
    of raters who never voted in the study (the first-vote timeout)."""
    cutoff = utcnow() - timedelta(seconds=older_than_s)
    ever_voted = select(Vote.assignment_id).where(Vote.study_id == study_id, Vote.kind == "vote")
    last_seen = func.coalesce(Assignment.served_at, Assignment.created_at)
    query = select(Assignment).where(
        Assignment.study_id == study_id,
        Assignment.vote_id.is_(None),
        Assignment.released_at.is_(None),
        last_seen < cutoff,
        Assignment.id.not_in(ever_voted),
        Assignment.rater_id != (keep_rater if keep_rater is not None else -1),
    )
    if never_voters_only:
        voters = select(Vote.rater_id).where(Vote.study_id == study_id, Vote.kind == "vote")
        query = query.where(Assignment.rater_id.not_in(voters))
    idle = session.scalars(query).all()
    return sum(_release(session, assignment, "idle") for assignment in idle)


def progress(store: Store, study_id: int, rater_id: int | None = None) -> dict[str, Any]:
    """Votes in force in the study (study_done of study_total = items x raters per item) and,
    for a rater, `_outlook`: done of total (theirs), held_by_others, expires_at,
    study_complete and finished."""
    with store.session() as session:
        study = _study(session, study_id)
        n_items = _n_items(session, study_id)
        study_done = session.scalar(
            select(func.count())
            .select_from(Assignment)
            .join(StudyItem, StudyItem.id == Assignment.item_id)
            .where(
                Assignment.study_id == study_id,
                Assignment.vote_id.is_not(None),
                StudyItem.withdrawn_at.is_(None),
            )
        )
        result: dict[str, Any] = {
            "study_done": study_done,
            "study_total": n_items * study.raters_per_item,
        }
        if rater_id is not None:
            result.update(_outlook(session, study, rater_id))
        return result


def _event(kind: str, assignment: Assignment, rater_id: int, **values: Any) -> Vote:
    """A row of the vote log about `assignment` ("vote", "reveal" or "undo"): the study, item
    and the two sides as the rater was shown them, so that every event can be read alone."""
    return Vote(
        kind=kind,
        study_id=assignment.study_id,
        assignment_id=assignment.id,
        item_id=assignment.item_id,
        rater_id=rater_id,
        model_left=assignment.model_left,
        model_right=assignment.model_right,
        **values,
    )


def _study(session: Session, study_id: int) -> PreferenceStudy:
    study = session.get(PreferenceStudy, study_id)
    if study is None:
        raise StudyError(f"No study with id {study_id}.")
    return study


def _open_study(session: Session, study_id: int) -> PreferenceStudy:
    study = _study(session, study_id)
    if study.closed_at is not None:
        raise StudyError("This study is closed; thank you for taking part.")
    return study


def _rater_assignment(session: Session, item_token: str, rater_id: int) -> Assignment:
    assignment = session.scalar(select(Assignment).where(Assignment.token == item_token))
    if assignment is None:
        raise ItemGoneError(
            "This item is no longer part of the study; your earlier votes are kept. "
            "Load the next item."
        )
    if assignment.rater_id != rater_id:
        raise StudyError("This item was given to another rater; load your next item.")
    return assignment


def _released_message(reason: str | None) -> str:
    if reason == "taken":
        return (
            "Another rater completed this item first, so this vote was not counted; your "
            "earlier votes are kept. Load the next item."
        )
    if reason == "revoked":
        return "Your invitation to this study was revoked; your earlier votes are kept."
    return (
        "This item was idle too long and went back to the pool; your earlier votes are kept. "
        "Load the next item."
    )


def _lock(session: Session, table: type[Rater] | type[StudyItem], row_id: int) -> None:
    """Lock one row until the transaction ends, portably: a no-op UPDATE takes the row lock on
    PostgreSQL and the database write lock on SQLite, so what is read next is current. It
    rewrites a non-key column, so rows referencing this one are not blocked."""
    column = Rater.display_name if table is Rater else StudyItem.n_assigned
    session.execute(update(table).where(table.id == row_id).values({column: column}))


def _release(session: Session, assignment: Assignment, reason: str) -> bool:
    """Release an unvoted claim (conditionally: a racing vote wins); True when released."""
    done = session.execute(
        update(Assignment)
        .where(Assignment.id == assignment.id, Assignment.released_at.is_(None))
        .where(Assignment.vote_id.is_(None))
        .values(released_at=utcnow(), released_reason=reason)
    ).rowcount
    if done:
        session.execute(
            update(StudyItem)
            .where(StudyItem.id == assignment.item_id)
            .values(n_assigned=StudyItem.n_assigned - 1)
        )
    return bool(done)


def _release_others(session: Session, item_id: int, keep_assignment: int) -> None:
    """The item is complete: other raters' unvoted claims on it go, so they move on."""
    others = session.scalars(
        select(Assignment).where(
            Assignment.item_id == item_id,
            Assignment.id != keep_assignment,
            Assignment.vote_id.is_(None),
            Assignment.released_at.is_(None),
        )
    ).all()
    for other in others:
        _release(session, other, "taken")


def _n_items(session: Session, study_id: int) -> int:
    return session.scalar(
        select(func.count())
        .select_from(StudyItem)
        .where(StudyItem.study_id == study_id, StudyItem.withdrawn_at.is_(None))
    )


def _progress(session: Session, study_id: int, rater_id: int) -> tuple[int, int]:
    """(votes in force by the rater, the items that are theirs: those votes plus every item
    they may still rate). An item another rater completed is not theirs, so a rater who
    rated all they could stands at 100%, not at their share of the study."""
    outlook = _outlook(session, _study(session, study_id), rater_id)
    return outlook["done"], outlook["total"]


def _capped(session: Session, study: PreferenceStudy, rater_id: int) -> bool:
    """True when the rater has as many votes in force as the study's cap allows."""
    cap = int(study.max_votes_per_rater or 0)
    if cap <= 0:
        return False
    done = session.scalar(
        select(func.count())
        .select_from(Assignment)
        .where(
            Assignment.study_id == study.id,
            Assignment.rater_id == rater_id,
            Assignment.vote_id.is_not(None),
        )
    )
    return done >= cap


def _outlook(session: Session, study: PreferenceStudy, rater_id: int) -> dict[str, Any]:
    """Where a rater stands: done, total (theirs), `held_by_others` (items they may still
    rate that others hold now), `expires_at` (naive UTC: the latest moment the first of those
    claims runs out unvoted), `study_complete` (every item has its raters' votes) and
    `finished` (nothing is left that this rater may rate)."""
    in_force = _in_force_per_item()
    live = (StudyItem.study_id == study.id, StudyItem.withdrawn_at.is_(None))
    mine = {
        item_id: (vote_id, released_at)
        for item_id, vote_id, released_at in session.execute(
            select(Assignment.item_id, Assignment.vote_id, Assignment.released_at)
            .join(StudyItem, StudyItem.id == Assignment.item_id)
            .where(Assignment.rater_id == rater_id, *live)
        ).all()
    }
    done = sum(vote_id is not None for vote_id, _ in mine.values())
    incomplete = session.scalars(
        select(StudyItem.id).where(*live, in_force < study.raters_per_item)
    ).all()
    own_open = [i for i in incomplete if i in mine and mine[i] == (None, None)]
    others = [i for i in incomplete if i not in mine]
    expires_at = None
    if others:
        voters = set(
            session.scalars(
                select(Vote.rater_id).where(Vote.study_id == study.id, Vote.kind == "vote")
            ).all()
        )
        holds = session.execute(
            select(
                Assignment.rater_id,
                func.coalesce(Assignment.served_at, Assignment.created_at),
            ).where(
                Assignment.item_id.in_(others),
                Assignment.vote_id.is_(None),
                Assignment.released_at.is_(None),
            )
        ).all()
        timeout = float(study.claim_timeout_s or DEFAULT_CLAIM_TIMEOUT_SECONDS)
        ends = [
            seen
            + timedelta(
                seconds=timeout if holder in voters else min(timeout, FIRST_VOTE_TIMEOUT_SECONDS)
            )
            for holder, seen in holds
        ]
        expires_at = min(ends, default=None)
    capped = not own_open and _capped(session, study, rater_id)
    if capped:
        others = []
    remaining = len(own_open) + len(others)
    return {
        "capped": capped,
        "done": done,
        "total": done + remaining,
        "held_by_others": len(others),
        "expires_at": expires_at,
        "study_complete": not incomplete,
        "finished": remaining == 0,
    }


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
    """Take a free slot on an item the rater has not had, drawn by the server's CSPRNG among
    the free items (so neither the order a rater meets items in nor where the gold items fall
    can be predicted from ids, positions or other raters' orders)."""
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
        .limit(CLAIM_DRAW_POOL)
    ).all()
    _CSPRNG.shuffle(candidates)
    for item_id in candidates:
        claimed = session.execute(
            update(StudyItem)
            .where(StudyItem.id == item_id, StudyItem.n_assigned < study.raters_per_item)
            .values(n_assigned=StudyItem.n_assigned + 1)
        ).rowcount
        if claimed == 1:
            return _assign(session, study, session.get(StudyItem, item_id), rater_id)
    return None


def _share(session: Session, study: PreferenceStudy, rater_id: int) -> Assignment | None:
    """No free slot: join an item another rater holds without having voted on it, so idle or
    throwaway claims cannot lock a rater out. A claim is shared when its holder never voted
    in the study (a throwaway sign-in) or it was idle for SHARE_AFTER_SECONDS; never-voters
    first, then the longest idle; an item is shared by at most two open claims per slot."""
    seen = select(Assignment.item_id).where(Assignment.rater_id == rater_id)
    quiet_since = utcnow() - timedelta(seconds=SHARE_AFTER_SECONDS)
    last_seen = func.coalesce(Assignment.served_at, Assignment.created_at)
    voters = select(Vote.rater_id).where(Vote.study_id == study.id, Vote.kind == "vote")
    in_force = _in_force_per_item()
    rows = session.execute(
        select(StudyItem.id, Assignment.rater_id.in_(voters), Assignment.served_at)
        .join(Assignment, Assignment.item_id == StudyItem.id)
        .where(
            StudyItem.study_id == study.id,
            StudyItem.withdrawn_at.is_(None),
            StudyItem.id.not_in(seen),
            or_(
                StudyItem.n_assigned < 2 * study.raters_per_item,
                Assignment.rater_id.not_in(voters),  # throwaways never fill an item up
            ),
            Assignment.vote_id.is_(None),
            Assignment.released_at.is_(None),
            Assignment.rater_id != rater_id,
            in_force < study.raters_per_item,
            or_(Assignment.rater_id.not_in(voters), last_seen < quiet_since),
        )
    ).all()
    if not rows:
        return None
    oldest = datetime.max
    item_id = min(rows, key=lambda row: (bool(row[1]), row[2] or oldest, row[0]))[0]
    session.execute(
        update(StudyItem).where(StudyItem.id == item_id).values(n_assigned=StudyItem.n_assigned + 1)
    )
    return _assign(session, study, session.get(StudyItem, item_id), rater_id)


def _assign(session: Session, study: PreferenceStudy, item: StudyItem, rater_id: int) -> Assignment:
    """A new claim; which list goes left is a CSPRNG draw stored with it (never derived from
    the seed, the ids or anything else a rater can see), and a gold item gets a cover pair of
    the study's models, drawn the same way, that its reveal names (so a reveal never says
    which items were quality checks)."""
    a_left = secrets.randbelow(2) == 0
    cover = None
    if item.is_gold:
        models = list(study.models)
        first, second = _CSPRNG.sample(models, 2)
        cover = {"A": first, "B": second}
    assignment = Assignment(
        token=secrets.token_urlsafe(16),
        study_id=study.id,
        item_id=item.id,
        rater_id=rater_id,
        model_left=item.model_a if a_left else item.model_b,
        model_right=item.model_b if a_left else item.model_a,
        cover=cover,
    )
    session.add(assignment)
    session.flush()
    return assignment


def _sides(item: StudyItem, assignment: Assignment) -> tuple[list[dict], list[dict]]:
    if assignment.model_left == item.model_a:
        return item.top_a, item.top_b
    return item.top_b, item.top_a
