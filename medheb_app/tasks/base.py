"""What a MedHEB task is: validated metadata, queries, a candidate pool and relevance.

MedHEB section 3.1.1: every task is a query, a task-specific candidate pool and a clinically
meaningful positive relation, ranked by cosine similarity. Each query has one designated
positive (possibly with further accepted ids) or, for graded tasks (section 5.4), a gain per
candidate. Instructions (Appendix A.6) are prepended to queries only; candidates never get one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from medheb_app.evidence.study import EmbedItem, Evidence, Study
from medheb_app.settings import Settings

Family = Literal["I-I", "MB-VR", "I-Lab", "I-Rep", "T-I", "VQA", "VG", "T-T"]
FAMILIES: tuple[str, ...] = ("I-I", "MB-VR", "I-Lab", "I-Rep", "T-I", "VQA", "VG", "T-T")
# MedHEB section 5.3: families covered by earlier benchmarks vs. the under-explored relations.
ESTABLISHED_FAMILIES: tuple[str, ...] = ("I-I", "I-Lab", "I-Rep", "T-I", "T-T")
UNDEREXPLORED_FAMILIES: tuple[str, ...] = ("MB-VR", "VG")
TaskForm = Literal["2d", "3d", "text"]
TaskSplit = Literal["ID", "held-out-source"]
MainMetric = Literal["hit@1", "ndcg@5"]
Part = Literal["test", "train"]


class TaskMetadata(BaseModel):
    """A task's identity and protocol; unknown fields are an error, not silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9._-]*$")
    family: Family
    form: TaskForm
    split: TaskSplit
    anatomy: str
    source: str
    qry_inst: str = Field(min_length=1)
    qry_text: str = ""  # task-level query text (Table 9); per-row text lives in the query item
    main_metric: MainMetric = "hit@1"
    graded: bool = False
    relation: str = ""  # graded tasks: the relation type of Table 5 (severity, laterality, ...)
    description: str = ""
    data_revision: str = ""
    synthetic: bool = False

    @property
    def instruction(self) -> str:
        """What the query is prefixed with: qry_inst, then the task-level qry_text if any."""
        return " ".join(part for part in (self.qry_inst, self.qry_text) if part)

    @model_validator(mode="after")
    def _graded_uses_ndcg(self) -> TaskMetadata:
        if self.graded != (self.main_metric == "ndcg@5"):
            raise ValueError("Graded tasks use main_metric 'ndcg@5'; single-positive 'hit@1'.")
        if self.graded and not self.relation:
            raise ValueError("A graded task names its relation (e.g. 'severity').")
        return self


@dataclass(frozen=True)
class Item:
    """One query or candidate: a stable id (it keys the embedding cache) and what to embed."""

    id: str
    item: EmbedItem


@dataclass(frozen=True)
class Query(Item):
    """A query, its relevance and the candidates it must not be ranked against (itself).

    `positives[0]` is the designated positive; later ids are also accepted. Graded queries
    carry `gains` (candidate id -> gain > 0; absent ids have gain 0) instead.
    """

    positives: tuple[str, ...] = ()
    gains: Mapping[str, float] = field(default_factory=dict)
    exclude: frozenset[str] = frozenset()


class TaskUnavailable(Exception):
    """A task cannot be built here (e.g. ../shared/data is absent); the message says why."""


class EmptyTask(ValueError):
    """A task's data gave it no query or no candidate (a corpus too small for its relation)."""


@dataclass
class Task:
    """Metadata plus queries and one shared candidate pool."""

    metadata: TaskMetadata
    queries: list[Query]
    candidates: list[Item]

    def __post_init__(self) -> None:
        self.validate()

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def instruction(self) -> str:
        """What each query is prefixed with (Appendix A.6); candidates get none."""
        return self.metadata.instruction

    def validate(self) -> None:
        """Fail early on a task that cannot be scored: every query must have a reachable target."""
        name = self.metadata.name
        if not self.queries:
            raise EmptyTask(f"Task {name} has no queries.")
        if not self.candidates:
            raise EmptyTask(f"Task {name} has no candidates.")
        ids = [candidate.id for candidate in self.candidates]
        if len(set(ids)) != len(ids):
            raise ValueError(f"Task {name} has duplicate candidate ids.")
        if len({query.id for query in self.queries}) != len(self.queries):
            raise ValueError(f"Task {name} has duplicate query ids.")
        known = set(ids)
        for query in self.queries:
            relevant = set(query.gains) if self.metadata.graded else set(query.positives)
            if self.metadata.graded and any(gain < 0 for gain in query.gains.values()):
                raise ValueError(f"Task {name}, query {query.id}: gains must be >= 0.")
            unknown = relevant - known
            if unknown:
                raise ValueError(
                    f"Task {name}, query {query.id}: relevant ids not in the candidate pool: "
                    f"{sorted(unknown)[:3]}"
                )
            reachable = {
                i for i in relevant - query.exclude if not self.metadata.graded or query.gains[i]
            }
            if not reachable:
                raise ValueError(f"Task {name}, query {query.id} has no reachable relevant id.")

    def relevance(self, query: Query) -> dict[str, float]:
        """Candidate id -> gain (1.0 for binary positives), excluded candidates removed."""
        if self.metadata.graded:
            pairs: Iterable[tuple[str, float]] = query.gains.items()
        else:
            pairs = ((pid, 1.0) for pid in query.positives)
        return {cid: float(g) for cid, g in pairs if cid not in query.exclude and g > 0}

    def counts(self) -> dict[str, int]:
        return {"n_queries": len(self.queries), "n_candidates": len(self.candidates)}


Builder = Callable[[Settings, Part], Task]


@dataclass(frozen=True)
class TaskSpec:
    """A registered task: its name, family, split, where it comes from and how to build it.

    `trainable` tasks (ID tasks with a train part) feed the MedEmb recipe's training pairs.
    """

    name: str
    family: str
    split: str
    source: str
    build: Builder
    trainable: bool = False


@dataclass
class Suite:
    """A named set of task builders, registered in order."""

    name: str
    description: str = ""
    specs: dict[str, TaskSpec] = field(default_factory=dict)

    def register(self, spec: TaskSpec) -> None:
        if spec.name in self.specs:
            raise ValueError(f"Task {spec.name} is registered twice in suite {self.name}.")
        self.specs[spec.name] = spec

    def names(self) -> list[str]:
        return list(self.specs)

    def build(
        self,
        settings: Settings,
        only: Sequence[str] | None = None,
        part: Part = "test",
        before_each: Callable[[str, int, int], None] | None = None,
    ) -> tuple[list[Task], dict[str, str]]:
        """(tasks built, {task name: reason skipped}); unknown names in `only` are an error.
        `before_each(name, i, n)` is called before each build (a runner reports the stage and
        checks for cancel there: a real-data task can take a minute to build)."""
        wanted = list(only) if only else self.names()
        unknown = [name for name in wanted if name not in self.specs]
        if unknown:
            raise KeyError(
                f"Unknown task(s) {', '.join(unknown)} in suite {self.name}; "
                f"known: {', '.join(self.names())}"
            )
        tasks: list[Task] = []
        skipped: dict[str, str] = {}
        for i, name in enumerate(wanted):
            if before_each is not None:
                before_each(name, i, len(wanted))
            try:
                tasks.append(self.specs[name].build(settings, part))
            except TaskUnavailable as reason:
                skipped[name] = str(reason)
        record_sizes(settings, tasks)
        return tasks, skipped


SIZES_FILE = "task-sizes.json"


def record_sizes(settings: Settings, tasks: Iterable[Task]) -> None:
    """Remember each built task's form and sizes in DATA_DIR, so `bench list` can answer the
    CLI contract's fields (form, n_queries, n_candidates) without building anything."""
    path = settings.data_dir / SIZES_FILE
    sizes = known_sizes(settings)
    for task in tasks:
        sizes[task.name] = {
            "form": task.metadata.form,
            "n_queries": len(task.queries),
            "n_candidates": len(task.candidates),
        }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(sizes, sort_keys=True))
        partial.replace(path)
    except OSError:  # a read-only DATA_DIR only costs the listing its sizes
        pass


def known_sizes(settings: Settings) -> dict[str, dict[str, object]]:
    """{task name: {form, n_queries, n_candidates}} as last built here ({} if never)."""
    try:
        loaded = json.loads((settings.data_dir / SIZES_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def revision(*parts: object) -> str:
    """A short content hash of whatever identifies a task's data (files, seeds, ids)."""
    payload = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def file_digest(*paths: object) -> str:
    """Short SHA-256 over the bytes of the given files (the real data a task was built from)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(str(path), "rb") as handle:
            while block := handle.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()[:12]


def describe_item(item: EmbedItem) -> str:
    """A short human description (for reports and the UI's per-query browser)."""
    if isinstance(item, str):
        return item if len(item) <= 80 else item[:77] + "..."
    if isinstance(item, Study):
        return f"{item.form} study {item.id}"
    if isinstance(item, Evidence):
        return "+".join(item.forms)
    return type(item).__name__
