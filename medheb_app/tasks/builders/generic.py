"""The task shapes MedHEB reuses across sources, as pure functions of labelled items.

- Same-label retrieval (I-I): a query ranks same-source studies; positive if it shares the
  query's single label (MedHEB Table 3). The query itself and, when known, other studies of
  the same patient are excluded, so a follow-up image cannot stand in for visual similarity.
- Image-to-label (I-Lab) and label-to-image (T-I): images against the task's label texts.
- Paired retrieval (I-Rep, MB-VR, T-T, VG): each query has exactly one source-paired target.
Label tasks keep only single-label samples (section 3.1.3) so non-target labels are valid
negatives; callers filter with `single_label`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from medheb_app.evidence.study import EmbedItem
from medheb_app.tasks.base import Item, Query, Task, TaskMetadata


@dataclass(frozen=True)
class LabelledItem:
    """An item with its single class label and the group (patient) it belongs to."""

    id: str
    item: EmbedItem
    label: str
    group: str | None = None


def single_label(
    labels_by_id: Mapping[str, Iterable[str]],
) -> dict[str, str]:
    """Ids with exactly one label -> that label (multi-label and unlabelled ids dropped)."""
    kept: dict[str, str] = {}
    for item_id, labels in labels_by_id.items():
        distinct = sorted(set(labels))
        if len(distinct) == 1:
            kept[item_id] = distinct[0]
    return kept


def subsample(items: Sequence, n: int | None, seed: int) -> list:
    """At most n items, drawn without replacement by a seeded generator, in original order."""
    if n is None or len(items) <= n:
        return list(items)
    chosen = np.random.default_rng(seed).choice(len(items), size=n, replace=False)
    return [items[i] for i in sorted(chosen)]


def same_label_task(
    metadata: TaskMetadata,
    items: Sequence[LabelledItem],
    max_queries: int | None = None,
    seed: int = 0,
) -> Task:
    """Image-image: every item is a candidate; queries are items whose label has another member.

    Positives are all other same-label items outside the query's group, the first of them
    (in pool order) being the designated one.
    """
    by_label: dict[str, list[LabelledItem]] = defaultdict(list)
    for item in items:
        by_label[item.label].append(item)
    by_group: dict[str, set[str]] = defaultdict(set)
    for item in items:
        if item.group is not None:
            by_group[item.group].add(item.id)
    queries: list[Query] = []
    for item in items:
        exclude = {item.id} | (by_group[item.group] if item.group is not None else set())
        positives = tuple(other.id for other in by_label[item.label] if other.id not in exclude)
        if positives:
            queries.append(
                Query(id=item.id, item=item.item, positives=positives, exclude=frozenset(exclude))
            )
    queries = subsample(queries, max_queries, seed)
    candidates = [Item(id=item.id, item=item.item) for item in items]
    return Task(metadata, queries, candidates)


def label_candidates(
    labels: Iterable[str], label_id: Callable[[str], str], label_text: Callable[[str], str]
) -> list[Item]:
    """One text candidate per label, in sorted order."""
    return [Item(id=label_id(label), item=label_text(label)) for label in sorted(set(labels))]


def image_to_label_task(
    metadata: TaskMetadata,
    items: Sequence[LabelledItem],
    label_id: Callable[[str], str],
    label_text: Callable[[str], str],
    vocabulary: Iterable[str] | None = None,
    max_queries: int | None = None,
    seed: int = 0,
) -> Task:
    """Image -> its label's text among all the task's label texts (MedHEB I-Lab)."""
    labels = set(vocabulary) if vocabulary is not None else {item.label for item in items}
    candidates = label_candidates(labels, label_id, label_text)
    queries = [
        Query(id=item.id, item=item.item, positives=(label_id(item.label),))
        for item in items
        if item.label in labels
    ]
    return Task(metadata, subsample(queries, max_queries, seed), candidates)


def label_to_image_task(
    metadata: TaskMetadata,
    items: Sequence[LabelledItem],
    label_id: Callable[[str], str],
    label_text: Callable[[str], str],
) -> Task:
    """Label text -> images with that label (MedHEB T-I); one query per label present."""
    by_label: dict[str, list[str]] = defaultdict(list)
    for item in items:
        by_label[item.label].append(item.id)
    queries = [
        Query(id=label_id(label), item=label_text(label), positives=tuple(by_label[label]))
        for label in sorted(by_label)
    ]
    candidates = [Item(id=item.id, item=item.item) for item in items]
    return Task(metadata, queries, candidates)


def paired_task(
    metadata: TaskMetadata,
    pairs: Sequence[tuple[Item, Item]],
    distractors: Sequence[Item] = (),
    max_queries: int | None = None,
    seed: int = 0,
) -> Task:
    """Each query's only positive is its paired target; the pool is every target (+distractors).

    Used for image-to-report, modality bridging, text-text and region retrieval, where the
    source pairs one query with one target (MedHEB Table 3).
    """
    chosen = subsample(list(pairs), max_queries, seed)
    queries = [Query(id=q.id, item=q.item, positives=(t.id,)) for q, t in chosen]
    pool: dict[str, Item] = {}
    for _, target in chosen:
        pool.setdefault(target.id, target)
    for item in distractors:
        pool.setdefault(item.id, item)
    return Task(metadata, queries, list(pool.values()))


def graded_task(
    metadata: TaskMetadata,
    queries: Sequence[Item],
    candidates: Sequence[Item],
    gain: Callable[[str, str], float],
    max_queries: int | None = None,
    seed: int = 0,
) -> Task:
    """Graded relevance (MedHEB section 5.4): gain(query id, candidate id) in [0, 1].

    The query itself is excluded; queries with no candidate of positive gain are dropped.
    """
    built: list[Query] = []
    for query in queries:
        gains = {
            c.id: g for c in candidates if c.id != query.id and (g := gain(query.id, c.id)) > 0
        }
        if gains:
            built.append(
                Query(id=query.id, item=query.item, gains=gains, exclude=frozenset({query.id}))
            )
    return Task(metadata, subsample(built, max_queries, seed), list(candidates))
