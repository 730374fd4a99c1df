"""Analysis of the preference votes (MedHEB section 5.6, Figure 7): pure functions over the
vote table of `export.votes_frame` (columns model_a, model_b, outcome in {a, b, tie,
both_poor}, stratum, item, rater, choice).

- preference_rates: share of each outcome per model pair, overall and per top-1 stratum
  (both hit / only a / only b / neither), with Wilson 95% intervals.
- bradley_terry: strengths from all pairwise outcomes (Hunter 2004 MM algorithm). A tie and a
  "both poor" both count as half a win for each side; a weak prior of `prior` virtual ties per
  compared pair keeps strengths finite when a model never wins. Percentile bootstrap intervals.
- rater_agreement: Cohen's kappa when exactly two raters share items, Fleiss' kappa otherwise,
  over the canonical outcome (not the on-screen side, which differs per rater).
- position_bias: how often the left list (on-screen "A") wins among A/B votes, vs 50%.
- rater_quality: per rater, accuracy on gold (quality-control) items (choosing the reference
  list; a tie or "both poor" counts as wrong), median seconds from claim to vote, and side
  bias (share of on-screen A among that rater's A/B votes).
- exclude_raters: drop raters whose gold accuracy is below a threshold.

Gold items (column `gold`) never enter the model comparison (rates, Bradley-Terry, agreement,
position bias); `summarise` reports agreement with and without the excluded raters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from scipy import stats

from medheb_app.study.mrmc import mrmc_by_pair
from medheb_app.study.quality import fragility, rater_flags, shared_clients, without_raters
from medheb_app.study.sizing import precision_so_far

OUTCOMES = ("a", "b", "tie", "both_poor")
STRATA = ("both_hit", "only_a", "only_b", "neither")


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion k / n (NaN when n is 0)."""
    if n == 0:
        return float("nan"), float("nan")
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence, method="wilson")
    return float(ci.low), float(ci.high)


def preference_rates(votes: pd.DataFrame, confidence: float = 0.95) -> pd.DataFrame:
    """Per pair and stratum ("all" first): n, then count / rate / lo / hi of each outcome."""
    rows = []
    for (model_a, model_b), pair in votes.groupby(["model_a", "model_b"], sort=True):
        for name in ("all", *STRATA):
            subset = pair if name == "all" else pair[pair["stratum"] == name]
            row: dict[str, Any] = {
                "model_a": model_a,
                "model_b": model_b,
                "stratum": name,
                "n": len(subset),
            }
            for result in OUTCOMES:
                k = int((subset["outcome"] == result).sum())
                lo, hi = wilson_interval(k, len(subset), confidence)
                rate = k / len(subset) if len(subset) else float("nan")
                row |= {result: k, f"{result}_rate": rate, f"{result}_lo": lo, f"{result}_hi": hi}
            rows.append(row)
    return pd.DataFrame(rows)


def _pairwise_counts(votes: pd.DataFrame, models: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """wins[i, j]: times i beat j, ties counted as half; games[i, j]: comparisons of i and j."""
    index = {m: i for i, m in enumerate(models)}
    wins = np.zeros((len(models), len(models)))
    ia = votes["model_a"].map(index).to_numpy()
    ib = votes["model_b"].map(index).to_numpy()
    result = votes["outcome"].to_numpy()
    share_a = np.where(result == "a", 1.0, np.where(result == "b", 0.0, 0.5))
    np.add.at(wins, (ia, ib), share_a)
    np.add.at(wins, (ib, ia), 1.0 - share_a)
    return wins, wins + wins.T


def bradley_terry_mm(
    wins: np.ndarray, prior: float = 0.5, tol: float = 1e-10, max_iter: int = 10_000
) -> np.ndarray:
    """Bradley-Terry strengths p (geometric mean 1) from a win matrix, P(i beats j) =
    p_i / (p_i + p_j), by Hunter's MM update p_i <- W_i / sum_j n_ij / (p_i + p_j).

    `prior` adds that many virtual ties to every pair that was compared at least once.
    """
    wins = np.asarray(wins, dtype=float)
    games = wins + wins.T
    if prior > 0:
        compared = games > 0
        wins = wins + 0.5 * prior * compared
        games = wins + wins.T
    total_wins = wins.sum(axis=1)
    if np.any(total_wins <= 0):
        raise ValueError("Every model needs at least one win or tie for Bradley-Terry.")
    p = np.ones(len(wins))
    for _ in range(max_iter):
        denom = (games / (p[:, None] + p[None, :])).sum(axis=1)
        new = total_wins / denom
        new /= np.exp(np.log(new).mean())
        if np.max(np.abs(new - p)) < tol:
            return new
        p = new
    return p


def bradley_terry(
    votes: pd.DataFrame, n_boot: int = 200, seed: int = 0, prior: float = 0.5
) -> pd.DataFrame:
    """Rank models by Bradley-Terry strength with percentile bootstrap 95% intervals
    (votes resampled with replacement). Columns: model, strength, lo, hi, rank."""
    models = sorted(set(votes["model_a"]) | set(votes["model_b"]))
    if len(models) < 2 or votes.empty:
        return pd.DataFrame(columns=["model", "strength", "lo", "hi", "rank"])
    strength = bradley_terry_mm(_pairwise_counts(votes, models)[0], prior)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        sample = votes.iloc[rng.integers(0, len(votes), len(votes))]
        try:
            boots.append(bradley_terry_mm(_pairwise_counts(sample, models)[0], prior))
        except ValueError:  # a resample where a model never won: skip it
            continue
    frame = pd.DataFrame({"model": models, "strength": strength, "lo": np.nan, "hi": np.nan})
    if boots:
        frame["lo"] = np.percentile(boots, 2.5, axis=0)
        frame["hi"] = np.percentile(boots, 97.5, axis=0)
    frame["rank"] = frame["strength"].rank(ascending=False, method="min").astype(int)
    return frame.sort_values("rank").reset_index(drop=True)


def cohen_kappa(first: Sequence[str], second: Sequence[str]) -> float:
    """Cohen's kappa of two raters' labels on the same items."""
    first, second = np.asarray(first), np.asarray(second)
    if len(first) != len(second) or len(first) == 0:
        raise ValueError("Cohen's kappa needs two equally long, non-empty label lists.")
    labels = np.union1d(first, second)
    observed = np.mean(first == second)
    expected = sum(np.mean(first == c) * np.mean(second == c) for c in labels)
    return float("nan") if expected == 1 else float((observed - expected) / (1 - expected))


def fleiss_kappa(counts: np.ndarray) -> float:
    """Fleiss' kappa from an items x categories matrix of rating counts. Items may have
    different numbers of ratings (each at least 2): per-item agreement is averaged and the
    category shares are pooled over all ratings."""
    counts = np.asarray(counts, dtype=float)
    per_item = counts.sum(axis=1)
    if counts.ndim != 2 or len(counts) == 0 or np.any(per_item < 2):
        raise ValueError("Fleiss' kappa needs items with at least two ratings each.")
    agreement = ((counts**2).sum(axis=1) - per_item) / (per_item * (per_item - 1))
    shares = counts.sum(axis=0) / counts.sum()
    expected = float((shares**2).sum())
    observed = float(agreement.mean())
    return float("nan") if expected == 1 else (observed - expected) / (1 - expected)


def rater_agreement(votes: pd.DataFrame) -> dict[str, Any]:
    """Agreement on items rated more than once: Cohen's kappa when those items have exactly
    two raters in all, Fleiss' kappa otherwise."""
    multi = votes.groupby("item").filter(lambda g: g["rater"].nunique() >= 2)
    raters = sorted(multi["rater"].unique())
    result: dict[str, Any] = {
        "method": None,
        "kappa": float("nan"),
        "n_items": int(multi["item"].nunique()),
        "n_raters": len(raters),
    }
    if multi.empty:
        return result
    if len(raters) == 2:
        wide = multi.pivot_table(index="item", columns="rater", values="outcome", aggfunc="last")
        return result | {
            "method": "cohen",
            "kappa": cohen_kappa(wide[raters[0]].tolist(), wide[raters[1]].tolist()),
        }
    last = multi.drop_duplicates(["item", "rater"], keep="last")
    counts = pd.crosstab(last["item"], last["outcome"]).reindex(columns=OUTCOMES, fill_value=0)
    return result | {"method": "fleiss", "kappa": fleiss_kappa(counts.to_numpy())}


def position_bias(votes: pd.DataFrame) -> dict[str, Any]:
    """Share of A/B votes that chose the left list, with a two-sided binomial test vs 0.5."""
    decided = votes[votes["choice"].isin(["A", "B"])]
    n, left = len(decided), int((decided["choice"] == "A").sum())
    lo, hi = wilson_interval(left, n)
    p_value = float(stats.binomtest(left, n, 0.5).pvalue) if n else float("nan")
    rate = left / n if n else float("nan")
    return {"n": n, "left": left, "left_rate": rate, "lo": lo, "hi": hi, "p_value": p_value}


def is_gold(votes: pd.DataFrame) -> pd.Series:
    """Which rows are gold (quality-control) votes; all False for a table without the column."""
    if "gold" not in votes.columns:
        return pd.Series(False, index=votes.index)
    return votes["gold"].fillna(False).astype(bool)


def cannot_judge(votes: pd.DataFrame) -> pd.Series:
    """Which rows are "cannot judge" votes (left out of every preference figure, counted)."""
    if "outcome" not in votes.columns:
        return pd.Series(False, index=votes.index)
    return votes["outcome"] == "cannot_judge"


def model_votes(votes: pd.DataFrame) -> pd.DataFrame:
    """The votes that compare models: gold items and "cannot judge" votes removed."""
    return votes[~is_gold(votes) & ~cannot_judge(votes)]


def cannot_judge_counts(votes: pd.DataFrame) -> dict[str, Any]:
    """How many compared-item votes could not judge, in all and per reason."""
    rows = votes[~is_gold(votes) & cannot_judge(votes)]
    reasons = rows["reason"].value_counts().to_dict() if "reason" in rows.columns else {}
    return {"n": len(rows), "reasons": {str(k): int(v) for k, v in reasons.items()}}


QUALITY_COLUMNS = [
    "rater",
    "n_votes",
    "n_gold",
    "gold_correct",
    "gold_accuracy",
    "median_seconds",
    "n_ab",
    "side_a_share",
]


def rater_quality(votes: pd.DataFrame) -> pd.DataFrame:
    """One row per rater: gold accuracy (NaN without gold votes), median seconds per item
    (NaN without a `seconds` column), side bias = share of on-screen A among A/B votes."""
    gold = is_gold(votes)
    rows = []
    for rater, own in votes.groupby("rater", sort=True):
        own_gold = own[gold.loc[own.index]]
        correct = int((own_gold["outcome"] == "a").sum())
        decided = own[own["choice"].isin(["A", "B"])]
        seconds = own["seconds"].median() if "seconds" in own.columns else float("nan")
        rows.append(
            {
                "rater": rater,
                "n_votes": len(own),
                "n_gold": len(own_gold),
                "gold_correct": correct,
                "gold_accuracy": correct / len(own_gold) if len(own_gold) else float("nan"),
                "median_seconds": float(seconds),
                "n_ab": len(decided),
                "side_a_share": (
                    float((decided["choice"] == "A").mean()) if len(decided) else float("nan")
                ),
            }
        )
    return pd.DataFrame(rows, columns=QUALITY_COLUMNS)


def exclude_raters(votes: pd.DataFrame, min_gold_accuracy: float) -> tuple[pd.DataFrame, list[Any]]:
    """The votes of raters whose gold accuracy is at least `min_gold_accuracy`, and the
    excluded raters. A rater who has not rated a gold item yet is kept (nothing to judge)."""
    quality = rater_quality(votes)
    low = quality[quality["gold_accuracy"] < min_gold_accuracy]["rater"].tolist()
    return votes[~votes["rater"].isin(low)], low


def summarise(
    votes: pd.DataFrame,
    n_boot: int = 200,
    seed: int = 0,
    min_gold_accuracy: float | None = None,
    ties: str = "half",
    margin: float | None = None,
    excluded: list[Any] | None = None,
) -> dict[str, Any]:
    """Everything the analysis view and `study analyse --json` show, as plain data.

    Gold items are left out of the model comparison. With `min_gold_accuracy`, raters below
    it are excluded from rates, Bradley-Terry and position bias; agreement is reported with
    all raters ("agreement") and without the excluded ones ("agreement_kept"). "mrmc": per
    model pair, the ORH analyses, the cluster bootstrap (`n_boot` draws) and the Wilson
    figure of the preference rate (study.mrmc; `ties` "half" or "exclude", an optional
    non-inferiority `margin` on the difference). `excluded`: raters an admin excluded (the
    logged, confirmed exclusions of study.quality), left out of everything. "flags": per
    rater, the sequential outlier test, speeder and straight-liner flags; "without_flagged":
    the MRMC figures without the flagged raters; "fragility": per pair, the fewest votes whose
    removal changes the preferred model; "one_rater_per_client": the MRMC figures with raters
    who enrolled from one client merged into one (per_client)."""
    quality = rater_quality(votes) if len(votes) else pd.DataFrame(columns=QUALITY_COLUMNS)
    confirmed = list(excluded or [])
    excluded = []
    kept = without_raters(votes, confirmed) if len(votes) else votes
    if min_gold_accuracy is not None and len(kept):
        kept, excluded = exclude_raters(kept, min_gold_accuracy)
    compared = model_votes(kept)
    models = set(compared["model_a"]) | set(compared["model_b"])
    summary: dict[str, Any] = {
        "n_votes": len(compared),
        "n_gold_votes": int(is_gold(votes).sum()),
        "cannot_judge": cannot_judge_counts(kept),
        "n_items": int(compared["item"].nunique()) if len(compared) else 0,
        "n_raters": int(compared["rater"].nunique()) if len(compared) else 0,
        "ties": "tie and both_poor count as half a win for each side in Bradley-Terry",
        "rates": _records(preference_rates(compared)),
        "agreement": rater_agreement(model_votes(votes)),
        "agreement_kept": rater_agreement(compared),
        "min_gold_accuracy": min_gold_accuracy,
        "excluded_raters": excluded,
        "raters": _records(quality),
        "position_bias": position_bias(compared),
        "bradley_terry": [],
    }
    if len(models) >= 2 and len(compared):
        summary["bradley_terry"] = _records(bradley_terry(compared, n_boot=n_boot, seed=seed))
    summary["mrmc"] = (
        mrmc_by_pair(compared, ties=ties, margin=margin, n_boot=n_boot, seed=seed)
        if len(compared)
        else []
    )
    summary["precision"] = precision_so_far(compared, summary["mrmc"]) if len(compared) else None
    summary["confirmed_exclusions"] = confirmed
    flags = rater_flags(compared) if len(compared) else pd.DataFrame(columns=["rater", "flags"])
    summary["flags"] = _records(flags)
    flagged = flags[flags["flags"] != ""]["rater"].tolist()
    summary["without_flagged"] = {
        "raters": flagged,
        "mrmc": (
            mrmc_by_pair(without_raters(compared, flagged), ties=ties, margin=margin, n_boot=0)
            if flagged and len(without_raters(compared, flagged))
            else []
        ),
    }
    summary["fragility"] = fragility(compared) if len(compared) else []
    summary["one_rater_per_client"] = per_client(compared, ties, margin, n_boot, seed)
    return _no_nan(summary)


SENSITIVITY_READINGS = ("without_flagged", "one_rater_per_client")


def sensitivity_results(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The RRRC preference of each model pair under each sensitivity reading of a summary
    (without the flagged raters; one rater per enrolment client), for the tab and the CLI."""
    rows = []
    for reading in SENSITIVITY_READINGS:
        part = summary.get(reading) or {}
        for pair in part.get("mrmc") or []:
            result = pair["results"].get("RRRC")
            if result:
                rows.append(
                    {
                        "reading": reading,
                        "n_raters": len(part.get("raters") or []),
                        "model_a": pair["model_a"],
                        "preference": result["preference"],
                        "lo": result["preference_lo"],
                        "hi": result["preference_hi"],
                    }
                )
    return rows


SENSITIVITY_LABELS = {
    "without_flagged": "Without the flagged raters",
    "one_rater_per_client": "One rater per enrolment client",
}


def _readers(n: int) -> str:
    return {0: "no reader", 1: "one reader"}.get(n, f"{n} readers")


def _gap_reason(reading: str, pair: dict[str, Any], n_shared: int, n_raters: Any) -> str:
    """Why one model pair of a sensitivity reading has no RRRC result, as a clause."""
    n_readers = int(pair.get("n_readers") or 0)
    if reading == "one_rater_per_client" and n_readers + len(pair.get("dropped_raters") or []) == 1:
        if n_shared == n_raters:
            return (
                f"all {n_shared} raters enrolled from one client, so the comparison has one reader"
            )
        return "this pair's raters enrolled from one client, so the comparison has one reader"
    if n_readers < 2:
        merged = "merged by client" if reading == "one_rater_per_client" else "without them"
        return (
            f"{merged}, the comparison has {_readers(n_readers)} with two or more rated "
            "queries, and MRMC needs two"
        )
    return "the MRMC analysis gave no RRRC result"


def sensitivity_gaps(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The sensitivity readings a summary applies to but could not compute (no RRRC result
    for a model pair, e.g. every rater enrolled from one client), each with a sentence saying
    why, so `study analyse` and the tab say so rather than leave the reading out."""
    rows = []
    for reading in SENSITIVITY_READINGS:
        part = summary.get(reading) or {}
        raters = part.get("raters") or []
        if not raters:
            continue  # the reading does not apply: nobody flagged, no client shared
        pairs = part.get("mrmc") or []
        gaps = [
            (f" ({pair['model_a']} vs {pair['model_b']})", pair)
            for pair in pairs
            if not (pair.get("results") or {}).get("RRRC")
        ]
        if not pairs:  # every vote was left out (all raters flagged): no pair to analyse
            gaps = [("", None)]
        for named_pair, pair in gaps:
            reason = (
                f"all {len(raters)} raters who voted are flagged"
                if pair is None
                else _gap_reason(reading, pair, len(raters), summary.get("n_raters"))
            )
            rows.append(
                {
                    "reading": reading,
                    "model_a": pair and pair.get("model_a"),
                    "model_b": pair and pair.get("model_b"),
                    "reason": reason,
                    "sentence": f"{SENSITIVITY_LABELS[reading]}{named_pair}: not computed: "
                    f"{reason}.",
                }
            )
    return rows


def per_client(
    compared: pd.DataFrame, ties: str, margin: float | None, n_boot: int, seed: int
) -> dict[str, Any]:
    """The MRMC figures with the raters who enrolled from one client counted as one rater
    (study.export.enrolment_client): an open-enrolment study cannot tell one person who
    joined twice from two colleagues behind one address, so both readings are reported.
    Empty lists when no two raters share a client."""
    sharing = shared_clients(compared)
    if not sharing:
        return {"raters": [], "mrmc": []}
    merged = compared.assign(rater=compared["client"])
    return {
        "raters": sorted(sharing),
        "mrmc": mrmc_by_pair(merged, ties=ties, margin=margin, n_boot=n_boot, seed=seed),
    }


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dict(orient="records")


def _no_nan(value: Any) -> Any:
    """NaN (an empty stratum, an undefined kappa) and infinite degrees of freedom as None,
    and numpy scalars as Python ones, so the summary is strict JSON."""
    if isinstance(value, dict):
        return {key: _no_nan(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_no_nan(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    return value


def stratum_figure(votes: pd.DataFrame) -> go.Figure:
    """Stacked bars of outcome shares per top-1 stratum, one panel per model pair (Figure 7)."""
    rates = preference_rates(votes)
    pairs = list(dict.fromkeys(zip(rates["model_a"], rates["model_b"], strict=True)))
    titles = [f"{a} vs {b}" for a, b in pairs] or ["no votes yet"]
    figure = make_subplots(rows=max(len(pairs), 1), cols=1, subplot_titles=titles)
    colors = {"a": "#1f77b4", "tie": "#bbbbbb", "both_poor": "#7f7f7f", "b": "#ff7f0e"}
    for row, (model_a, model_b) in enumerate(pairs, start=1):
        pair = rates[(rates["model_a"] == model_a) & (rates["model_b"] == model_b)]
        labels = {
            "all": "All",
            "both_hit": "Both hit",
            "only_a": f"Only {model_a} hit",
            "only_b": f"Only {model_b} hit",
            "neither": "Neither hit",
        }
        names = {"a": f"{model_a} preferred", "b": f"{model_b} preferred"}
        names |= {"tie": "Tie", "both_poor": "Both poor"}
        y = [f"{labels[s]} (n={n})" for s, n in zip(pair["stratum"], pair["n"], strict=True)]
        for result in ("a", "tie", "both_poor", "b"):
            figure.add_trace(
                go.Bar(
                    x=100 * pair[f"{result}_rate"],
                    y=y,
                    orientation="h",
                    name=names[result],
                    marker_color=colors[result],
                    legendgroup=f"{row}-{result}",
                    hovertemplate="%{y}: %{x:.1f}%<extra>" + names[result] + "</extra>",
                ),
                row=row,
                col=1,
            )
        figure.update_yaxes(autorange="reversed", row=row, col=1)
        figure.update_xaxes(title_text="% of comparisons", range=[0, 100], row=row, col=1)
    figure.update_layout(barmode="stack", height=320 * max(len(pairs), 1))
    return figure
