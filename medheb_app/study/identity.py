"""Who a rater is: invitations, open enrolment and resume secrets.

A rater belongs to one study. The credential is an invitation the admin issued for that study
(a long link secret and a short human code, both stored only as SHA-256 digests and shown
once), or, in a study created with open enrolment, nothing: each sign-in there is a fresh rater.
A display name is only a label; typing someone else's name never resumes them. Every sign-in
returns a resume secret (stored hashed, rotated at each sign-in with the invitation) that the
web page keeps in an HTTP-only cookie so a rater comes back to their own progress.

Revoking an invitation stops its rater at once (no further items, no further votes, no resume)
while their past votes stay in the log.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from medheb_app.store.db import Store, utcnow
from medheb_app.store.study_tables import (
    Assignment,
    PreferenceStudy,
    Rater,
    StudyInvitation,
    StudyItem,
)
from medheb_app.study.errors import StudyError

CODE_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I/L: easy to read out and type
CODE_LENGTH = 8
MAX_INVITATIONS = 500
MAX_NAME_CHARS = 80
OPEN_SIGN_INS_PER_ADDRESS_HOUR = 6  # open-enrolment sign-ins per client address per study
INVITE_PATH = "/rate?invite="
REVOKED_MESSAGE = (
    "Your invitation to this study was revoked, so you cannot rate any more; your earlier "
    "votes are kept. Contact the study's organiser if this is a mistake."
)


@dataclass(frozen=True)
class Invitation:
    """A new invitation, the only time its secret and code exist in clear: hand them over."""

    id: int
    secret: str = field(repr=False)
    code: str = field(repr=False)
    label: str = ""

    @property
    def link(self) -> str:
        """The path to append to the app's address: /rate?invite=<secret>."""
        return f"{INVITE_PATH}{self.secret}"


@dataclass(frozen=True)
class InvitationInfo:
    """An invitation as the admin lists it: no secret, no code."""

    id: int
    study_id: int
    label: str
    created_at: datetime
    revoked: bool
    used: bool
    rater_id: int | None
    display_name: str


@dataclass(frozen=True)
class RaterSession:
    """A signed-in rater. `resume_secret` goes into an HTTP-only cookie, never onto the page."""

    rater_id: int
    study_id: int
    display_name: str
    resume_secret: str = field(repr=False)


def digest(value: str) -> str:
    """SHA-256 hex digest: how every credential is stored."""
    return hashlib.sha256(value.encode()).hexdigest()


def normalise_code(text: str) -> str:
    """A typed code as stored: upper case, without spaces or dashes."""
    return "".join(ch for ch in text.upper() if ch not in " -\t")


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def clean_display_name(name: str | None, fallback: str) -> str:
    """A display name, trimmed; `fallback` when empty; a StudyError when too long."""
    value = " ".join((name or "").split())
    if len(value) > MAX_NAME_CHARS:
        raise StudyError(f"A display name can be at most {MAX_NAME_CHARS} characters.")
    return value or fallback


def create_invitations(store: Store, study_id: int, n: int, label: str = "") -> list[Invitation]:
    """Issue `n` invitations to a study; their secrets and codes are returned once, only here."""
    if not 1 <= n <= MAX_INVITATIONS:
        raise StudyError(f"Issue between 1 and {MAX_INVITATIONS} invitations at a time; got {n}.")
    label = " ".join(label.split())
    if len(label) > 200:
        raise StudyError("An invitation label can be at most 200 characters.")
    issued = []
    with store.session() as session:
        _study(session, study_id)
        for _ in range(n):
            secret = secrets.token_urlsafe(24)
            code = new_code()
            while session.scalar(
                select(StudyInvitation.id).where(StudyInvitation.code_hash == digest(code))
            ):
                code = new_code()
            row = StudyInvitation(
                study_id=study_id,
                secret_hash=digest(secret),
                code_hash=digest(code),
                label=label,
            )
            session.add(row)
            session.flush()
            issued.append(Invitation(row.id, secret, code, label))
    return issued


def list_invitations(store: Store, study_id: int) -> list[InvitationInfo]:
    """A study's invitations, oldest first, with whether each was used or revoked."""
    with store.session() as session:
        _study(session, study_id)
        rows = session.execute(
            select(StudyInvitation, Rater.display_name)
            .outerjoin(Rater, Rater.id == StudyInvitation.rater_id)
            .where(StudyInvitation.study_id == study_id)
            .order_by(StudyInvitation.id)
        ).all()
        return [_info(row, name) for row, name in rows]


def revoke_invitation(store: Store, invitation_id: int) -> InvitationInfo:
    """Revoke an invitation: its rater can no longer sign in, resume, get items or vote; their
    open claims go back to the pool; their votes so far are kept."""
    with store.session() as session:
        row = session.get(StudyInvitation, invitation_id)
        if row is None:
            raise StudyError(f"No invitation with id {invitation_id}.")
        if row.revoked_at is None:
            row.revoked_at = utcnow()
            if row.rater_id is not None:
                _release_open_claims(session, row.rater_id)
        name = session.get(Rater, row.rater_id).display_name if row.rater_id else ""
        return _info(row, name)


def sign_in_with_invitation(
    store: Store, secret_or_code: str, display_name: str = ""
) -> RaterSession:
    """Sign in with an invitation's link secret or its short code. The first use creates the
    invitation's rater; later uses resume the same rater (the display name given then is
    ignored: the invitation, not the name, says who this is)."""
    value = (secret_or_code or "").strip()
    if not value:
        raise StudyError("Enter the invitation code you were given.")
    if len(value) > 200:
        raise StudyError("That is not an invitation code.")
    with store.session() as session:
        row = session.scalar(
            select(StudyInvitation).where(
                (StudyInvitation.secret_hash == digest(value))
                | (StudyInvitation.code_hash == digest(normalise_code(value)))
            )
        )
        if row is None:
            raise StudyError("That invitation code is not valid; check it and try again.")
        if row.revoked_at is not None:
            raise StudyError(REVOKED_MESSAGE)
        study = _study(session, row.study_id)
        if study.closed_at is not None:
            raise StudyError("This study is closed; thank you for your interest.")
        if row.rater_id is None:
            name = clean_display_name(display_name, f"Rater {row.id}")
            rater = _new_rater(session, study.id, name, invitation_id=row.id)
            bound = session.execute(
                update(StudyInvitation)
                .where(StudyInvitation.id == row.id, StudyInvitation.rater_id.is_(None))
                .values(rater_id=rater.id, used_at=utcnow())
            ).rowcount
            if bound != 1:  # the same invitation was used at the same moment in another tab
                session.rollback()
                return sign_in_with_invitation(store, secret_or_code, display_name)
        else:
            rater = session.get(Rater, row.rater_id)
        secret = secrets.token_urlsafe(24)
        rater.resume_hash = digest(secret)
        return RaterSession(rater.id, study.id, rater.display_name, secret)


def sign_in_open(
    store: Store,
    study_id: int,
    display_name: str,
    address: str | None = None,
    per_hour: int = OPEN_SIGN_INS_PER_ADDRESS_HOUR,
) -> RaterSession:
    """Join a study created with open enrolment: always a fresh rater, whatever the name.

    `address` (the client's, as the web layer sees it): at most `per_hour` sign-ins to this
    study from one address in any hour, so one client cannot mint throwaway raters by the
    dozen (issue 19 item 5); only a digest of (study, address) is stored."""
    with store.session() as session:
        study = _study(session, study_id)
        if not study.open_enrolment or study.closed_at is not None:
            raise StudyError(
                "This study is by invitation only: enter the invitation code you were given."
            )
        name = clean_display_name(display_name, "")
        if not name:
            raise StudyError("Enter a display name (any label you like) to start.")
        key = digest(f"enrol:{study.id}:{address}") if address else None
        if key is not None:
            _lock_study(session, study.id)  # concurrent sign-ins count one after another
            recent = session.scalar(
                select(func.count())
                .select_from(Rater)
                .where(
                    Rater.enrol_key == key,
                    Rater.created_at > utcnow() - timedelta(hours=1),
                )
            )
            if recent >= per_hour:
                raise StudyError(
                    f"{recent} people have already joined this study from your network in the "
                    "last hour, the most allowed; try again later, or ask the study's organiser "
                    "for an invitation."
                )
        rater = _new_rater(session, study.id, name, invitation_id=None)
        rater.enrol_key = key
        secret = secrets.token_urlsafe(24)
        rater.resume_hash = digest(secret)
        return RaterSession(rater.id, study.id, rater.display_name, secret)


def resume(store: Store, resume_secret: str | None) -> RaterSession | None:
    """The rater a resume secret (from the cookie) belongs to, or None when it is unknown,
    revoked, or its study is closed."""
    with store.session() as session:
        rater = _rater_of(session, resume_secret)
        if rater is None:
            return None
        study = session.get(PreferenceStudy, rater.study_id)
        if study is None or study.closed_at is not None or _revoked(session, rater):
            return None
        return RaterSession(rater.id, study.id, rater.display_name, resume_secret)


CLOSED_MESSAGE = (
    "This study is closed, so no more items are served; your votes are kept. Thank you for "
    "taking part."
)


def signed_out_reason(store: Store, resume_secret: str | None) -> str | None:
    """Why a cookie's resume secret no longer signs its rater in, in words for the rater:
    the invitation was revoked, or the study was closed (None for anything else: an unknown
    or replaced secret says nothing about anyone)."""
    with store.session() as session:
        rater = _rater_of(session, resume_secret)
        if rater is None:
            return None
        if _revoked(session, rater):
            return REVOKED_MESSAGE
        study = session.get(PreferenceStudy, rater.study_id)
        if study is not None and study.closed_at is not None:
            return CLOSED_MESSAGE
        return None


def _rater_of(session: Session, resume_secret: str | None) -> Rater | None:
    """The rater of a study whose resume secret this is (None for none, or an absurd one)."""
    if not resume_secret or len(resume_secret) > 200:
        return None
    rater = session.scalar(select(Rater).where(Rater.resume_hash == digest(resume_secret)))
    return rater if rater is not None and rater.study_id is not None else None


def active_rater(session: Session, study_id: int, rater_id: int) -> Rater:
    """The rater, checked to belong to `study_id` and not revoked; a StudyError otherwise."""
    rater = session.get(Rater, rater_id)
    if rater is None or rater.study_id != study_id:
        raise StudyError("You are not signed in to this study; sign in again.")
    if _revoked(session, rater):
        raise StudyError(REVOKED_MESSAGE)
    return rater


def _revoked(session: Session, rater: Rater) -> bool:
    if rater.invitation_id is None:
        return False
    invitation = session.get(StudyInvitation, rater.invitation_id)
    return invitation is not None and invitation.revoked_at is not None


def _new_rater(session: Session, study_id: int, name: str, invitation_id: int | None) -> Rater:
    rater = Rater(
        name=f"s{study_id}-{secrets.token_hex(8)}",
        token=secrets.token_hex(16),
        study_id=study_id,
        display_name=name,
        invitation_id=invitation_id,
    )
    session.add(rater)
    session.flush()
    return rater


def _release_open_claims(session: Session, rater_id: int) -> None:
    open_claims = session.scalars(
        select(Assignment).where(
            Assignment.rater_id == rater_id,
            Assignment.vote_id.is_(None),
            Assignment.released_at.is_(None),
        )
    ).all()
    for claim in open_claims:
        claim.released_at = utcnow()
        claim.released_reason = "revoked"
        session.execute(
            update(StudyItem)
            .where(StudyItem.id == claim.item_id)
            .values(n_assigned=StudyItem.n_assigned - 1)
        )


def _lock_study(session: Session, study_id: int) -> None:
    """Lock the study row until the transaction ends (a no-op UPDATE, portable to SQLite)."""
    session.execute(
        update(PreferenceStudy)
        .where(PreferenceStudy.id == study_id)
        .values(public_title=PreferenceStudy.public_title)
    )


def _study(session: Session, study_id: int) -> PreferenceStudy:
    study = session.get(PreferenceStudy, study_id)
    if study is None:
        raise StudyError(f"No study with id {study_id}.")
    return study


def _info(row: StudyInvitation, display_name: str | None) -> InvitationInfo:
    return InvitationInfo(
        id=row.id,
        study_id=row.study_id,
        label=row.label,
        created_at=row.created_at,
        revoked=row.revoked_at is not None,
        used=row.rater_id is not None,
        rater_id=row.rater_id,
        display_name=display_name or "",
    )
