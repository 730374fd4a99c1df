"""Analysis of preference votes on hand-computed cases and independent implementations."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from medheb_app.study.analysis import (
    bradley_terry,
    bradley_terry_mm,
    cohen_kappa,
    fleiss_kappa,
    position_bias,
    preference_rates,
    rater_agreement,
    stratum_figure,
    summarise,
    wilson_interval,
)


def votes(rows: list[tuple]) -> pd.DataFrame:
    """(model_a, model_b, outcome, stratum, item, rater, choice) rows as a vote table."""
    columns = ["model_a", "model_b", "outcome", "stratum", "item", "rater", "choice"]
    return pd.DataFrame(rows, columns=columns)


def pairwise(model_a: str, model_b: str, a_wins: int, b_wins: int, ties: int = 0) -> list[tuple]:
    outcomes = ["a"] * a_wins + ["b"] * b_wins + ["tie"] * ties
    return [(model_a, model_b, o, "neither", i, "r1", "A") for i, o in enumerate(outcomes)]


def test_wilson_interval_matches_the_closed_form():
    k, n, z = 5, 10, stats.norm.ppf(0.975)
    p = k / n
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z / (1 + z**2 / n) * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    assert wilson_interval(k, n) == pytest.approx((centre - half, centre + half))
    assert wilson_interval(0, 20)[0] == pytest.approx(0.0)
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def test_preference_rates_overall_and_by_stratum():
    rows = [
        ("m1", "m2", "a", "both_hit", 1, "r", "A"),
        ("m1", "m2", "a", "neither", 2, "r", "B"),
        ("m1", "m2", "b", "neither", 3, "r", "A"),
        ("m1", "m2", "tie", "neither", 4, "r", "tie"),
        ("m1", "m2", "both_poor", "only_b", 5, "r", "both_poor"),
    ]
    rates = preference_rates(votes(rows)).set_index("stratum")
    assert rates.loc["all", "n"] == 5
    assert rates.loc["all", ["a", "b", "tie", "both_poor"]].tolist() == [2, 1, 1, 1]
    assert rates.loc["all", "a_rate"] == pytest.approx(0.4)
    assert rates.loc["neither", "n"] == 3
    assert rates.loc["neither", "a_rate"] == pytest.approx(1 / 3)
    assert (rates.loc["neither", "a_lo"], rates.loc["neither", "a_hi"]) == pytest.approx(
        wilson_interval(1, 3)
    )
    assert rates.loc["only_a", "n"] == 0 and math.isnan(rates.loc["only_a", "a_rate"])
    assert list(rates.index) == ["all", "both_hit", "only_a", "only_b", "neither"]


def test_bradley_terry_two_models_is_the_win_ratio():
    wins = np.array([[0, 3], [1, 0]])
    p = bradley_terry_mm(wins, prior=0)
    assert p[0] / p[1] == pytest.approx(3.0)
    assert np.prod(p) == pytest.approx(1.0)
    # a tie is half a win for each side: 1 win + 1 tie vs 0 wins + 1 tie -> 1.5 / 0.5 = 3
    frame = votes(pairwise("x", "y", a_wins=1, b_wins=0, ties=1))
    table = bradley_terry(frame, n_boot=0, prior=0).set_index("model")
    assert table.loc["x", "strength"] / table.loc["y", "strength"] == pytest.approx(3.0)


def test_bradley_terry_three_models_obvious_ranking_satisfies_score_equations():
    rows = (
        pairwise("good", "mid", 8, 2)
        + pairwise("mid", "poor", 8, 2)
        + pairwise("good", "poor", 9, 1)
    )
    frame = votes(rows)
    table = bradley_terry(frame, n_boot=100, seed=1, prior=0)
    assert table["model"].tolist() == ["good", "mid", "poor"]
    assert table["rank"].tolist() == [1, 2, 3]
    assert (table["lo"] <= table["strength"]).all() and (table["strength"] <= table["hi"]).all()
    # the MLE solves sum_j n_ij p_i / (p_i + p_j) = W_i for every model
    p = dict(zip(table["model"], table["strength"], strict=True))
    expected_wins = p["good"] * (10 / (p["good"] + p["mid"]) + 10 / (p["good"] + p["poor"]))
    assert expected_wins == pytest.approx(8 + 9)
    with pytest.raises(ValueError, match="at least one win"):
        bradley_terry_mm(np.array([[0, 2], [0, 0]]), prior=0)
    # the prior keeps a never-winning model finite and last
    assert np.all(np.isfinite(bradley_terry_mm(np.array([[0, 2], [0, 0]]), prior=0.5)))


def test_cohen_kappa_matches_sklearn():
    rng = np.random.default_rng(0)
    first = rng.choice(["a", "b", "tie", "both_poor"], size=40)
    second = np.where(rng.random(40) < 0.6, first, rng.choice(["a", "b", "tie"], size=40))
    assert cohen_kappa(first, second) == pytest.approx(cohen_kappa_score(first, second))


def test_fleiss_kappa_on_the_textbook_example():
    # Fleiss (1971) as worked on Wikipedia: 10 subjects, 14 raters, 5 categories -> 0.210
    counts = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    assert fleiss_kappa(np.array(counts)) == pytest.approx(0.20993, abs=1e-4)
    with pytest.raises(ValueError, match="at least two ratings"):
        fleiss_kappa(np.array([[1, 0], [1, 1]]))


def test_rater_agreement_picks_cohen_for_two_raters_and_fleiss_for_more():
    outcomes_1 = ["a", "a", "b", "tie", "a", "b"]
    outcomes_2 = ["a", "b", "b", "tie", "a", "a"]
    rows = [("m1", "m2", o, "neither", i, "r1", "A") for i, o in enumerate(outcomes_1)]
    rows += [("m1", "m2", o, "neither", i, "r2", "A") for i, o in enumerate(outcomes_2)]
    rows += [("m1", "m2", "a", "neither", 99, "r1", "A")]  # single-rated: not used
    two = rater_agreement(votes(rows))
    assert two["method"] == "cohen" and two["n_items"] == 6 and two["n_raters"] == 2
    assert two["kappa"] == pytest.approx(cohen_kappa_score(outcomes_1, outcomes_2))
    outcomes_3 = ["a", "a", "b", "tie", "b", "b"]
    rows += [("m1", "m2", o, "neither", i, "r3", "A") for i, o in enumerate(outcomes_3)]
    three = rater_agreement(votes(rows))
    assert three["method"] == "fleiss" and three["n_raters"] == 3
    counts = pd.crosstab(
        pd.Series(list(range(6)) * 3), pd.Series(outcomes_1 + outcomes_2 + outcomes_3)
    )
    assert three["kappa"] == pytest.approx(fleiss_kappa(counts.to_numpy()))
    none = rater_agreement(votes(rows[:1]))
    assert none["method"] is None and none["n_items"] == 0


def test_position_bias_binomial_test_on_left_choices():
    rows = [("m1", "m2", "a", "neither", i, "r", "A") for i in range(25)]
    rows += [("m1", "m2", "b", "neither", 100 + i, "r", "B") for i in range(5)]
    rows += [("m1", "m2", "tie", "neither", 200, "r", "tie")]
    bias = position_bias(votes(rows))
    assert (bias["n"], bias["left"]) == (30, 25)
    assert bias["left_rate"] == pytest.approx(25 / 30)
    assert bias["p_value"] == pytest.approx(stats.binomtest(25, 30, 0.5).pvalue)
    assert bias["p_value"] < 0.001


def test_summary_is_strict_json_and_figure_has_four_segments_per_pair():
    rows = pairwise("m1", "m2", 3, 1, ties=1) + pairwise("m1", "m3", 2, 2)
    frame = votes(rows)
    summary = summarise(frame, n_boot=20)
    text = json.dumps(summary, allow_nan=False)  # NaN (empty strata) must have become null
    assert json.loads(text)["n_votes"] == 9
    assert summary["bradley_terry"][0]["model"] == "m1"
    figure = stratum_figure(frame)
    assert len(figure.data) == 2 * 4
    first = figure.data[0]
    assert first.name == "m1 preferred"
    assert first.x[0] == pytest.approx(60.0)  # 3 of 5 in the "All" row
    assert figure.layout.barmode == "stack"
