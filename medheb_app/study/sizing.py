"""How many items a preference study needs, and how precise a running one is (issue 18 item 2).

Independent votes first: to tell a true preference p from 0.5 with a two-sided test at level
alpha and the given power, n0 = [z(1-alpha/2) sqrt(0.25) + z(power) sqrt(p(1-p))]^2 /
(p - 0.5)^2 votes (p = 0.60: 194, 0.65: 85, 0.70: 47 at alpha 0.05, power 0.8). Votes on one
query are correlated, so that is multiplied by the design effect 1 + (m - 1) ICC_query of m
votes per item (Kish 1965; Donner & Klar 2000 for cluster designs). Votes of one rater are
correlated too: with ICC_rater > 0 and R raters sharing n votes, n = n0 D (1 + (n/R - 1)
ICC_rater), solved for n:

    n = n0 D (1 - ICC_rater) / (1 - n0 D ICC_rater / R),

which has no solution when R <= n0 D ICC_rater: then no number of items is enough and more
raters are needed (a rater's leaning does not average out over their own votes). With no pilot,
ICC_query = 0.1 and ICC_rater = 0.02 are assumed and said so. The RRRC analysis tests on
about R - 1 degrees of freedom, so n0 is computed with t quantiles on R - 1 df (the
vote-level figure with normal quantiles is reported beside it); a pilot study's ICCs come from
`estimate_icc` (one-way ANOVA estimator for unbalanced groups).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

DEFAULT_ICC_QUERY = 0.1
DEFAULT_ICC_RATER = 0.02


@dataclass(frozen=True)
class Plan:
    """A study size: votes and items needed, with every assumption it rests on."""

    preference: float
    alpha: float
    power: float
    raters: int
    votes_per_item: int
    icc_query: float
    icc_rater: float
    n_votes_independent: int
    design_effect: float
    n_votes: int | None  # None: impossible with this many raters
    n_items: int | None
    min_raters: int  # fewer raters than this and no number of items suffices
    icc_source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def sentence(self) -> str:
        head = (
            f"To detect a true preference of {self.preference:.2f} (two-sided alpha "
            f"{self.alpha:g}, power {self.power:.0%}) with {self.raters} raters and "
            f"{self.votes_per_item} vote(s) per item ({self.icc_source}: ICC by query "
            f"{self.icc_query:.3g}, by rater {self.icc_rater:.3g}): "
        )
        if self.n_items is None:
            return head + (
                f"no number of items is enough; at least {self.min_raters} raters are needed."
            )
        return head + (
            f"{self.n_items} items ({self.n_votes} votes; {self.n_votes_independent} if votes "
            f"were independent, design effect {self.design_effect:.3g})."
        )


def independent_votes(
    preference: float, alpha: float = 0.05, power: float = 0.8, df: float | None = None
) -> float:
    """Votes needed if every vote were an independent coin (normal approximation; with `df`,
    t quantiles on that many degrees of freedom, as the RRRC test of R raters has about R - 1)."""
    if not 0 < preference < 1 or preference == 0.5:
        raise ValueError("The expected preference must be between 0 and 1 and not 0.5.")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError("alpha and power must be between 0 and 1.")
    quantile = stats.norm.ppf if df is None else stats.t(df).ppf
    za, zb = quantile(1 - alpha / 2), quantile(power)
    p = preference
    return (za * 0.5 + zb * math.sqrt(p * (1 - p))) ** 2 / (p - 0.5) ** 2


def plan(
    preference: float,
    raters: int,
    votes_per_item: int = 1,
    icc_query: float | None = None,
    icc_rater: float | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    icc_source: str | None = None,
) -> Plan:
    """Votes and items for the given design (see the module docstring)."""
    if raters < 1 or votes_per_item < 1:
        raise ValueError("A study needs at least one rater and one vote per item.")
    if votes_per_item > raters:
        raise ValueError("Votes per item cannot exceed the number of raters.")
    assumed = icc_query is None and icc_rater is None
    icc_query = DEFAULT_ICC_QUERY if icc_query is None else float(icc_query)
    icc_rater = DEFAULT_ICC_RATER if icc_rater is None else float(icc_rater)
    if not (0 <= icc_query < 1 and 0 <= icc_rater < 1):
        raise ValueError("An ICC is between 0 and 1.")
    n0 = independent_votes(preference, alpha, power)
    # the RRRC analysis tests on about raters - 1 degrees of freedom: t quantiles, not z
    n0_t = independent_votes(preference, alpha, power, df=raters - 1) if raters > 1 else n0
    design = 1 + (votes_per_item - 1) * icc_query
    base = n0_t * design
    min_raters = math.floor(base * icc_rater) + 1 if icc_rater > 0 else 1
    n_votes: int | None = None
    n_items: int | None = None
    if raters >= min_raters:
        n = base * (1 - icc_rater) / (1 - base * icc_rater / raters)
        n_votes = math.ceil(n)
        n_items = math.ceil(n / votes_per_item)
    return Plan(
        preference=preference,
        alpha=alpha,
        power=power,
        raters=raters,
        votes_per_item=votes_per_item,
        icc_query=icc_query,
        icc_rater=icc_rater,
        n_votes_independent=math.ceil(n0),
        design_effect=design,
        n_votes=n_votes,
        n_items=n_items,
        min_raters=min_raters,
        icc_source=icc_source or ("assumed, no pilot" if assumed else "given"),
    )


def estimate_icc(values: np.ndarray, groups: np.ndarray) -> float:
    """One-way ANOVA ICC of `values` grouped by `groups` (unbalanced groups: the adjusted group
    size n0 of Snedecor & Cochran), clipped at 0; NaN with fewer than two groups."""
    values = np.asarray(values, dtype=float)
    labels, index = np.unique(np.asarray(groups), return_inverse=True)
    k, n = len(labels), len(values)
    if k < 2 or n <= k:
        return float("nan")
    sizes = np.bincount(index)
    means = np.bincount(index, values) / sizes
    grand = values.mean()
    msb = float((sizes * (means - grand) ** 2).sum() / (k - 1))
    msw = float(((values - means[index]) ** 2).sum() / (n - k))
    size0 = (n - (sizes**2).sum() / n) / (k - 1)
    denominator = msb + (size0 - 1) * msw
    return max(0.0, (msb - msw) / denominator) if denominator > 0 else 0.0


SIZING_PREFERENCES = (0.60, 0.65, 0.70)
ASSUMED_RATERS = 5


def creation_note(n_items: int, votes_per_item: int, raters: int | None = None) -> str:
    """One line for a new study: the items a true preference of 0.60 / 0.65 / 0.70 needs with
    its votes per item (ICCs assumed, `raters` or ASSUMED_RATERS raters), beside what it has."""
    raters = max(raters or ASSUMED_RATERS, votes_per_item)
    parts = []
    for preference in SIZING_PREFERENCES:
        sized = plan(preference, raters, votes_per_item)
        parts.append(
            f"{preference:.2f}: {sized.n_items} items"
            if sized.n_items is not None
            else f"{preference:.2f}: more than {raters} raters"
        )
    return (
        f"Sizing (alpha 0.05, power 80%, {raters} raters, {votes_per_item} vote(s) per item, "
        f"ICC by query {DEFAULT_ICC_QUERY} and by rater {DEFAULT_ICC_RATER} assumed): a true "
        f"preference of {'; '.join(parts)}. This study has {n_items} items; "
        "`study plan` sizes other designs."
    )


MAX_PLANNING_ICC = 0.99


def planning_icc(icc: float) -> float:
    """An ICC observed on a few votes, as a plan can use it: within [0, MAX_PLANNING_ICC]. A
    pilot whose votes agree within every query (or every rater) estimates 1, where the design
    has no solution, rather than fail."""
    return min(max(float(icc), 0.0), MAX_PLANNING_ICC)


def pilot_estimates(votes: Any) -> dict[str, Any]:
    """From a (pilot) study's compared votes of its first model pair: the observed preference
    rate for model A, the ICC by query and by rater of A's score, votes per item, raters."""
    # deferred: pandas
    from medheb_app.study.mrmc import score_matrix

    if votes is None or not len(votes):
        raise ValueError("The pilot study has no votes yet.")
    (model_a, model_b), pair = next(iter(votes.groupby(["model_a", "model_b"], sort=True)))
    scores, readers, cases = score_matrix(pair)
    rows, cols = np.nonzero(~np.isnan(scores))
    values = scores[rows, cols]
    icc_query = estimate_icc(values, cols)
    icc_rater = estimate_icc(values, rows)
    return {
        "model_a": model_a,
        "model_b": model_b,
        "preference": float(values.mean()),
        "icc_query": 0.0 if math.isnan(icc_query) else icc_query,
        "icc_rater": 0.0 if math.isnan(icc_rater) else icc_rater,
        "votes_per_item": max(1, round(len(values) / max(len(cases), 1))),
        "raters": len(readers),
        "n_votes": len(values),
        "n_cases": len(cases),
    }


def precision_so_far(
    votes: Any, mrmc_pairs: list[dict[str, Any]], target_preference: float | None = None
) -> dict[str, Any] | None:
    """A running study's precision: the 95% CI half-width of the preference rate now (RRRC
    when it can be computed, else Wilson's), and the items still needed for the planned power
    at the observed preference (or `target_preference`) with the observed ICCs, raters and
    votes per item. None without votes."""
    if not mrmc_pairs:
        return None
    first = mrmc_pairs[0]
    rrrc = (first.get("results") or {}).get("RRRC")
    if rrrc is not None:
        half, source = (rrrc["hi"] - rrrc["lo"]) / 4, "RRRC"  # the unclipped width, in rate
    else:
        wilson = first.get("wilson") or {}
        if wilson.get("hi") is None:
            return None
        half, source = (wilson["hi"] - wilson["lo"]) / 2, "Wilson (RRRC needs two raters)"
    pilot = pilot_estimates(votes)
    preference = target_preference or pilot["preference"]
    out: dict[str, Any] = {"half_width": half, "source": source, "pilot": pilot}
    if abs(preference - 0.5) < 0.01:
        out["note"] = (
            "The observed preference is about 0.5, so no sample size detects it; plan with "
            "the preference you expect (`study plan`)."
        )
        return out
    if not 0 < preference < 1:  # every vote so far for one side: no variance to plan with
        out["note"] = (
            f"Every compared vote so far prefers one side (observed preference "
            f"{preference:.3g}), so it cannot size the study; plan with the preference you "
            "expect (`study plan`)."
        )
        return out

    sized = plan(
        preference,
        max(pilot["raters"], pilot["votes_per_item"]),
        pilot["votes_per_item"],
        planning_icc(pilot["icc_query"]),
        planning_icc(pilot["icc_rater"]),
        icc_source="observed so far",
    )
    out["plan"] = sized.to_dict()
    out["plan_sentence"] = sized.sentence()
    if sized.n_items is not None:
        out["items_needed"] = max(0, sized.n_items - pilot["n_cases"])
    return out
