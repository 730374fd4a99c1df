"""Score one MedHEB task with one ranker, and aggregate a model's tasks into MedHEB's tables.

MedHEB section 5.1: a ranker scores every candidate for every query (the task instruction,
Appendix A.6, goes to queries only); each query's top-k (ties in pool order, its excluded
candidates never ranked) is scored by where the relevant targets land (Hit@1, MRR@5, Hit@5;
NDCG@5/10 for graded tasks). `summarise_model` builds Tables 4 / 7 / 8 / 5 for one model.
The runner (eval/runner.py) calls these; CXR-Retrieve's counterpart is eval/cxr_retrieve.py.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from medheb_app.eval import metrics
from medheb_app.eval.rankers import Progress, Ranker
from medheb_app.eval.results import ModelSummary, TaskRun
from medheb_app.evidence.study import EmbedItem, Evidence, Study
from medheb_app.study.payloads import locate
from medheb_app.tasks.base import FAMILIES, Task

TOP_K = 10


def instruction_for(task: Task) -> str:
    """qry_inst followed by the task-level qry_text (e.g. Table 9's question), if any."""
    return task.metadata.instruction


THUMB_SIDE = 96  # in-memory images (crops, paired slices) are kept as small PNGs to show


def item_payload(item: EmbedItem) -> dict[str, Any]:
    """What a person would be shown for an item, kept in the run's files for the drill-down:
    its text, its image or volume file, its positive labels, its patient and whether it is
    synthetic; an image held only in memory (a region crop, a slice pair) as a small inline
    PNG (`thumbnail`), since no file exists to point at."""
    if isinstance(item, str):
        return {"text": item}
    if isinstance(item, Study):
        if item.form == "text":
            payload: dict[str, Any] = {"text": item.text or ""}
        else:
            payload = {"form": item.form}
            if item.path:
                payload["image" if item.form == "2d" else "volume"] = item.path
            elif item.pixels is not None:
                payload["thumbnail"] = _thumbnail(item.pixels)
        labels = sorted(name for name, value in item.findings.items() if value == 1)
        if labels:
            payload["labels"] = labels
        if item.patient_id:
            payload["patient"] = str(item.patient_id)
        if item.synthetic:
            payload["synthetic"] = True
        return payload
    if isinstance(item, Evidence):
        payload = {"form": "+".join(item.forms)}
        if item.text is not None:
            payload["text"] = item.text
        pixels = item.image if item.image is not None else item.volume
        if pixels is not None:
            payload["thumbnail"] = _thumbnail(pixels)
        return payload
    return {}


def region_of(item_id: str) -> str | None:
    """The whole image a VG query or crop id belongs to ("<image>#box2|text", "...:crop")."""
    return item_id.partition("#box")[0] if "#box" in item_id else None


def add_region_boxes(
    task: Task, records: list[dict[str, Any]], payloads: dict[str, dict[str, Any]]
) -> None:
    """For region tasks (MedHEB VG: a whole image + text query, image-only crops as
    candidates), keep where each shown crop lies in its whole image, so the drill-down can draw
    the gold and the retrieved boxes on the image and state their IoU: `box` [x0, y0, x1, y1]
    (x1, y1 exclusive) in the whole image's pixels, `source` that image, `source_size`
    [width, height]; the query's payload gets `box` of its gold crop. A few numbers per item;
    the crop's position is found by exact match (crops are copies of a window)."""
    wholes: dict[str, np.ndarray] = {}
    for query in task.queries:
        base = region_of(query.id)
        if base and isinstance(query.item, Evidence) and query.item.image is not None:
            wholes.setdefault(base, np.asarray(query.item.image))
    if not wholes:
        return

    crops = {c.id: c.item for c in task.candidates}

    def box_of(crop_id: str) -> list[int] | None:
        base, item = region_of(crop_id), crops.get(crop_id)
        if base not in wholes or not isinstance(item, Evidence) or item.image is None:
            return None
        found = locate(np.asarray(item.image), wholes[base])
        return [int(v) for v in found] if found else None

    for crop_id, payload in payloads.items():
        box = box_of(crop_id)
        if box is not None:
            height, width = wholes[region_of(crop_id)].shape[:2]
            payload.update(box=box, source=region_of(crop_id), source_size=[width, height])
    for record in records:
        query = record.get("query")
        gold = next((b for pid in record.get("positives") or [] if (b := box_of(pid))), None)
        if isinstance(query, dict) and gold is not None:
            height, width = wholes[region_of(record["positives"][0])].shape[:2]
            query.update(box=gold, source_size=[width, height])


def _thumbnail(pixels: np.ndarray) -> str:
    """A PNG data URI of at most THUMB_SIDE px (a volume: its middle slice)."""
    import base64
    import io

    from PIL import Image

    array = np.asarray(pixels, dtype=np.float32)
    if array.ndim == 3 and array.shape[-1] not in (3, 4):
        array = array[array.shape[0] // 2]
    low, high = float(np.nanmin(array)), float(np.nanmax(array))
    scaled = (array - low) / (high - low) if high > low else np.zeros_like(array)
    image = Image.fromarray((np.nan_to_num(scaled) * 255).astype(np.uint8))
    image.thumbnail((THUMB_SIDE, THUMB_SIDE))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def rank(scores: np.ndarray, task: Task, k: int = TOP_K) -> list[list[int]]:
    """Per query, the indices of its top-k candidates (best first, ties in pool order),
    never including the query's excluded candidates."""
    index = {c.id: j for j, c in enumerate(task.candidates)}
    ranked: list[list[int]] = []
    for i, query in enumerate(task.queries):
        row = np.asarray(scores[i], dtype=np.float64).copy()
        for cid in query.exclude:
            if cid in index:
                row[index[cid]] = -np.inf
        allowed = len(row) - int(np.isneginf(row).sum())
        order = np.argsort(-row, kind="stable")[: min(k, allowed)]
        ranked.append([int(j) for j in order])
    return ranked


def score_query(ranked_ids: Sequence[str], relevance: dict[str, float], graded: bool) -> dict:
    """Per-query metrics. For graded queries a hit is a candidate of the query's top gain."""
    if graded:
        best = max(relevance.values())
        targets = {cid for cid, gain in relevance.items() if gain == best}
    else:
        targets = set(relevance)
    values = {
        "hit@1": metrics.hit_at_k(ranked_ids, targets, 1),
        "mrr@5": metrics.reciprocal_rank_at_k(ranked_ids, targets, 5),
        "hit@5": metrics.hit_at_k(ranked_ids, targets, 5),
    }
    if graded:
        values["ndcg@5"] = metrics.ndcg_at_k(ranked_ids, relevance, 5)
        values["ndcg@10"] = metrics.ndcg_at_k(ranked_ids, relevance, 10)
    return values


def evaluate_task(
    task: Task, ranker: Ranker, progress: Progress | None = None, stop=None, k: int = TOP_K
) -> TaskRun:
    """Score one task with one ranker and return the full per-query record."""
    started = time.perf_counter()
    scores = ranker.score(task, progress, stop)
    scored = time.perf_counter()
    expected = (len(task.queries), len(task.candidates))
    if scores.shape != expected:
        raise ValueError(f"{ranker.spec} scored {scores.shape} on {task.name}; need {expected}.")
    graded = task.metadata.graded
    records: list[dict[str, Any]] = []
    for i, (query, order) in enumerate(zip(task.queries, rank(scores, task, k), strict=True)):
        ranked_ids = [task.candidates[j].id for j in order]
        relevance = task.relevance(query)
        record: dict[str, Any] = {
            "id": query.id,
            "query": item_payload(query.item),
            "ranked": ranked_ids,
            "scores": [round(float(scores[i, j]), 6) for j in order],
        }
        if graded:
            record["gains"] = relevance
        else:
            record["positives"] = [pid for pid in query.positives if pid in relevance]
        record.update(score_query(ranked_ids, relevance, graded))
        records.append(record)
    shown = {cid for record in records for cid in record["ranked"]}
    payloads = {c.id: item_payload(c.item) for c in task.candidates if c.id in shown}
    add_region_boxes(task, records, payloads)
    names = [key for key in records[0] if "@" in key]
    task_scores = {name: metrics.macro_average(r[name] for r in records) for name in names}
    task_scores["n_queries"] = len(records)
    return TaskRun(
        task=task.metadata.model_dump(),
        model=ranker.spec,
        model_card=ranker.card.to_dict(),
        scores=task_scores,
        queries=records,
        instruction=instruction_for(task),
        n_candidates=len(task.candidates),
        payloads=payloads,
        timing={
            "score_s": round(scored - started, 3),
            "rank_s": round(time.perf_counter() - scored, 3),
        },
        note=ranker.note,
    )


def _mean_percent(runs: Sequence[TaskRun], key: str) -> float:
    return round(100.0 * metrics.macro_average(run.scores[key] for run in runs), 2)


def _block(runs: Sequence[TaskRun], keys: Sequence[str]) -> dict[str, float]:
    block: dict[str, float] = {key: _mean_percent(runs, key) for key in keys}
    block["n_tasks"] = len(runs)
    return block


def summarise_model(spec: str, card: dict, note: str, runs: Sequence[TaskRun]) -> ModelSummary:
    """Table 4 / 8 (family and split task-macro), Table 7 (CV) and Table 5 (graded NDCG@5)."""
    keys = ("hit@1", "mrr@5", "hit@5")
    single = [run for run in runs if not run.task["graded"]]
    graded = [run for run in runs if run.task["graded"]]
    families = {
        family: _block(members, keys)
        for family in FAMILIES
        if (members := [run for run in single if run.task["family"] == family])
    }
    splits = {
        split: _block(members, keys)
        for split, members in (
            ("ID", [run for run in single if run.task["split"] == "ID"]),
            ("held-out-source", [run for run in single if run.task["split"] == "held-out-source"]),
            ("all", single),
        )
        if members
    }
    consistency: dict[str, float] = {}
    if families:
        family_hit1 = [block["hit@1"] for block in families.values()]
        consistency = {
            "mu": round(float(np.mean(family_hit1)), 2),
            "sigma": round(float(np.std(family_hit1)), 2),
            "cv": round(metrics.coefficient_of_variation(family_hit1), 3),
            "n_families": len(family_hit1),
        }
    relations: dict[str, dict[str, float]] = {}
    for relation in sorted({run.task["relation"] for run in graded}):
        members = [run for run in graded if run.task["relation"] == relation]
        relations[relation] = _block(members, ("ndcg@5", "ndcg@10", "hit@1"))
    if graded:
        relations["all"] = _block(graded, ("ndcg@5", "ndcg@10", "hit@1"))
    tasks = {
        run.task_name: {
            "family": run.task["family"],
            "split": run.task["split"],
            "graded": run.task["graded"],
            "relation": run.task["relation"],
            **{
                key: (value if key == "n_queries" else round(100.0 * value, 2))
                for key, value in run.scores.items()
            },
        }
        for run in runs
    }
    return ModelSummary(spec, card, tasks, families, splits, consistency, relations, note)
