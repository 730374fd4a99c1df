"""The search service the CLI and the UI share: a text query or a file in, ranked hits out.

A text query is parsed into constraints (medheb_app.query.parser; CXR-Retrieve section
3.2), embedded by the chosen model and ranked against a prebuilt index, by cosine
("similarity") or by the query's logic over per-finding probes ("logic",
ranking/index_logic.py); each hit says whether its labels satisfy the constraints, so the UI
can mark hard negatives. A file query (PNG/JPEG, DICOM, NIfTI) is read by
medheb_app.evidence.readers and ranked by cosine, without constraints.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np

from medheb_app.evidence.file_study import study_from_file
from medheb_app.evidence.study import EvidenceError, Study
from medheb_app.index.catalog import (
    IndexNotFoundError,
    LoadedIndex,
    check_index_name,
    index_exists,
    index_vocabulary,
    list_indices,
    load_index,
    missing_message,
    query_vocabulary,
)
from medheb_app.models import registry
from medheb_app.models.base import Embedder
from medheb_app.models.device import intra_op_threads
from medheb_app.models.query_cache import encode_query_text
from medheb_app.query.parser import (
    ParsedQuery,
    QueryTooLong,
    check_query_length,
    parse_query,
    satisfies,
    violation_words,
    violations,
)
from medheb_app.ranking.index_logic import (
    IndexLogicError,
    ProbesNotReady,
    logic_search,
    training_ids,
)
from medheb_app.ranking.logic_aware import PREFIX as LOGIC_PREFIX
from medheb_app.serving import default_model, reach
from medheb_app.settings import Settings

log = logging.getLogger(__name__)
MAX_K = 1000
MAX_PUBLIC_K = 50  # an anonymous request (the web page) asks for at most this many hits
RANKINGS = ("auto", "logic", "similarity")
FILE_LOGIC_WARNING = (
    "Logic-aware ranking reads a text query's findings; a file query is ranked by similarity."
)
PROBES_NOT_READY = (
    "Logic-aware ranking is not prepared for this model and index yet (building the index "
    "prepares it: `python -m medheb_app index build`, `demo build` or an admin index job); "
    "ranked by similarity."
)
TRAINING_LEFT_OUT = (
    "{count} of the top {k} by logic-aware ranking were studies this index's finding probes "
    "were fit on: scored with their own labels they look better than they are, so they are "
    "left out (include training studies to see them, marked and scored out of fold: "
    "`search --include-training`, or include_training in the API)."
)
IN_SAMPLE_WARNING = (
    "{count} hits are studies the finding probes were fit on, scored in-sample (their p is "
    "optimistic): the out-of-fold scores of this index are not prepared (building the index "
    "prepares them)."
)
HEDGED_ONLY_WARNING = (
    "The query names {named} only as possible or past (a question, a hedge or history), which "
    "requires and excludes nothing, so results are ranked by similarity only and not checked."
)
NO_FINDING_WARNING = (
    "No known finding in the query, so results are ranked by similarity only and not "
    "checked against constraints. Known findings: {known}."
)


class SearchError(ValueError):
    """A search that cannot run as asked; the message tells the user what to change.

    `field` names the request field at fault ("query", "k", "ranking", ...; None for the
    rest), so a page can put the message beside what the user typed."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


def _shown(value: object, limit: int = 60) -> str:
    """A user-typed value quoted back briefly (a 1 MB spec is not echoed whole)."""
    text = str(value)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def check_offered(model: str, index: str, settings: Settings, anonymous: bool = True) -> None:
    """Refuse, in words, a (model, index) the caller may not pick: an anonymous caller the
    offered pairs only (public indices, serving.offered), a token any built index
    (serving.built_pairs). The refusal names only what this caller may pick."""
    offer = reach(settings, anonymous)
    if index not in offer:
        names = ", ".join(offer) or "none yet (the demo is being prepared)"
        message = f"Index {_shown(index)} is not offered here; pick one of: {names}."
        raise SearchError(message, "index")
    if model not in offer[index]:
        raise SearchError(
            f"Model {_shown(model)} is not offered for index {index!r}; pick one of: "
            f"{', '.join(offer[index])}.",
            "model",
        )


@dataclass(frozen=True)
class Score:
    """A hit's score as its ranking produced it: "cosine" similarity, or "log_p", the log
    probability that the study meets the query (logic-aware ranking, ranking/logic_aware.py),
    with p and the log-odds log(p / (1 - p)) computed without losing p near 1."""

    kind: Literal["cosine", "log_p"]
    value: float

    @property
    def p(self) -> float | None:
        return math.exp(min(self.value, 0.0)) if self.kind == "log_p" else None

    @property
    def log_odds(self) -> float | None:
        if self.kind != "log_p":
            return None
        value = min(self.value, -1e-12)
        return value - math.log(-math.expm1(value))


@dataclass
class SearchHit:
    """One ranked result with everything a page shows for it: the score (value, kind and, for
    logic-aware ranking, p and log-odds), the labels against the query, the report text, the
    finding boxes and where its image is."""

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
    score_kind: str = "cosine"  # "cosine" | "log_p"
    p_query: float | None = None  # log_p only: p(the study meets the query)
    log_odds: float | None = None  # log_p only
    text: str | None = None
    boxes: list[dict[str, Any]] = field(default_factory=list)
    form: str = "2d"
    # The study's labels fit this index's finding probes (ranking/index_logic.py): a
    # logic-aware ranking leaves such studies out unless asked to include them.
    training: bool = False
    # log_p only, how p was obtained: "held-out" (the probes never saw the study),
    # "out-of-fold" (a training study scored by the cross-fitted probe that left it out) or
    # "in-sample" (scored by a probe fit on its own labels: optimistic).
    p_fit: str | None = None

    @property
    def typed_score(self) -> Score:
        return Score("log_p" if self.score_kind == "log_p" else "cosine", self.score)

    @property
    def broken(self) -> list[str]:
        """The query's constraints this hit breaks, in words ("has Cardiomegaly")."""
        return violation_words(self.violations)


HIT_FIELDS = tuple(f.name for f in fields(SearchHit))


def hit_json(hit: SearchHit) -> dict[str, Any]:
    """asdict(hit) without its recursive deep copy, which was a third of a repeated (cached)
    search's time: a hit's nested values are flat dicts of scalars, copied one level."""
    row = {name: getattr(hit, name) for name in HIT_FIELDS}
    row["findings"] = dict(hit.findings)
    row["violations"] = dict(hit.violations)
    row["boxes"] = [dict(box) for box in hit.boxes]
    return row


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
            "results": [hit_json(hit) for hit in self.results],
            "timings_ms": self.timings_ms,
        }


def resolve_index(
    name: str, embedder: Embedder, settings: Settings, spec: str | None = None
) -> LoadedIndex:
    """The built index `name` for this model (`spec`: how the caller named it). A search
    never builds one: a missing index is an error that says how to build it (`demo build`,
    `index build` or an admin job)."""
    try:
        return load_index(name, embedder, settings, spec)
    except IndexNotFoundError as error:
        raise _not_built(error) from None


def _not_built(error: IndexNotFoundError) -> SearchError:
    return SearchError(
        f"{error} Indices are built from the command line or as an admin job, never by a search."
    )


def _check_modality(embedder: Embedder, form: str, spec: str) -> None:
    if form not in embedder.card.modalities:
        readable = ", ".join(embedder.card.modalities)
        raise SearchError(f"Model {spec!r} cannot embed {form} input; it reads: {readable}.")


def vocabulary_warnings(
    loaded: LoadedIndex, parsed: ParsedQuery | None, setting: str, ranking: str
) -> list[str]:
    """What the index's labels cannot do for this query, said plainly."""
    vocabulary = index_vocabulary(loaded)
    if vocabulary is None or parsed is None:
        return []
    if not vocabulary.labelled:
        return [
            f"Index {loaded.name!r} comes from a source without finding labels, so it offers "
            "similarity search only: hits are ranked by similarity to the whole query and not "
            "checked against its findings."
        ]
    if setting == "strict" and parsed.negative and not vocabulary.confirmed_negatives:
        return [
            f"Index {loaded.name!r} comes from {vocabulary.source}, whose labels are "
            "positive-only: no study is a confirmed negative, so under the strict setting no "
            "hit can satisfy an excluded finding. Use the main setting (not labelled positive "
            "counts as absent)."
        ]
    return []


def _encode_text(
    text: str, embedder: Embedder, spec: str, threads: int = 0, cache: int = 0, batch: int = 1
) -> np.ndarray:
    _check_modality(embedder, "text", spec)
    return encode_query_text(embedder, text, spec, cache, threads, batch)  # models/query_cache.py


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


SMALLEST_SIDE = 32  # pixels: below this an upload is a thumbnail or a strip, not a study


def pixel_warnings(pixels: np.ndarray | None, form: str) -> list[str]:
    """What an upload's pixels cannot tell a model: all one value (blank, or no finite
    value at all: a NaN volume), or a side of a few pixels."""
    if pixels is None or pixels.size == 0:
        return []
    finite = pixels[np.isfinite(pixels)]
    if finite.size == 0 or float(finite.max()) == float(finite.min()):
        return [
            "The upload's pixels all have one value (a blank image, or none that is a number), "
            "so the hits are those nearest a blank image and mean nothing."
        ]
    plane = pixels.shape[1:3] if form == "3d" else pixels.shape[:2]
    if min(plane) < SMALLEST_SIDE:
        height, width = plane
        return [
            f"The upload is only {width}x{height} pixels; models read it scaled to their input "
            "size, so its hits say little about a study."
        ]
    return []


def series_warnings(meta: dict[str, object]) -> list[str]:
    """An upload of several DICOM series is searched with its largest (evidence/dicom.py
    read_series): say so, since the others are not searched."""
    series = int(meta.get("SeriesInUpload") or 1)  # type: ignore[call-overload]
    if series <= 1:
        return []
    used = meta.get("ImagesInSeries")
    return [
        f"The upload holds {series} DICOM series; the search used the largest"
        + (f" ({used} image{'s' if used != 1 else ''})" if used else "")
        + " and none of the others. Upload one series per search to search with another."
    ]


def upload_warnings(study: Study, loaded: LoadedIndex) -> list[str]:
    """Everything an uploaded study's hits cannot show: what its pixels lack, the series it
    left out, and how it differs from what the index holds."""
    return [
        *pixel_warnings(study.pixels, study.form),
        *series_warnings(study.meta),
        *upload_mismatch(study, loaded),
    ]


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
    return study_from_file(path, max_bytes=settings.max_upload_bytes)


@dataclass(frozen=True)
class SearchRequest:
    """A search as asked, checked once (validate): exactly one of text or study."""

    text: str | None
    study: Study | None
    query_name: str  # what the answer calls the query: the text, or the file's name
    model: str
    index: str
    k: int
    setting: str
    ranking: str
    public: bool
    nprobe: int | None = None
    ef_search: int | None = None
    rerank: int | None = None
    include_training: bool = False


@dataclass
class Ranked:
    """What rank() produced: scores and ids (best first), how, and what it had to say."""

    scores: np.ndarray
    ids: np.ndarray
    parsed: ParsedQuery | None
    checked: bool  # whether hits can be checked against the query (the index has labels)
    logic: bool
    notes: list[str]
    timings_ms: dict[str, float]
    p_fit: tuple[str, ...] = ()  # logic only: how each hit's p was obtained (index_logic)


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
    include_training: bool = False,
) -> SearchResponse:
    """Rank the index's studies for a text query, an image/volume file or an already read
    study (exactly one).

    model_spec defaults to the strongest shipped model that has the index (default_model),
    index to settings.default_index; "logic:<spec>" (the benchmarks' form) is <spec> with
    ranking "logic". `setting` is the CXR-Retrieve relevance setting used for
    `satisfies`: "main" ("no B" holds when B is not positive) or "strict" (only when B is
    confirmed negative). `ranking` is "auto" (logic-aware when the query names findings and
    the index has labelled training studies for probes, else similarity), "logic" (the query's
    constraints over per-finding probes; a score is then log p(the study satisfies the
    query)) or "similarity" (cosine). The query is parsed against the index's own finding
    vocabulary (its source's label names); an index whose source has no labels is ranked by
    similarity. `nprobe` (IVF, IVF-PQ), `ef_search` (HNSW) and `rerank` (IVF-PQ: the shortlist
    factor of the exact re-rank, 0 = PQ scores only) override the index's recorded search
    parameters for this search. A logic-aware ranking leaves out the studies the index's
    probes were fit on unless `include_training` (not for a public request); every hit says
    whether it is one (`training`) and, for log_p, how its p was obtained (`p_fit`).
    A query the index cannot answer is refused (refuse_unanswerable): a finding it has no
    labels for under logic-aware ranking, an exclusion on an index without labels.

    Nothing heavy happens here: a missing index is an error, never built. `public=True` is an
    anonymous request (the web app): the model and index must be among `offered(settings)` and
    logic-aware ranking reads only probes prepared in advance (the index builder,
    index/build.py, prepares them), falling back to similarity with a warning otherwise;
    at most MAX_PUBLIC_K hits (else MAX_K).

    Every check happens here, once (validate), before a model or an index is loaded: a
    request to refuse raises SearchError, whose message is a sentence for the user (no path,
    no class name) and whose `field` names the parameter at fault ("query", "k", "ranking",
    "setting", "file", "model", "index", "input", a knob's name; None otherwise). The answer
    is everything a page shows: SearchResponse.to_json() is the `search --json` document, and
    each SearchHit has its score typed (`score_kind` "cosine" or "log_p", with `p_query` and
    `log_odds` for "log_p"; `typed_score`), its labels against the query (`satisfies`,
    `violations`), report `text`, finding `boxes`, `form`, `modality`, `split` and image `path`
    (a server path: an HTTP answer should not pass it on as is).
    """
    if settings is None:  # a library function never reads the environment itself
        raise TypeError("search() needs settings (medheb_app.settings.Settings.from_env()).")
    request = validate(
        query_text, file, model_spec, index, k, settings, setting, ranking, study, public,
        nprobe, ef_search, rerank, include_training,
    )  # fmt: skip
    return run(prepare(request, settings), settings)


@dataclass(frozen=True)
class Prepared:
    """A validated request with the model and the index build it will search."""

    request: SearchRequest
    embedder: Embedder
    loaded: LoadedIndex


def prepare(request: SearchRequest, settings: Settings) -> Prepared:
    """The model and index build for a validated request (both memoised after the first
    load, so this costs a few stats): what a cached answer of it must have been made with.
    An index that is built for no model is refused before any model loads."""
    if not index_exists(request.index, settings):
        raise _not_built(IndexNotFoundError(missing_message(request.index, "", settings)))
    embedder = _load_model(request.model, request.index, settings)
    loaded = resolve_index(request.index, embedder, settings, request.model)
    return Prepared(request, embedder, loaded)


def _load_model(spec: str, index: str, settings: Settings) -> Embedder:
    """The model of a search, refused in words (SearchError, field "model") when it cannot
    be: an unknown spec, or one whose loading fails. A spec naming files (open_clip:, mllm:,
    a checkpoint path) is loaded only when the index was built with exactly that spec: a
    search never reads a file that no build read before."""
    if registry.names_files(spec) and spec not in registry.valid_specs(settings):
        built = [e for e in list_indices(settings) if e["name"] == index]
        if spec not in {entry["model_spec"] for entry in built}:
            raise SearchError(missing_message(index, spec, settings), "model")
    try:
        return registry.load_embedder(spec, settings)
    except registry.UnknownModelError as error:
        raise SearchError(str(error), "model") from None
    except Exception:  # a checkpoint that cannot be read: say so, log the rest
        log.warning("model %r could not be loaded for a search", spec, exc_info=True)
        message = f"Model {spec!r} could not be loaded; the server log has the details."
        raise SearchError(message, "model") from None


def run(prepared: Prepared, settings: Settings) -> SearchResponse:
    """Rank and assemble the answer of a prepared request."""
    request, embedder, loaded = prepared.request, prepared.embedder, prepared.loaded
    return assemble(request, rank(request, embedder, loaded, settings), embedder, loaded)


def validate(
    query_text: str | None,
    file: str | Path | None,
    model_spec: str | None,
    index: str | None,
    k: Any,
    settings: Settings,
    setting: str = "main",
    ranking: str = "auto",
    study: Study | None = None,
    public: bool = False,
    nprobe: int | None = None,
    ef_search: int | None = None,
    rerank: int | None = None,
    include_training: bool = False,
) -> SearchRequest:
    """Every check a search makes before any model or index is loaded (a 1 MB query or a
    request for a model that is not offered costs nothing); a file is read here."""
    index_name = index or settings.default_index
    try:
        check_index_name(index_name)
    except ValueError as error:
        raise SearchError(str(error), "index") from None
    spec = (model_spec or default_model(settings, index_name)).strip()
    if spec.startswith(LOGIC_PREFIX):  # the benchmarks' logic:<spec>: that model, logic-aware
        spec = spec.removeprefix(LOGIC_PREFIX).strip()
        if ranking == "similarity":
            message = f"{LOGIC_PREFIX}{spec} ranks logic-aware; drop it or ask for ranking 'logic'."
            raise SearchError(message, "ranking")
        ranking = "logic"
    given = sum(value is not None for value in (query_text, file, study))
    if given == 0:
        raise SearchError("Type a query or upload a study to search with (exactly one).", "input")
    if given > 1:
        message = "Give either a text query or a file to search with (exactly one)."
        raise SearchError(message, "input")
    most = MAX_PUBLIC_K if public else MAX_K
    try:
        k = int(k)
    except (TypeError, ValueError):
        raise SearchError("k (top k) must be a whole number.", "k") from None
    if not 1 <= k <= most:
        raise SearchError(f"k must be between 1 and {most}; got {k}.", "k")
    if setting not in ("main", "strict"):
        message = f"Unknown relevance setting {_shown(setting)}; use 'main' or 'strict'."
        raise SearchError(message, "setting")
    if ranking not in RANKINGS:
        message = f"Unknown ranking {_shown(ranking)}; use one of: {', '.join(RANKINGS)}."
        raise SearchError(message, "ranking")
    for knob, value, lowest in (("nprobe", nprobe, 1), ("ef_search", ef_search, 1),
                                ("rerank", rerank, 0)):  # fmt: skip
        if value is not None and int(value) < lowest:  # whichever ranking runs
            raise SearchError(f"{knob} must be at least {lowest}; got {value}.", knob)
    if query_text is not None:
        try:
            check_query_length(query_text)
        except QueryTooLong as error:
            raise SearchError(str(error), "query") from error
        if not any(char.isalnum() for char in query_text):  # blank, or only marks
            raise SearchError(  # (a zero-width space is not whitespace to str.strip)
                "The query is empty (it has no letter or digit); describe the findings, e.g. "
                "'pleural effusion and no cardiomegaly'.",
                "query",
            )
    if public:
        check_offered(spec, index_name, settings)
        if include_training:
            raise SearchError(
                "Training studies are shown to signed-in users and API tokens only.",
                "include_training",
            )
    name = "uploaded study"
    if file is not None:
        try:
            study = _read_file(Path(file), settings)
        except EvidenceError as error:
            raise SearchError(str(error), "file") from error
        name = Path(file).name
    text = query_text.strip() if query_text is not None else None
    return SearchRequest(
        text, study, text or name, spec, index_name, k, setting, ranking, public,
        nprobe, ef_search, rerank, bool(include_training),
    )  # fmt: skip


def rank(
    request: SearchRequest, embedder: Embedder, loaded: LoadedIndex, settings: Settings
) -> Ranked:
    """Embed the query with `embedder` and rank `loaded`: logic-aware where asked for and
    possible, else by cosine. Tests pass fakes for both, no registry involved."""
    started = time.perf_counter()
    parsed: ParsedQuery | None = None
    threads = settings.query_threads
    vocabulary = index_vocabulary(loaded)
    labelled = vocabulary is None or vocabulary.labelled
    if request.text is not None:  # validate checked it is not empty
        parsed = parse_query(request.text, query_vocabulary(loaded))
        refuse_unanswerable(parsed, loaded.name, labelled, request.ranking)  # before encoding
        vector = _encode_text(
            request.text, embedder, request.model, threads, settings.query_cache,
            settings.query_batch,
        )  # fmt: skip
    else:
        try:
            vector = _encode_study(request.study, embedder, request.model, threads)  # type: ignore[arg-type]
        except EvidenceError as error:
            raise SearchError(str(error)) from error
    encoded = time.perf_counter()
    notes = upload_warnings(request.study, loaded) if request.study is not None else []
    if parsed is not None and parsed.unlabelled:  # similarity, asked for: hits not checked
        labelled = False
        notes.append(
            f"This index does not search by {_and_list(parsed.unlabelled)}, so hits are "
            "ranked by similarity to the whole query and not checked against its findings."
        )
    notes.extend(vocabulary_warnings(loaded, parsed, request.setting, request.ranking))
    if request.ranking == "logic" and parsed is None:
        notes.append(FILE_LOGIC_WARNING)
    found = None
    wants_logic = request.ranking in ("logic", "auto") and labelled
    if wants_logic and parsed is not None and parsed.has_constraints:
        found = _logic(request, loaded, embedder, parsed, vector, settings, notes)
    p_fit: tuple[str, ...] = ()
    if found is None:
        try:
            scores, ids = loaded.search(
                np.asarray(vector, dtype=np.float32), request.k, nprobe=request.nprobe,
                ef_search=request.ef_search, rerank=request.rerank,
            )  # fmt: skip
        except ValueError as error:
            raise SearchError(str(error)) from error
        if not np.any(vector):
            notes.append(blank_query_warning(request, embedder))
    else:
        scores, ids, p_fit = found[0][None], found[1][None], found[2]
    timings = {
        "encode": round((encoded - started) * 1000, 2),
        "search": round((time.perf_counter() - encoded) * 1000, 2),
    }
    logic = found is not None
    return Ranked(scores[0], ids[0], parsed, labelled, logic, notes, timings, p_fit)


def blank_query_warning(request: SearchRequest, embedder: Embedder) -> str:
    """Why hits that all score the same came back: the query embedded to all zeros (the
    oracle reads true labels only, and an upload carries none)."""
    upload = request.text is None
    what = "the uploaded study" if upload else "this query"
    why = ""
    if upload and embedder.card.name == "oracle":
        why = " The oracle reads true labels, and an upload carries none."
    return (
        f"Model {request.model!r} found nothing to rank by in {what} (its embedding is all "
        f"zeros), so every study scores the same and the order of the hits means nothing.{why}"
    )


def _and_list(names: tuple[str, ...] | list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def refuse_unanswerable(parsed: ParsedQuery, index: str, labelled: bool, ranking: str) -> None:
    """Refuse (SearchError, field "query") a query this index cannot answer, rather than
    answer another one (issue 23 item 5), in one place for the CLI, the page and the API:

    - a logic-aware ranking (ranking "logic", or "auto" on a query with constraints) of a
      query naming a finding the index has no labels for ("emphysema and no effusion" over
      the CXR-Retrieve ten): dropping it would answer "no effusion" alone;
    - on an index without finding labels, which offers similarity search only: a logic-aware
      ranking, or a query excluding a finding (a cosine cannot exclude anything).

    Similarity ranking, asked for by name, is always allowed; its hits are then not checked.
    """
    if ranking == "similarity":
        return
    if not labelled:
        if ranking == "logic" or parsed.negative or parsed.unlabelled:
            named = [*parsed.positive, *parsed.negative, *parsed.unlabelled]
            what = f" for {_and_list(list(dict.fromkeys(named)))}" if named else ""
            raise SearchError(
                f"This index has no labels{what}: index {index!r} comes from a source without "
                "finding labels, so it offers similarity search only and cannot rank by the "
                "query's logic or exclude a finding. Describe what the image should show, or "
                "ask for similarity ranking (ranking 'similarity').",
                "query",
            )
        return
    if parsed.unlabelled:
        raise SearchError(
            f"This index does not search by {_and_list(parsed.unlabelled)}: its finding "
            "vocabulary (the labels its hits are ranked and checked by) leaves it out, so it "
            "cannot answer a query about it, and ranking without it would answer another "
            "query. Ask about findings in this index's vocabulary, or ask for "
            "similarity ranking (ranking 'similarity') to rank by the whole query's embedding, "
            "unchecked.",
            "query",
        )


def _logic(
    request: SearchRequest,
    loaded: LoadedIndex,
    embedder: Embedder,
    parsed: ParsedQuery,
    vector: np.ndarray,
    settings: Settings,
    notes: list[str],
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]] | None:
    """The logic-aware top k (scores, ids, how each p was obtained), or None (with a note)
    when this index cannot give it now. A public request only reads probes prepared in
    advance (the index builder fits them)."""
    try:
        found = logic_search(
            loaded, embedder, parsed, vector, request.k, settings, fit=not request.public,
            setting=request.setting, include_training=request.include_training,
        )  # fmt: skip
    except ProbesNotReady:
        notes.append(PROBES_NOT_READY)
        return None
    except IndexLogicError as error:
        if request.ranking == "logic":
            raise SearchError(str(error)) from error
        return None
    notes.extend(found.notes)
    if found.left_out:
        shown = min(request.k, loaded.index.count)  # "the top 1000" of a 300-study index
        notes.append(TRAINING_LEFT_OUT.format(count=found.left_out, k=shown))
    in_sample = found.p_fit.count("in-sample")
    if in_sample:
        notes.append(IN_SAMPLE_WARNING.format(count=in_sample))
    return found.scores, found.ids, found.p_fit


def assemble(
    request: SearchRequest, ranked: Ranked, embedder: Embedder, loaded: LoadedIndex
) -> SearchResponse:
    """The answer a page or the CLI shows: how the query was read, typed hits with their
    index metadata, and every warning."""
    parsed = ranked.parsed
    response = SearchResponse(
        query=request.query_name,
        query_kind="text" if request.text is not None else "file",
        model=request.model,
        model_fingerprint=embedder.card.fingerprint,
        index=request.index,
        k=request.k,
        ranking="logic" if ranked.logic else "similarity",
        warnings=list(ranked.notes),
        timings_ms=ranked.timings_ms,
    )
    if parsed is not None:
        response.positive = list(parsed.positive)
        response.negative = list(parsed.negative)
        response.uncertain = list(parsed.uncertain)
        response.unknown_terms = list(parsed.unknown)
        response.corrections = dict(parsed.corrections)
        response.suggestions = {typed: list(found) for typed, found in parsed.suggestions}
        response.warnings.extend(parsed.warnings)
        hedged = [*parsed.uncertain, *parsed.history]
        if not parsed.has_constraints and hedged:
            response.warnings.append(HEDGED_ONLY_WARNING.format(named=_and_list(hedged)))
        elif not parsed.has_constraints:
            known = ", ".join(name.lower() for name in parsed.vocabulary)
            response.warnings.append(NO_FINDING_WARNING.format(known=known))
    kind = "log_p" if ranked.logic else "cosine"
    checked = parsed if ranked.checked else None
    response.results = _hits(ranked.scores, ranked.ids, loaded, checked, request.setting, kind)
    _mark_training(response.results, ranked, loaded)
    return response


def _mark_training(hits: list[SearchHit], ranked: Ranked, loaded: LoadedIndex) -> None:
    """Set each hit's `training` and, for log_p, `p_fit` (ranking/index_logic.py)."""
    if ranked.logic:
        for hit, how in zip(hits, ranked.p_fit, strict=True):
            hit.training, hit.p_fit = how != "held-out", how
        return
    vocabulary = index_vocabulary(loaded)
    if vocabulary is not None and not vocabulary.labelled:
        return  # no labels, no probes: nothing was trained on
    names = query_vocabulary(loaded)
    for hit, mark in zip(hits, training_ids(loaded, names, [h.id for h in hits]), strict=True):
        hit.training = mark


def _hits(
    scores: np.ndarray,
    ids: np.ndarray,
    loaded: LoadedIndex,
    parsed: ParsedQuery | None,
    setting: str,
    kind: Literal["cosine", "log_p"] = "cosine",
) -> list[SearchHit]:
    hits = []
    for score, item_id in zip(scores, ids, strict=True):
        if item_id is None:  # an approximate index found fewer than k items
            continue
        row = loaded.item(item_id)
        findings = row.get("findings", {})
        typed = Score(kind, round(float(score), 6))
        hits.append(
            SearchHit(
                rank=len(hits) + 1,
                id=item_id,
                score=typed.value,
                findings=findings,
                source=row.get("source", ""),
                satisfies=satisfies(findings, parsed, setting) if parsed is not None else None,
                violations=violations(findings, parsed, setting) if parsed is not None else {},
                synthetic=bool(row.get("synthetic", False)),
                modality=row.get("modality", ""),
                split=row.get("split"),
                path=row.get("path"),
                score_kind=kind,
                p_query=typed.p,
                log_odds=typed.log_odds,
                text=row.get("text"),
                boxes=list(row.get("boxes") or []),
                form=str(row.get("form") or "2d"),
            )
        )
    return hits
