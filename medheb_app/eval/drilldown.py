"""What the explorer's drill-down shows of a stored run, as plain data read from its files.

For either kind of run (MedHEB tasks, CXR-Retrieve queries): the queries of a task with a
hit / miss mark per model (hit = the top-1 candidate is relevant), the query as what it is
(text, image or volume, with its labels or constraints), and each model's top-k with its
evidence (a payload the UI renders), its finding labels, whether it is gold and, for
compositional queries, which constraint a retrieved image violates
(medheb_app.query.violations: "Pneumonia present" on a hard negative of "A and no
Pneumonia"). The UI only renders these objects; nothing here imports the UI or the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from medheb_app.eval.results import CxrRetrieveReport, Summary, TaskRun
from medheb_app.query.parser import ParsedQuery, satisfies, violations
from medheb_app.tasks.cxr_retrieve import KINDS

TOP_K = 10


@dataclass(frozen=True)
class QueryOutcome:
    """One query of a task: its id, what it says, and per model whether its top 1 is relevant."""

    id: str
    text: str
    hits: dict[str, bool]

    @property
    def failed(self) -> bool:
        """Some chosen model missed at rank 1."""
        return not all(self.hits.values())

    def label(self, models: list[str]) -> str:
        """'✓✗ neg-03 · Atelectasis and no pneumonia' (one mark per model, in order)."""
        marks = "".join("✓" if self.hits[m] else "✗" if m in self.hits else "·" for m in models)
        text = self.text if len(self.text) <= 70 else self.text[:69] + "…"
        return f"{marks} {self.id}" + (f" · {text}" if text else "")


@dataclass(frozen=True)
class HitView:
    """One retrieved candidate as shown: rank, id, score, evidence, labels, gold, violations."""

    rank: int
    id: str
    score: float | None
    payload: dict[str, Any]
    gold: bool
    findings: dict[str, Any] = field(default_factory=dict)
    violated: dict[str, str] = field(default_factory=dict)  # finding -> "missing" | "present"


@dataclass(frozen=True)
class RankedView:
    """One model's answer to one query."""

    model: str
    hits: list[HitView]
    summary: str  # "Hit@1 0 · gold first at rank 4" / "P@5 40 · HNRR@5 20"
    hit: bool


@dataclass(frozen=True)
class QueryView:
    """The query as what it is: its payload (text / image / volume) and its labels."""

    id: str
    payload: dict[str, Any]
    labels: list[str]
    gold: list[str]


def drill_tasks(summary: Summary) -> list[str]:
    """What the task picker lists: MedHEB task names, or CXR-Retrieve's three regimes."""
    if summary.kind == "cxr-retrieve":
        return list(KINDS)
    names: list[str] = []
    for block in summary.models.values():
        names += [task for task in block.tasks if task not in names]
    return sorted(names)


def _reports(summary: Summary, models: list[str]) -> dict[str, CxrRetrieveReport]:
    return {m: summary.cxr_report(m) for m in models if m in summary.models}


def _runs(summary: Summary, task: str, models: list[str]) -> dict[str, TaskRun]:
    return {
        m: summary.task_run(m, task)
        for m in models
        if m in summary.models and task in summary.models[m].tasks
    }


def _text(payload: Any) -> str:
    if isinstance(payload, str):
        return payload
    if isinstance(payload, dict):
        if payload.get("text"):
            return str(payload["text"])
        path = payload.get("image") or payload.get("volume")
        if path:
            return f"[{payload.get('form', 'image')}: {str(path).rsplit('/', 1)[-1]}]"
    return ""


def query_outcomes(summary: Summary, task: str, models: list[str]) -> list[QueryOutcome]:
    """Every query of `task` (a regime for CXR-Retrieve) with each model's hit at rank 1."""
    if summary.kind == "cxr-retrieve":
        reports = _reports(summary, models)
        if not reports:
            return []
        first = next(iter(reports.values()))
        outcomes = []
        for i, query in enumerate(first.queries):
            if query["kind"] != task:
                continue
            hits = {
                m: r.queries[i][f"metrics_{r.setting}"]["P@1"] == 1.0 for m, r in reports.items()
            }
            outcomes.append(QueryOutcome(query["id"], query["text"], hits))
        return outcomes
    runs = _runs(summary, task, models)
    if not runs:
        return []
    first = next(iter(runs.values()))
    by_model = {m: {str(q["id"]): q for q in run.queries} for m, run in runs.items()}
    return [
        QueryOutcome(
            str(q["id"]),
            _text(q.get("query")),
            {m: by_model[m].get(str(q["id"]), {}).get("hit@1", 0) == 1 for m in runs},
        )
        for q in first.queries
    ]


def _gold(record: dict[str, Any]) -> set[str]:
    if record.get("positives") is not None:
        return {str(p) for p in record["positives"]}
    gains = record.get("gains") or {}
    best = max(gains.values(), default=0)
    return {str(k) for k, v in gains.items() if v == best and v > 0}


def _constraints(record: dict[str, Any]) -> ParsedQuery:
    return ParsedQuery(
        text=record["text"],
        positive=tuple(record["positives"]),
        negative=tuple(record["negatives"]),
    )


def query_view(summary: Summary, task: str, query_id: str, models: list[str]) -> QueryView | None:
    """The query itself: text, image or volume, with its labels (or constraints) and gold."""
    if summary.kind == "cxr-retrieve":
        for report in _reports(summary, models).values():
            record = next((q for q in report.queries if q["id"] == query_id), None)
            if record is None:
                return None
            labels = [f"requires {name}" for name in record["positives"]]
            labels += [f"excludes {name}" for name in record["negatives"]]
            n_relevant = record[f"n_relevant_{report.setting}"]
            gold = [f"{n_relevant} relevant images ({report.setting} setting)"]
            return QueryView(query_id, {"text": record["text"]}, labels, gold)
        return None
    for run in _runs(summary, task, models).values():
        record = next((q for q in run.queries if str(q["id"]) == query_id), None)
        if record is None:
            continue
        payload = record.get("query")
        payload = payload if isinstance(payload, dict) else {"text": str(payload or "")}
        labels = [str(label) for label in payload.get("labels", [])]
        return QueryView(query_id, payload, labels, sorted(_gold(record)))
    return None


def ranked_views(
    summary: Summary, task: str, query_id: str, models: list[str], k: int = TOP_K
) -> list[RankedView]:
    """Each model's top-k for one query, in the order of `models` (skipping models without)."""
    if summary.kind == "cxr-retrieve":
        return [
            view
            for model, report in _reports(summary, models).items()
            if (view := _cxr_view(model, report, query_id, k)) is not None
        ]
    views = []
    for model, run in _runs(summary, task, models).items():
        record = next((q for q in run.queries if str(q["id"]) == query_id), None)
        if record is None:
            continue
        gold = _gold(record)
        scores = record.get("scores") or []
        hits = [
            HitView(
                rank=rank + 1,
                id=str(cid),
                score=scores[rank] if rank < len(scores) else None,
                payload=run.payloads.get(str(cid), {}),
                gold=str(cid) in gold,
            )
            for rank, cid in enumerate(record["ranked"][:k])
        ]
        found = [h.rank for h in hits if h.gold]
        where = f"gold first at rank {found[0]}" if found else f"gold not in the top {len(hits)}"
        text = f"Hit@1 {100 * record.get('hit@1', 0):.0f} · MRR@5 {record.get('mrr@5', 0):.2f}"
        views.append(RankedView(model, hits, f"{text} · {where}", record.get("hit@1", 0) == 1))
    return views


def _cxr_view(model: str, report: CxrRetrieveReport, query_id: str, k: int) -> RankedView | None:
    record = next((q for q in report.queries if q["id"] == query_id), None)
    if record is None:
        return None
    constraints = _constraints(record)
    hits = []
    for rank, hit in enumerate(record["top_k"][:k], start=1):
        findings = dict(hit.get("findings") or {})
        payload = {"image": hit["path"], "form": "2d"} if hit.get("path") else {}
        hits.append(
            HitView(
                rank=rank,
                id=str(hit["id"]),
                score=hit.get("score"),
                payload=payload,
                gold=satisfies(findings, constraints, report.setting),  # type: ignore[arg-type]
                findings={name: value for name, value in findings.items() if value is not None},
                violated=violations(findings, constraints),
            )
        )
    metrics = record[f"metrics_{report.setting}"]
    text = f"P@1 {100 * metrics['P@1']:.0f} · P@5 {100 * metrics['P@5']:.0f}"
    if "HNRR@5" in metrics:
        text += f" · HNRR@5 {100 * metrics['HNRR@5']:.0f}"
    return RankedView(model, hits, text, metrics["P@1"] == 1.0)
