"""Score CXR-Retrieve: rank a gallery for the 145 queries and score it (section 3.3, eq. 1-3).

Rankers follow the one protocol of medheb_app.eval.rankers (a `CxrRetrieveTask` in, a
(queries, images) score matrix out): embedding models by cosine (section 3.1), the
logic-aware ranker (medheb_app.ranking) and the label oracle alike. The ranking does not
depend on the relevance setting, so one ranking is scored under both main and strict
relevance (Table 5) at no extra cost. The runner's `cxr-retrieve` suite (eval/runner.py)
stores these reports like any run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from medheb_app.eval.metrics import (
    any_relevant_at_k,
    hard_negative_rate_at_k,
    macro_average,
    precision_at_k,
)
from medheb_app.eval.rankers import Ranker
from medheb_app.eval.results import CxrRetrieveReport, ModelSummary
from medheb_app.evidence.study import Study
from medheb_app.query.parser import Setting
from medheb_app.tasks.base import revision
from medheb_app.tasks.cxr_retrieve import (
    KINDS,
    BenchmarkQuery,
    CxrRetrieveTask,
    Gallery,
    hard_negative_ids,
    relevant_ids,
)

Progress = Callable[[float, str], None]
P_KS = (1, 3, 5)
R_KS = (3, 5)
TOP_K = 10
SETTINGS: tuple[Setting, ...] = ("main", "strict")


def top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Best-first gallery indices per row; ties keep gallery order (stable, reproducible)."""
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def query_metrics(
    ranked: Sequence[str], relevant: set[str], hard_negatives: set[str], negation: bool
) -> dict[str, float]:
    """One query's P@k, R@k and (negation only) HNRR@k, as fractions."""
    values = {f"P@{k}": precision_at_k(ranked, relevant, k) for k in P_KS}
    values.update({f"R@{k}": any_relevant_at_k(ranked, relevant, k) for k in R_KS})
    if negation:
        values.update(
            {f"HNRR@{k}": hard_negative_rate_at_k(ranked, hard_negatives, k) for k in P_KS}
        )
    return values


def regime_summary(per_query: Sequence[dict[str, float]]) -> dict[str, float]:
    """Macro average over a regime's queries, in percent."""
    names = per_query[0].keys()
    return {name: 100.0 * macro_average(q[name] for q in per_query) for name in names}


def evaluate(
    ranker: Ranker,
    gallery: Gallery,
    setting: Setting = "main",
    paraphrase: bool = False,
    progress: Progress | None = None,
    stop: Any = None,
) -> CxrRetrieveReport:
    """Rank `gallery` for the 145 queries and score under main and strict relevance."""
    if setting not in SETTINGS:
        raise ValueError(f"Unknown setting {setting!r}; use 'main' or 'strict'.")
    task = CxrRetrieveTask(gallery, paraphrase=paraphrase)
    queries = task.benchmark
    studies = gallery.studies
    ids = [s.id for s in studies]
    started = time.perf_counter()
    if progress:
        progress(0.0, f"ranking {len(studies)} images for {len(queries)} queries")
    scores = np.asarray(ranker.score(task, progress, stop), dtype=np.float64)
    if scores.shape != (len(queries), len(studies)):
        raise ValueError(f"Ranker {ranker.spec} returned scores of shape {scores.shape}.")
    ranked_at = time.perf_counter()
    order = top_indices(scores, min(TOP_K, len(studies)))
    per_setting: dict[str, dict[str, list[dict[str, float]]]] = {s: {} for s in SETTINGS}
    without: dict[str, dict[str, int]] = {s: dict.fromkeys(KINDS, 0) for s in SETTINGS}
    records = []
    for row, query in enumerate(queries):
        ranked = [ids[i] for i in order[row]]
        hard = hard_negative_ids(query, studies)
        record = _query_record(query, [studies[i] for i in order[row]], scores[row, order[row]])
        for name in SETTINGS:
            relevant = relevant_ids(query, studies, name)
            without[name][query.kind] += not relevant
            metrics = query_metrics(ranked, relevant, hard, query.kind == "negation")
            per_setting[name].setdefault(query.kind, []).append(metrics)
            record[f"n_relevant_{name}"] = len(relevant)
            record[f"metrics_{name}"] = metrics
        record["n_hard_negatives"] = len(hard)
        records.append(record)
    summaries = {
        name: {kind: regime_summary(rows) for kind, rows in per_kind.items()}
        for name, per_kind in per_setting.items()
    }
    return CxrRetrieveReport(
        model=ranker.spec,
        source=gallery.source,
        split=gallery.split,
        setting=setting,
        paraphrase=paraphrase,
        n_gallery=len(studies),
        regimes=summaries[setting],
        settings=summaries,
        without_relevant=without,
        queries=records,
        notes=list(gallery.notes),
        timing_s={
            "rank": round(ranked_at - started, 3),
            "score": round(time.perf_counter() - ranked_at, 3),
        },
        model_card=ranker.card.to_dict(),
        gallery_revision=gallery_revision(gallery),
        note=ranker.note,
    )


def gallery_revision(gallery: Gallery) -> str:
    """A short hash of the gallery's ids, labels and image files: what the numbers depend on."""
    return revision(
        gallery.source,
        gallery.split,
        [(s.id, s.path, sorted(s.findings.items())) for s in gallery.studies],
    )


def _query_record(
    query: BenchmarkQuery, top: Sequence[Study], scores: np.ndarray
) -> dict[str, Any]:
    vocabulary = set(query.constraints.vocabulary)
    return {
        "id": query.id,
        "kind": query.kind,
        "text": query.text,
        "positives": list(query.positives),
        "negatives": list(query.negatives),
        "top_k": [
            {
                "id": study.id,
                "score": round(float(score), 6),
                "findings": {k: v for k, v in study.findings.items() if k in vocabulary},
                "path": str(study.path) if study.path else None,
            }
            for study, score in zip(top, scores, strict=True)
        ],
    }


def cxr_model_summary(report: CxrRetrieveReport) -> ModelSummary:
    """A report's entry in a run Summary: its chosen setting's regime metrics, flat
    ("negation/P@5", percent), under the one task "cxr-retrieve"."""
    flat: dict[str, Any] = {
        "family": "T-I",
        "split": "ID",
        "graded": False,
        "relation": "",
        "n_queries": len(report.queries),
    }
    for kind, values in report.regimes.items():
        flat.update({f"{kind}/{name}": round(value, 2) for name, value in values.items()})
    return ModelSummary(
        model=report.model,
        model_card=report.model_card,
        tasks={"cxr-retrieve": flat},
        families={},
        splits={},
        consistency={},
        graded={},
        note=report.note,
    )
