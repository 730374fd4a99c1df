"""The raters' page over raw HTTP: invitation links and codes, open enrolment, the resume secret
kept in the HTTP-only cookie, session-hash reuse, reveal-then-final votes, and blinding of
everything a rater's traffic carries before a vote.
"""

from __future__ import annotations

import pytest

from medheb_app.services import create_services
from medheb_app.ui.server import build_server
from tests.run_fixtures import MODELS, TASK, write_run
from tests.web_client import QueueClient, fn_index, serve

INTERNAL = "internal-rater-study-secret"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from medheb_app.settings import Settings
    from medheb_app.study import create_invitations, create_study

    root = tmp_path_factory.mktemp("raters")
    settings = Settings.from_env(data_dir=root / "data", admin_password="pw-raters-1")
    services = create_services(settings, start_bootstrap=False)
    write_run(root / "run", with_images=True)
    invited = create_study(
        services.store,
        INTERNAL,
        list(MODELS),
        root / "run",
        n_items=3,
        seed=3,
        public_title="Chest reader study",
    ).id
    open_study = create_study(
        services.store,
        INTERNAL + "-open",
        list(MODELS),
        root / "run",
        n_items=3,
        seed=4,
        public_title="Open pilot",
        open_enrolment=True,
        reveal_after_vote=False,
    ).id
    invitations = create_invitations(services.store, invited, 3)
    app = build_server(services)
    with serve(app) as base:
        yield {
            "base": base,
            "services": services,
            "invited": invited,
            "open": open_study,
            "invitations": invitations,
            "rate": app.state.blocks["rate"],
            "auth": app.state.guards.auth,
        }
    services.jobs.shutdown(wait=False)


def _rater_fns(site) -> dict[str, int]:
    blocks = site["rate"]
    return {
        "show": fn_index(blocks, "build_rater_app.<locals>.show"),
        "vote": fn_index(blocks, "make_vote.<locals>.vote"),
        "undo": fn_index(blocks, "build_rater_app.<locals>.do_undo"),
    }


def _text(result: dict) -> str:
    return str(result["output"]) + result["text"]


def test_invitation_link_sets_the_cookie_and_strips_the_secret(site):
    invitation = site["invitations"][0]
    client = QueueClient(site["base"])
    reply = client.http.get(invitation.link)
    assert reply.status_code == 303
    assert reply.headers["location"] == "/rate/" and invitation.secret not in str(reply.headers)
    cookie = reply.headers["set-cookie"].lower()
    assert "medheb_rater=" in cookie and "httponly" in cookie and "samesite=strict" in cookie
    shown = _text(client.call(_rater_fns(site)["show"], [], prefix="/rate"))
    assert "Chest reader study" in shown and "candidate report" in shown
    assert INTERNAL not in shown
    for secret in (*MODELS, TASK, invitation.secret, invitation.code):
        assert secret not in shown, secret


def test_the_raters_page_answers_without_its_trailing_slash(site):
    client = QueueClient(site["base"])
    reply = client.http.get("/rate")
    assert reply.status_code == 307 and reply.headers["location"] == "/rate/"
    assert client.http.get("/rate/").status_code == 200


def test_a_second_client_with_the_raters_session_hash_is_not_signed_in(site):
    client = QueueClient(site["base"])
    client.post_form("/auth/rater", {"code": site["invitations"][1].code})
    fns = _rater_fns(site)
    assert "candidate report" in _text(client.call(fns["show"], [], prefix="/rate"))
    thief = QueueClient(site["base"], session_hash=client.session_hash)
    stolen = _text(thief.call(fns["show"], [], prefix="/rate"))
    assert "not signed in" in stolen and "candidate report" not in stolen
    voted = _text(thief.call(fns["vote"], [None, "", ""], prefix="/rate"))
    assert "not signed in" in voted


def test_a_display_name_never_resumes_another_rater(site):
    """Attack D: sign in with a name that exists (open enrolment) -> a fresh rater."""
    from medheb_app.study import resume

    auth = site["auth"]  # the server's: the cookie is sealed and its session is server-side
    raters = set()
    for _ in range(2):
        client = QueueClient(site["base"])
        reply = client.post_form("/auth/rater", {"study": str(site["open"]), "label": "Dr Same"})
        assert reply.status_code == 303, reply.text
        assert "Dr Same" not in reply.headers.get("location", "")
        claim = auth.rater(client.http)  # the cookie the browser holds
        raters.add(claim.rater_id)
        assert claim.secret not in reply.text  # the resume secret is only in the cookie
        shown = _text(client.call(_rater_fns(site)["show"], [], prefix="/rate"))
        assert "Open pilot" in shown and "0 of 3 items rated" in shown  # a fresh rater
        assert claim.secret not in shown
    assert len(raters) == 2
    # a name typed as an invitation code is not a credential
    client = QueueClient(site["base"])
    refused = client.post_form("/auth/rater", {"code": "Dr Same"})
    assert refused.status_code == 401 and "medheb_rater" not in refused.headers.get(
        "set-cookie", ""
    )
    assert resume(site["services"].store, "Dr Same") is None


def test_reveal_makes_the_vote_final_and_undo_is_refused(site):
    """Attack E: vote, see the names, undo, vote again."""
    from medheb_app.study.export import votes_frame

    client = QueueClient(site["base"])
    client.post_form("/auth/rater", {"code": site["invitations"][2].code})
    fns = _rater_fns(site)
    before = _text(client.call(fns["show"], [], prefix="/rate"))
    for secret in MODELS:
        assert secret not in before
    voted = _text(client.call(fns["vote"], [None, "", ""], prefix="/rate"))
    assert "Vote recorded" in voted and "final" in voted
    assert MODELS[0] in voted and MODELS[1] in voted  # shown over each side after the vote
    undone = _text(client.call(fns["undo"], [], prefix="/rate"))
    assert "withdrawn" not in undone
    votes = votes_frame(site["services"].store, site["invited"])
    assert len(votes) >= 1


def test_undo_works_before_any_reveal(site):
    client = QueueClient(site["base"])
    client.post_form("/auth/rater", {"study": str(site["open"]), "label": "Undoer"})
    fns = _rater_fns(site)
    client.call(fns["show"], [], prefix="/rate")
    voted = _text(client.call(fns["vote"], [None, "", ""], prefix="/rate"))
    assert "Vote recorded" in voted and "final" not in voted
    for secret in MODELS:
        assert secret not in voted
    undone = _text(client.call(fns["undo"], [], prefix="/rate"))
    assert "withdrawn" in undone and "0 of 3 items rated" in undone


def test_rater_sign_in_page_lists_public_titles_only(site):
    page = QueueClient(site["base"]).http.get("/auth/rater").text
    assert "Open pilot" in page and INTERNAL not in page
    assert "Chest reader study" not in page  # invitation-only studies are not listed
    for secret in (*MODELS, TASK):
        assert secret not in page
