"""Multi-reader multi-case (MRMC) analysis of a preference study: intervals that generalise to
new raters and new queries, not only to these votes (issue 18 item 1).

Several raters vote on the same queries, so votes cluster by rater and by query, and a Wilson
interval that treats every vote as an independent coin is too narrow. Radiology reader studies
use Obuchowski-Rockette (OR) analysis with Hillis' corrections (ORH), as iMRMC (FDA), MRMCaov
and RJafroc do; here it is applied to the figure of merit of a preference study.

Figure of merit: for a model pair (A, B), reader j's preference rate for A, theta_Aj = the mean
over the queries j rated of A's score (1 if A was preferred, 0 if B, a tie or "both poor" 0.5
with ties="half", left out with ties="exclude"); theta_Bj = 1 - theta_Aj. The modalities of
the OR model are the two models; readers are raters; cases are queries (all votes on one query
form one case, so the jackknife leaves a whole query out).

OR model (Obuchowski & Rockette 1995; Hillis, Obuchowski, Schartz & Berbaum 2005; Hillis 2007,
"A comparison of denominator degrees of freedom methods for multiple observer ROC analysis",
Stat Med 26:596-619; Hillis 2008, "Recent developments in the Dorfman-Berbaum-Metz procedure
for multireader ROC study analysis", Acad Radiol 15:351-360): with t modalities and r readers,

    MS(T)   = r / (t-1) * sum_i (theta_i. - theta..)^2
    MS(T*R) = 1 / ((t-1)(r-1)) * sum_ij (theta_ij - theta_i. - theta_.j + theta..)^2

and the case-sampling (co)variances of the reader FOMs estimated by the jackknife over cases,
Cov(theta_ij, theta_i'j') = (c-1)/c * sum_k (theta_ij(k) - mean_k)(theta_i'j'(k) - mean_k),
averaged into Var (same modality, same reader), Cov1 (other modality, same reader), Cov2 (same
modality, other reader) and Cov3 (other modality, other reader). Then

- RRRC (random readers, random cases): F = MS(T) / [MS(T*R) + r max(Cov2 - Cov3, 0)] on
  (t-1, ddf_H) with Hillis' ddf_H = [MS(T*R) + r max(Cov2 - Cov3, 0)]^2 /
  [MS(T*R)^2 / ((t-1)(r-1))]; CI of a difference: d +- t(ddf_H) sqrt(2/r [MS(T*R) + r max(.)]).
- FRRC (fixed readers, random cases): chi^2 = (t-1) MS(T) / [Var - Cov1 + (r-1) max(Cov2 -
  Cov3, 0)] on t-1 df; CI: d +- z sqrt(2/r [Var - Cov1 + (r-1) max(.)]).
- RRFC (random readers, fixed cases): F = MS(T) / MS(T*R) on (t-1, (t-1)(r-1)); CI: d +-
  t((t-1)(r-1)) sqrt(2 MS(T*R) / r).

A non-inferiority margin m tests H0: theta_A - theta_B <= -m one-sided with the same standard
error and df. `cluster_bootstrap` resamples raters and queries (two-way, with replacement) as a
cross-check; it is known to be somewhat wide (each resampling level also carries the other's
noise).

Readers need at least two rated queries to enter (the jackknife leaves one out); an unbalanced
design (not every rater rates every query, the usual case here) is handled by the jackknife
directly: leaving out a query a rater did not rate leaves that rater's FOM unchanged.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

TIES = ("half", "exclude")
GENERALISES = {
    "RRRC": "new raters and new queries like these (the claim a reader study usually makes)",
    "FRRC": "these raters only, reading new queries",
    "RRFC": "new raters reading these same queries",
    "bootstrap": "raters and queries resampled together; a cross-check of RRRC",
    "wilson": "these votes only, as if every vote were an independent coin (too narrow "
    "when raters share queries)",
}


@dataclass(frozen=True)
class ORCovariances:
    """The jackknife (co)variance components of the OR model."""

    var: float
    cov1: float
    cov2: float
    cov3: float


@dataclass(frozen=True)
class MRMCResult:
    """One analysis of the difference theta_A - theta_B (preference for A minus for B)."""

    analysis: str  # "RRRC" | "FRRC" | "RRFC" | "bootstrap"
    difference: float
    se: float
    df: float  # denominator degrees of freedom (inf: normal)
    lo: float
    hi: float
    p_value: float  # two-sided, H0: no difference
    statistic: float  # F (chi^2 for FRRC; NaN for the bootstrap)
    margin: float | None = None
    ni_p_value: float | None = None  # one-sided, H0: difference <= -margin
    generalises_to: str = ""

    @property
    def preference(self) -> tuple[float, float, float]:
        """The same result as A's preference rate theta_A = (1 + difference) / 2 and its CI,
        the CI cut to the rates that can happen (0 to 1): with two or three raters the t
        interval on few degrees of freedom reaches past them (the difference's lo/hi stay
        as computed, and `preference_clipped` says when the cut was made)."""
        lo, hi = (1 + self.lo) / 2, (1 + self.hi) / 2
        return (1 + self.difference) / 2, min(max(lo, 0.0), 1.0), min(max(hi, 0.0), 1.0)

    @property
    def preference_clipped(self) -> bool:
        """Whether the computed preference interval reached below 0 or above 1."""
        return bool(self.lo < -1 or self.hi > 1)

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["preference"], record["preference_lo"], record["preference_hi"] = self.preference
        record["preference_clipped"] = self.preference_clipped
        return record


# ---------------------------------------------------------------- the OR core (any FOM)


def or_covariances(jack: np.ndarray) -> ORCovariances:
    """Var, Cov1, Cov2, Cov3 from jackknife FOMs `jack[i, j, k]` (modality i, reader j, FOM
    without case k), each averaged over the pairs of its kind."""
    t, r, c = jack.shape
    centred = jack - jack.mean(axis=2, keepdims=True)
    flat = centred.reshape(t * r, c)
    cov = (c - 1) / c * (flat @ flat.T)  # (t r) x (t r)
    modality = np.repeat(np.arange(t), r)
    reader = np.tile(np.arange(r), t)
    same_i = modality[:, None] == modality[None, :]
    same_j = reader[:, None] == reader[None, :]

    def mean(mask: np.ndarray) -> float:
        return float(cov[mask].mean()) if mask.any() else 0.0

    return ORCovariances(
        var=mean(same_i & same_j),
        cov1=mean(~same_i & same_j),
        cov2=mean(same_i & ~same_j),
        cov3=mean(~same_i & ~same_j),
    )


def orh(
    theta: np.ndarray,
    jack: np.ndarray,
    confidence: float = 0.95,
    margin: float | None = None,
) -> dict[str, MRMCResult]:
    """RRRC, FRRC and RRFC results for theta[0] - theta[1] (modality 0 minus modality 1) from
    reader FOMs `theta[i, j]` and jackknife FOMs `jack[i, j, k]` (Hillis 2007, 2008)."""
    t, r = theta.shape
    if t != 2:
        raise ValueError("This analysis compares two modalities (one model pair) at a time.")
    if r < 2:
        raise ValueError("MRMC analysis needs at least two readers.")
    cov = or_covariances(jack)
    by_modality = theta.mean(axis=1)
    by_reader = theta.mean(axis=0)
    grand = theta.mean()
    ms_t = r / (t - 1) * float(((by_modality - grand) ** 2).sum())
    interaction = theta - by_modality[:, None] - by_reader[None, :] + grand
    ms_tr = float((interaction**2).sum()) / ((t - 1) * (r - 1))
    spread = max(cov.cov2 - cov.cov3, 0.0)
    difference = float(by_modality[0] - by_modality[1])
    z = 1 - (1 - confidence) / 2

    def result(name: str, denominator: float, df: float, statistic: float) -> MRMCResult:
        se = math.sqrt(max(2.0 / r * denominator, 0.0))
        quantile = stats.norm.ppf(z) if math.isinf(df) else stats.t.ppf(z, df)
        if se > 0:
            tail = stats.norm if math.isinf(df) else stats.t(df)
            p_value = float(2 * tail.sf(abs(difference) / se))
            ni = float(tail.sf((difference + margin) / se)) if margin is not None else None
        else:
            p_value = 0.0 if difference else 1.0
            ni = (0.0 if difference + margin > 0 else 1.0) if margin is not None else None
        return MRMCResult(
            analysis=name,
            difference=difference,
            se=se,
            df=df,
            lo=difference - quantile * se,
            hi=difference + quantile * se,
            p_value=p_value,
            statistic=statistic,
            margin=margin,
            ni_p_value=ni,
            generalises_to=GENERALISES[name],
        )

    rrrc_den = ms_tr + r * spread
    ddf_h = rrrc_den**2 / (ms_tr**2 / ((t - 1) * (r - 1))) if ms_tr > 0 else math.inf
    frrc_den = cov.var - cov.cov1 + (r - 1) * spread
    return {
        "RRRC": result("RRRC", rrrc_den, ddf_h, ms_t / rrrc_den if rrrc_den > 0 else math.inf),
        "FRRC": result(
            "FRRC", frrc_den, math.inf, (t - 1) * ms_t / frrc_den if frrc_den > 0 else math.inf
        ),
        "RRFC": result(
            "RRFC", ms_tr, float((t - 1) * (r - 1)), ms_t / ms_tr if ms_tr > 0 else math.inf
        ),
    }


# ---------------------------------------------------------------- preference studies


def score_matrix(
    votes: pd.DataFrame, ties: str = "half"
) -> tuple[np.ndarray, list[Any], list[Any]]:
    """A's score per (reader, case) for one model pair's votes: 1 A preferred, 0 B, 0.5 a tie
    or both poor (ties="half"; ties="exclude" leaves those votes out); NaN where the reader did
    not rate the case. A case is a query (task, query id); a rater with several votes on one
    query (impossible for one pair today) would be averaged. Returns (scores, readers, cases)."""
    if ties not in TIES:
        raise ValueError(f"ties must be one of {', '.join(TIES)}; got {ties!r}.")
    frame = votes
    if ties == "exclude":
        frame = frame[frame["outcome"].isin(["a", "b"])]
    score = frame["outcome"].map({"a": 1.0, "b": 0.0, "tie": 0.5, "both_poor": 0.5})
    case = (
        frame["task"].astype(str) + "\x1f" + frame["query_id"].astype(str)
        if "task" in frame.columns and "query_id" in frame.columns
        else frame["item"].astype(str)
    )
    table = (
        pd.DataFrame({"reader": frame["rater"].to_numpy(), "case": case.to_numpy(), "s": score})
        .groupby(["reader", "case"])["s"]
        .mean()
        .unstack("case")
    )
    return table.to_numpy(dtype=float), list(table.index), list(table.columns)


def reader_foms(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """theta[i, j] and the jackknife jack[i, j, k] of the two modalities (A, then B = 1 - A)
    from A's score matrix (readers x cases, NaN unrated); every reader needs >= 2 cases."""
    rated = ~np.isnan(scores)
    counts = rated.sum(axis=1)
    sums = np.where(rated, scores, 0.0).sum(axis=1)
    theta_a = sums / counts
    # leaving case k out: (sum - x_jk) / (n_j - 1) where rated, unchanged elsewhere
    without = (sums[:, None] - np.where(rated, scores, 0.0)) / (counts[:, None] - 1)
    jack_a = np.where(rated, without, theta_a[:, None])
    theta = np.stack([theta_a, 1 - theta_a])
    jack = np.stack([jack_a, 1 - jack_a])
    return theta, jack


def cluster_bootstrap(
    scores: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    margin: float | None = None,
) -> MRMCResult:
    """Two-way cluster bootstrap of theta_A - theta_B: raters and queries drawn with
    replacement, the statistic recomputed as the mean of the drawn raters' preference rates
    over their drawn queries (raters left with no query in a draw drop out of it); percentile
    interval, bootstrap standard error; p-value from the normal approximation."""
    rng = np.random.default_rng(seed)
    r, c = scores.shape
    rated = ~np.isnan(scores)
    values = np.where(rated, scores, 0.0)
    estimate = 2 * float(np.mean(np.nansum(scores, axis=1) / rated.sum(axis=1))) - 1
    draws = np.empty(n_boot)
    for b in range(n_boot):
        readers = rng.integers(0, r, r)
        case_weights = np.bincount(rng.integers(0, c, c), minlength=c).astype(float)
        n = rated[readers] @ case_weights
        s = values[readers] @ case_weights
        ok = n > 0
        draws[b] = 2 * float(np.mean(s[ok] / n[ok])) - 1 if ok.any() else np.nan
    draws = draws[~np.isnan(draws)]
    alpha = 1 - confidence
    lo, hi = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    se = float(draws.std(ddof=1))
    p_value = float(2 * stats.norm.sf(abs(estimate) / se)) if se > 0 else float(estimate == 0)
    ni = float(stats.norm.sf((estimate + margin) / se)) if margin is not None and se > 0 else None
    return MRMCResult(
        analysis="bootstrap",
        difference=estimate,
        se=se,
        df=math.inf,
        lo=float(lo),
        hi=float(hi),
        p_value=p_value,
        statistic=float("nan"),
        margin=margin,
        ni_p_value=ni,
        generalises_to=GENERALISES["bootstrap"],
    )


def analyse_pair(
    votes: pd.DataFrame,
    ties: str = "half",
    confidence: float = 0.95,
    margin: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """MRMC analysis of one model pair's (non-gold) votes: RRRC, FRRC, RRFC, the cluster
    bootstrap and, for comparison, the Wilson interval of the pooled preference rate. Raters
    with fewer than two rated queries are left out (listed in `dropped_raters`); with fewer
    than two raters left, `error` says why and no MRMC result is given."""
    scores, readers, cases = score_matrix(votes, ties)
    enough = (~np.isnan(scores)).sum(axis=1) >= 2
    dropped = [reader for reader, ok in zip(readers, enough, strict=True) if not ok]
    scores = scores[enough]
    summary: dict[str, Any] = {
        "ties": ties,
        "n_readers": int(enough.sum()),
        "n_cases": len(cases),
        "n_votes": int((~np.isnan(scores)).sum()),
        "dropped_raters": dropped,
        "confidence": confidence,
        "margin": margin,
        "results": {},
        "wilson": wilson_preference(scores, confidence),
    }
    if scores.shape[0] < 2:
        summary["error"] = "MRMC needs at least two raters with two or more rated queries each."
        return summary
    theta, jack = reader_foms(scores)
    results = orh(theta, jack, confidence, margin)
    if n_boot > 1:
        results["bootstrap"] = cluster_bootstrap(scores, n_boot, seed, confidence, margin)
    summary["results"] = {name: res.to_dict() for name, res in results.items()}
    summary["covariances"] = asdict(or_covariances(jack))
    return summary


def wilson_preference(scores: np.ndarray, confidence: float = 0.95) -> dict[str, Any]:
    """The pooled preference rate for A over every vote (ties as their score) with a Wilson
    interval on the vote count: what the per-vote analysis reports, for comparison."""
    values = scores[~np.isnan(scores)]
    n = len(values)
    if not n:
        return {"preference": None, "lo": None, "hi": None, "n": 0}
    p = float(values.mean())
    z = stats.norm.ppf(1 - (1 - confidence) / 2)
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2)) / (1 + z**2 / n)
    return {
        "preference": p,
        "lo": centre - half,
        "hi": centre + half,
        "n": n,
        "generalises_to": GENERALISES["wilson"],
    }


def mrmc_by_pair(
    votes: pd.DataFrame,
    ties: str = "half",
    margin: float | None = None,
    n_boot: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """`analyse_pair` for every model pair among the (non-gold) votes."""
    out = []
    for (model_a, model_b), pair in votes.groupby(["model_a", "model_b"], sort=True):
        result = analyse_pair(pair, ties, margin=margin, n_boot=n_boot, seed=seed)
        out.append({"model_a": model_a, "model_b": model_b, **result})
    return out


def mrmc_input(votes: pd.DataFrame, ties: str = "half") -> pd.DataFrame:
    """The MRMC input table iMRMC, RJafroc and MRMCaov read: one row per (reader, case,
    modality) with the score that modality got from that reader on that case (A's score and
    B's = 1 - A's), plus the truth column those tools expect (all 1: every case is a "signal"
    case whose figure of merit is the mean score, i.e. the preference rate)."""
    rows = []
    for (model_a, model_b), pair in votes.groupby(["model_a", "model_b"], sort=True):
        scores, readers, cases = score_matrix(pair, ties)
        for j, reader in enumerate(readers):
            for k, case in enumerate(cases):
                value = scores[j, k]
                if np.isnan(value):
                    continue
                task, _, query = str(case).partition("\x1f")
                case_id = f"{task}/{query}" if query else task
                for modality, score in ((model_a, value), (model_b, 1 - value)):
                    rows.append(
                        {
                            "reader": reader,
                            "case": case_id,
                            "modality": modality,
                            "score": score,
                            "truth": 1,
                            "pair": f"{model_a} vs {model_b}",
                        }
                    )
    return pd.DataFrame(rows, columns=["reader", "case", "modality", "score", "truth", "pair"])
