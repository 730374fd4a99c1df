"""The blinded comparison tab's callbacks, driven in-process against a real study in SQLite."""

from __future__ import annotations

import pytest

from medheb_app.services import create_services
from medheb_app.study.items import create_study
from medheb_app.ui import compare_tab
from tests.run_fixtures import MODELS, TASK, write_run


@pytest.fixture
def services(settings):
    return create_services(settings, start_bootstrap=False)


@pytest.fixture
def study_id(services, tmp_path):
    write_run(tmp_path / "run")
    return create_study(
        services.store,
        f"{MODELS[0]} vs {MODELS[1]}",
        list(MODELS),
        tmp_path / "run",
        n_items=3,
        reveal_after_vote=True,
        seed=1,
        open_enrolment=True,
    ).id


def _shown_text(item: compare_tab.ItemRender) -> str:
    return " ".join(
        [item.token, item.query_html, item.side_a_html, item.side_b_html, item.progress_html]
        + [caption for _, caption in item.side_a_images + item.side_b_images]
    )


def test_study_picker_redacts_model_names(services, study_id):
    labels = [label for label, _ in compare_tab.study_choices(services)]
    assert len(labels) == 1 and f"(study {study_id})" in labels[0]
    assert not any(model in labels[0] for model in MODELS)


def test_rater_sees_no_secrets_until_vote_then_reveal(services, study_id):
    rater, note = compare_tab.sign_in(services, study_id, "Dr Rater")
    assert rater is not None and rater.token not in note  # no credential on the page
    item = compare_tab.next_item(services, rater)
    shown = _shown_text(item)
    assert item.token and "query text" in item.query_html
    assert item.side_a_html.count("candidate report") == 3
    for secret in (*MODELS, TASK, "T-T"):
        assert secret not in shown
    locked, message = compare_tab.vote(services, rater, item.token, "A")
    assert locked and "Vote recorded" in message
    assert all(model in message for model in MODELS)
    locked_again, again = compare_tab.vote(services, rater, item.token, "B")
    assert not locked_again and "already voted" in again
    undone, refused = compare_tab.undo(services, rater)  # names seen: the vote is final
    assert not undone and "final" in refused


def test_three_votes_complete_the_study_and_undo_reopens(services, tmp_path):
    from medheb_app.study.session import progress

    write_run(tmp_path / "run")
    study_id = create_study(
        services.store,
        "no reveal",
        list(MODELS),
        tmp_path / "run",
        n_items=3,
        reveal_after_vote=False,
        seed=1,
        open_enrolment=True,
    ).id  # fmt: skip  (a revealed vote is final, so undo is shown without a reveal)
    rater, _ = compare_tab.sign_in(services, study_id, "Second Rater")
    tokens = []
    for choice in ("A", "tie", "both_poor"):
        item = compare_tab.next_item(services, rater)
        tokens.append(item.token)
        assert compare_tab.vote(services, rater, item.token, choice)[0]
    assert len(set(tokens)) == 3
    done = compare_tab.next_item(services, rater)
    assert done.token == "" and "All items are rated" in done.message
    assert progress(services.store, study_id, rater.id)["done"] == 3
    undone, message = compare_tab.undo(services, rater)
    assert undone and "withdrawn" in message
    reopened = compare_tab.next_item(services, rater)
    assert reopened.token == tokens[-1]
    assert progress(services.store, study_id, rater.id)["done"] == 2


def test_bad_requests_give_messages(services, study_id):
    assert compare_tab.sign_in(services, None, "x")[0] is None
    rater, note = compare_tab.sign_in(services, study_id, "   ")
    assert rater is None and "invitation code" in note
    assert "Sign in" in compare_tab.next_item(services, None).message
    assert not compare_tab.vote(services, None, "", "A")[0]
    assert not compare_tab.undo(services, None)[0]
