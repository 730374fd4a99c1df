"""The page's side of the API work: the admin tab issues and revokes tokens (admins only), and
searches on the page are audited on real indices, never on the synthetic demo."""

from __future__ import annotations

import pytest

from tests.api_site import build_data


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    from medheb_app.services import create_services

    # the operator published the real index (MEDHEB_PUBLIC_INDICES), so the page may search it
    settings = build_data(tmp_path_factory.mktemp("api-ui"), public_indices=("ward-cxr",))
    services = create_services(settings, ensure_demo=lambda s, p: None)
    services.bootstrap.wait(10)
    yield services
    services.jobs.shutdown(wait=False)


def test_admin_tab_issues_a_token_once_and_revokes_it(services):
    from medheb_app.api.audit import events
    from medheb_app.api.tokens import verify
    from medheb_app.ui.admin_tokens import issue_token, revoke, token_table

    secret, note = issue_token(services, False, "admin", 30, "not an admin")
    assert secret == "" and "Sign in as admin" in note
    assert token_table(services).empty
    secret, note = issue_token(services, True, "read", 30, "notebook")
    assert secret.startswith("mhb_") and "not shown again" in note
    token = verify(services.store, secret).token
    assert token is not None and token.scope == "read" and token.name == "notebook"
    table = token_table(services)
    assert list(table["scope"]) == ["read"] and secret not in table.to_string()
    assert "bogus" in issue_token(services, True, "bogus", 30, "")[1]
    assert "Sign in as admin" in revoke(services, False, token.id)
    assert verify(services.store, secret).token is not None
    assert f"Revoked token {token.id}" in revoke(services, True, token.id)
    assert verify(services.store, secret).problem == "revoked"
    actions = [(e.who, e.channel, e.action) for e in events(services.store)]
    assert ("admin", "ui", "token-create") in actions and ("admin", "ui", "token-revoke") in actions


def test_page_searches_are_audited_on_real_indices_only(services):
    from medheb_app.api.audit import events
    from medheb_app.ui.search_tab import run_search

    before = len(events(services.store))
    real = run_search(services, "lungs", None, "random", "ward-cxr", 4, client="192.0.2.7")
    demo = run_search(services, "cardiomegaly", None, "oracle", "demo-cxr", 4, client="192.0.2.7")
    assert len(real.hits) == 4 and len(demo.hits) == 4
    logged = events(services.store)[before:]
    assert [(e.who, e.channel, e.action, e.index, e.query, e.count) for e in logged] == [
        ("anonymous:192.0.2.7", "ui", "search", "ward-cxr", "lungs", 4)
    ]


def test_the_page_refuses_a_real_index_the_operator_did_not_publish(services):
    from dataclasses import replace

    from medheb_app.api.audit import events
    from medheb_app.services.search import SearchError, SearchService
    from medheb_app.ui.search_tab import index_choices

    unpublished = SearchService(replace(services.settings, public_indices=()))
    before = len(events(services.store))
    with pytest.raises(SearchError, match=r"not offered here; pick one of: demo-cxr\.$"):
        unpublished.public("lungs", None, "random", "ward-cxr", 4, "auto")
    assert list(unpublished.offered()) == ["demo-cxr"]
    assert "ward-cxr" in index_choices(services)  # published in this fixture
    assert len(events(services.store)) == before


def test_admin_study_actions_on_the_page_are_audited(services, tmp_path):
    from medheb_app.api.audit import events
    from medheb_app.study.items import create_study
    from medheb_app.ui.admin_study import issue_invitations, revoke
    from tests.api_site import text_run

    run = text_run(tmp_path / "run", services.settings, "audit")
    study = create_study(services.store, "audited", ["random", "oracle"], run.out_dir, n_items=2)
    before = len(events(services.store))
    assert "Copy these now" in issue_invitations(services, True, study.id, 2, "ward")
    assert "Sign in" in issue_invitations(services, False, study.id, 2, "ward")  # refused: no row
    from medheb_app.study import list_invitations

    first = list_invitations(services.store, study.id)[0].id
    assert "revoked" in revoke(services, True, first)
    logged = [(e.who, e.channel, e.action, e.query) for e in events(services.store)[before:]]
    assert logged == [
        ("admin", "ui", "study-invite", f"study {study.id}: 2 invitations"),
        ("admin", "ui", "study-revoke-invitation", f"invitation {first}"),
    ]
