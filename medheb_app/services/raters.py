"""The rater-facing side of reader studies for the /rate page and its sign-in routes
(`services.raters`): sign-in by invitation or open enrolment into a cookie claim, a claim back
into a rater, and the rater's items and votes, bound to the store; each method delegates to
medheb_app.study, so the web layer never touches the study tables. A display name is only
ever a label: it never selects an existing rater."""

from __future__ import annotations

from typing import Any

from medheb_app.access.auth import RaterClaim
from medheb_app.store.db import Store
from medheb_app.study import (
    ItemGoneError,
    PublicStudy,
    StudyError,
    find_study,
    list_open_studies,
    resume,
    sign_in_open,
    sign_in_with_invitation,
)
from medheb_app.study.identity import signed_out_reason
from medheb_app.study.instructions import INSTRUCTIONS
from medheb_app.study.session import (
    CANNOT_JUDGE_REASONS,
    UNDO_WINDOW_SECONDS,
    VoteReceipt,
    next_item,
    progress,
    record_vote,
    reveal,
    undo_last_vote,
)

__all__ = [
    "CANNOT_JUDGE_REASONS",
    "INSTRUCTIONS",
    "UNDO_WINDOW_SECONDS",
    "ItemGoneError",
    "Raters",
    "SignInError",
    "StudyError",
]


class SignInError(ValueError):
    """A sign-in the rater can fix (unknown code, closed study); the message is for them."""


def _claim(session: Any) -> RaterClaim:
    return RaterClaim(int(session.study_id), int(session.rater_id), str(session.resume_secret))


class Raters:
    """What a rater (or a sign-in route on their behalf) may do; nothing names a model before
    that item's vote."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def public_studies(self) -> list[PublicStudy]:
        """Open studies as raters may see them: PublicStudy(id, title, open_enrolment), never
        the internal name."""
        return list(list_open_studies(self.store))

    def redeem(self, code: str, display_name: str = "") -> RaterClaim:
        """An invitation link secret or short code -> the claim for its rater."""
        try:
            return _claim(sign_in_with_invitation(self.store, code or "", display_name or ""))
        except StudyError as error:
            raise SignInError(str(error)) from error

    def enrol(self, study_id: int, label: str, address: str | None = None) -> RaterClaim:
        """Open enrolment: always a fresh rater for this sign-in; `label` is a display name and
        `address` the client's (sign-ins per address per hour are capped)."""
        try:
            return _claim(sign_in_open(self.store, int(study_id), label or "", address))
        except StudyError as error:
            raise SignInError(str(error)) from error

    def resolve(self, claim: RaterClaim | None) -> int | None:
        """The rater id of a cookie claim while its resume secret is current (not replaced by a
        newer sign-in, not revoked, study open), else None."""
        if claim is None:
            return None
        session = resume(self.store, claim.secret)
        if session is None or (session.rater_id, session.study_id) != (
            claim.rater_id,
            claim.study_id,
        ):
            return None
        return int(session.rater_id)

    def signed_out_reason(self, claim: RaterClaim | None) -> str | None:
        """For a cookie that no longer signs its rater in: whether the invitation was revoked
        or the study closed (a message for the rater), else None."""
        if claim is None:
            return None
        return signed_out_reason(self.store, claim.secret)

    def study(self, study_id: int) -> Any:
        """The study row (its reveal and raters-per-item settings); StudyError if unknown."""
        return find_study(self.store, study_id)

    def next_item(self, study_id: int, rater_id: int) -> Any:
        """The rater's open item, else a newly claimed one, else None."""
        return next_item(self.store, study_id, rater_id)

    def progress(self, study_id: int, rater_id: int) -> dict[str, Any]:
        """The rater's and the study's counts (study.session.progress)."""
        return progress(self.store, study_id, rater_id)

    def vote(self, token: str, rater_id: int, choice: str, **details: Any) -> VoteReceipt:
        """Append the rater's vote on the item shown under `token` (ItemGoneError: move on)."""
        return record_vote(self.store, token, rater_id, choice, **details)

    def reveal(self, token: str, rater_id: int) -> dict[str, str]:
        """The models behind sides A and B after the rater's vote; makes that vote final."""
        return reveal(self.store, token, rater_id)

    def undo_last_vote(self, study_id: int, rater_id: int) -> str:
        """Withdraw the rater's latest vote while the study allows it."""
        return undo_last_vote(self.store, study_id, rater_id)
