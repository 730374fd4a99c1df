"""Run CXR-Retrieve: rank a gallery for the 145 queries and score it (section 3.3, eq. 1-3).

A Ranker maps query texts and a gallery to a (queries, images) score matrix. Embedding models
rank by cosine (section 3.1: image embeddings computed once, query embedded at search time);
the logic-aware ranker (medheb_app.ranking) plugs in through the same protocol. The ranking
does not depend on the relevance setting, so one ranking is scored under both main and strict
relevance (Table 5) at no extra cost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from medheb_app.eval.metrics import (
    any_relevant_at_k,
    hard_negative_rate_at_k,
    macro_average,
    precision_at_k,
)
from medheb_app.evidence.study import Study
from medheb_app.models.base import Embedder
from medheb_app.query.parser import Setting
from medheb_app.tasks.cxr_retrieve import (
    KINDS,
    BenchmarkQuery,
    Gallery,
    benchmark_queries,
    hard_negative_ids,
    relevant_ids,
)

Progress = Callable[[float, str], None]
P_KS = (1, 3, 5)
R_KS = (3, 5)
TOP_K = 10
SETTINGS: tuple[Setting, ...] = ("main", "strict")


class Ranker(Protocol):
    """Scores every gallery image for every query text; higher is better."""

    name: str

    def score(self, texts: Sequence[str], gallery: Sequence[Study]) -> np.ndarray:
        """(len(texts), len(gallery)) float scores."""
        ...


class EmbeddingRanker:
    """Cosine ranking with any Embedder; image vectors go through the embedding cache."""

    def __init__(self, embedder: Embedder, cache: Any = None, name: str | None = None) -> None:
        self.embedder = embedder
        self.cache = cache
        self.name = name or embedder.card.name

    def image_vectors(
        self, gallery: Sequence[Study], progress: Progress | None = None
    ) -> np.ndarray:
        from medheb_app.index.cache import embed_with_cache
        from medheb_app.index.catalog import study_content_key

        keys = [study_content_key(study) for study in gallery]
        return embed_with_cache(self.embedder, list(gallery), keys, self.cache, progress=progress)

    def score(self, texts: Sequence[str], gallery: Sequence[Study]) -> np.ndarray:
        queries = np.asarray(self.embedder.encode(list(texts)), dtype=np.float32)
        return queries @ self.image_vectors(gallery).T


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


@dataclass
class CxrRetrieveReport:
    """One model's run: per setting per regime metrics (percent) and every query's top 10."""

    model: str
    source: str
    split: str | None
    setting: Setting
    paraphrase: bool
    n_gallery: int
    regimes: dict[str, dict[str, float]]
    settings: dict[str, dict[str, dict[str, float]]]
    without_relevant: dict[str, dict[str, int]]
    queries: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    timing_s: dict[str, float] = field(default_factory=dict)
    model_card: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def evaluate(
    ranker: Ranker,
    gallery: Gallery,
    setting: Setting = "main",
    paraphrase: bool = False,
    progress: Progress | None = None,
) -> CxrRetrieveReport:
    """Rank `gallery` for the 145 queries and score under main and strict relevance."""
    if setting not in SETTINGS:
        raise ValueError(f"Unknown setting {setting!r}; use 'main' or 'strict'.")
    queries = benchmark_queries(gallery.vocabulary, paraphrase=paraphrase)
    studies = gallery.studies
    ids = [s.id for s in studies]
    started = time.perf_counter()
    if progress:
        progress(0.0, f"ranking {len(studies)} images for {len(queries)} queries")
    scores = np.asarray(ranker.score([q.text for q in queries], studies), dtype=np.float64)
    if scores.shape != (len(queries), len(studies)):
        raise ValueError(f"Ranker {ranker.name} returned scores of shape {scores.shape}.")
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
    card = getattr(getattr(ranker, "embedder", None), "card", None)
    return CxrRetrieveReport(
        model=ranker.name,
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
        model_card=card.to_dict() if card is not None else {},
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
            }
            for study, score in zip(top, scores, strict=True)
        ],
    }


# -- paper-style tables -------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def table2(reports: Sequence[CxrRetrieveReport]) -> str:
    """Table 2 layout: per regime, per model P@1/3/5, R@3/5 and HNRR@5 (negation only)."""
    header = "| Model | P@1 | P@3 | P@5 | R@3 | R@5 | HNRR@5 ↓ |\n|---|---|---|---|---|---|---|"
    titles = {
        "single": 'Single ("A")',
        "pair": 'Pair ("A and B")',
        "negation": 'Negation ("A and no B")',
    }
    lines = [header]
    for kind in KINDS:
        lines.append(f"| **{titles[kind]}** | | | | | | |")
        for report in reports:
            m = report.regimes[kind]
            cells = [m["P@1"], m["P@3"], m["P@5"], m["R@3"], m["R@5"], m.get("HNRR@5")]
            lines.append(f"| {report.model} | " + " | ".join(_fmt(c) for c in cells) + " |")
    return "\n".join(lines)


def table3(reports: Sequence[CxrRetrieveReport]) -> str:
    """Table 3 layout: (a) negation P@k/R@k of the given (e.g. paraphrased) run, (b) HNRR@k."""
    lines = ["| Model | P@1 | P@3 | P@5 | R@3 | R@5 |", "|---|---|---|---|---|---|"]
    for report in reports:
        m = report.regimes["negation"]
        cells = [m["P@1"], m["P@3"], m["P@5"], m["R@3"], m["R@5"]]
        lines.append(f"| {report.model} | " + " | ".join(_fmt(c) for c in cells) + " |")
    lines += ["", "| Model | HNRR@1 ↓ | HNRR@3 ↓ | HNRR@5 ↓ |", "|---|---|---|---|"]
    for report in reports:
        m = report.regimes["negation"]
        cells = [m["HNRR@1"], m["HNRR@3"], m["HNRR@5"]]
        lines.append(f"| {report.model} | " + " | ".join(_fmt(c) for c in cells) + " |")
    return "\n".join(lines)


def table5(reports: Sequence[CxrRetrieveReport]) -> str:
    """Table 5 layout: negation P@1, P@5 and HNRR@5 under main and strict relevance."""
    lines = ["| Setting | Model | P@1 | P@5 | HNRR@5 ↓ |", "|---|---|---|---|---|"]
    for name, title in (("main", "Main"), ("strict", "Strict confirmed negative")):
        for report in reports:
            m = report.settings[name]["negation"]
            cells = [m["P@1"], m["P@5"], m["HNRR@5"]]
            lines.append(
                f"| {title} | {report.model} | " + " | ".join(_fmt(c) for c in cells) + " |"
            )
    return "\n".join(lines)


def table4(rows: Sequence[tuple[str, str, CxrRetrieveReport]]) -> str:
    """Table 4 layout (ablations): (block, variant, report) -> P@5 per regime and HNRR@5."""
    lines = [
        "| Block | Variant | Single | Pair | Negation | HNRR@5 ↓ |",
        "|---|---|---|---|---|---|",
    ]
    for block, variant, report in rows:
        r = report.regimes
        cells = [
            r["single"]["P@5"],
            r["pair"]["P@5"],
            r["negation"]["P@5"],
            r["negation"]["HNRR@5"],
        ]
        lines.append(f"| {block} | {variant} | " + " | ".join(_fmt(c) for c in cells) + " |")
    return "\n".join(lines)


def p5_by_finding(report: Any, kind: str = "negation", setting: str = "main") -> dict[str, float]:
    """Mean P@5 (percent) of the `kind` queries per finding they require first: "A" for
    single, "A and no B" for negation. It shows which findings a model cannot retrieve."""
    rows: dict[str, list[float]] = {}
    for query in report.queries:
        if query["kind"] == kind:
            rows.setdefault(query["positives"][0], []).append(query[f"metrics_{setting}"]["P@5"])
    return {name: 100 * float(np.mean(values)) for name, values in rows.items()}


def finding_table(reports: Sequence[CxrRetrieveReport]) -> str:
    """Per finding A, per model: P@5 of "A" / mean P@5 of the nine "A and no B" queries."""
    findings = list(p5_by_finding(reports[0], "single", reports[0].setting))
    header = "| Finding (single / negation P@5) | " + " | ".join(r.model for r in reports) + " |"
    lines = [header, "|---" * (len(reports) + 1) + "|"]
    per_model = [
        (p5_by_finding(r, "single", r.setting), p5_by_finding(r, "negation", r.setting))
        for r in reports
    ]
    for name in findings:
        cells = [
            f"{_fmt(single.get(name))} / {_fmt(negation.get(name))}"
            for single, negation in per_model
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def coverage_line(report: CxrRetrieveReport) -> str:
    """How many queries have no relevant image (kept, scoring 0, as the paper does)."""
    counts = report.without_relevant[report.setting]
    total = sum(counts.values())
    parts = ", ".join(f"{kind} {counts[kind]}" for kind in KINDS)
    return (
        f"{total} of 145 queries have no relevant image in this gallery ({report.setting} "
        f"setting: {parts}); they are kept and score 0, as in the paper."
    )
