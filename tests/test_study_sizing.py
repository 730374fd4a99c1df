"""Issue 18 item 2: sizing a study (`study plan`, at creation) and its precision so far."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_study_cli import run_cli
from test_study_items import write_run

from medheb_app.study.simulation import simulate_scores
from medheb_app.study.sizing import creation_note, estimate_icc, independent_votes, plan


def test_independent_votes_match_the_issue_arithmetic():
    assert [round(independent_votes(p) + 0.5) for p in (0.60, 0.65, 0.70)] == [194, 85, 47]


def test_design_effect_t_quantiles_and_the_rater_floor():
    n0 = independent_votes(0.65, df=9)  # RRRC with 10 raters tests on about 9 df
    assert n0 > independent_votes(0.65)
    one = plan(0.65, raters=10, votes_per_item=1, icc_query=0.1, icc_rater=0.0)
    assert one.n_votes == one.n_items == int(np.ceil(n0))  # m = 1: no query clustering
    assert one.n_votes_independent == 85  # the vote-level figure is reported beside it
    three = plan(0.65, raters=10, votes_per_item=3, icc_query=0.1, icc_rater=0.0)
    assert three.design_effect == pytest.approx(1.2)
    assert three.n_votes == int(np.ceil(n0 * 1.2)) and three.n_items == int(np.ceil(n0 * 0.4))
    # rater clustering: n = n0 D (1 - rho) / (1 - n0 D rho / R), and too few raters fail
    rho = 0.05
    sized = plan(0.65, raters=10, votes_per_item=1, icc_query=0.0, icc_rater=rho)
    assert sized.n_votes == int(np.ceil(n0 * (1 - rho) / (1 - n0 * rho / 10)))
    few = plan(0.65, raters=4, votes_per_item=1, icc_query=0.0, icc_rater=rho)
    assert few.n_items is None and "raters are needed" in few.sentence()
    assert few.min_raters > 4
    assumed = plan(0.7, raters=5)
    assert "assumed, no pilot" in assumed.sentence()
    with pytest.raises(ValueError, match=r"not 0\.5"):
        plan(0.5, raters=3)


def test_icc_estimate_recovers_a_known_clustering():
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(400), 5)
    values = rng.normal(0, 1, 400)[groups] * np.sqrt(0.3) + rng.normal(0, np.sqrt(0.7), 2000)
    assert estimate_icc(values, groups) == pytest.approx(0.3, abs=0.06)
    assert estimate_icc(rng.normal(size=300), np.repeat(np.arange(60), 5)) < 0.1


def test_planned_items_give_the_power_they_promise():
    """The plan's items, simulated (20 raters sharing the items equally, one vote per item, no
    clustering), reject 'no preference' by ORH RRRC in about 80% of studies. With a random,
    unequal share per rater the power is lower (about 73%: docs/study.md says so)."""
    from medheb_app.study.mrmc import orh, reader_foms

    sized = plan(0.65, raters=20, votes_per_item=1, icc_query=0.0, icc_rater=0.0)
    rng = np.random.default_rng(7)
    rejected = 0
    n = 300
    logit = np.log(0.65 / 0.35)
    owner = np.arange(sized.n_items) % 20  # round-robin: equal shares
    for _ in range(n):
        scores = simulate_scores(rng, 20, sized.n_items, logit, 0.0, 0.0)
        scores[owner[None, :] != np.arange(20)[:, None]] = np.nan
        theta, jack = reader_foms(scores)
        rejected += orh(theta, jack)["RRRC"].p_value < 0.05
    assert 0.74 <= rejected / n <= 0.88, rejected / n


def test_study_plan_and_create_print_the_sizing(tmp_path: Path, settings, capsys):
    code, out, err = run_cli(
        capsys, "study", "plan", "--preference", "0.65", "--raters", "6", "--votes-per-item",
        "2", "--icc-query", "0.1", "--icc-rater", "0", "--json",
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    n0 = independent_votes(0.65, df=5)
    assert data["n_votes"] == int(np.ceil(n0 * 1.1))
    assert data["n_items"] == int(np.ceil(n0 * 1.1 / 2))
    code, out, err = run_cli(capsys, "study", "plan", "--preference", "0.65")
    assert code == 2 and "--raters" in err
    run = write_run(tmp_path / "run", payloads=True)
    code, out, err = run_cli(
        capsys, "study", "create", "--run", str(run), "--model", "oracle", "--model", "random",
        "--n", "4", "--name", "sized", "--raters", "2",
    )  # fmt: skip
    assert code == 0, err
    assert creation_note(4, 2) in out and "This study has 4 items" in out


def rate_oracle_pairs(settings, tmp_path: Path, name: str, n_items: int, raters: int, choose):
    """A study of oracle vs random over `n_items` text items, two raters an item, each of
    `raters` raters voting until nothing is left for them (at most 8 votes): `choose(n, r, query)`
    is True when rater r's n-th vote, on `query` (what the rater is shown), goes to the oracle's
    side, else to the other side."""
    from sqlalchemy import select

    from medheb_app.store.db import Store
    from medheb_app.store.study_tables import Assignment
    from medheb_app.study import (
        create_invitations,
        create_study,
        next_item,
        record_vote,
        sign_in_with_invitation,
    )

    run = write_run(tmp_path / "run", payloads=True, tasks={"t-t": n_items})
    store = Store.open(settings.database_url)
    study = create_study(store, name, ["oracle", "random"], run, n_items, raters_per_item=2)
    for r in range(raters):
        invitation = create_invitations(store, study.id, 1)[0]
        rater = sign_in_with_invitation(store, invitation.code).rater_id
        for n in range(8):
            view = next_item(store, study.id, rater)
            if view is None:
                break
            with store.session() as session:
                left = session.scalar(
                    select(Assignment.model_left).where(Assignment.token == view.token)
                )
            oracle_side = "A" if left == "oracle" else "B"
            other = "B" if oracle_side == "A" else "A"
            chosen = oracle_side if choose(n, r, view.query) else other
            record_vote(store, view.token, rater, chosen)


def test_a_running_study_reports_its_precision_and_the_items_still_needed(
    tmp_path: Path, settings, capsys
):
    # the oracle two times in three
    rate_oracle_pairs(settings, tmp_path, "pilot", 12, 3, lambda n, r, _: (n + r) % 3)
    code, out, err = run_cli(capsys, "study", "analyse", "--study", "pilot", "--boot", "20")
    assert code == 0, err
    assert "Precision so far: the 95% CI of the preference rate is +-" in out
    assert "(RRRC)" in out and "Items still needed:" in out
    code, out, err = run_cli(
        capsys, "study", "plan", "--pilot", "pilot", "--preference", "0.7", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["icc_source"] == "from pilot study pilot" and data["pilot"]["raters"] == 3


def test_a_pilot_whose_raters_agree_on_every_query_still_sizes_a_study(
    tmp_path: Path, settings, capsys
):
    """Both votes of every item agree (the oracle wins on two queries in three): the pilot's
    ICC by query is 1, where the design has no solution. `study plan` plans with 0.99, as the
    analysis's precision-so-far does, instead of failing with "An ICC is between 0 and 1"."""
    rate_oracle_pairs(
        settings, tmp_path, "agreed", 12, 3, lambda n, r, query: sum(map(ord, str(query))) % 3
    )
    code, out, err = run_cli(
        capsys, "study", "plan", "--pilot", "agreed", "--preference", "0.7", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["pilot"]["icc_query"] == 1.0 and 0 < data["pilot"]["preference"] < 1
    assert data["icc_query"] == 0.99 and data["icc_source"] == "from pilot study agreed"
    assert data["design_effect"] == pytest.approx(1 + (data["votes_per_item"] - 1) * 0.99)


def test_a_study_whose_every_vote_prefers_one_model_still_analyses(
    tmp_path: Path, settings, capsys
):
    """A unanimous pilot (observed preference 1.0) has no variance to size a study with: the
    analysis says so instead of failing (it raised from `plan` when the sides fell that way)."""
    rate_oracle_pairs(settings, tmp_path, "unanimous", 6, 2, lambda n, r, _: True)
    code, out, err = run_cli(capsys, "study", "analyse", "--study", "unanimous", "--boot", "20")
    assert code == 0, err
    assert "Every compared vote so far prefers one side (observed preference 1)" in out
    assert "Items still needed" not in out
    code, out, err = run_cli(capsys, "study", "plan", "--pilot", "unanimous")
    assert code == 2 and err.count("\n") == 1
    assert "prefers one side (observed preference 1)" in err and "--preference" in err
    code, out, err = run_cli(capsys, "study", "plan", "--pilot", "unanimous", "--preference", "0.7")
    assert code == 0, err
