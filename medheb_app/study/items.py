"""Building and managing a preference study (MedHEB section 5.6).

Queries are sampled stratified across tasks, as the paper's 530 queries across all 107 tasks:
an equal share per task, the remainder to random tasks, and what a small task cannot supply
handed on to tasks with queries to spare. Every sampled query yields one item per model pair
and stores the query, each model's top-3, the gold ids, the task and each model's top-1 hit.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, update

from medheb_app.store.db import Store
from medheb_app.store.study_tables import PreferenceStudy, StudyItem, Vote, utcnow
from medheb_app.study.errors import StudyError
from medheb_app.study.payloads import Describe
from medheb_app.study.run_outputs import (
    Payload,
    QueryOutput,
    RunOutputs,
    TaskOutput,
    common_queries,
    load_run,
)

TOP_K = 3


@dataclass(frozen=True)
class ItemSpec:
    """Everything stored for one item; the secrets here never reach a rater before a vote."""

    task: str
    family: str
    split: str
    query_id: str
    query_payload: Payload
    model_a: str
    model_b: str
    top_a: list[Payload]
    top_b: list[Payload]
    gold: list[str]
    hit_a: bool
    hit_b: bool


def stratified_sample(
    ids_by_task: Mapping[str, Sequence[str]], n: int, rng: random.Random
) -> list[tuple[str, str]]:
    """Pick n (task, query id) pairs spread as evenly across tasks as their sizes allow."""
    available = {task: len(ids) for task, ids in ids_by_task.items() if ids}
    total = sum(available.values())
    if n < 1:
        raise StudyError("A study needs at least one query.")
    if n > total:
        raise StudyError(f"Asked for {n} queries but the runs share only {total}.")
    quota = dict.fromkeys(available, 0)
    remaining = n
    while remaining:
        open_tasks = [t for t in sorted(available) if quota[t] < available[t]]
        share, extra = divmod(remaining, len(open_tasks))
        lucky = set(rng.sample(open_tasks, extra))
        for task in open_tasks:
            take = min(share + (task in lucky), available[task] - quota[task])
            quota[task] += take
            remaining -= take
    picked = []
    for task in sorted(quota):
        picked += [(task, qid) for qid in rng.sample(list(ids_by_task[task]), quota[task])]
    return picked


def _top(task: TaskOutput, query: QueryOutput, describe: Describe | None) -> list[Payload]:
    top = []
    for cid in query.ranked[:TOP_K]:
        payload = task.candidates.get(cid) or (describe(task.task, cid) if describe else None)
        top.append({"id": cid, "payload": dict(payload or {"ref": cid})})
    return top


def build_items(
    outputs: RunOutputs, n_queries: int, seed: int, describe: Describe | None = None
) -> list[ItemSpec]:
    """Sample queries stratified across tasks; one item per (query, model pair), shuffled."""
    models = list(outputs)
    if len(models) < 2 or len(set(models)) != len(models):
        raise StudyError("A preference study compares at least two different models.")
    rng = random.Random(seed)
    picked = stratified_sample(common_queries(outputs), n_queries, rng)
    items = []
    for task_name, qid in picked:
        reference = outputs[models[0]][task_name]
        query = reference.queries[qid]
        payload = query.payload
        if describe and set(payload) == {"ref"}:
            payload = describe(task_name, qid) or payload
        for model_a, model_b in itertools.combinations(models, 2):
            qa = outputs[model_a][task_name].queries[qid]
            qb = outputs[model_b][task_name].queries[qid]
            items.append(
                ItemSpec(
                    task=task_name,
                    family=reference.family,
                    split=reference.split,
                    query_id=qid,
                    query_payload=dict(payload),
                    model_a=model_a,
                    model_b=model_b,
                    top_a=_top(outputs[model_a][task_name], qa, describe),
                    top_b=_top(outputs[model_b][task_name], qb, describe),
                    gold=sorted(query.gold),
                    hit_a=bool(qa.ranked) and qa.ranked[0] in qa.gold,
                    hit_b=bool(qb.ranked) and qb.ranked[0] in qb.gold,
                )
            )
    rng.shuffle(items)
    return items


def create_study(
    store: Store,
    name: str,
    models: Sequence[str],
    queries: RunOutputs | str | Path,
    n_items: int,
    raters_per_item: int = 1,
    reveal_after_vote: bool = True,
    seed: int = 0,
    describe: Describe | None = None,
) -> int:
    """Create a study and its items; returns the study id.

    `queries` is a run directory or outputs already loaded with `load_run`. `n_items` is the
    number of queries sampled; each yields one item per model pair (with two models, one).
    """
    name = name.strip()
    if not name:
        raise StudyError("A study needs a name.")
    if raters_per_item < 1:
        raise StudyError("Each item needs at least one rater (raters_per_item >= 1).")
    models = list(models)
    if len(models) < 2 or len(set(models)) != len(models):
        raise StudyError("A preference study compares at least two different models.")
    source = ""
    if not isinstance(queries, Mapping):
        source = str(queries)
        queries = load_run(queries, models)
    missing = [m for m in models if m not in queries]
    if missing:
        raise StudyError(f"No outputs loaded for: {', '.join(missing)}.")
    items = build_items({m: queries[m] for m in models}, n_items, seed, describe)
    with store.session() as session:
        if session.scalar(select(PreferenceStudy.id).where(PreferenceStudy.name == name)):
            raise StudyError(f"A study named '{name}' already exists; pick another name.")
        study = PreferenceStudy(
            name=name,
            models=models,
            n_queries=n_items,
            raters_per_item=raters_per_item,
            reveal_after_vote=reveal_after_vote,
            seed=seed,
            source=source,
        )
        session.add(study)
        session.flush()
        for position, spec in enumerate(items):
            session.add(StudyItem(study_id=study.id, position=position, **vars(spec)))
        return study.id


def find_study(store: Store, study: int | str) -> PreferenceStudy:
    """A study by id or name, or a StudyError listing the ones that exist."""
    with store.session() as session:
        if isinstance(study, int) or str(study).isdigit():
            found = session.get(PreferenceStudy, int(study))
        else:
            found = session.scalar(select(PreferenceStudy).where(PreferenceStudy.name == study))
        if found is None:
            names = session.scalars(select(PreferenceStudy.name)).all()
            raise StudyError(f"No study '{study}'; existing: {', '.join(names) or 'none'}.")
        return found


def list_studies(store: Store) -> list[dict[str, Any]]:
    """Every study with its item and vote counts (votes in force, undone ones excluded)."""
    with store.session() as session:
        studies = session.scalars(select(PreferenceStudy).order_by(PreferenceStudy.id)).all()
        n_items = dict(
            session.execute(
                select(StudyItem.study_id, func.count())
                .where(StudyItem.withdrawn_at.is_(None))
                .group_by(StudyItem.study_id)
            ).all()
        )
        kinds = session.execute(
            select(Vote.study_id, Vote.kind, func.count()).group_by(Vote.study_id, Vote.kind)
        ).all()
    votes: dict[int, int] = {}
    for study_id, kind, count in kinds:
        votes[study_id] = votes.get(study_id, 0) + (count if kind == "vote" else -count)
    return [
        {
            "id": s.id,
            "name": s.name,
            "models": list(s.models),
            "n_items": n_items.get(s.id, 0),
            "raters_per_item": s.raters_per_item,
            "reveal_after_vote": s.reveal_after_vote,
            "votes": votes.get(s.id, 0),
            "created_at": s.created_at.isoformat(timespec="seconds"),
        }
        for s in studies
    ]


def withdraw_items(store: Store, study_id: int, positions: Sequence[int] | None = None) -> int:
    """Take items out of a study (all when positions is None); their votes are kept."""
    with store.session() as session:
        query = update(StudyItem).where(
            StudyItem.study_id == study_id, StudyItem.withdrawn_at.is_(None)
        )
        if positions is not None:
            query = query.where(StudyItem.position.in_(list(positions)))
        return session.execute(query.values(withdrawn_at=utcnow())).rowcount
