"""Vote quality beyond gold accuracy (issue 18 item 3), after Chatbot Arena's own cleaning:
a per-rater sequential outlier test against the consensus, speeders and straight-liners
flagged, a fragility figure, and exclusions that an admin confirms, kept in an append-only log
(votes are never deleted).

- Sequential outlier test (Chiang et al. 2024, "Chatbot Arena", section 5.3, anomalous users):
  each A/B vote of a rater is compared with the consensus of the *other* raters (on the same
  item when others rated it, else on the model pair): it disagrees when it takes the side the
  consensus finds less likely, which a rater like the others does with probability q_i =
  min(P(A), 1 - P(A)). After each vote the number of disagreements so far is tested against
  its Poisson-binomial distribution under the consensus (exact upper tail), and the rater is
  flagged when the smallest tail probability over the looks, times the number of looks (a
  Bonferroni correction for testing after every vote), falls below alpha. (Fisher's
  combination of per-vote p-values, which Arena describes, is very conservative with such
  discrete p-values: a rater against every one of 40 consensus votes stayed unflagged.)
- Speeders: median seconds from claim to vote below `SPEEDER_SECONDS` (with 5+ votes).
- Straight-liners: one on-screen choice in at least `STRAIGHT_SHARE` of 10+ votes.
- Fragility: the fewest votes whose removal changes the preferred model of a pair on the
  pooled preference rate S / n (ties half): removing wins of the preferred model, it stops
  being preferred once (S - k) / (n - k) <= 1/2, so k = ceil(2 S - n) (Arena reports that 2 of
  57,477 votes can flip a ranking pair).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import select

from medheb_app.store.db import Store
from medheb_app.store.study_tables import Rater, RaterExclusion
from medheb_app.study.errors import StudyError

OUTLIER_ALPHA = 0.01
SPEEDER_SECONDS = 3.0
STRAIGHT_SHARE = 0.9
MIN_VOTES_STRAIGHT = 10
MIN_VOTES_SPEED = 5


def _scores(votes: pd.DataFrame) -> pd.Series:
    return votes["outcome"].map({"a": 1.0, "b": 0.0, "tie": 0.5, "both_poor": 0.5})


def sequential_outlier_test(votes: pd.DataFrame, alpha: float = OUTLIER_ALPHA) -> pd.DataFrame:
    """Per rater: A/B votes tested, the smallest Bonferroni-corrected Fisher p-value over the
    looks, and whether the rater is flagged (compared, non-gold votes in vote order)."""
    frame = votes.assign(score=_scores(votes))
    if "vote_id" in frame.columns:
        frame = frame.sort_values("vote_id")
    decided = frame[frame["outcome"].isin(["a", "b"])]
    rows = []
    for rater, own in decided.groupby("rater", sort=True):
        others = frame[frame["rater"] != rater]
        by_item = others.groupby("item")["score"].agg(["sum", "count"])
        by_pair = others.groupby(["model_a", "model_b"])["score"].agg(["sum", "count"])
        dist = np.array([1.0])  # P(D = d) of the disagreements so far under the consensus
        disagreed, looks, worst = 0, 0, 1.0
        for vote in own.itertuples():
            if vote.item in by_item.index:
                total, count = by_item.loc[vote.item]
            elif (vote.model_a, vote.model_b) in by_pair.index:
                total, count = by_pair.loc[(vote.model_a, vote.model_b)]
            else:
                continue  # nobody else to agree or disagree with yet
            # consensus P(A), shrunk towards 1/2 by one pseudo-vote each way (never 0 or 1)
            p_a = (total + 1.0) / (count + 2.0)
            minority_a = p_a < 0.5
            q = min(p_a, 1 - p_a)  # chance that a rater like the others takes the minority side
            dist = np.convolve(dist, [1 - q, q])
            disagreed += (vote.outcome == "a") == minority_a and p_a != 0.5
            looks += 1
            worst = min(worst, float(dist[disagreed:].sum()))  # P(D >= disagreed)
        corrected = min(1.0, worst * looks) if looks else 1.0
        rows.append(
            {
                "rater": rater,
                "n_tested": looks,
                "p_value": corrected,
                "outlier": looks > 0 and corrected < alpha,
            }
        )
    return pd.DataFrame(rows, columns=["rater", "n_tested", "p_value", "outlier"])


def shared_clients(votes: pd.DataFrame) -> dict[Any, list[Any]]:
    """Per rater, the other raters who enrolled from the same client (votes' "client" column,
    study.export.enrolment_client); only raters who share one appear."""
    if "client" not in votes.columns or not len(votes):
        return {}
    raters = votes.groupby("client")["rater"].unique()
    return {
        rater: sorted(other for other in group if other != rater)
        for group in raters
        if len(group) > 1
        for rater in group
    }


def rater_flags(votes: pd.DataFrame) -> pd.DataFrame:
    """Per rater: outlier (sequential test), speeder, straight-liner and a client shared with
    other raters (one person may have enrolled twice), with the figures."""
    outliers = sequential_outlier_test(votes).set_index("rater")
    sharing = shared_clients(votes)
    rows = []
    for rater, own in votes.groupby("rater", sort=True):
        seconds = own["seconds"].median() if "seconds" in own.columns else float("nan")
        top_share = own["choice"].value_counts(normalize=True).max() if len(own) else 0.0
        test = outliers.loc[rater] if rater in outliers.index else None
        flags = []
        if test is not None and bool(test["outlier"]):
            flags.append("disagrees with consensus")
        if len(own) >= MIN_VOTES_SPEED and seconds < SPEEDER_SECONDS:
            flags.append("speeder")
        if len(own) >= MIN_VOTES_STRAIGHT and top_share >= STRAIGHT_SHARE:
            flags.append("straight-liner")
        if rater in sharing:
            others = ", ".join(map(str, sharing[rater]))
            flags.append(f"enrolled from the same client as rater {others}")
        rows.append(
            {
                "rater": rater,
                "n_votes": len(own),
                "outlier_p": float(test["p_value"]) if test is not None else None,
                "median_seconds": float(seconds),
                "same_choice_share": float(top_share),
                "flags": ", ".join(flags),
            }
        )
    return pd.DataFrame(
        rows,
        columns=["rater", "n_votes", "outlier_p", "median_seconds", "same_choice_share", "flags"],
    )


def fragility(votes: pd.DataFrame) -> list[dict[str, Any]]:
    """Per model pair: the preferred model on the pooled preference rate and the fewest votes
    whose removal would leave it no longer preferred (None when neither is preferred)."""
    out = []
    for (model_a, model_b), pair in votes.groupby(["model_a", "model_b"], sort=True):
        scores = _scores(pair).dropna().to_numpy()
        n, total = len(scores), float(scores.sum())
        if n == 0 or total * 2 == n:
            out.append({"model_a": model_a, "model_b": model_b, "preferred": None, "n": n})
            continue
        a_wins = total * 2 > n
        lead = 2 * total - n if a_wins else n - 2 * total  # = wins - losses of the preferred
        out.append(
            {
                "model_a": model_a,
                "model_b": model_b,
                "preferred": model_a if a_wins else model_b,
                "n": n,
                "fragility": math.ceil(lead - 1e-9),
            }
        )
    return out


# ---------------------------------------------------------------- confirmed exclusions


def record_exclusion(
    store: Store,
    study_id: int,
    rater_id: int,
    reason: str,
    decided_by: str = "admin",
    reinstate: bool = False,
) -> None:
    """Append an admin's decision to exclude (or reinstate) a rater of a study."""
    reason = " ".join((reason or "").split())
    if not reinstate and not reason:
        raise StudyError("Say why this rater's votes are excluded (it is kept in the log).")
    if len(reason) > 500:
        raise StudyError("A reason can be at most 500 characters.")
    with store.session() as session:
        rater = session.get(Rater, int(rater_id))
        if rater is None or rater.study_id != int(study_id):
            raise StudyError(f"Study {study_id} has no rater {rater_id}.")
        session.add(
            RaterExclusion(
                study_id=int(study_id),
                rater_id=int(rater_id),
                action="reinstate" if reinstate else "exclude",
                reason=reason,
                decided_by=decided_by,
            )
        )


def confirmed_exclusions(store: Store, study_id: int) -> list[int]:
    """Raters of a study whose latest logged decision is "exclude"."""
    with store.session() as session:
        rows = session.execute(
            select(RaterExclusion.rater_id, RaterExclusion.action)
            .where(RaterExclusion.study_id == int(study_id))
            .order_by(RaterExclusion.id)
        ).all()
    latest: dict[int, str] = {}
    for rater_id, action in rows:
        latest[int(rater_id)] = action
    return sorted(r for r, action in latest.items() if action == "exclude")


def exclusion_log(store: Store, study_id: int) -> list[dict[str, Any]]:
    """The whole log, oldest first."""
    with store.session() as session:
        rows = session.scalars(
            select(RaterExclusion)
            .where(RaterExclusion.study_id == int(study_id))
            .order_by(RaterExclusion.id)
        ).all()
        return [
            {
                "rater": r.rater_id,
                "action": r.action,
                "reason": r.reason,
                "by": r.decided_by,
                "at": r.created_at.isoformat(timespec="seconds"),
            }
            for r in rows
        ]


def without_raters(votes: pd.DataFrame, raters: list[Any]) -> pd.DataFrame:
    """The votes of everyone but `raters`."""
    return votes[~votes["rater"].isin(list(raters))] if len(raters) else votes
