"""Who a rater is: invitations (hashed, single-rater, revocable), open enrolment, resume secrets,
and raters bound to one study (each test on SQLite and on a real PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select, text
from test_study_items import write_run

from medheb_app.store.db import Store
from medheb_app.store.study_tables import Assignment, Rater, StudyInvitation, StudyItem, Vote
from medheb_app.study import (
    StudyError,
    create_invitations,
    create_study,
    list_invitations,
    next_item,
    record_vote,
    resume,
    revoke_invitation,
    sign_in_open,
    sign_in_with_invitation,
)
from medheb_app.study.identity import CODE_ALPHABET, CODE_LENGTH, digest

MODELS = ["oracle", "random"]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", models=tuple(MODELS), payloads=True)


def make_study(store: Store, run_dir: Path, name: str = "pilot", **options) -> int:
    return create_study(store, name, MODELS, run_dir, 4, 1, True, seed=1, **options).id


def dump(store: Store) -> str:
    """Every row of every study table, as text: what someone with the database file sees."""
    tables = ["studies", "study_invitations", "raters", "study_assignments", "study_votes"]
    with store.engine.connect() as connection:
        rows = {
            table: [
                list(map(str, row)) for row in connection.execute(text(f"SELECT * FROM {table}"))
            ]
            for table in tables
        }
    return json.dumps(rows)


def test_invitations_are_shown_once_and_stored_only_hashed(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    issued = create_invitations(store, study_id, 3, label="ward 5")
    assert len({i.secret for i in issued}) == len({i.code for i in issued}) == 3
    for invitation in issued:
        assert invitation.link == f"/rate?invite={invitation.secret}"
        assert len(invitation.code) == CODE_LENGTH and set(invitation.code) <= set(CODE_ALPHABET)
        assert len(invitation.secret) >= 32
        assert invitation.secret not in repr(invitation) and invitation.code not in repr(invitation)
    stored = dump(store)
    for invitation in issued:
        assert invitation.secret not in stored and invitation.code not in stored
    with store.session() as session:
        row = session.get(StudyInvitation, issued[0].id)
        assert row.secret_hash == digest(issued[0].secret)
    listed = list_invitations(store, study_id)
    assert [(i.id, i.label, i.used, i.revoked) for i in listed] == [
        (i.id, "ward 5", False, False) for i in issued
    ]
    assert "secret" not in json.dumps([vars(i) for i in listed], default=str)
    with pytest.raises(StudyError, match="between 1 and"):
        create_invitations(store, study_id, 0)


def test_signing_in_with_a_known_name_never_resumes_that_rater(store: Store, run_dir: Path):
    """Attack: signing in with another rater's *name* resumed them and printed their token."""
    study_id = make_study(store, run_dir)
    invitation = create_invitations(store, study_id, 1)[0]
    ada = sign_in_with_invitation(store, invitation.code, "Dr Ada")
    record_vote(store, next_item(store, study_id, ada.rater_id).token, ada.rater_id, "A")
    # an invitation-only study refuses names outright ...
    for attempt in ("Dr Ada", ada.display_name, str(ada.rater_id)):
        with pytest.raises(StudyError) as refused:
            sign_in_with_invitation(store, attempt, "Dr Ada")
        assert ada.resume_secret not in str(refused.value)
        with pytest.raises(StudyError, match="invitation only"):
            sign_in_open(store, study_id, attempt)
    # ... and an open-enrolment study makes every sign-in a fresh rater, whatever the name
    open_id = make_study(store, run_dir, name="open", open_enrolment=True)
    first = sign_in_open(store, open_id, "Dr Ada")
    second = sign_in_open(store, open_id, "Dr Ada")
    assert first.rater_id != second.rater_id
    assert first.resume_secret != second.resume_secret
    assert next_item(store, open_id, second.rater_id).done == 0
    with pytest.raises(StudyError, match="display name"):
        sign_in_open(store, open_id, "   ")


def test_the_invitation_is_the_credential_and_resumes_its_one_rater(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    invitation = create_invitations(store, study_id, 1)[0]
    first = sign_in_with_invitation(store, invitation.secret, "  Dr   Ada ")
    assert first.display_name == "Dr Ada" and first.study_id == study_id
    record_vote(store, next_item(store, study_id, first.rater_id).token, first.rater_id, "A")
    # the short code (typed loosely) resumes the same rater; the name typed then is ignored
    spaced = f" {invitation.code[:4].lower()}-{invitation.code[4:]} "
    again = sign_in_with_invitation(store, spaced, "Someone Else")
    assert (again.rater_id, again.display_name) == (first.rater_id, "Dr Ada")
    assert next_item(store, study_id, again.rater_id).done == 1
    # each sign-in rotates the resume secret: the old cookie no longer works
    assert resume(store, first.resume_secret) is None
    assert resume(store, again.resume_secret) == again
    assert again.resume_secret not in dump(store)
    assert resume(store, "") is None and resume(store, "forged") is None
    used = list_invitations(store, study_id)[0]
    assert used.used and used.rater_id == first.rater_id and used.display_name == "Dr Ada"
    with pytest.raises(StudyError, match="not valid"):
        sign_in_with_invitation(store, "AAAAAAAA")
    with pytest.raises(StudyError, match="Enter the invitation code"):
        sign_in_with_invitation(store, "  ")


def test_raters_belong_to_one_study(store: Store, run_dir: Path):
    first = make_study(store, run_dir, name="first")
    second = make_study(store, run_dir, name="second")
    rater = sign_in_with_invitation(store, create_invitations(store, first, 1)[0].code, "Ada")
    assert rater.study_id == first
    with pytest.raises(StudyError, match="not signed in to this study"):
        next_item(store, second, rater.rater_id)
    view = next_item(store, first, rater.rater_id)
    with store.session() as session:
        assert session.get(Rater, rater.rater_id).study_id == first
    record_vote(store, view.token, rater.rater_id, "tie")


def test_revoking_blocks_further_votes_but_keeps_past_ones(store: Store, run_dir: Path):
    study_id = make_study(store, run_dir)
    invitation = create_invitations(store, study_id, 1)[0]
    rater = sign_in_with_invitation(store, invitation.code, "Dr Ada")
    record_vote(store, next_item(store, study_id, rater.rater_id).token, rater.rater_id, "A")
    pending = next_item(store, study_id, rater.rater_id)
    info = revoke_invitation(store, invitation.id)
    assert info.revoked and info.used
    for attempt in (
        lambda: record_vote(store, pending.token, rater.rater_id, "B"),
        lambda: next_item(store, study_id, rater.rater_id),
        lambda: sign_in_with_invitation(store, invitation.code),
        lambda: sign_in_with_invitation(store, invitation.secret),
    ):
        with pytest.raises(StudyError, match="revoked"):
            attempt()
    assert resume(store, rater.resume_secret) is None
    with store.session() as session:
        votes = session.scalars(select(Vote).where(Vote.kind == "vote")).all()
        assert [(v.rater_id, v.choice) for v in votes] == [(rater.rater_id, "A")]
    # the revoked rater's open claim gave its slot back
    with store.session() as session:
        claim = session.scalar(select(Assignment).where(Assignment.token == pending.token))
        assert claim.released_reason == "revoked"
        assert session.get(StudyItem, claim.item_id).n_assigned == 0
    with pytest.raises(StudyError, match="No invitation"):
        revoke_invitation(store, 999)
