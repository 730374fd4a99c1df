"""Issue 18 item 5 and issue 19 item 5: the rater's flow ends right, and throwaway sign-ins
cannot hold a study's items (each test on SQLite and on a real PostgreSQL).

Before: with two raters on 20 items, after all 20 votes both were told "No item is free for
you right now (other raters hold them)" with progress stuck at their share (40% / 60%); 10
throwaway open-enrolment sign-ins from one address held every free item, so a real rater found
nothing for minutes.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update
from test_study_items import write_run

from medheb_app.store.db import Store, utcnow
from medheb_app.store.study_tables import Assignment
from medheb_app.study import (
    StudyError,
    create_invitations,
    create_study,
    next_item,
    progress,
    record_vote,
    sign_in_open,
    sign_in_with_invitation,
)
from medheb_app.study.identity import OPEN_SIGN_INS_PER_ADDRESS_HOUR

MODELS = ["oracle", "random"]


def _invited(store: Store, study_id: int) -> int:
    invitation = create_invitations(store, study_id, 1)[0]
    return sign_in_with_invitation(store, invitation.code).rater_id


def test_two_raters_reach_study_complete_with_their_own_counts(store: Store, tmp_path: Path):
    run = write_run(tmp_path / "run", models=tuple(MODELS), tasks={"t-t": 20}, payloads=True)
    study_id = create_study(
        store, "pair", MODELS, run, 20, raters_per_item=1, reveal_after_vote=True
    ).id
    raters = [_invited(store, study_id), _invited(store, study_id)]
    active = list(raters)
    turn = 0
    while active:  # the two raters alternate, one vote each (a slower and a faster rater)
        rater = active[turn % len(active)]
        view = next_item(store, study_id, rater)
        if view is None:
            active.remove(rater)
        else:
            record_vote(store, view.token, rater, "A")
            if turn % 3 == 0:  # the first rater is faster: unequal shares, like 8 and 12
                view = next_item(store, study_id, rater)
                if view is not None:
                    record_vote(store, view.token, rater, "B")
        turn += 1
    outlooks = [progress(store, study_id, rater) for rater in raters]
    assert sum(o["done"] for o in outlooks) == 20
    assert outlooks[0]["done"] != outlooks[1]["done"]
    for outlook in outlooks:
        assert outlook["study_complete"] and outlook["finished"], outlook
        assert outlook["done"] == outlook["total"], outlook  # 100% of what was theirs
        assert outlook["held_by_others"] == 0


def test_claims_held_by_others_are_counted_with_their_expiry(store: Store, tmp_path: Path):
    run = write_run(tmp_path / "run", models=tuple(MODELS), tasks={"t-t": 2}, payloads=True)
    study_id = create_study(
        store,
        "held",
        MODELS,
        run,
        2,
        raters_per_item=1,
        claim_timeout_s=300,
        reveal_after_vote=True,
    ).id
    first, second = _invited(store, study_id), _invited(store, study_id)
    view = next_item(store, study_id, first)
    record_vote(store, view.token, first, "A")
    held = next_item(store, study_id, first)  # `first` has voted: keeps this claim a while
    assert held is not None
    assert next_item(store, study_id, second) is None
    outlook = progress(store, study_id, second)
    assert outlook["held_by_others"] == 1 and not outlook["finished"]
    assert not outlook["study_complete"] and (outlook["done"], outlook["total"]) == (0, 1)
    left = (outlook["expires_at"] - utcnow()).total_seconds()
    assert 280 < left <= 300, left  # the holder's claim runs out with the study's timeout


def test_ten_throwaway_sign_ins_leave_items_for_a_real_rater(store: Store, tmp_path: Path):
    """Issue 19 item 5: sign-ins per address per hour are capped, and the claims of raters who
    never vote neither fill items up nor outlive a short first-vote timeout."""
    run = write_run(tmp_path / "run", models=tuple(MODELS), tasks={"t-t": 5}, payloads=True)
    study_id = create_study(
        store, "open", MODELS, run, 5, open_enrolment=True, reveal_after_vote=True
    ).id
    throwaways, refused = [], 0
    for n in range(10):  # from one address
        try:
            throwaways.append(sign_in_open(store, study_id, f"bot {n}", "198.51.100.7").rater_id)
        except StudyError as error:
            assert "from your network in the last hour" in str(error)
            refused += 1
    assert len(throwaways) == OPEN_SIGN_INS_PER_ADDRESS_HOUR and refused == 10 - len(throwaways)
    for n in range(10 - len(throwaways)):  # and the rest from other addresses
        throwaways.append(sign_in_open(store, study_id, f"bot {n}", f"203.0.113.{n}").rater_id)
    for bot in throwaways:
        assert next_item(store, study_id, bot) is not None  # each holds an item, never votes
    real = sign_in_open(store, study_id, "Dr Real", "192.0.2.1").rater_id
    view = next_item(store, study_id, real)
    assert view is not None  # at once, although every item is claimed (twice over)
    record_vote(store, view.token, real, "A")

    with store.session() as session:  # two minutes later the throwaways' claims have lapsed
        session.execute(
            update(Assignment)
            .where(Assignment.rater_id.in_(throwaways))
            .values(served_at=utcnow() - timedelta(minutes=3))
        )
    second = next_item(store, study_id, real)
    assert second is not None
    with store.session() as session:
        released = session.scalars(
            select(Assignment.released_reason).where(Assignment.rater_id.in_(throwaways))
        ).all()
    assert "idle" in released  # a first-vote timeout gave a throwaway's item back
    voted = 1
    while (view := next_item(store, study_id, real)) is not None:
        record_vote(store, view.token, real, "B")
        voted += 1
    assert voted == 5 and progress(store, study_id, real)["study_complete"]


@pytest.mark.parametrize("per_hour", [1])
def test_the_cap_counts_only_the_last_hour(store: Store, tmp_path: Path, per_hour: int):
    from medheb_app.store.study_tables import Rater

    run = write_run(tmp_path / "run", models=tuple(MODELS), tasks={"t-t": 2}, payloads=True)
    study_id = create_study(
        store, "hour", MODELS, run, 2, open_enrolment=True, reveal_after_vote=True
    ).id
    first = sign_in_open(store, study_id, "a", "192.0.2.9", per_hour=per_hour)
    with pytest.raises(StudyError, match="last hour"):
        sign_in_open(store, study_id, "b", "192.0.2.9", per_hour=per_hour)
    with store.session() as session:
        session.execute(
            update(Rater)
            .where(Rater.id == first.rater_id)
            .values(created_at=utcnow() - timedelta(minutes=61))
        )
    assert sign_in_open(store, study_id, "c", "192.0.2.9", per_hour=per_hour).rater_id


def test_raters_enrolled_from_one_client_are_flagged_and_merged(store: Store, tmp_path: Path):
    """Adversarial pass at 2e21a9a, V18: one browser enrols twice and votes both slots of every
    item. The analysis cannot refuse it (two colleagues behind one hospital address look the
    same), so it names those raters and reports the comparison with them as one rater."""
    from medheb_app.study.analysis import summarise
    from medheb_app.study.export import votes_frame

    run = write_run(tmp_path / "run", models=tuple(MODELS), tasks={"t-t": 6}, payloads=True)
    study_id = create_study(
        store, "open", MODELS, run, 6, raters_per_item=2, open_enrolment=True
    ).id
    twins = [sign_in_open(store, study_id, f"me {n}", "198.51.100.7").rater_id for n in (1, 2)]
    other = sign_in_open(store, study_id, "Dr Other", "192.0.2.1").rater_id
    for _ in range(3):  # a colleague from elsewhere takes half the items' first slots
        view = next_item(store, study_id, other)
        record_vote(store, view.token, other, "B")
    for rater in twins:
        while (view := next_item(store, study_id, rater)) is not None:
            record_vote(store, view.token, rater, "A")
    votes = votes_frame(store, study_id)
    clients = votes.drop_duplicates("rater").set_index("rater")["client"]
    assert clients[twins[0]] == clients[twins[1]] != clients[other]
    assert not votes.astype(str).apply(lambda c: c.str.contains("198.51.100")).any().any()

    summary = summarise(votes, n_boot=20)
    flags = {row["rater"]: row["flags"] for row in summary["flags"]}
    assert f"same client as rater {twins[1]}" in flags[twins[0]]
    assert f"same client as rater {twins[0]}" in flags[twins[1]]
    assert "client" not in flags[other]
    merged = summary["one_rater_per_client"]
    assert merged["raters"] == sorted(twins) and merged["mrmc"]
    assert summary["n_raters"] == 3  # the main figures still count every rater
    from medheb_app.commands.study import quality_lines
    from medheb_app.ui.analysis_tab import quality_html

    lines = quality_lines(summary)
    assert any("One rater per enrolment client (2 raters" in line for line in lines)
    assert "as one rater per client, RRRC preference for" in quality_html(summary)
    assert not any("client (" in line and "not computed" in line for line in lines)
    # every rater here is flagged but one, too few for MRMC without them: said, not left out
    assert (
        "  Without the flagged raters (oracle vs random): not computed: without them, the "
        "comparison has one reader with two or more rated queries, and MRMC needs two."
    ) in lines


def test_a_per_client_reading_that_cannot_be_computed_says_why(store: Store, tmp_path: Path):
    """The adversarial pass (N2): when every rater enrolled from one client, the merged
    comparison has one reader and MRMC cannot run; `study analyse` and the tab left that
    reading out without a word while the headline counted two raters."""
    from medheb_app.commands.study import quality_lines
    from medheb_app.study.analysis import summarise
    from medheb_app.study.export import votes_frame
    from medheb_app.ui.analysis_tab import quality_html

    run = write_run(tmp_path / "run", models=tuple(MODELS), tasks={"t-t": 6}, payloads=True)
    study_id = create_study(
        store, "one-client", MODELS, run, 6, raters_per_item=2, open_enrolment=True
    ).id
    twins = [sign_in_open(store, study_id, f"me {n}", "198.51.100.7").rater_id for n in (1, 2)]
    for rater, choice in zip(twins, ("A", "B"), strict=True):
        while (view := next_item(store, study_id, rater)) is not None:
            record_vote(store, view.token, rater, choice)
    summary = summarise(votes_frame(store, study_id), n_boot=20)
    assert summary["n_raters"] == 2
    assert summary["mrmc"][0]["results"].get("RRRC")  # two raters: the main reading is there
    merged = summary["one_rater_per_client"]
    assert merged["raters"] == sorted(twins)
    (pair,) = merged["mrmc"]
    assert pair["n_readers"] == 1 and "error" in pair and not pair["results"]
    sentence = (
        f"One rater per enrolment client ({pair['model_a']} vs {pair['model_b']}): not "
        "computed: all 2 raters enrolled from one client, so the comparison has one reader."
    )
    lines = quality_lines(summary)
    assert f"  {sentence}" in lines
    assert not any("RRRC preference" in line for line in lines)  # no figure pretends otherwise
    assert f"<div>{sentence}</div>" in quality_html(summary)
