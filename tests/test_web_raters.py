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
        reveal_after_vote=True,
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
            "guards": app.state.guards,
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
    voted = _text(thief.call(fns["vote"], [None, "", "", None, "", False], prefix="/rate"))
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
    # the keys line follows the study (issue 22 item 6d): no "U = undo" where votes are final
    assert "U = undo" not in before and "Each vote is final" in before
    voted = _text(client.call(fns["vote"], [None, "", "", None, "", False], prefix="/rate"))
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
    shown = _text(client.call(fns["show"], [], prefix="/rate"))
    assert "U = undo (within 30 s of a vote)" in shown and "Each vote is final" not in shown
    voted = _text(client.call(fns["vote"], [None, "", "", None, "", False], prefix="/rate"))
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


def test_a_revoked_rater_is_told_so_not_that_they_are_signed_out(site):
    """Issue 18 item 9: revocation says what happened (it said only 'not signed in')."""
    from medheb_app.study import create_invitations, revoke_invitation

    invitation = create_invitations(site["services"].store, site["invited"], 1)[0]
    client = QueueClient(site["base"])
    assert client.http.get(invitation.link).status_code == 303
    show = _rater_fns(site)["show"]
    assert "Side A" in _text(client.call(show, [], prefix="/rate"))
    revoke_invitation(site["services"].store, invitation.id)
    text = _text(client.call(show, [], prefix="/rate"))
    assert "invitation to this study was revoked" in text and "not signed in" not in text
    vote = _rater_fns(site)["vote"]
    text = _text(client.call(vote, ["", "", "", None, "", False], prefix="/rate"))
    assert "revoked" in text


def test_a_closed_study_tells_its_raters_it_closed(tmp_path):
    """Issue 18 item 9: a closed study says so (it said only 'not signed in')."""
    from medheb_app.settings import Settings
    from medheb_app.study import close_study, create_invitations, create_study

    settings = Settings.from_env(data_dir=tmp_path / "data", admin_password="pw-closed-1")
    services = create_services(settings, start_bootstrap=False)
    write_run(tmp_path / "run")
    study = create_study(
        services.store, "to-close", list(MODELS), tmp_path / "run", 2, reveal_after_vote=True
    ).id
    invitation = create_invitations(services.store, study, 1)[0]
    app = build_server(services)
    with serve(app) as base:
        client = QueueClient(base)
        assert client.http.get(invitation.link).status_code == 303
        show = fn_index(app.state.blocks["rate"], "build_rater_app.<locals>.show")
        assert "Side A" in _text(client.call(show, [], prefix="/rate"))
        close_study(services.store, study)
        text = _text(client.call(show, [], prefix="/rate"))
        assert "study is closed" in text and "not signed in" not in text
    services.jobs.shutdown(wait=False)


def test_exports_are_served_only_to_a_signed_in_admin_and_never_written_to_disk(site):
    """Issue 18 item 9: the analysis CSV URL worked without any cookie and the file sat in the
    shared temporary folder. Now: a route that checks the admin cookie on every request."""
    import os
    import tempfile
    import time
    from pathlib import Path

    from medheb_app.ui.analysis_tab import export_links

    started = time.time()
    path = f"/study-export/{site['invited']}/votes.csv"
    assert path in export_links(site["invited"])
    anonymous = QueueClient(site["base"])
    reply = anonymous.http.get(path)
    assert reply.status_code == 403 and "model" not in reply.text
    rater = QueueClient(site["base"])
    rater.http.get(site["invitations"][2].link)  # a rater's cookie is no admin's
    assert rater.http.get(path).status_code == 403
    admin = QueueClient(site["base"])
    assert admin.post_form("/auth/admin", {"password": "pw-raters-1"}).status_code == 303
    reply = admin.http.get(path)
    assert reply.status_code == 200, reply.text
    assert reply.text.startswith("study,vote_id,item,rater")
    assert reply.headers["cache-control"] == "no-store"
    assert "attachment" in reply.headers["content-disposition"]
    assert admin.http.get("/study-export/999/votes.csv").status_code == 404
    # the adversarial pass: a non-ASCII digit and an id past the integer range answered 500
    for odd in ("%D9%A2", "99999999999999999999999", "-1", "1.0"):
        assert admin.http.get(f"/study-export/{odd}/votes.csv").status_code == 404, odd
    mrmc = admin.http.get(f"/study-export/{site['invited']}/mrmc.csv")
    assert mrmc.status_code == 200 and mrmc.text.startswith("reader,case,modality,score")
    assert anonymous.http.get(f"/study-export/{site['invited']}/mrmc.csv").status_code == 403
    gradio_temp = Path(os.environ.get("GRADIO_TEMP_DIR", Path(tempfile.gettempdir()) / "gradio"))
    data = Path(site["services"].settings.data_dir)
    written = [*gradio_temp.rglob("*.csv"), *data.rglob("*.csv")]
    leaked = [  # other test runs share /tmp/gradio: only this study's rows count
        p
        for p in written
        if p.is_file() and p.stat().st_mtime >= started - 1 and INTERNAL in p.read_text()
    ]
    assert not leaked, leaked


def test_two_raters_end_on_study_complete_with_their_count_and_no_next(tmp_path):
    """Issue 18 item 5, in the page: after every vote both raters see 'Study complete, thank
    you' with their own count and the Next button hidden (both were told 'No item is free for
    you right now', progress stuck at their share); Next without a vote says so."""
    import re

    from medheb_app.settings import Settings
    from medheb_app.study import create_invitations, create_study

    settings = Settings.from_env(data_dir=tmp_path / "data", admin_password="pw-end-1")
    services = create_services(settings, start_bootstrap=False)
    write_run(tmp_path / "run")
    study = create_study(
        services.store, "ending", list(MODELS), tmp_path / "run", 4, reveal_after_vote=True
    ).id
    app = build_server(services)
    with serve(app) as base:
        blocks = app.state.blocks["rate"]
        show = fn_index(blocks, "build_rater_app.<locals>.show")
        vote = fn_index(blocks, "make_vote.<locals>.vote")
        press_next = fn_index(blocks, "build_rater_app.<locals>.press_next")
        clients = []
        for invitation in create_invitations(services.store, study, 2):
            client = QueueClient(base)
            assert client.http.get(invitation.link).status_code == 303
            clients.append(client)
        first = _text(clients[0].call(show, [], prefix="/rate"))
        assert "Side A" in first
        again = _text(clients[0].call(press_next, [None], prefix="/rate"))
        assert "no vote yet" in again and "Side A" in again  # the same item, and why
        counts = [0, 0]
        ended = ["", ""]
        for _ in range(12):
            for n, client in enumerate(clients):
                if ended[n]:
                    continue
                text = _text(client.call(press_next, [None], prefix="/rate"))
                if "Side A" in text:
                    voted = _text(
                        client.call(vote, [None, "", "", None, "", False], prefix="/rate")
                    )
                    assert "Vote recorded" in voted
                    counts[n] += 1
                elif "Study complete" in text or "No item" in text or "being rated" in text:
                    ended[n] = text if "Study complete" in text else ""
            if all(ended):
                break
        assert sum(counts) == 4 and all(ended), (counts, ended)
        for n, text in enumerate(ended):
            assert "Study complete, thank you" in text
            rated = f"You rated {counts[n]} item{'s' if counts[n] != 1 else ''}"
            assert rated in text, text[-400:]
            assert f"{counts[n]} of {counts[n]} items rated" in text  # 100% of theirs
            assert re.search(r"'visible': False", text), text[-400:]  # no Next button
    services.jobs.shutdown(wait=False)


def test_cannot_judge_with_a_reason_comment_and_flag_reach_the_export(site):
    """Issue 18 item 4: a rater can mark an item as not judgeable (with a reason), comment on
    any vote and flag clinical significance; all exported; cannot-judge is counted apart."""
    from medheb_app.study.analysis import summarise
    from medheb_app.study.export import votes_frame

    blocks = site["rate"]
    indices = [
        index
        for index, block_fn in blocks.fns.items()
        if block_fn.fn is not None and "make_vote.<locals>.vote" in block_fn.fn.__qualname__
    ]
    assert len(indices) == 5  # A, B, tie, both poor, cannot judge
    cannot = indices[4]
    client = QueueClient(site["base"])
    client.post_form("/auth/rater", {"study": str(site["open"]), "label": "Judge"})
    show = _rater_fns(site)["show"]
    assert "Side A" in _text(client.call(show, [], prefix="/rate"))
    refused = _text(client.call(cannot, [None, "", "", None, "", False], prefix="/rate"))
    assert "Say why this item cannot be judged" in refused
    done = _text(
        client.call(cannot, [None, "", "", "image_quality", "blurred film", True], prefix="/rate")
    )
    assert "Vote recorded: Cannot judge" in done
    client.call(show, [], prefix="/rate")
    client.call(indices[0], [None, "", "", None, "A is clearly better", False], prefix="/rate")
    votes = votes_frame(site["services"].store, site["open"])
    mine = votes[votes["rater_name"] == "Judge"].sort_values("vote_id")
    assert list(mine["outcome"])[:1] == ["cannot_judge"]
    first = mine.iloc[0]
    assert (first["reason"], first["comment"], bool(first["clinically_significant"])) == (
        "image_quality",
        "blurred film",
        True,
    )
    assert mine.iloc[1]["comment"] == "A is clearly better"
    summary = summarise(votes, n_boot=0)
    assert summary["cannot_judge"]["reasons"].get("image_quality", 0) >= 1
    overall = [r for r in summary["rates"] if r["stratum"] == "all"]
    assert sum(r["n"] for r in overall) == summary["n_votes"]  # cannot-judge left out
    assert summary["n_votes"] == int((votes["outcome"] != "cannot_judge").sum())


def test_a_link_from_elsewhere_never_swaps_a_signed_in_rater(site):
    """The adversarial pass: a cross-site link to /rate?invite=<attacker's invitation> set the
    attacker's rater identity in the victim's browser. A signed-in rater is now asked first;
    the sign-in is kept until they choose, and their own page's link still signs in at once."""
    from medheb_app.access.limits import RateLimiter
    from medheb_app.study import create_invitations

    site["guards"].rater_limit = RateLimiter(10, 60.0)  # this file's sign-ins share one client
    own, other = create_invitations(site["services"].store, site["invited"], 2)
    client = QueueClient(site["base"])
    assert client.http.get(own.link).status_code == 303
    before = dict(client.http.cookies)
    for fetched_from in ("cross-site", "same-site"):
        asked = client.http.get(other.link, headers={"Sec-Fetch-Site": fetched_from})
        assert asked.status_code == 200 and "already signed in as a rater" in asked.text
        assert "set-cookie" not in asked.headers and dict(client.http.cookies) == before
        assert asked.headers["cache-control"] == "no-store"
    chosen = client.http.get(other.link, headers={"Sec-Fetch-Site": "same-origin"})
    assert chosen.status_code == 303 and "medheb_rater=" in chosen.headers["set-cookie"]
