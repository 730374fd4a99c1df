"""Reading benchmark run outputs as the preference study needs them (MedHEB section 5.6).

A run directory holds DIR/<model>/<task>.json (DESIGN.md "bench run"; eval/results.TaskRun):
task metadata under "task" (or "metadata") and a `queries` list of {"id", "ranked": [ids best
first], "positives": [ids]} or {"gains": {id: gain}}. Display payloads are optional: a query
record may carry "query" (a dict or a string), "text" or "image"; a task file may carry
"candidates" (or "payloads"): {id: {"text" | "image" | "thumbnail": ...}}
(eval/medheb_scoring.item_payload; a task whose metadata says `synthetic` marks every payload
synthetic, so runs written before payloads carried the flag keep the mark). Without them an
item shows the bare reference ({"ref": id}); `payloads.describe_with_tasks` supplies real ones.

A CXR-Retrieve run file (DIR/<model>/cxr-retrieve.json, tasks/cxr_retrieve.py) is read too:
each query's `top_k` hits (id, findings, image path) give the ranked list, the hits whose
labels meet the query under the run's setting its gold ids (CXR-Retrieve section 3.2), and
their image files the payloads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medheb_app.eval.results import model_dirname
from medheb_app.query.parser import ParsedQuery, satisfies
from medheb_app.study.errors import StudyError

Payload = dict[str, Any]


@dataclass(frozen=True)
class QueryOutput:
    """One query's ranked list from one model, with its gold ids and display payload."""

    id: str
    ranked: tuple[str, ...]
    gold: frozenset[str]
    payload: Payload


@dataclass
class TaskOutput:
    """One model's output on one task."""

    task: str
    family: str
    split: str
    queries: dict[str, QueryOutput]
    candidates: dict[str, Payload] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # the task's metadata as the run saved it


RunOutputs = dict[str, dict[str, TaskOutput]]  # model -> task -> output


def gold_ids(record: Mapping[str, Any]) -> frozenset[str]:
    """The positives; for graded tasks the ids with the highest positive gain."""
    if record.get("positives") is not None:
        return frozenset(str(p) for p in record["positives"])
    gains = {str(k): float(v) for k, v in (record.get("gains") or {}).items()}
    best = max(gains.values(), default=0.0)
    return frozenset(k for k, v in gains.items() if v == best and v > 0)


def _ranked_ids(ranked: Sequence[Any]) -> tuple[str, ...]:
    return tuple(str(r["id"]) if isinstance(r, Mapping) else str(r) for r in ranked)


def _query_payload(record: Mapping[str, Any]) -> Payload:
    query = record.get("query")
    if isinstance(query, Mapping):
        return dict(query)
    if isinstance(query, str):
        return {"text": query}
    payload = {key: record[key] for key in ("text", "image") if record.get(key) is not None}
    return payload or {"ref": str(record["id"])}


def _cxr_retrieve_output(path: Path, data: Mapping[str, Any]) -> TaskOutput:
    """A CXR-Retrieve run file as a task output: ranked = the top k's ids, gold = the hits
    whose labels meet the query (positives present, negatives absent) under its setting."""
    setting = "strict" if data.get("setting") == "strict" else "main"
    synthetic = str(data.get("source", "")).startswith("phantom")
    queries: dict[str, QueryOutput] = {}
    candidates: dict[str, Payload] = {}
    for record in data["queries"]:
        if "id" not in record or not isinstance(record.get("top_k"), list):
            raise StudyError(f"{path}: every query needs 'id' and 'top_k'.")
        parsed = ParsedQuery(
            str(record.get("text", "")),
            positive=tuple(record.get("positives") or ()),
            negative=tuple(record.get("negatives") or ()),
        )
        hits = [hit for hit in record["top_k"] if isinstance(hit, Mapping) and "id" in hit]
        gold = {
            str(hit["id"])
            for hit in hits
            if satisfies(hit.get("findings") or {}, parsed, setting)  # type: ignore[arg-type]
        }
        for hit in hits:
            if hit.get("path"):
                candidates[str(hit["id"])] = {"path": str(hit["path"]), "synthetic": synthetic}
        queries[str(record["id"])] = QueryOutput(
            id=str(record["id"]),
            ranked=tuple(str(hit["id"]) for hit in hits),
            gold=frozenset(gold),
            payload={"text": str(record.get("text", "")), "synthetic": synthetic},
        )
    meta = {"name": path.stem, "family": "T-I", "split": str(data.get("split") or ""),
            "synthetic": synthetic, "setting": setting}  # fmt: skip
    return TaskOutput(path.stem, "T-I", meta["split"], queries, candidates, meta)


def load_task_output(path: Path) -> TaskOutput:
    """Read one DIR/<model>/<task>.json (a MedHEB task's, or CXR-Retrieve's)."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise StudyError(f"{path} is not valid JSON: {error.msg} (line {error.lineno}).") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("queries"), list):
        raise StudyError(f"{path} has no 'queries' list; is it a benchmark run output?")
    if data["queries"] and all(
        isinstance(record, Mapping) and "top_k" in record for record in data["queries"]
    ):
        return _cxr_retrieve_output(path, data)
    meta = data.get("metadata") or data.get("task") or {}
    if not isinstance(meta, Mapping):
        meta = {"name": meta}
    queries = {}
    for record in data["queries"]:
        if "id" not in record or "ranked" not in record:
            raise StudyError(f"{path}: every query needs 'id' and 'ranked'.")
        query = QueryOutput(
            id=str(record["id"]),
            ranked=_ranked_ids(record["ranked"]),
            gold=gold_ids(record),
            payload=_query_payload(record),
        )
        queries[query.id] = query
    candidates = {
        str(k): dict(v) for k, v in (data.get("candidates") or data.get("payloads") or {}).items()
    }
    if meta.get("synthetic"):  # a phantom task: every pixel it shows is generated
        for payload in (*(q.payload for q in queries.values()), *candidates.values()):
            payload.setdefault("synthetic", True)
    return TaskOutput(
        task=str(meta.get("name") or path.stem),
        family=str(meta.get("family", "")),
        split=str(meta.get("split", "")),
        queries=queries,
        candidates=candidates,
        meta=dict(meta),
    )


def _model_dir(run_dir: Path, model: str) -> Path:
    """The folder of `model`: its name as given, or as a runner would make it path-safe."""
    for name in (model_dirname(model), model):
        if (run_dir / name).is_dir():
            return run_dir / name
    available = sorted(p.name for p in run_dir.iterdir() if p.is_dir())
    raise StudyError(
        f"No outputs for model '{model}' in {run_dir}; available: {', '.join(available) or 'none'}."
    )


def load_run(run_dir: str | Path, models: Sequence[str]) -> RunOutputs:
    """Read every task output of `models` from a benchmark run directory."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise StudyError(f"Run directory not found: {run_dir}")
    outputs: RunOutputs = {}
    for model in models:
        files = sorted(_model_dir(run_dir, model).glob("*.json"))
        if not files:
            raise StudyError(f"No task outputs (*.json) for model '{model}' in {run_dir}.")
        tasks = [load_task_output(path) for path in files]
        outputs[model] = {task.task: task for task in tasks}
    return outputs


def common_queries(outputs: RunOutputs) -> dict[str, list[str]]:
    """Task -> query ids that every model answered (sorted, so sampling is reproducible)."""
    models = list(outputs)
    tasks = set.intersection(*(set(outputs[m]) for m in models))
    shared = {}
    for task in sorted(tasks):
        ids = set.intersection(*(set(outputs[m][task].queries) for m in models))
        if ids:
            shared[task] = sorted(ids)
    return shared
