"""Simulated preference studies where the truth is known, to check what an interval promises
(issue 18 item 1) and to size a study (item 2).

Model: rater j prefers A on query k with probability logistic(mu + R_j + C_k), R_j ~ N(0,
sd_reader^2) and C_k ~ N(0, sd_case^2) (a rater's leaning, a query's difficulty for A). The
truth is the population preference rate E[logistic(mu + R + C)] over new raters and new
queries, the quantity an RRRC interval claims to cover.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from medheb_app.study.mrmc import cluster_bootstrap, orh, reader_foms, wilson_preference

INTERVALS = ("RRRC", "FRRC", "RRFC", "bootstrap", "wilson")


def population_preference(mu: float, sd_reader: float, sd_case: float) -> float:
    """E over reader and case effects of P(A preferred), by 60-point Gauss-Hermite quadrature."""
    x, w = np.polynomial.hermite_e.hermegauss(60)
    w = w / w.sum()
    p = expit(mu + sd_reader * x[:, None] + sd_case * x[None, :])
    return float((w[:, None] * w[None, :] * p).sum())


def simulate_scores(
    rng: np.random.Generator,
    readers: int,
    cases: int,
    mu: float,
    sd_reader: float,
    sd_case: float,
    per_case: int | None = None,
) -> np.ndarray:
    """One study's A-scores (readers x cases; 1 = A preferred), NaN where a rater did not rate
    a query (`per_case` raters drawn per query; None: every rater rates every query)."""
    p = expit(mu + rng.normal(0, sd_reader, (readers, 1)) + rng.normal(0, sd_case, (1, cases)))
    scores = (rng.random((readers, cases)) < p).astype(float)
    if per_case:
        keep = np.zeros_like(scores, dtype=bool)
        for k in range(cases):
            keep[rng.choice(readers, per_case, replace=False), k] = True
        scores[~keep] = np.nan
    return scores


def coverage(
    n_studies: int,
    readers: int,
    cases: int,
    mu: float = 0.4,
    sd_reader: float = 0.6,
    sd_case: float = 1.0,
    per_case: int | None = None,
    boot: int = 0,
    seed: int = 1,
) -> dict[str, float]:
    """Share of simulated studies whose 95% interval for the preference rate covers the truth,
    per interval (bootstrap only with `boot` > 0 resamples), plus the truth and the mean RRRC
    half-width."""
    truth = population_preference(mu, sd_reader, sd_case)
    rng = np.random.default_rng(seed)
    hits = dict.fromkeys(INTERVALS, 0)
    widths = []
    for n in range(n_studies):
        scores = simulate_scores(rng, readers, cases, mu, sd_reader, sd_case, per_case)
        theta, jack = reader_foms(scores)
        for name, result in orh(theta, jack).items():
            hits[name] += (1 + result.lo) / 2 <= truth <= (1 + result.hi) / 2
            if name == "RRRC":
                widths.append((result.hi - result.lo) / 4)
        wilson = wilson_preference(scores)
        hits["wilson"] += wilson["lo"] <= truth <= wilson["hi"]
        if boot:
            result = cluster_bootstrap(scores, boot, seed=n)
            hits["bootstrap"] += (1 + result.lo) / 2 <= truth <= (1 + result.hi) / 2
    out = {name: count / n_studies for name, count in hits.items()}
    if not boot:
        out.pop("bootstrap")
    return out | {"truth": truth, "rrrc_half_width": float(np.mean(widths))}
