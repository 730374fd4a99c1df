"""Building and managing a preference study (MedHEB section 5.6).

Queries are sampled stratified across tasks, as the paper's 530 queries across all 107 tasks:
an equal share per task, the remainder to random tasks, and what a small task cannot supply
handed on to tasks with queries to spare. Every sampled query yields one item per model pair
and stores the query, each model's top-3, the gold ids, the task and each model's top-1 hit.
Every payload is rendered at creation (`payloads`); a query whose query or any shown candidate
cannot be rendered is withheld, never shown. A share of gold (quality-control) items, a
reference list against random candidates, lets the analysis measure each rater's accuracy.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy import func, or_, select, update

from medheb_app.store.db import Store
from medheb_app.store.study_tables import (
    Assignment,
    PreferenceStudy,
    StudyInvitation,
    StudyItem,
    Vote,
    utcnow,
)
from medheb_app.study.errors import StudyError
from medheb_app.study.instructions import instruction
from medheb_app.study.payloads import Renderer, Unrenderable
from medheb_app.study.run_outputs import (
    Payload,
    RunOutputs,
    TaskOutput,
    common_queries,
    load_run,
)
from medheb_app.study.session import DEFAULT_CLAIM_TIMEOUT_SECONDS

TOP_K = 3
GOLD_REFERENCE = "gold:reference"
GOLD_RANDOM = "gold:random"
DEFAULT_PUBLIC_TITLE = "Reader study: which list of studies is more useful?"
log = logging.getLogger(__name__)
_CSPRNG = random.SystemRandom()  # item positions: no seed a rater could learn


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
    is_gold: bool = False
    instruction: str = ""


@dataclass(frozen=True)
class BuiltItems:
    """The items of a new study and the queries withheld because they cannot be shown."""

    items: list[ItemSpec]
    withheld: list[dict[str, str]]  # {"task", "query_id", "reason"}


@dataclass(frozen=True)
class StudyCreated:
    """What `create_study` made: the id, the compared and gold item counts, and every
    withheld query with its reason (for the admin, never for raters)."""

    id: int
    n_items: int
    n_gold: int
    withheld: list[dict[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class PublicStudy:
    """A study as raters may see it in a picker."""

    id: int
    title: str
    open_enrolment: bool


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


def _entry(render: Renderer, task: str, cid: str, raw: Payload | None) -> dict[str, Any]:
    return {"id": cid, "payload": render(task, cid, raw)}


def _top(render: Renderer, task: TaskOutput, ranked: Sequence[str]) -> list[dict[str, Any]]:
    """The top-3 entries {"id", "payload"}; raises Unrenderable when one cannot be shown."""
    if len(ranked) < TOP_K:
        raise Unrenderable(f"a ranked list has fewer than {TOP_K} candidates")
    return [_entry(render, task.task, cid, task.candidates.get(cid)) for cid in ranked[:TOP_K]]


def _pool(outputs: RunOutputs, task_name: str) -> list[str]:
    """Every candidate id the run shows for a task (any model's ranked lists, payload keys)."""
    ids: set[str] = set()
    for model in outputs.values():
        task = model[task_name]
        ids |= set(task.candidates)
        for query in task.queries.values():
            ids |= set(query.ranked) | set(query.gold)
    return sorted(ids)


def _pair_items(outputs: RunOutputs, task_name: str, qid: str, render: Renderer) -> list[ItemSpec]:
    """One item per model pair for a query, or Unrenderable naming what cannot be shown."""
    models = list(outputs)
    reference = outputs[models[0]][task_name]
    query = reference.queries[qid]
    payload = render(task_name, qid, query.payload)
    items = []
    for model_a, model_b in itertools.combinations(models, 2):
        qa = outputs[model_a][task_name].queries[qid]
        qb = outputs[model_b][task_name].queries[qid]
        items.append(
            ItemSpec(
                task=task_name,
                family=reference.family,
                split=reference.split,
                query_id=qid,
                query_payload=payload,
                model_a=model_a,
                model_b=model_b,
                top_a=_top(render, outputs[model_a][task_name], qa.ranked),
                top_b=_top(render, outputs[model_b][task_name], qb.ranked),
                gold=sorted(query.gold | qa.gold | qb.gold),  # CXR-Retrieve: gold among hits
                hit_a=bool(qa.ranked) and qa.ranked[0] in qa.gold,
                hit_b=bool(qb.ranked) and qb.ranked[0] in qb.gold,
            )
        )
    return items


def _gold_item(
    outputs: RunOutputs, task_name: str, qid: str, render: Renderer, rng: random.Random
) -> ItemSpec:
    """A quality-control item: side a is the reference top-3 (the query's relevant candidates
    first, then the first model's next best), side b three random non-relevant candidates.
    Which side a rater sees on the left is drawn per rater like any item."""
    models = list(outputs)
    task = outputs[models[0]][task_name]
    query = task.queries[qid]
    if not query.gold:
        raise Unrenderable("the query has no relevant candidate to build a reference list")
    best = sorted(query.gold)[:TOP_K]
    best += [c for c in query.ranked if c not in best][: TOP_K - len(best)]
    others = [c for c in _pool(outputs, task_name) if c not in query.gold]
    if len(best) < TOP_K or len(others) < TOP_K:
        raise Unrenderable("too few candidates to build a reference and a random list")
    rng.shuffle(best)  # relevant ones are not always in first place
    best.sort(key=lambda c: c not in query.gold)
    randoms = rng.sample(others, TOP_K)
    return ItemSpec(
        task=task_name,
        family=task.family,
        split=task.split,
        query_id=qid,
        query_payload=render(task_name, qid, query.payload),
        model_a=GOLD_REFERENCE,
        model_b=GOLD_RANDOM,
        top_a=[_entry(render, task_name, c, task.candidates.get(c)) for c in best],
        top_b=[_entry(render, task_name, c, task.candidates.get(c)) for c in randoms],
        gold=sorted(query.gold),
        hit_a=True,
        hit_b=False,
        is_gold=True,
    )


def build_items(
    outputs: RunOutputs,
    n_queries: int,
    seed: int,
    describe: Renderer | None = None,
    gold_share: float = 0.0,
) -> BuiltItems:
    """Sample queries stratified across tasks; one item per (query, model pair), plus gold
    items for `gold_share` of all items; shuffled.

    A query whose query or any shown candidate cannot be rendered is withheld (logged, listed
    with the reason) and replaced by another query of the same task when one is left."""
    models = list(outputs)
    if len(models) < 2 or len(set(models)) != len(models):
        raise StudyError("A preference study compares at least two different models.")
    if not 0.0 <= gold_share <= 0.5:
        raise StudyError(f"gold_share must be between 0 and 0.5; got {gold_share}.")
    render = describe or Renderer(None)
    rng = random.Random(seed)
    available = common_queries(outputs)
    picked = stratified_sample(available, n_queries, rng)
    chosen = set(picked)
    spare = {task: [q for q in ids if (task, q) not in chosen] for task, ids in available.items()}
    for ids in spare.values():
        rng.shuffle(ids)
    items: list[ItemSpec] = []
    withheld: list[dict[str, str]] = []
    used: set[tuple[str, str]] = set()
    for task_name, qid in picked:
        while True:
            try:
                items += _pair_items(outputs, task_name, qid, render)
                used.add((task_name, qid))
                break
            except Unrenderable as why:
                log.warning("study item withheld: %s %s: %s", task_name, qid, why)
                withheld.append({"task": task_name, "query_id": qid, "reason": str(why)})
                if not spare[task_name]:
                    break
                qid = spare[task_name].pop()
    n_gold = round(gold_share * len(items) / (1.0 - gold_share)) if gold_share else 0
    gold_pool = [(t, q) for t, ids in spare.items() for q in ids] or sorted(used)
    rng.shuffle(gold_pool)
    gold_items: list[ItemSpec] = []
    for task_name, qid in gold_pool:
        if len(gold_items) >= n_gold:
            break
        try:
            gold_items.append(_gold_item(outputs, task_name, qid, render, rng))
        except Unrenderable as why:
            log.info("gold item skipped: %s %s: %s", task_name, qid, why)
    if len(gold_items) < n_gold:
        raise StudyError(
            f"Only {len(gold_items)} of the {n_gold} gold items asked for could be built "
            "(queries with a relevant candidate and enough others to show); lower gold_share."
        )
    items += gold_items
    rng.shuffle(items)
    lines = {task: _instruction(outputs[models[0]][task]) for task in {i.task for i in items}}
    return BuiltItems([replace(i, instruction=lines[i.task]) for i in items], withheld)


def _instruction(task: TaskOutput) -> str:
    """What "better" means on this task, from its metadata and relevance (instructions.py)."""
    meta = {"family": task.family, **task.meta}
    return instruction(meta, (query.gold for query in task.queries.values()))


def create_study(
    store: Store,
    name: str,
    models: Sequence[str],
    queries: RunOutputs | str | Path,
    n_items: int,
    raters_per_item: int = 1,
    reveal_after_vote: bool = False,
    seed: int = 0,
    describe: Renderer | None = None,
    *,
    public_title: str = "",
    open_enrolment: bool = False,
    gold_share: float = 0.0,
    claim_timeout_s: float = DEFAULT_CLAIM_TIMEOUT_SECONDS,
    source: str | Path = "",
    max_votes_per_rater: int = 0,
) -> StudyCreated:
    """Create a study and its items; returns its id, item counts and the withheld queries.

    `queries` is a run directory or outputs already loaded with `load_run`. `n_items` is the
    number of queries sampled; each yields one item per model pair (with two models, one).
    `public_title` is what raters see (never `name`); `open_enrolment` lets anyone join with a
    display name, otherwise raters need an invitation (`identity.create_invitations`).
    `gold_share` of the items are quality-control items (see `_gold_item`), excluded from the
    model comparison. `describe` renders payloads (`payloads.describe_with_tasks`); without
    it the run files' own payloads are used, and queries they cannot show are withheld.
    `max_votes_per_rater` (0: none) caps each rater's votes, so no rater dominates.
    `source`: the run folder loaded outputs came from (recorded for the admin; blinding
    itself recognises the run by its content, see `study.blinding`).
    """
    name = name.strip()
    if not name:
        raise StudyError("A study needs a name.")
    public_title = " ".join(public_title.split())
    if len(public_title) > 200:
        raise StudyError("A public title can be at most 200 characters.")
    if raters_per_item < 1:
        raise StudyError("Each item needs at least one rater (raters_per_item >= 1).")
    if claim_timeout_s < 30:
        raise StudyError("An idle claim must be kept at least 30 seconds (claim_timeout_s).")
    if max_votes_per_rater < 0:
        raise StudyError("max_votes_per_rater is 0 (no cap) or a positive number of votes.")
    models = list(models)
    if len(models) < 2 or len(set(models)) != len(models):
        raise StudyError("A preference study compares at least two different models.")
    title = public_title.lower()
    if any(m.lower() in title for m in models) or (len(name) >= 4 and name.lower() in title):
        raise StudyError("The public title must not name the models or the internal study name.")
    source = str(source or "")
    if not isinstance(queries, Mapping):
        source = str(queries)
        queries = load_run(queries, models)
    missing = [m for m in models if m not in queries]
    if missing:
        raise StudyError(f"No outputs loaded for: {', '.join(missing)}.")
    built = build_items({m: queries[m] for m in models}, n_items, seed, describe, gold_share)
    if not built.items:
        reasons = sorted({w["reason"] for w in built.withheld})
        raise StudyError(
            "No item could be shown to raters, so no study was created: " + "; ".join(reasons[:3])
        )
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
            public_title=public_title or DEFAULT_PUBLIC_TITLE,
            open_enrolment=open_enrolment,
            gold_share=gold_share,
            claim_timeout_s=claim_timeout_s,
            max_votes_per_rater=int(max_votes_per_rater),
        )
        session.add(study)
        session.flush()
        order = list(built.items)
        _CSPRNG.shuffle(order)  # positions (and so where gold items fall) from the CSPRNG
        for position, spec in enumerate(order):
            session.add(StudyItem(study_id=study.id, position=position, **vars(spec)))
        study_id = study.id
    n_gold = sum(spec.is_gold for spec in built.items)
    return StudyCreated(study_id, len(built.items) - n_gold, n_gold, built.withheld)


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


def list_open_studies(store: Store) -> list[PublicStudy]:
    """The rater-safe listing: open studies as (id, public title, open enrolment), nothing
    else (no internal name, no models)."""
    with store.session() as session:
        studies = session.scalars(
            select(PreferenceStudy)
            .where(PreferenceStudy.closed_at.is_(None))
            .order_by(PreferenceStudy.id)
        ).all()
        return [
            PublicStudy(s.id, s.public_title or DEFAULT_PUBLIC_TITLE, bool(s.open_enrolment))
            for s in studies
        ]


def close_study(store: Store, study: int | str, closed: bool = True) -> None:
    """Close a study (gone from the raters' list, no more items or votes) or reopen it."""
    study_id = find_study(store, study).id
    with store.session() as session:
        session.execute(
            update(PreferenceStudy)
            .where(PreferenceStudy.id == study_id)
            .values(closed_at=utcnow() if closed else None)
        )


def open_study_models(store: Store) -> set[str]:
    """The models compared by the reader studies a rater can be in now: not closed, and open
    to enrolment, with an invitation issued or with an item already served. While such a study
    is open, a search with one of them could reproduce a side's list (services.search); a study
    nobody can enter (the demo's showcase study on a server without an admin) pauses nothing."""
    invited = select(StudyInvitation.study_id)
    served = select(Assignment.study_id)
    with store.session() as session:
        lists = session.scalars(
            select(PreferenceStudy.models).where(
                PreferenceStudy.closed_at.is_(None),
                or_(
                    PreferenceStudy.open_enrolment.is_(True),
                    PreferenceStudy.id.in_(invited),
                    PreferenceStudy.id.in_(served),
                ),
            )
        ).all()
    return {str(model) for models in lists for model in models or []}


def list_studies(store: Store) -> list[dict[str, Any]]:
    """The ADMIN listing: every study with its internal name, models, settings and item and
    vote counts (votes in force, undone ones excluded). Items are counted as `create_study`
    counts them: `n_items` compare models, `n_gold` are quality-control items, so a study has
    n_items + n_gold rows (`item_counts` words it). Never show this to raters; they get
    `list_open_studies`."""
    with store.session() as session:
        studies = session.scalars(select(PreferenceStudy).order_by(PreferenceStudy.id)).all()
        n_items: dict[int, int] = {}
        n_gold: dict[int, int] = {}
        for study_id, is_gold, count in session.execute(
            select(StudyItem.study_id, StudyItem.is_gold, func.count())
            .where(StudyItem.withdrawn_at.is_(None))
            .group_by(StudyItem.study_id, StudyItem.is_gold)
        ).all():
            (n_gold if is_gold else n_items)[study_id] = count
        kinds = session.execute(
            select(Vote.study_id, Vote.kind, func.count())
            .where(Vote.kind.in_(["vote", "undo"]))
            .group_by(Vote.study_id, Vote.kind)
        ).all()
    votes: dict[int, int] = {}
    for study_id, kind, count in kinds:
        votes[study_id] = votes.get(study_id, 0) + (count if kind == "vote" else -count)
    return [
        {
            "id": s.id,
            "name": s.name,
            "public_title": s.public_title or DEFAULT_PUBLIC_TITLE,
            "models": list(s.models),
            "n_items": n_items.get(s.id, 0),
            "n_gold": n_gold.get(s.id, 0),
            "raters_per_item": s.raters_per_item,
            "reveal_after_vote": s.reveal_after_vote,
            "open_enrolment": bool(s.open_enrolment),
            "gold_share": float(s.gold_share or 0.0),
            "claim_timeout_s": float(s.claim_timeout_s or DEFAULT_CLAIM_TIMEOUT_SECONDS),
            "closed": s.closed_at is not None,
            "votes": votes.get(s.id, 0),
            "created_at": s.created_at.isoformat(timespec="seconds"),
        }
        for s in studies
    ]


GOLD_SHARE_HELP = "a fraction from 0 to 0.5: 0.1 = 10% of the items"
GOLD_ACCURACY_HELP = "a fraction from 0 to 1: 0.8 = 80%"


def fraction(value: float | None, name: str, high: float = 1.0) -> float | None:
    """`value` checked as a fraction in [0, high] (the one unit of shares and accuracies in the
    CLI, the UI and the API); a percentage such as 80 gets a message, never 8000%."""
    if value is None:
        return None
    value = float(value)
    if not 0.0 <= value <= high:
        example = "0.1 = 10%" if high < 1 else "0.8 = 80%"
        raise StudyError(f"The {name} is a fraction from 0 to {high:g} ({example}); got {value:g}.")
    return value


def item_counts(n_items: int, n_gold: int) -> str:
    """How the CLI and the UI word a study's size: "24 items + 3 gold (27 in all)"."""
    words = f"{n_items} item{'s' if n_items != 1 else ''}"
    return f"{words} + {n_gold} gold ({n_items + n_gold} in all)" if n_gold else words


def withdraw_items(store: Store, study_id: int, positions: Sequence[int] | None = None) -> int:
    """Take items out of a study (all when positions is None); their votes are kept."""
    with store.session() as session:
        query = update(StudyItem).where(
            StudyItem.study_id == study_id, StudyItem.withdrawn_at.is_(None)
        )
        if positions is not None:
            query = query.where(StudyItem.position.in_(list(positions)))
        return session.execute(query.values(withdrawn_at=utcnow())).rowcount
