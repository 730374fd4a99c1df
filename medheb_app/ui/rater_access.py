"""How the web layer turns an invitation, a short code or an open-enrolment sign-in into a rater
claim, and a claim back into a rater: a thin adapter over medheb_app.study, so the cookie
routes and the rater page never touch the study tables themselves."""

from __future__ import annotations

from dataclasses import dataclass

from medheb_app.access.auth import RaterClaim
from medheb_app.services import Services


class SignInError(ValueError):
    """A sign-in the rater can fix (unknown code, closed study); the message is for them."""


@dataclass(frozen=True)
class StudyCard:
    """What a non-admin may know of a study: its id and the public title the admin chose."""

    id: int
    title: str
    open_enrolment: bool


def public_studies(services: Services) -> list[StudyCard]:
    """Studies raters may see, by public title only (never the internal name)."""
    from medheb_app.study.items import list_studies

    cards = []
    for study in list_studies(services.store):
        title = study.get("public_title") or f"Reader study {study['id']}"
        cards.append(StudyCard(int(study["id"]), str(title), bool(study.get("open_enrolment"))))
    return cards


def redeem(services: Services, code: str) -> RaterClaim:
    """An invitation link secret or short code -> the claim for its rater."""
    from medheb_app.study import StudyError

    try:
        from medheb_app.study import redeem_invitation
    except ImportError as error:  # the study layer without invitations
        raise SignInError("Invitations are not available in this version.") from error
    try:
        info = redeem_invitation(services.store, (code or "").strip())
    except StudyError as error:
        raise SignInError(str(error)) from error
    return RaterClaim(int(info.study_id), int(info.id), str(info.resume_secret))


def enrol(services: Services, study_id: int, label: str) -> RaterClaim:
    """Open enrolment: a fresh rater for this sign-in; `label` is only a display name."""
    from medheb_app.study import StudyError

    try:
        from medheb_app.study import enrol_rater
    except ImportError as error:
        raise SignInError("Open enrolment is not available in this version.") from error
    try:
        info = enrol_rater(services.store, int(study_id), (label or "").strip())
    except StudyError as error:
        raise SignInError(str(error)) from error
    return RaterClaim(int(study_id), int(info.id), str(info.resume_secret))


def resolve(services: Services, claim: RaterClaim | None) -> int | None:
    """The rater id of a cookie claim when its resume secret still matches, else None."""
    if claim is None:
        return None
    try:
        from medheb_app.study import resume_rater
    except ImportError:
        return None
    from medheb_app.study import StudyError

    try:
        info = resume_rater(services.store, claim.study_id, claim.secret)
    except StudyError:
        return None
    return int(info.id) if int(info.id) == claim.rater_id else None
