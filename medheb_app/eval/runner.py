"""Run a suite of tasks against models: embed, rank by cosine, score, and write the results.

MedHEB section 5.1: for each task a model embeds the queries (with the task instruction,
Appendix A.6) and the candidate pool (without one), ranks candidates by cosine similarity and
is scored by where the relevant targets land. Two baselines need no model: "random" (a seeded
random ranking: chance level) and "oracle" (puts the relevant candidates first, highest gain
first: the upper bound). Everything else is loaded by models.registry.load_embedder.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from medheb_app.eval import metrics
from medheb_app.eval.results import ModelSummary, Summary, TaskRun, model_dirname, now_iso
from medheb_app.evidence.study import EmbedItem, Evidence, Study
from medheb_app.models.base import ModelCard, l2_normalise
from medheb_app.settings import Settings
from medheb_app.tasks.base import FAMILIES, Suite, Task

Progress = Callable[[float, str], None]
TOP_K = 10
BASELINE_SPECS = ("random", "oracle")
ORACLE_NOTE = (
    "oracle is not a model: it ranks each query's relevant candidates first (highest gain "
    "first), so its scores are the upper bound each task allows."
)
RANDOM_NOTE = "random ranks candidates in a seeded random order: the chance level of each task."


class Ranker(Protocol):
    """Scores every candidate of a task for every query: (n_queries, n_candidates)."""

    spec: str
    card: ModelCard
    note: str

    def score(
        self, task: Task, progress: Progress | None, stop: threading.Event | None
    ) -> np.ndarray: ...


def instruction_for(task: Task) -> str:
    """qry_inst followed by the task-level qry_text (e.g. Table 9's question), if any."""
    return task.metadata.instruction


def _baseline_card(name: str, description: str) -> ModelCard:
    return ModelCard(
        name=name,
        version="1",
        dims=0,
        modalities=("text", "2d", "3d"),
        license="n/a",
        description=description,
    )


class OracleRanker:
    """Scores each candidate by its relevance: the perfect ranking, ties kept in pool order."""

    spec = "oracle"
    note = ORACLE_NOTE
    card = _baseline_card("oracle", ORACLE_NOTE)

    def score(self, task: Task, progress: Progress | None, stop: threading.Event | None):
        index = {c.id: j for j, c in enumerate(task.candidates)}
        scores = np.zeros((len(task.queries), len(task.candidates)), dtype=np.float32)
        for i, query in enumerate(task.queries):
            for cid, gain in task.relevance(query).items():
                scores[i, index[cid]] = gain
        return scores


class RandomRanker:
    """Uniform random scores, seeded by the task name so reruns give the same chance level."""

    spec = "random"
    note = RANDOM_NOTE
    card = _baseline_card("random", RANDOM_NOTE)

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def score(self, task: Task, progress: Progress | None, stop: threading.Event | None):
        task_seed = int(hashlib.sha256(task.name.encode()).hexdigest()[:8], 16)
        rng = np.random.default_rng([self.seed, task_seed])
        return rng.random((len(task.queries), len(task.candidates)), dtype=np.float32)


class EmbeddingRanker:
    """Cosine similarity between instructed query embeddings and plain candidate embeddings."""

    note = ""

    def __init__(self, spec: str, embedder: Any, cache: Any | None) -> None:
        self.spec = spec
        self.embedder = embedder
        self.card = embedder.card
        self.cache = cache

    def embed(
        self,
        items: Sequence[EmbedItem],
        ids: Sequence[str],
        instruction: str | None,
        progress: Progress | None,
        stop: threading.Event | None,
    ) -> np.ndarray:
        from medheb_app.index.cache import embed_with_cache

        vectors = embed_with_cache(
            self.embedder, items, ids, self.cache, instruction, progress=progress, stop=stop
        )
        return l2_normalise(vectors)

    def score(self, task: Task, progress: Progress | None, stop: threading.Event | None):
        instruction = instruction_for(task) or None

        def half(offset: float) -> Progress | None:
            if progress is None:
                return None
            return lambda fraction, message: progress(offset + fraction / 2, message)

        queries = self.embed(
            [q.item for q in task.queries],
            [q.id for q in task.queries],
            instruction,
            half(0.0),
            stop,
        )
        candidates = self.embed(
            [c.item for c in task.candidates],
            [c.id for c in task.candidates],
            None,
            half(0.5),
            stop,
        )
        return queries @ candidates.T


def load_ranker(spec: str, settings: Settings, seed: int = 0) -> Ranker:
    """'oracle' and 'random' are built in; any other spec goes through the model registry."""
    if spec == "oracle":
        return OracleRanker()
    if spec == "random":
        return RandomRanker(seed)
    from medheb_app.index.cache import EmbeddingCache
    from medheb_app.models.registry import load_embedder

    return EmbeddingRanker(spec, load_embedder(spec, settings), EmbeddingCache(settings.cache_dir))


def item_forms(item: EmbedItem) -> set[str]:
    if isinstance(item, str):
        return {"text"}
    if isinstance(item, Evidence):
        return set(item.forms)
    if isinstance(item, Study):
        return {item.form}
    return set()


def task_forms(task: Task) -> set[str]:
    """Every evidence form the task asks a model to read."""
    forms: set[str] = set()
    for entry in [*task.queries, *task.candidates]:
        forms |= item_forms(entry.item)
    return forms


def item_payload(item: EmbedItem) -> dict[str, Any]:
    """What a person would be shown for an item: its text, its image file, or its form."""
    if isinstance(item, str):
        return {"text": item}
    if isinstance(item, Study):
        if item.form == "text":
            return {"text": item.text or ""}
        payload: dict[str, Any] = {"form": item.form}
        if item.path:
            payload["image" if item.form == "2d" else "volume"] = item.path
        return payload
    if isinstance(item, Evidence):
        payload = {"form": "+".join(item.forms)}
        if item.text is not None:
            payload["text"] = item.text
        return payload
    return {}


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


def _open_store(settings: Settings):
    from medheb_app.store.db import Store

    return Store.open(settings.database_url)


def run_suite(
    suite: Suite | Sequence[Task],
    models: Sequence[str | Ranker],
    out_dir: Path,
    settings: Settings,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    only: Sequence[str] | None = None,
    record: bool = True,
) -> Summary:
    """Evaluate every model on every task; write per-task files, summary.json and report.md.

    `models` are spec strings (see load_ranker) or ready Ranker objects.

    Runs are recorded in the SQL store (`record`). Cancelling through `stop` raises
    InterruptedError after marking the run cancelled; finished task files stay on disk.
    """
    from medheb_app.eval.reports import render_report
    from medheb_app.store import runs as run_table

    if not models:
        raise ValueError("Give at least one model spec (e.g. --model random).")
    specs = [m if isinstance(m, str) else m.spec for m in models]
    if len(set(specs)) != len(specs):
        raise ValueError("The same model spec was given twice.")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started_iso = now_iso()
    started = time.perf_counter()
    report = progress or (lambda fraction, message: None)
    report(0.0, "building tasks")
    if isinstance(suite, Suite):
        suite_name = suite.name
        tasks, skipped = suite.build(settings, only=only)
    else:
        suite_name, tasks, skipped = "custom", list(suite), {}
    if not tasks:
        raise ValueError(f"No task of suite {suite_name} could be built: {skipped}")
    build_s = time.perf_counter() - started
    from medheb_app.models.device import resolve_device

    settings_record = {
        "data_dir": str(settings.data_dir),
        "device": resolve_device(settings.device),
    }
    store = _open_store(settings) if record else None
    run_id = (
        run_table.start_run(store, suite_name, specs, str(out_dir), settings_record)
        if store
        else None
    )
    summaries: dict[str, ModelSummary] = {}
    model_timing: dict[str, float] = {}
    total = len(models) * len(tasks)
    try:
        for m, model in enumerate(models):
            model_started = time.perf_counter()
            ranker = load_ranker(model, settings) if isinstance(model, str) else model
            spec = ranker.spec
            runs: list[TaskRun] = []
            for t, task in enumerate(tasks):
                if stop is not None and stop.is_set():
                    raise InterruptedError("Benchmark run was cancelled.")
                done = (m * len(tasks) + t) / total
                report(done, f"{spec}: {task.name}")
                missing = task_forms(task) - set(ranker.card.modalities)
                if missing:
                    skipped[f"{spec}/{task.name}"] = (
                        f"{spec} does not read {', '.join(sorted(missing))} evidence"
                    )
                    continue

                def task_progress(
                    fraction: float, message: str, _done: float = done, _name: str = task.name
                ) -> None:
                    report(_done + fraction / total, f"{_name}: {message}")

                run = evaluate_task(task, ranker, task_progress, stop)
                path = run.to_disk(out_dir)
                runs.append(run)
                if store is not None and run_id is not None:
                    run_table.add_task_result(
                        store,
                        run_id,
                        model=spec,
                        task=task.name,
                        family=task.metadata.family,
                        split=task.metadata.split,
                        metrics={k: v for k, v in run.scores.items() if k != "n_queries"},
                        path=str(path),
                    )
            if runs:
                summaries[spec] = summarise_model(spec, ranker.card.to_dict(), ranker.note, runs)
            model_timing[spec] = round(time.perf_counter() - model_started, 2)
    except BaseException as error:
        if store is not None and run_id is not None:
            status = "cancelled" if isinstance(error, InterruptedError) else "failed"
            run_table.finish_run(store, run_id, status, error=str(error))
        raise
    summary = Summary(
        suite=suite_name,
        models=summaries,
        tasks=[{**task.metadata.model_dump(), **task.counts()} for task in tasks],
        skipped=skipped,
        out_dir=str(out_dir),
        started=started_iso,
        finished=now_iso(),
        settings=settings_record,
        timing={
            "build_tasks_s": round(build_s, 2),
            **{f"{k}_s": v for k, v in model_timing.items()},
        },
        run_id=run_id,
    )
    summary.timing["total_s"] = round(time.perf_counter() - started, 2)
    summary.to_disk(out_dir)
    (out_dir / "report.md").write_text(render_report(summary))
    if store is not None and run_id is not None:
        run_table.finish_run(store, run_id, "finished")
    report(1.0, f"done: {len(tasks)} tasks x {len(models)} models")
    return summary


__all__ = [
    "BASELINE_SPECS",
    "EmbeddingRanker",
    "OracleRanker",
    "RandomRanker",
    "evaluate_task",
    "instruction_for",
    "load_ranker",
    "model_dirname",
    "rank",
    "run_suite",
    "summarise_model",
]
