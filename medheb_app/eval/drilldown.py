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

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from medheb_app.eval.results import CxrRetrieveReport, Summary, TaskRun
from medheb_app.query.parser import (
    VIOLATION_WORDS,
    ParsedQuery,
    satisfies,
    violation_words,
    violations,
)
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
    violated: dict[str, str] = field(default_factory=dict)  # finding -> a VIOLATION_WORDS key

    @property
    def broken(self) -> list[str]:
        """The violated constraints in words ("has Pneumonia")."""
        return violation_words(self.violated)


@dataclass(frozen=True)
class RankedView:
    """One model's answer to one query."""

    model: str
    hits: list[HitView]
    summary: str  # "Hit@1 0 · gold first at rank 4" / "P@5 40 · HNRR@5 20"
    hit: bool
    reason: str = ""  # why #1 is wrong, in the task's terms ("" on a hit)


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


def _synthetic(source: Any) -> bool:
    """Phantom sources are generated images: their payloads carry the SYNTHETIC mark."""
    return str(source or "").startswith("phantom")


def _marked(payload: dict[str, Any], synthetic: bool) -> dict[str, Any]:
    return {**payload, "synthetic": True} if synthetic and payload else payload


def _region(item_id: str) -> tuple[str, str] | None:
    """(image id, box number) of a VG query or crop id ("<image>#box2|text", "...#box2:crop")."""
    if "#box" not in item_id:
        return None
    image, _, rest = item_id.partition("#box")
    number = "".join(ch for ch in rest if ch.isdigit())
    return (image, number) if number else None


def iou(a: Any, b: Any) -> float | None:
    """Intersection over union of two [x0, y0, x1, y1] boxes (x1, y1 exclusive); None when
    either is missing."""
    if (
        not (isinstance(a, list | tuple) and isinstance(b, list | tuple))
        or len(a) != 4
        or len(b) != 4
    ):
        return None
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _case(item_id: str) -> str | None:
    """The case number an id ends with ("...:dwi:5" -> "5", "...:impression:iu-2891" ->
    "2891"), which pairing tasks share between a query and its own counterpart."""
    found = re.search(r"(\d+)$", item_id.rsplit(":", 1)[-1])
    return found.group(1) if found else None


def miss_reason(
    query_id: str,
    query: dict[str, Any],
    top_id: str,
    top: dict[str, Any],
    gold: Sequence[str] = (),
) -> str:
    """Why the #1 candidate is not gold, in the task's own terms: another region (same image
    or not, with its IoU against the gold box when the run kept the boxes), another patient
    or case (pairing tasks: the query's own counterpart shares its case number), another
    label than the image's, or the findings it lacks or adds."""
    asked, got = _region(query_id), _region(top_id)
    if asked and got:
        if asked[0] == got[0]:
            overlap = iou(top.get("box"), query.get("box"))
            by = f", IoU {overlap:.2f} with the gold box" if overlap is not None else ""
            return f"wrong region: #1 is box {got[1]} of the same image{by} (gold: box {asked[1]})"
        return (
            f"wrong image: #1 is a region of another image, IoU 0 with the gold box "
            f"(box {asked[1]} of this one)"
        )
    patient, other = query.get("patient"), top.get("patient")
    if patient and other and patient != other:
        return f"wrong patient: #1 is patient {other}, the query is patient {patient}"
    if top_id.startswith("label:") and gold and all(g.startswith("label:") for g in gold):
        wanted = ", ".join(sorted(g.rsplit(":", 1)[-1] for g in gold))
        return f"wrong label: #1 names {top_id.rsplit(':', 1)[-1]}, the image's is {wanted}"
    mine, theirs = _case(query_id), _case(top_id)
    if mine and theirs and mine != theirs and any(_case(g) == mine for g in gold):
        return (
            f"wrong case: #1 belongs to case {theirs}, the query's own counterpart is case {mine}"
        )
    wanted, shown = set(query.get("labels") or []), set(top.get("labels") or [])
    if wanted or shown:
        parts = []
        if wanted - shown:
            parts.append("lacks " + ", ".join(sorted(wanted - shown)))
        if shown - wanted:
            parts.append("has " + ", ".join(sorted(shown - wanted)) + " the query does not")
        if parts:
            return "#1 " + "; ".join(parts)
        return "#1 has the same findings but is not the paired item"
    return "#1 is not the paired item"


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
        payload = _marked(payload, _synthetic(run.task.get("source")))
        labels = [str(label) for label in payload.get("labels", [])]
        if payload.get("patient"):
            labels.append(f"patient {payload['patient']}")
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
        synthetic = _synthetic(run.task.get("source"))
        hits = [
            HitView(
                rank=rank + 1,
                id=str(cid),
                score=scores[rank] if rank < len(scores) else None,
                payload=_marked(run.payloads.get(str(cid), {}), synthetic),
                gold=str(cid) in gold,
            )
            for rank, cid in enumerate(record["ranked"][:k])
        ]
        found = [h.rank for h in hits if h.gold]
        where = f"gold first at rank {found[0]}" if found else f"gold not in the top {len(hits)}"
        text = f"Hit@1 {100 * record.get('hit@1', 0):.0f} · MRR@5 {record.get('mrr@5', 0):.2f}"
        hit = record.get("hit@1", 0) == 1
        reason = ""
        if not hit and hits:
            query = record.get("query") if isinstance(record.get("query"), dict) else {}
            reason = miss_reason(query_id, query, hits[0].id, hits[0].payload, sorted(gold))
        views.append(RankedView(model, hits, f"{text} · {where}", hit, reason))
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
        payload = _marked(payload, _synthetic(report.source))
        hits.append(
            HitView(
                rank=rank,
                id=str(hit["id"]),
                score=hit.get("score"),
                payload=payload,
                gold=satisfies(findings, constraints, report.setting),  # type: ignore[arg-type]
                findings={name: value for name, value in findings.items() if value is not None},
                violated=violations(findings, constraints, report.setting),
            )
        )
    metrics = record[f"metrics_{report.setting}"]
    text = f"P@1 {100 * metrics['P@1']:.0f} · P@5 {100 * metrics['P@5']:.0f}"
    if "HNRR@5" in metrics:
        text += f" · HNRR@5 {100 * metrics['HNRR@5']:.0f}"
    reason = ""
    if metrics["P@1"] != 1.0 and hits:
        top = hits[0]
        words = [
            f"lacks required {name}" if how == "missing"
            else f"has excluded {name}" if how == "present"
            else f"{VIOLATION_WORDS[how]} {name}"
            for name, how in sorted(top.violated.items())
        ]  # fmt: skip
        reason = "#1 " + "; ".join(words) if words else "#1 is not labelled as the query asks"
    return RankedView(model, hits, text, metrics["P@1"] == 1.0, reason)
