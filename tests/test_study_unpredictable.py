"""Issue 18 item 7: which list goes left, the order a rater meets items in and where the gold
items fall are CSPRNG draws stored with the assignment, so a hostile rater who knows the code,
the seed, the item ids and their own rater id predicts nothing, and a reveal never says which
items were quality checks.

The attack replayed is the issue's: reveal the first 16 items, then predict the left model of
every later item before voting, by the formula the old code used (sha256 of
"seed:item_id:rater_id", with the true internal ids handed to the attacker) and by the patterns
a rater could learn from the 16 reveals (majority side, alternation).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from scipy.stats import binom
from sqlalchemy import select
from test_study_items import write_run

from medheb_app.store.db import Store
from medheb_app.store.study_tables import Assignment, StudyItem
from medheb_app.study import (
    create_invitations,
    create_study,
    next_item,
    record_vote,
    reveal,
    sign_in_with_invitation,
)
from medheb_app.study.errors import StudyError
from medheb_app.study.session import undo_last_vote

MODELS = ["oracle", "random"]
N_ITEMS = 200
N_LEARN = 16


def _old_formula(seed: int, item_id: int, rater_id: int) -> bool:
    """The side draw the code used before: True when model_a went left."""
    return hashlib.sha256(f"{seed}:{item_id}:{rater_id}".encode()).digest()[0] % 2 == 0


def _rater(store: Store, study_id: int) -> int:
    invitation = create_invitations(store, study_id, 1)[0]
    return sign_in_with_invitation(store, invitation.code).rater_id


def _internal(store: Store, token: str) -> tuple[int, str, str]:
    """What the attacker is granted on top of what they see: the item's internal id and
    canonical pair order (consecutive ids are easy to guess)."""
    with store.session() as session:
        assignment = session.scalar(select(Assignment).where(Assignment.token == token))
        item = session.get(StudyItem, assignment.item_id)
        return item.id, item.model_a, item.model_b


def test_reveals_of_16_items_predict_no_later_side(tmp_path: Path):
    store = Store.open(f"sqlite:///{tmp_path / 'sides.db'}")
    run = write_run(tmp_path / "run", models=tuple(MODELS), tasks={"t-t": N_ITEMS}, payloads=True)
    study_id = create_study(store, "sides", MODELS, run, N_ITEMS, 1, True, seed=0).id
    rater = _rater(store, study_id)
    learned: list[bool] = []  # model_a on the left, as the reveals showed
    hits = {"old formula": 0, "majority of reveals": 0, "alternation": 0}
    n_predicted = 0
    while (view := next_item(store, study_id, rater)) is not None:
        item_id, model_a, _model_b = _internal(store, view.token)
        if len(learned) >= N_LEARN:  # predict before voting
            guesses = {
                "old formula": _old_formula(0, item_id, rater),
                "majority of reveals": 2 * sum(learned[:N_LEARN]) >= N_LEARN,
                "alternation": not learned[-1],
            }
        record_vote(store, view.token, rater, "A")
        a_left = reveal(store, view.token, rater)["A"] == model_a
        if len(learned) >= N_LEARN:
            n_predicted += 1
            for name, guess in guesses.items():
                hits[name] += guess == a_left
        learned.append(a_left)
    assert len(learned) == N_ITEMS and n_predicted == N_ITEMS - N_LEARN
    # no better than a fair coin: above the 99.9% point of Binomial(184, 1/2) fails
    ceiling = binom.ppf(0.999, n_predicted, 0.5)
    for name, correct in hits.items():
        assert correct <= ceiling, f"{name} predicted {correct} of {n_predicted} sides"
    assert 0.3 < sum(learned) / len(learned) < 0.7  # both sides do occur


def test_gold_items_fall_at_random_positions_and_reveal_like_any_item(tmp_path: Path):
    """Ten raters each rate every item: the serial positions of the gold items differ between
    raters (the old code gave every rater them at the same positions) and the reveal of a gold
    item names two of the study's models, never 'reference' or 'random'."""
    store = Store.open(f"sqlite:///{tmp_path / 'gold.db'}")
    run = write_run(tmp_path / "run", models=tuple(MODELS), tasks={"t-t": 30}, payloads=True)
    created = create_study(
        store,
        "qc",
        MODELS,
        run,
        8,
        raters_per_item=10,
        seed=0,
        gold_share=0.2,
        reveal_after_vote=True,
    )
    assert created.n_gold == 2
    patterns = set()
    voted: list[tuple[int, str]] = []
    for _ in range(10):
        rater = _rater(store, created.id)
        positions = []
        serial = 0
        while (view := next_item(store, created.id, rater)) is not None:
            with store.session() as session:
                assignment = session.scalar(
                    select(Assignment).where(Assignment.token == view.token)
                )
                gold = session.get(StudyItem, assignment.item_id).is_gold
            record_vote(store, view.token, rater, "B")
            voted.append((rater, view.token))
            if gold:
                positions.append(serial)
            serial += 1
        assert serial == 10 and len(positions) == 2
        patterns.add(tuple(positions))
    assert len(patterns) >= 3, patterns  # 45 equally likely pairs: 3+ distinct of 10 raters
    for rater, token in voted:  # every item has its 10 votes now, so each may be named
        names = reveal(store, token, rater)
        assert set(names.values()) <= set(MODELS) and names["A"] != names["B"], names


def test_a_reveal_never_reaches_a_rater_who_has_yet_to_vote_on_the_item(tmp_path: Path):
    """The adversarial pass: with two raters per item, rater 1 voted, stored each side's
    content against the names the reveal showed, and rater 3 (a second identity) then named
    both sides of 11 of 11 shared items before voting. Names now come only once an item has
    all its votes, and no vote on a named item can be undone (that would re-open it)."""
    store = Store.open(f"sqlite:///{tmp_path / 'carry.db'}")
    run = write_run(tmp_path / "run", models=tuple(MODELS), tasks={"t-t": 10}, payloads=True)
    study_id = create_study(
        store, "carry", MODELS, run, 4, raters_per_item=2, seed=0, reveal_after_vote=True
    ).id
    first, second = _rater(store, study_id), _rater(store, study_id)
    view = next_item(store, study_id, first)
    receipt = record_vote(store, view.token, first, "A")
    assert not receipt.can_reveal and receipt.named_later
    with pytest.raises(StudyError, match="every rater of this item has voted"):
        reveal(store, view.token, first)
    item_id = _internal(store, view.token)[0]
    while (other := next_item(store, study_id, second)) is not None:
        if _internal(store, other.token)[0] == item_id:
            break
        record_vote(store, other.token, second, "tie")
    assert other is not None
    completing = record_vote(store, other.token, second, "B")
    assert completing.can_reveal and not completing.named_later
    names = reveal(store, other.token, second)
    assert set(names.values()) == set(MODELS)
    assert set(reveal(store, view.token, first).values()) == set(MODELS)  # complete: named
    with pytest.raises(StudyError, match="final"):
        undo_last_vote(store, study_id, first, window_seconds=3600)
