"""The search service the CLI and the UI share: a text query or a file in, ranked hits out.

A text query is parsed into constraints (medheb_app.query.parser; CXR-Retrieve section
3.2), embedded by the chosen model and ranked against a prebuilt index, by cosine
("similarity") or by the query's logic over per-finding probes ("logic",
ranking/index_logic.py); each hit says whether its labels satisfy the constraints, so the UI
can mark hard negatives. A file query (PNG/JPEG, DICOM, NIfTI) is read by
medheb_app.evidence.readers and ranked by cosine, without constraints.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.evidence.study import EvidenceError
from medheb_app.index.catalog import IndexNotFoundError, LoadedIndex, load_index
from medheb_app.index.sources import Vocabulary
from medheb_app.models.base import Embedder
from medheb_app.query.parser import (
    ParsedQuery,
    QueryTooLong,
    check_query_length,
    parse_query,
    satisfies,
    violations,
)
from medheb_app.settings import Settings

MAX_K = 1000
RANKINGS = ("similarity", "logic")
FILE_LOGIC_WARNING = (
    "Logic-aware ranking reads a text query's findings; a file query is ranked by similarity."
)
NO_FINDING_WARNING = (
    "No known finding in the query, so results are ranked by similarity only and not "
    "checked against constraints. Known findings: {known}."
)


class SearchError(ValueError):
    """A search that cannot run as asked; the message tells the user what to change."""


@dataclass
class SearchHit:
    """One ranked result with what the UI needs to show it and to mark broken constraints."""

    rank: int
    id: str
    score: float
    findings: dict[str, int | None]
    source: str
    satisfies: bool | None
    violations: dict[str, str] = field(default_factory=dict)
    synthetic: bool = False
    modality: str = ""
    split: str | None = None
    path: str | None = None


@dataclass
class SearchResponse:
    """A query, how it was understood, and its ranked hits (the CLI's JSON contract)."""

    query: str
    query_kind: str  # "text" | "file"
    model: str
    model_fingerprint: str
    index: str
    k: int
    ranking: str = "similarity"
    positive: list[str] = field(default_factory=list)
    negative: list[str] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)
    unknown_terms: list[str] = field(default_factory=list)
    corrections: dict[str, str] = field(default_factory=dict)  # misspelling -> read as
    suggestions: dict[str, list[str]] = field(default_factory=dict)  # "did you mean"
    warnings: list[str] = field(default_factory=list)
    results: list[SearchHit] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)

    @property
    def constraints(self) -> dict[str, list[str]]:
        return {"positive": self.positive, "negative": self.negative}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: {"query", "constraints": {"positive", "negative"}, "results", ...}."""
        return {
            "query": self.query,
            "query_kind": self.query_kind,
            "model": self.model,
            "model_fingerprint": self.model_fingerprint,
            "index": self.index,
            "k": self.k,
            "ranking": self.ranking,
            "constraints": {**self.constraints, "uncertain": self.uncertain},
            "unknown_terms": self.unknown_terms,
            "corrections": self.corrections,
            "suggestions": self.suggestions,
            "warnings": self.warnings,
            "results": [asdict(hit) for hit in self.results],
            "timings_ms": self.timings_ms,
        }


def resolve_index(
    name: str, spec: str, embedder: Embedder, settings: Settings
) -> tuple[LoadedIndex, bool]:
    """(the index `name` for this model, whether it was just built).

    A demo index that has not been built for this model yet is built now, from the demo
    corpus (one-off, can take minutes for a large model); any other missing index is an error.
    """
    from medheb_app.demo import DEMO_3D, DEMO_CXR, ensure_demo_index

    try:
        return load_index(name, embedder, settings), False
    except IndexNotFoundError:
        if name not in (DEMO_CXR, DEMO_3D):
            raise
    try:
        return ensure_demo_index(name, spec, settings), True
    except ImportError as error:  # a part of the demo is not installed in this checkout
        raise SearchError(f"The demo index {name!r} cannot be built here: {error}") from error


def _check_modality(embedder: Embedder, form: str, spec: str) -> None:
    if form not in embedder.card.modalities:
        readable = ", ".join(embedder.card.modalities)
        raise SearchError(f"Model {spec!r} cannot embed {form} input; it reads: {readable}.")


def index_vocabulary(loaded: LoadedIndex) -> Vocabulary | None:
    """The finding vocabulary the index's source labels (None for indices built before
    indices recorded one: the demo, labelled with the CXR-Retrieve ten)."""
    return Vocabulary.from_dict(loaded.info.get("vocabulary"))


def query_vocabulary(loaded: LoadedIndex) -> tuple[str, ...]:
    """Names a query is parsed against: the index's own labelled findings, else the ten."""
    vocabulary = index_vocabulary(loaded)
    return vocabulary.names if vocabulary is not None and vocabulary.labelled else CXR_RETRIEVE_10


def vocabulary_warnings(
    loaded: LoadedIndex, parsed: ParsedQuery | None, setting: str, ranking: str
) -> list[str]:
    """What the index's labels cannot do for this query, said plainly."""
    vocabulary = index_vocabulary(loaded)
    if vocabulary is None or parsed is None:
        return []
    if not vocabulary.labelled:
        notes = [
            f"Index {loaded.name!r} comes from a source without finding labels, so hits are "
            "not checked against the query's findings."
        ]
        if ranking == "logic":
            notes.append(
                "Logic-aware ranking is unavailable for it (probes need labelled studies to "
                "fit on); results are ranked by similarity."
            )
        return notes
    if setting == "strict" and parsed.negative and not vocabulary.confirmed_negatives:
        return [
            f"Index {loaded.name!r} comes from {vocabulary.source}, whose labels are "
            "positive-only: no study is a confirmed negative, so under the strict setting no "
            "hit can satisfy an excluded finding. Use the main setting (not labelled positive "
            "counts as absent)."
        ]
    return []


def _encode_text(
    text: str, embedder: Embedder, spec: str, vocabulary: tuple[str, ...] = CXR_RETRIEVE_10
) -> tuple[np.ndarray, ParsedQuery]:
    text = text.strip()
    if not text:
        raise SearchError(
            "The query is empty; describe the findings, e.g. 'pleural effusion and no "
            "cardiomegaly'."
        )
    _check_modality(embedder, "text", spec)
    return embedder.encode([text]), parse_query(text, vocabulary)


def _encode_file(path: Path, embedder: Embedder, spec: str, settings: Settings) -> np.ndarray:
    from medheb_app.evidence.readers import study_from_file

    study = study_from_file(path, max_bytes=settings.max_upload_bytes)
    _check_modality(embedder, study.form, spec)
    return embedder.encode([study])


def search(
    query_text: str | None = None,
    file: str | Path | None = None,
    model_spec: str | None = None,
    index: str | None = None,
    k: int = 10,
    settings: Settings | None = None,
    setting: str = "main",
    ranking: str = "similarity",
    nprobe: int | None = None,
    ef_search: int | None = None,
) -> SearchResponse:
    """Rank the index's studies for a text query or an image/volume file (exactly one).

    model_spec defaults to settings.default_model, index to settings.default_index. `setting`
    is the CXR-Retrieve relevance setting used for `satisfies`: "main" ("no B" holds when B is
    not positive) or "strict" (only when B is confirmed negative). `ranking` is "similarity"
    (cosine) or "logic" (a text query's constraints over per-finding probes; a score is then
    log p(the study satisfies the query)). `nprobe` (IVF, IVF-PQ) and `ef_search` (HNSW)
    override the index's recorded search parameters for this search.
    """
    from medheb_app.models.registry import load_embedder

    settings = settings or Settings.from_env()
    spec = model_spec or settings.default_model
    index_name = index or settings.default_index
    if (query_text is None) == (file is None):
        raise SearchError("Give either a text query or a file to search with (exactly one).")
    if not 1 <= int(k) <= MAX_K:
        raise SearchError(f"k must be between 1 and {MAX_K}; got {k}.")
    if setting not in ("main", "strict"):
        raise SearchError(f"Unknown relevance setting {setting!r}; use 'main' or 'strict'.")
    if ranking not in RANKINGS:
        raise SearchError(f"Unknown ranking {ranking!r}; use one of: {', '.join(RANKINGS)}.")
    if query_text is not None:
        try:  # before any model or index is loaded: a 1 MB query costs nothing
            check_query_length(query_text)
        except QueryTooLong as error:
            raise SearchError(str(error)) from error
    embedder = load_embedder(spec, settings)
    build_started = time.perf_counter()
    loaded, just_built = resolve_index(index_name, spec, embedder, settings)
    build_seconds = time.perf_counter() - build_started

    started = time.perf_counter()
    parsed: ParsedQuery | None = None
    if query_text is not None:
        vector, parsed = _encode_text(query_text, embedder, spec, query_vocabulary(loaded))
        query = query_text.strip()
    else:
        path = Path(file)  # type: ignore[arg-type]
        try:
            vector = _encode_file(path, embedder, spec, settings)
        except EvidenceError as error:
            raise SearchError(str(error)) from error
        query = path.name
    encoded = time.perf_counter()
    notes: list[str] = []
    vocabulary = index_vocabulary(loaded)
    labelled = vocabulary is None or vocabulary.labelled
    notes.extend(vocabulary_warnings(loaded, parsed, setting, ranking))
    use_logic = ranking == "logic" and parsed is not None and parsed.has_constraints and labelled
    if ranking == "logic" and parsed is None:
        notes.append(FILE_LOGIC_WARNING)
    if use_logic:
        from medheb_app.ranking.index_logic import IndexLogicError, logic_search

        try:
            top_scores, top_ids, probe_warnings = logic_search(
                loaded, embedder, parsed, vector, int(k), settings
            )
        except IndexLogicError as error:
            raise SearchError(str(error)) from error
        notes.extend(probe_warnings)
        scores, ids = top_scores[None], top_ids[None]
    else:
        try:
            scores, ids = loaded.search(
                np.asarray(vector, dtype=np.float32), int(k), nprobe=nprobe, ef_search=ef_search
            )
        except ValueError as error:
            raise SearchError(str(error)) from error
    searched = time.perf_counter()

    response = SearchResponse(
        query=query,
        query_kind="text" if parsed is not None else "file",
        model=spec,
        model_fingerprint=embedder.card.fingerprint,
        index=index_name,
        k=int(k),
        ranking="logic" if use_logic else "similarity",
        warnings=notes,
        timings_ms={
            "encode": round((encoded - started) * 1000, 2),
            "search": round((searched - encoded) * 1000, 2),
        },
    )
    if just_built:
        response.warnings.append(
            f"The {index_name} index had not been built for {spec}; it was built now "
            f"({loaded.index.count} studies, {build_seconds:.0f} s). Later searches reuse it."
        )
    if parsed is not None:
        response.positive = list(parsed.positive)
        response.negative = list(parsed.negative)
        response.uncertain = list(parsed.uncertain)
        response.unknown_terms = list(parsed.unknown)
        response.corrections = dict(parsed.corrections)
        response.suggestions = {typed: list(found) for typed, found in parsed.suggestions}
        response.warnings.extend(parsed.warnings)
        if not parsed.has_constraints:
            known = ", ".join(name.lower() for name in parsed.vocabulary)
            response.warnings.append(NO_FINDING_WARNING.format(known=known))
    response.results = _hits(scores[0], ids[0], loaded, parsed if labelled else None, setting)
    return response


def _hits(
    scores: np.ndarray,
    ids: np.ndarray,
    loaded: LoadedIndex,
    parsed: ParsedQuery | None,
    setting: str,
) -> list[SearchHit]:
    hits = []
    for score, item_id in zip(scores, ids, strict=True):
        if item_id is None:  # an approximate index found fewer than k items
            continue
        row = loaded.item(item_id)
        findings = row.get("findings", {})
        hits.append(
            SearchHit(
                rank=len(hits) + 1,
                id=item_id,
                score=round(float(score), 6),
                findings=findings,
                source=row.get("source", ""),
                satisfies=satisfies(findings, parsed, setting) if parsed is not None else None,
                violations=violations(findings, parsed) if parsed is not None else {},
                synthetic=bool(row.get("synthetic", False)),
                modality=row.get("modality", ""),
                split=row.get("split"),
                path=row.get("path"),
            )
        )
    return hits
