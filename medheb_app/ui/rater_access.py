"""How the web layer turns an invitation (link secret or short code) or an open-enrolment
sign-in into a rater claim for the cookie, and a cookie claim back into a rater: a thin adapter
over medheb_app.study.identity, so the sign-in routes and the rater page never touch the study
tables. A display name is only ever a label: it never selects an existing rater."""

from __future__ import annotations

from medheb_app.access.auth import RaterClaim
from medheb_app.services import Services
from medheb_app.study import (
    StudyError,
    list_open_studies,
    resume,
    sign_in_open,
    sign_in_with_invitation,
)
from medheb_app.study.identity import signed_out_reason as reason


class SignInError(ValueError):
    """A sign-in the rater can fix (unknown code, closed study); the message is for them."""


def public_studies(services: Services) -> list:
    """Open studies as raters may see them: PublicStudy(id, title, open_enrolment), never the
    internal name."""
    return list(list_open_studies(services.store))


def _claim(session) -> RaterClaim:
    return RaterClaim(int(session.study_id), int(session.rater_id), str(session.resume_secret))


def redeem(services: Services, code: str, display_name: str = "") -> RaterClaim:
    """An invitation link secret or short code -> the claim for its rater."""
    try:
        return _claim(sign_in_with_invitation(services.store, code or "", display_name or ""))
    except StudyError as error:
        raise SignInError(str(error)) from error


def enrol(services: Services, study_id: int, label: str, address: str | None = None) -> RaterClaim:
    """Open enrolment: always a fresh rater for this sign-in; `label` is a display name and
    `address` the client's (sign-ins per address per hour are capped)."""
    try:
        return _claim(sign_in_open(services.store, int(study_id), label or "", address))
    except StudyError as error:
        raise SignInError(str(error)) from error


def resolve(services: Services, claim: RaterClaim | None) -> int | None:
    """The rater id of a cookie claim while its resume secret is current (not replaced by a
    newer sign-in, not revoked, study open), else None."""
    if claim is None:
        return None
    session = resume(services.store, claim.secret)
    if session is None or (session.rater_id, session.study_id) != (
        claim.rater_id,
        claim.study_id,
    ):
        return None
    return int(session.rater_id)


def signed_out_reason(services: Services, claim: RaterClaim | None) -> str | None:
    """For a cookie that no longer signs its rater in: whether the invitation was revoked or
    the study closed (a message for the rater), else None."""
    if claim is None:
        return None
    return reason(services.store, claim.secret)
