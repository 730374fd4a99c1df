"""Admin-side study settings: the public title raters see, and gold (quality-control) items
with per-rater gold accuracy, speed and side bias in the analysis."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest
from sqlalchemy import select
from test_study_items import write_run

from medheb_app.store.db import Store
from medheb_app.store.study_tables import Assignment, StudyItem
from medheb_app.study import (
    StudyError,
    close_study,
    create_invitations,
    create_study,
    list_open_studies,
    list_studies,
    next_item,
    record_vote,
    reveal,
    sign_in_with_invitation,
)
from medheb_app.study.analysis import exclude_raters, rater_quality, summarise
from medheb_app.study.export import votes_frame
from medheb_app.study.items import GOLD_RANDOM, GOLD_REFERENCE

MODELS = ["oracle", "random"]


@pytest.fixture
def store(settings) -> Store:
    return Store.open(settings.database_url)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run", models=tuple(MODELS), payloads=True)


def test_raters_see_the_public_title_never_the_internal_name(store: Store, run_dir: Path):
    """Attack: the rater-facing study list showed the internal study name."""
    study_id = create_study(
        store, "oracle-vs-random-internal", MODELS, run_dir, 4,
        public_title="Chest X-ray retrieval study", open_enrolment=True, reveal_after_vote=True
    ).id  # fmt: skip
    legacy = create_study(store, "second internal", MODELS, run_dir, 4, reveal_after_vote=True).id
    public = list_open_studies(store)
    assert [(s.id, s.title, s.open_enrolment) for s in public] == [
        (study_id, "Chest X-ray retrieval study", True),
        (legacy, "Reader study: which list of studies is more useful?", False),
    ]
    shown = json.dumps([asdict(s) for s in public])
    assert "internal" not in shown and "oracle" not in shown and "random" not in shown
    admin = {s["id"]: s for s in list_studies(store)}
    assert admin[study_id]["name"] == "oracle-vs-random-internal"
    assert admin[study_id]["public_title"] == "Chest X-ray retrieval study"
    close_study(store, legacy)
    assert [s.id for s in list_open_studies(store)] == [study_id]
    assert admin[legacy]["closed"] is False and list_studies(store)[1]["closed"] is True
    with pytest.raises(StudyError, match="must not name the models"):
        create_study(
            store,
            "x1",
            MODELS,
            run_dir,
            2,
            public_title="Oracle versus chance",
            reveal_after_vote=True,
        )
    with pytest.raises(StudyError, match="internal study name"):
        create_study(
            store,
            "secret pilot",
            MODELS,
            run_dir,
            2,
            public_title="Secret Pilot 2",
            reveal_after_vote=True,
        )


def reference_side(store: Store, token: str) -> str | None:
    """Test-only peek: which on-screen side holds the reference list of a gold item."""
    with store.session() as session:
        assignment = session.scalar(select(Assignment).where(Assignment.token == token))
        item = session.get(StudyItem, assignment.item_id)
        if not item.is_gold:
            return None
        return "A" if assignment.model_left == GOLD_REFERENCE else "B"


def test_gold_items_look_like_any_item_and_measure_raters(store: Store, run_dir: Path):
    created = create_study(
        store,
        "qc",
        MODELS,
        run_dir,
        6,
        raters_per_item=2,
        gold_share=0.25,
        seed=4,
        reveal_after_vote=True,
    )
    assert (created.n_items, created.n_gold) == (6, 2)  # 2 of 8 items = 25%
    with store.session() as session:
        gold = session.scalars(select(StudyItem).where(StudyItem.is_gold.is_(True))).all()
        for item in gold:
            assert (item.model_a, item.model_b) == (GOLD_REFERENCE, GOLD_RANDOM)
            assert item.top_a[0]["id"] in item.gold  # relevance first
            assert not {e["id"] for e in item.top_b} & set(item.gold)  # random, not relevant
        regular = session.scalars(select(StudyItem).where(StudyItem.is_gold.is_(False))).all()
        assert {(i.model_a, i.model_b) for i in regular} == {tuple(MODELS)}
    shapes = set()
    for name, careful in (("careful", True), ("careless", False)):
        invitation = create_invitations(store, created.id, 1)[0]
        rater = sign_in_with_invitation(store, invitation.code, name).rater_id
        while (view := next_item(store, created.id, rater)) is not None:
            shapes.add(
                (
                    tuple(asdict(view)),
                    tuple(sorted(view.query)),
                    tuple(tuple(sorted(p)) for p in view.side_a + view.side_b),
                )
            )
            side = reference_side(store, view.token)
            wrong = {"A": "B", "B": "A"}.get(side or "")
            choice = "A" if side is None else (side if careful else wrong)
            receipt = record_vote(store, view.token, rater, choice)
            if side is not None:
                # names only once both raters of the item voted: the second rater's vote
                assert receipt.can_reveal is (not careful)
                if receipt.can_reveal:
                    names = reveal(store, view.token, rater)
                    assert set(names.values()) == set(MODELS)  # a cover pair, like any item
    assert len(shapes) == 1  # gold and compared items are served in the very same shape

    votes = votes_frame(store, created.id)
    assert votes["gold"].sum() == 4 and len(votes) == 16
    quality = rater_quality(votes).set_index("rater")
    by_name = dict(zip(votes["rater"], votes["rater_name"], strict=True))
    accuracy = {by_name[r]: quality.loc[r, "gold_accuracy"] for r in quality.index}
    assert accuracy == {"careful": 1.0, "careless": 0.0}
    assert (quality["n_gold"] == 2).all() and (quality["median_seconds"] >= 0).all()

    summary = summarise(votes, n_boot=0, min_gold_accuracy=0.5)
    careless = next(r for r, n in by_name.items() if n == "careless")
    assert summary["excluded_raters"] == [careless]
    assert summary["n_gold_votes"] == 4
    assert summary["n_votes"] == 6  # the careful rater's compared votes only, gold left out
    assert summary["agreement"]["n_raters"] == 2 and summary["agreement_kept"]["method"] is None
    rates = next(r for r in summary["rates"] if r["stratum"] == "all")
    assert (rates["model_a"], rates["model_b"]) == tuple(MODELS)  # no gold pair in the rates
    everyone = summarise(votes, n_boot=0)
    assert everyone["n_votes"] == 12 and everyone["excluded_raters"] == []
    with pytest.raises(StudyError, match="gold_share"):
        create_study(store, "too much", MODELS, run_dir, 4, gold_share=0.9, reveal_after_vote=True)


def test_rater_quality_on_a_hand_made_table():
    rows = [
        # rater, gold, outcome, choice, seconds
        (1, True, "a", "A", 10.0),
        (1, True, "b", "B", 20.0),
        (1, False, "a", "A", 30.0),
        (1, False, "tie", "tie", 40.0),
        (2, False, "b", "A", 5.0),
        (2, False, "a", "A", 7.0),
    ]
    frame = pd.DataFrame(rows, columns=["rater", "gold", "outcome", "choice", "seconds"])
    quality = rater_quality(frame).set_index("rater")
    assert quality.loc[1, "gold_accuracy"] == 0.5 and quality.loc[1, "n_gold"] == 2
    assert quality.loc[1, "median_seconds"] == 25.0
    assert quality.loc[1, "side_a_share"] == pytest.approx(2 / 3)
    assert quality.loc[2, "side_a_share"] == 1.0 and pd.isna(quality.loc[2, "gold_accuracy"])
    kept, excluded = exclude_raters(frame, 0.6)
    assert excluded == [1] and set(kept["rater"]) == {2}  # no gold yet: kept
