"""Issue 18 item 3: the sequential outlier test against the consensus, speeders and
straight-liners flagged, results with and without them, the fragility figure, votes-per-rater
caps and admin-confirmed exclusions in an append-only log (each store test on SQLite and a real
PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_study_items import write_run

from medheb_app.store.db import Store
from medheb_app.study import (
    StudyError,
    create_invitations,
    create_study,
    next_item,
    progress,
    record_vote,
    sign_in_with_invitation,
)
from medheb_app.study.analysis import summarise
from medheb_app.study.export import votes_frame
from medheb_app.study.quality import (
    confirmed_exclusions,
    exclusion_log,
    fragility,
    rater_flags,
    record_exclusion,
    sequential_outlier_test,
)


def crowd(n_items=40, contrarian=True, seed=0) -> pd.DataFrame:
    """Five honest raters who prefer A on 80% of items (each item rated by all), and one who
    votes against the majority; choices are on-screen A/B with the left side at random."""
    rng = np.random.default_rng(seed)
    rows, vote_id = [], 0
    truth = rng.random(n_items) < 0.8  # A really is better on these items
    for rater in range(6):
        for item in range(n_items):
            vote_id += 1
            likes_a = truth[item] if rng.random() < 0.9 else not truth[item]
            if contrarian and rater == 5:
                likes_a = not truth[item]
            left_is_a = rng.random() < 0.5
            choice = "A" if likes_a == left_is_a else "B"
            rows.append(
                {
                    "vote_id": vote_id, "rater": rater, "item": item, "task": "t",
                    "query_id": f"q{item}", "model_a": "alpha", "model_b": "beta",
                    "outcome": "a" if likes_a else "b", "choice": choice,
                    "seconds": 20.0 + rng.random(), "gold": False, "stratum": "both_hit",
                }
            )  # fmt: skip
    return pd.DataFrame(rows)


def test_the_sequential_test_flags_a_contrarian_and_no_honest_rater():
    tests = sequential_outlier_test(crowd()).set_index("rater")
    assert bool(tests.loc[5, "outlier"]) and tests.loc[5, "p_value"] < 1e-6
    assert not tests.loc[list(range(5)), "outlier"].any(), tests
    honest = sequential_outlier_test(crowd(contrarian=False, seed=3))
    assert not honest["outlier"].any(), honest


def test_speeders_and_straight_liners_are_flagged():
    votes = crowd(contrarian=False)
    votes.loc[votes["rater"] == 1, "seconds"] = 1.2
    votes.loc[votes["rater"] == 2, "choice"] = "A"
    flags = rater_flags(votes).set_index("rater")["flags"]
    assert flags[1] == "speeder" and flags[2] == "straight-liner"
    assert (flags[[0, 3, 4, 5]] == "").all(), flags


def test_fragility_counts_the_votes_that_flip_the_preferred_model():
    rows = [{"model_a": "x", "model_b": "y", "outcome": o} for o in "aaaaaaabbt"]  # 7-2, 1 tie
    [row] = fragility(pd.DataFrame(rows))
    # S = 7.5 of n = 10: removing k wins of x gives (7.5 - k) / (10 - k) <= 1/2 from k = 5
    assert row["preferred"] == "x" and row["fragility"] == 5
    even = fragility(pd.DataFrame([{"model_a": "x", "model_b": "y", "outcome": o} for o in "ab"]))
    assert even[0]["preferred"] is None


def test_summary_reports_flags_results_without_them_and_fragility():
    summary = summarise(crowd(), n_boot=0)
    flagged = {row["rater"]: row["flags"] for row in summary["flags"] if row["flags"]}
    assert flagged == {5: "disagrees with consensus"}
    without = summary["without_flagged"]
    assert without["raters"] == [5]
    [pair] = without["mrmc"]
    assert pair["n_readers"] == 5
    with_all = summary["mrmc"][0]["results"]["RRRC"]["preference"]
    assert pair["results"]["RRRC"]["preference"] > with_all  # the contrarian pulled it down
    assert summary["fragility"][0]["preferred"] == "alpha"
    excluded = summarise(crowd(), n_boot=0, excluded=[5])
    assert excluded["n_raters"] == 5 and excluded["confirmed_exclusions"] == [5]


@pytest.fixture
def study(store: Store, tmp_path: Path) -> tuple[Store, int]:
    run = write_run(tmp_path / "run", models=("oracle", "random"), tasks={"t-t": 6}, payloads=True)
    return store, create_study(
        store, "capped", ["oracle", "random"], run, 6, raters_per_item=2, max_votes_per_rater=2
    ).id


def _rater(store: Store, study_id: int) -> int:
    return sign_in_with_invitation(store, create_invitations(store, study_id, 1)[0].code).rater_id


def test_votes_per_rater_are_capped(study):
    store, study_id = study
    rater = _rater(store, study_id)
    for _ in range(2):
        record_vote(store, next_item(store, study_id, rater).token, rater, "A")
    assert next_item(store, study_id, rater) is None
    outlook = progress(store, study_id, rater)
    assert outlook["capped"] and outlook["finished"] and outlook["done"] == 2


def test_exclusions_are_logged_append_only_and_keep_the_votes(study):
    store, study_id = study
    first, second = _rater(store, study_id), _rater(store, study_id)
    for rater in (first, second):
        view = next_item(store, study_id, rater)
        record_vote(store, view.token, rater, "A")
    with pytest.raises(StudyError, match="Say why"):
        record_exclusion(store, study_id, first, "")
    with pytest.raises(StudyError, match="has no rater"):
        record_exclusion(store, study_id, 9999, "unknown")
    record_exclusion(store, study_id, first, "failed gold items", "dr admin")
    assert confirmed_exclusions(store, study_id) == [first]
    record_exclusion(store, study_id, first, "", reinstate=True)
    record_exclusion(store, study_id, second, "speeder")
    assert confirmed_exclusions(store, study_id) == [second]
    log = exclusion_log(store, study_id)
    assert [row["action"] for row in log] == ["exclude", "reinstate", "exclude"]
    assert log[0]["by"] == "dr admin" and log[0]["reason"] == "failed gold items"
    assert len(votes_frame(store, study_id)) == 2  # no vote was deleted
