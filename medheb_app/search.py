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
from medheb_app.evidence.study import EvidenceError, Study
from medheb_app.index.catalog import IndexNotFoundError, LoadedIndex, load_index
from medheb_app.index.sources import Vocabulary
from medheb_app.models.base import Embedder
from medheb_app.models.device import intra_op_threads
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
RANKINGS = ("auto", "logic", "similarity")
# The strongest shipped models first: the default of the search tab and the CLI is the first
# of these that has the chosen index built (BENCHMARKS.md, "Logic-aware search vs cosine":
# dual-lite@label-aware leads on "A and no B" under both rankings).
PREFERRED_MODELS = ("dual-lite@label-aware", "dual-lite", "medemb-lite")
BASE_MODEL = "dual-lite"  # committed weights: every install has it
FILE_SPEC_MARKERS = ("/", "\\", ":", "..")
FILE_LOGIC_WARNING = (
    "Logic-aware ranking reads a text query's findings; a file query is ranked by similarity."
)
PROBES_NOT_READY = (
    "Logic-aware ranking is not prepared for this model and index yet (an admin index job or "
    "`python -m medheb_app demo build` prepares it); ranked by similarity."
)
NO_FINDING_WARNING = (
    "No known finding in the query, so results are ranked by similarity only and not "
    "checked against constraints. Known findings: {known}."
)


class SearchError(ValueError):
    """A search that cannot run as asked; the message tells the user what to change."""


def _shown(value: object, limit: int = 60) -> str:
    """A user-typed value quoted back briefly (a 1 MB spec is not echoed whole)."""
    text = str(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")


_LISTED: dict[tuple, list[tuple[str, str]]] = {}


def _listed_models(settings: Settings) -> list[tuple[str, str]]:
    """(spec, fingerprint) of every listed model that names no file, remembered until a file
    under the model folders changes (listing hashes weights: ~60 ms, too slow per search)."""
    from medheb_app.models.registry import list_models

    roots = (settings.models_dir, settings.trained_models_dir)
    stamp = tuple(
        sorted(
            (str(path), path.stat().st_mtime_ns)
            for root in roots
            if root.is_dir()
            for path in root.rglob("*")
            if path.is_file()
        )
    )
    key = (str(settings.models_dir), str(settings.trained_models_dir), stamp)
    if key not in _LISTED:
        specs = []
        for entry in list_models(settings):
            spec = str(entry["spec"])
            card = entry.get("card") or {}
            if any(marker in spec for marker in FILE_SPEC_MARKERS):
                continue
            fingerprint = str(card.get("fingerprint", "")) if isinstance(card, dict) else ""
            specs.append((spec, fingerprint))
        _LISTED.clear()
        _LISTED[key] = specs
    return _LISTED[key]


def offered(settings: Settings) -> dict[str, list[str]]:
    """What an anonymous request may search: index name -> the listed model specs that have it
    built, strongest first. Only registered checkpoints and built-ins appear (never a spec
    that names a file), and only for indices that exist, so picking from it never builds,
    generates or loads anything by path."""
    from medheb_app.index.catalog import list_indices

    built: dict[str, set[str]] = {}
    for entry in list_indices(settings):
        built.setdefault(str(entry["name"]), set()).add(str(entry["fingerprint"]))
    specs = _listed_models(settings)
    order = {spec: rank for rank, spec in enumerate(PREFERRED_MODELS)}
    result: dict[str, list[str]] = {}
    for name in sorted(built):
        models = [spec for spec, fingerprint in specs if fingerprint in built[name]]
        if models:
            result[name] = sorted(models, key=lambda spec: (order.get(spec, len(order)), spec))
    return result


def default_model(settings: Settings, index: str | None = None) -> str:
    """The model a search uses when none is named.

    A spec the operator pinned (Settings.default_model, MEDHEB_DEFAULT_MODEL) wins; with
    "auto" it is the strongest listed model that has `index` built, else the model an index
    would be built with (build_default_model; the service then says the index is missing for
    it)."""
    if settings.pinned_model:
        return settings.pinned_model
    models = offered(settings).get(index or settings.default_index, [])
    return models[0] if models else build_default_model(settings)


def build_default_model(settings: Settings) -> str:
    """The model an index is built with when none is named: the pinned spec, else ("auto")
    the strongest shipped model whose weights are present (PREFERRED_MODELS), else dual-lite."""
    if settings.pinned_model:
        return settings.pinned_model
    listed = {spec for spec, _ in _listed_models(settings)}
    return next((spec for spec in PREFERRED_MODELS if spec in listed), BASE_MODEL)


def check_offered(model: str, index: str, settings: Settings) -> None:
    """Refuse, in words, a (model, index) an anonymous request may not pick."""
    offer = offered(settings)
    if index not in offer:
        names = ", ".join(offer) or "none yet (the demo is being prepared)"
        raise SearchError(f"Index {_shown(index)} is not offered here; pick one of: {names}.")
    if model not in offer[index]:
        raise SearchError(
            f"Model {_shown(model)} is not offered for index {index!r}; pick one of: "
            f"{', '.join(offer[index])}."
        )


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


def resolve_index(name: str, embedder: Embedder, settings: Settings) -> LoadedIndex:
    """The built index `name` for this model. A search never builds one: a missing index is
    an error that says how to build it (`demo build`, `index build` or an admin job)."""
    try:
        return load_index(name, embedder, settings)
    except IndexNotFoundError as error:
        raise SearchError(
            f"{error} Indices are built from the command line or as an admin job, never by a "
            "search."
        ) from None


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
        if ranking in ("logic", "auto") and parsed.has_constraints:
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
    text: str,
    embedder: Embedder,
    spec: str,
    vocabulary: tuple[str, ...] = CXR_RETRIEVE_10,
    threads: int = 0,
) -> tuple[np.ndarray, ParsedQuery]:
    text = text.strip()
    if not text:
        raise SearchError(
            "The query is empty; describe the findings, e.g. 'pleural effusion and no "
            "cardiomegaly'."
        )
    _check_modality(embedder, "text", spec)
    with intra_op_threads(threads):
        vector = embedder.encode([text])
    return vector, parse_query(text, vocabulary)


PROJECTION_MODALITIES = {"CR", "DX", "XR", "RG"}
CHEST_PARTS = {"CHEST", "THORAX", "LUNG", "LUNGS", "CHEST_TO_PELVIS", "CHESTABDOMEN"}
MODALITY_WORDS = {
    "CR": "a radiograph",
    "DX": "a radiograph",
    "CT": "a CT",
    "MR": "an MR",
    "US": "an ultrasound",
    "PT": "a PET",
    "NM": "a nuclear medicine image",
    "MG": "a mammogram",
}


def upload_mismatch(study: Study, loaded: LoadedIndex) -> list[str]:
    """Warnings when an uploaded study is not the kind the index holds (a head CT or prostate MR
    against the chest radiograph index): its hits are then only the least unlike images."""
    if "modalities" in loaded.info:  # recorded at build time: no pass over a large index
        modalities = {str(m).upper() for m in loaded.info["modalities"]} - {"", "OT"}
        forms = {str(form) for form in loaded.info.get("forms") or ["2d"]}
    else:
        rows = list(loaded.items.values())
        modalities = {str(row.get("modality") or "").upper() for row in rows} - {"", "OT"}
        forms = {str(row.get("form") or "2d") for row in rows}
    chest_index = bool(modalities) and modalities <= PROJECTION_MODALITIES
    held = "chest radiographs" if chest_index else ", ".join(sorted(modalities)) or "other images"
    notes = []
    modality = (study.modality or "").upper()
    if modality not in ("", "OT") and modalities and modality not in modalities:
        kind = MODALITY_WORDS.get(modality, f"a {modality} study")
        notes.append(
            f"The upload is {kind}, but index {loaded.name!r} holds {held}: the hits are the "
            "least unlike images there, not studies of the same kind."
        )
    part = str(study.meta.get("BodyPartExamined") or "").strip().upper()
    if part and chest_index and part not in CHEST_PARTS:
        notes.append(
            f"The upload is labelled {part.lower()!r}, but index {loaded.name!r} holds {held}; "
            "its hits cannot show the same anatomy."
        )
    if study.form == "3d" and forms == {"2d"} and not notes:
        notes.append(
            f"The upload is a volume, but index {loaded.name!r} holds 2D images only; pick "
            "'this slice' to search with the slice shown."
        )
    return notes


def _encode_study(study: Study, embedder: Embedder, spec: str, threads: int = 0) -> np.ndarray:
    _check_modality(embedder, study.form, spec)
    with intra_op_threads(threads):
        return embedder.encode([study])


def _read_file(path: Path, settings: Settings) -> Study:
    from medheb_app.evidence.readers import study_from_file

    return study_from_file(path, max_bytes=settings.max_upload_bytes)


def search(
    query_text: str | None = None,
    file: str | Path | None = None,
    model_spec: str | None = None,
    index: str | None = None,
    k: int = 10,
    settings: Settings | None = None,
    setting: str = "main",
    ranking: str = "auto",
    study: Study | None = None,
    public: bool = False,
    nprobe: int | None = None,
    ef_search: int | None = None,
    rerank: int | None = None,
) -> SearchResponse:
    """Rank the index's studies for a text query, an image/volume file or an already read
    study (exactly one).

    model_spec defaults to the strongest shipped model that has the index (default_model),
    index to settings.default_index. `setting` is the CXR-Retrieve relevance setting used for
    `satisfies`: "main" ("no B" holds when B is not positive) or "strict" (only when B is
    confirmed negative). `ranking` is "auto" (logic-aware when the query names findings and
    the index has labelled training studies for probes, else similarity), "logic" (the query's
    constraints over per-finding probes; a score is then log p(the study satisfies the
    query)) or "similarity" (cosine). The query is parsed against the index's own finding
    vocabulary (its source's label names); an index whose source has no labels is ranked by
    similarity. `nprobe` (IVF, IVF-PQ), `ef_search` (HNSW) and `rerank` (IVF-PQ: the shortlist
    factor of the exact re-rank, 0 = PQ scores only) override the index's recorded search
    parameters for this search.

    Nothing heavy happens here: a missing index is an error, never built. `public=True` is an
    anonymous request (the web app): the model and index must be among `offered(settings)` and
    logic-aware ranking reads only probes prepared in advance (the demo bootstrap and index
    jobs prepare them), falling back to similarity with a warning otherwise.
    """
    from medheb_app.models.registry import load_embedder

    settings = settings or Settings.from_env()
    index_name = index or settings.default_index
    spec = (model_spec or default_model(settings, index_name)).strip()
    if sum(value is not None for value in (query_text, file, study)) != 1:
        raise SearchError("Give either a text query or a file to search with (exactly one).")
    if not 1 <= int(k) <= MAX_K:
        raise SearchError(f"k must be between 1 and {MAX_K}; got {k}.")
    if setting not in ("main", "strict"):
        raise SearchError(f"Unknown relevance setting {_shown(setting)}; use 'main' or 'strict'.")
    if ranking not in RANKINGS:
        raise SearchError(f"Unknown ranking {_shown(ranking)}; use one of: {', '.join(RANKINGS)}.")
    for knob, value, lowest in (("nprobe", nprobe, 1), ("ef_search", ef_search, 1),
                                ("rerank", rerank, 0)):  # fmt: skip
        if value is not None and int(value) < lowest:  # whichever ranking runs
            raise SearchError(f"{knob} must be at least {lowest}; got {value}.")
    if query_text is not None:
        try:  # before any model or index is loaded: a 1 MB query costs nothing
            check_query_length(query_text)
        except QueryTooLong as error:
            raise SearchError(str(error)) from error
    if public:
        check_offered(spec, index_name, settings)
    embedder = load_embedder(spec, settings)
    loaded = resolve_index(index_name, embedder, settings)

    started = time.perf_counter()
    parsed: ParsedQuery | None = None
    if query_text is not None:
        vector, parsed = _encode_text(
            query_text, embedder, spec, query_vocabulary(loaded), settings.query_threads
        )
        query = query_text.strip()
    else:
        try:
            if study is None:
                study = _read_file(Path(file), settings)  # type: ignore[arg-type]
            vector = _encode_study(study, embedder, spec, settings.query_threads)
        except EvidenceError as error:
            raise SearchError(str(error)) from error
        query = "uploaded study" if file is None else Path(file).name  # type: ignore[arg-type]
    encoded = time.perf_counter()
    notes: list[str] = upload_mismatch(study, loaded) if study is not None else []
    vocabulary = index_vocabulary(loaded)
    labelled = vocabulary is None or vocabulary.labelled
    notes.extend(vocabulary_warnings(loaded, parsed, setting, ranking))
    has_constraints = parsed is not None and parsed.has_constraints and labelled
    if ranking == "logic" and parsed is None:
        notes.append(FILE_LOGIC_WARNING)
    use_logic = False
    if ranking in ("logic", "auto") and has_constraints:
        from medheb_app.ranking.index_logic import IndexLogicError, ProbesNotReady, logic_search

        try:
            top_scores, top_ids, probe_warnings = logic_search(
                loaded, embedder, parsed, vector, int(k), settings, fit=not public, setting=setting
            )
            use_logic = True
        except ProbesNotReady:
            notes.append(PROBES_NOT_READY)
        except IndexLogicError as error:
            if ranking == "logic":
                raise SearchError(str(error)) from error
        if use_logic:
            notes.extend(probe_warnings)
            scores, ids = top_scores[None], top_ids[None]
    if not use_logic:
        try:
            scores, ids = loaded.search(
                np.asarray(vector, dtype=np.float32),
                int(k),
                nprobe=nprobe,
                ef_search=ef_search,
                rerank=rerank,
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
