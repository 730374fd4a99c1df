"""The one ranker protocol of every evaluation, its baselines and the spec resolver.

A ranker scores every candidate of a task for every query: an (n_queries, n_candidates)
matrix, higher is better. A task here is anything with `name`, `instruction`, `queries` and
`candidates` (lists of `Item`: an id and what to embed): a MedHEB `Task` and a
`CxrRetrieveTask` alike. Ranking (top-k, ties in pool order) and scoring live in
medheb_app.eval.runner and medheb_app.eval.cxr_retrieve; rankers only score.

The oracle, one definition per kind of relevance:

| Relevance                         | Used by                    | "oracle" is                  |
|-----------------------------------|----------------------------|------------------------------|
| judgements: binary positives or   | MedHEB tasks (`bench run`, | `OracleRanker`: each query's |
| graded gains per query            | medheb-lite, manifests)    | relevant candidates first,   |
| (`Task.relevance`)                |                            | highest gain first: the      |
|                                   |                            | exact ceiling of each metric |
| constraints: "A and no B" against | CXR-Retrieve (`bench run   | `OracleEmbedder` by cosine:  |
| a study's labels, main or strict  | --suite cxr-retrieve`,     | satisfied minus violated     |
| (`query.parser.satisfies`)        | `cxr-retrieve eval`) and   | constraints on the gold      |
|                                   | `search`                   | labels                       |

Both are the ceiling of their kind; a query with fewer relevant candidates than k caps P@k
below 100 for either (CXR-Retrieve keeps such queries, as its paper does).

`load_ranker(spec, settings, relevance=...)` picks the right one; "random" is a seeded chance
ranking for judgement tasks and the random embedder for constraint tasks, so both kinds keep
the numbers their papers' tables were computed with.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import numpy as np

from medheb_app.evidence.study import EmbedItem, Evidence, Study
from medheb_app.index.cache import EmbeddingCache, embed_with_cache
from medheb_app.models import registry
from medheb_app.models.base import ModelCard, l2_normalise
from medheb_app.ranking.specs import logic_ranker
from medheb_app.settings import Settings

Progress = Callable[[float, str], None]
Relevance = Literal["judgements", "constraints"]
ORACLE_NOTE = (
    "oracle is not a model: it ranks each query's relevant candidates first (highest gain "
    "first), so its scores are the upper bound each task allows."
)
LABEL_ORACLE_NOTE = (
    "oracle is not a model: it ranks by the cosine of each query's constraints with the gold "
    "labels of each image (the ceiling of a label-reading ranker)."
)
RANDOM_NOTE = "random ranks candidates in a seeded random order: the chance level of each task."


class Entry(Protocol):
    """One query or candidate: a stable id and what a model embeds."""

    id: str
    item: EmbedItem


class Scorable(Protocol):
    """What a ranker reads of a task."""

    @property
    def name(self) -> str: ...

    @property
    def instruction(self) -> str: ...

    @property
    def queries(self) -> Sequence[Entry]: ...

    @property
    def candidates(self) -> Sequence[Entry]: ...


class Ranker(Protocol):
    """Scores every candidate of a task for every query: (n_queries, n_candidates)."""

    spec: str
    card: ModelCard
    note: str

    def score(
        self, task: Any, progress: Progress | None = None, stop: threading.Event | None = None
    ) -> np.ndarray: ...


def baseline_card(name: str, description: str) -> ModelCard:
    return ModelCard(
        name=name,
        version="1",
        dims=0,
        modalities=("text", "2d", "3d"),
        license="n/a",
        description=description,
    )


class OracleRanker:
    """Scores each candidate by its relevance: the perfect ranking, ties kept in pool order.

    Reads `task.relevance(query)` (binary or graded judgements: MedHEB tasks)."""

    spec = "oracle"
    note = ORACLE_NOTE
    card = baseline_card("oracle", ORACLE_NOTE)

    def score(self, task: Any, progress: Progress | None = None, stop=None) -> np.ndarray:
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
    card = baseline_card("random", RANDOM_NOTE)

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def score(self, task: Any, progress: Progress | None = None, stop=None) -> np.ndarray:
        task_seed = int(hashlib.sha256(task.name.encode()).hexdigest()[:8], 16)
        rng = np.random.default_rng([self.seed, task_seed])
        return rng.random((len(task.queries), len(task.candidates)), dtype=np.float32)


def item_kind(item: Any) -> str:
    """text, image or volume: the kind of input an embedder reads, for per-kind rates
    (eval/estimate.py); crops are named by the logic-aware stages that cut them."""
    if isinstance(item, str):
        return "text"
    form = getattr(item, "form", None)
    if form in ("text", "2d", "3d"):
        return {"text": "text", "2d": "image", "3d": "volume"}[form]
    forms = getattr(item, "forms", None) or ()
    if "3d" in forms:
        return "volume"
    return "image" if "2d" in forms else "text"


def text_chars(item: Any, instruction: str | None = None) -> int:
    """Characters a text input hands the encoder: its words plus the task instruction."""
    words = item if isinstance(item, str) else getattr(item, "text", "") or ""
    return len(str(words)) + len(instruction or "")


def content_key(entry: Entry) -> str:
    """The embedding-cache key of what is embedded: a study's id and content hash, a text's
    hash, else the entry's id (the same pixels or words are embedded once across tasks)."""
    item = entry.item
    if isinstance(item, Study):
        # deferred: faiss
        from medheb_app.index.catalog import study_content_key

        return study_content_key(item)
    if isinstance(item, str):
        return "text:" + hashlib.sha1(item.encode("utf-8")).hexdigest()[:16]
    return str(entry.id)


def unit_rows(vectors: np.ndarray, tolerance: float = 1e-5) -> np.ndarray:
    """Rows scaled to unit length, leaving rows already of unit length bit-for-bit unchanged.

    Most embedders return unit vectors; dividing them by a norm of 1 +- 1e-7 again would only
    add rounding noise, which reorders exact ties (the label oracle has many) differently from
    run to run of different code paths. Ties keep gallery order only if scores stay exact.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1)
    off = np.abs(norms - 1.0) > tolerance
    if not off.any():
        return vectors
    out = vectors.copy()
    out[off] = l2_normalise(vectors[off])
    return out


class EmbeddingRanker:
    """Cosine similarity between instructed query embeddings and plain candidate embeddings.

    Both sides go through the embedding cache (content-addressed keys), so a gallery's image
    vectors are computed once whatever the task or run."""

    def __init__(self, spec: str, embedder: Any, cache: Any | None = None, note: str = "") -> None:
        self.spec = spec
        self.embedder = embedder
        self.card = embedder.card
        self.cache = cache
        self.note = note
        # kind -> [seconds embedding, new vectors]: the runner records per-kind rates from it
        self.kind_timing: dict[str, list[float]] = {}
        # characters of the texts it embedded anew (a text's cost grows with its length, so
        # the estimate prices texts per character: eval/estimate.py)
        self.new_text_chars = 0

    @property
    def name(self) -> str:
        return self.spec

    def embed(
        self,
        entries: Sequence[Entry],
        instruction: str | None,
        progress: Progress | None = None,
        stop: threading.Event | None = None,
    ) -> np.ndarray:
        import time

        kind = item_kind(entries[0].item) if len(entries) else "text"
        fingerprint = self.card.fingerprint
        before = self.cache.count(fingerprint) if self.cache is not None else 0
        started = time.perf_counter()
        vectors = embed_with_cache(
            self.embedder,
            [entry.item for entry in entries],
            [content_key(entry) for entry in entries],
            self.cache,
            instruction,
            progress=progress,
            stop=stop,
        )
        seconds = time.perf_counter() - started
        new = self.cache.count(fingerprint) - before if self.cache is not None else len(entries)
        spent = self.kind_timing.setdefault(kind, [0.0, 0])
        spent[0] += seconds
        spent[1] += new
        if kind == "text" and len(entries) and new > 0:  # the new ones' share of the characters
            chars = sum(text_chars(entry.item, instruction) for entry in entries)
            self.new_text_chars += round(chars * new / len(entries))
        return unit_rows(vectors)

    def score(self, task: Any, progress: Progress | None = None, stop=None) -> np.ndarray:
        def part(offset: float, share: float) -> Progress | None:
            if progress is None:
                return None
            return lambda fraction, message: progress(offset + share * fraction, message)

        # candidates dominate the work (images); queries are usually short texts
        candidates = self.embed(task.candidates, None, part(0.0, 0.8), stop)
        queries = self.embed(task.queries, task.instruction or None, part(0.8, 0.2), stop)
        return queries @ candidates.T


def load_ranker(
    spec: str,
    settings: Settings,
    relevance: Relevance = "judgements",
    *,
    cache: Any = None,
    train_studies: Callable[[], Sequence[Study]] | None = None,
    probe_config: Any = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> Ranker:
    """A ranker for a spec string; the oracle is the one of the task's kind of relevance.

    Judgement tasks: "oracle" and "random" are built in (OracleRanker, RandomRanker).
    Constraint tasks: "logic:<spec>" is the logic-aware ranker over that embedder, with its
    probes fit on `train_studies` (called only when a probe must be fit); "oracle" is the
    label-vector embedder. Any other spec goes through the model registry. `progress`
    follows a logic: ranker's probe fit (the only loading that embeds).
    """
    spec = spec.strip()
    if relevance == "judgements":
        if spec == "oracle":
            return OracleRanker()
        if spec == "random":
            return RandomRanker(seed)
    cache = cache if cache is not None else EmbeddingCache(settings.cache_dir)
    if relevance == "constraints" and spec.startswith("logic:"):
        if train_studies is None:
            raise ValueError(f"{spec} fits probes on train studies; none were given.")
        return logic_ranker(spec, settings, train_studies, cache, probe_config, progress)
    note = LABEL_ORACLE_NOTE if spec == "oracle" else ""
    return EmbeddingRanker(spec, registry.load_embedder(spec, settings), cache, note=note)


def item_forms(item: EmbedItem) -> set[str]:
    """The evidence forms a model must read to embed `item`."""
    if isinstance(item, str):
        return {"text"}
    if isinstance(item, Evidence):
        return set(item.forms)
    if isinstance(item, Study):
        return {item.form}
    return set()


def task_forms(task: Any) -> set[str]:
    """Every evidence form the task asks a model to read."""
    forms: set[str] = set()
    for entry in [*task.queries, *task.candidates]:
        forms |= item_forms(entry.item)
    return forms


def unread_forms(task: Any, modalities: Sequence[str]) -> set[str]:
    """The task's evidence forms that a model reading `modalities` cannot read (empty: it can
    score the task). One rule for the runner, its Ray engine and the run estimate."""
    return task_forms(task) - set(modalities)
