"""Pydantic models of every request and response body of /api/v1 (they make the OpenAPI
document). Requests forbid unknown fields, so a misspelt field is a 422, not ignored."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import BaseModel, ConfigDict, Field

from medheb_app.search import MAX_K, MAX_PUBLIC_K

Finding = int | None  # 1 present, 0 absent, -1 uncertain, null not mentioned
Ranking = Literal["auto", "logic", "similarity"]
RelevanceSetting = Literal["main", "strict"]
MAX_ID = 2**31 - 1  # a database integer


DbId = Annotated[int, Path(ge=1, le=MAX_ID)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ---------------------------------------------------------------- search


class SearchRequest(Strict):
    """A text search, with the CLI's `search` parameters."""

    text: str = Field(
        min_length=1,
        max_length=1000,
        description="A compositional query, e.g. 'pleural effusion and no cardiomegaly'.",
        examples=["pleural effusion and no cardiomegaly"],
    )
    index: str | None = Field(None, max_length=200, description="Index name (default: demo).")
    model: str | None = Field(
        None, max_length=300, description="Model spec (default: the strongest built for it)."
    )
    ranking: Ranking = "auto"
    k: int = Field(
        10,
        ge=1,
        le=MAX_K,
        description=f"Number of hits: at most {MAX_K} with a token, {MAX_PUBLIC_K} without one.",
    )
    setting: RelevanceSetting = Field(
        "main", description="'no B' holds when B is not positive (main) or only when 0 (strict)."
    )
    nprobe: int | None = Field(None, ge=1, le=65536, description="IVF cells searched.")
    ef_search: int | None = Field(None, ge=1, le=65536, description="HNSW search breadth.")
    rerank: int | None = Field(None, ge=0, le=1024, description="IVF-PQ exact re-rank factor.")
    include_training: bool = Field(
        False,
        description="Logic ranking: also rank the studies the index's finding probes were fit "
        "on (left out by default; marked, scored out of fold). Search tokens only.",
    )


class Constraints(BaseModel):
    positive: list[str]
    negative: list[str]
    uncertain: list[str] = []


class HitLinks(BaseModel):
    record: str
    image: str


class Hit(BaseModel):
    rank: int
    id: str
    score: float
    score_kind: Literal["cosine", "log_p"] = Field(
        description="cosine, or log_p: log p(the study meets the query), logic ranking."
    )
    p_query: float | None = Field(None, description="log_p only: p(meets the query).")
    log_odds: float | None = Field(None, description="log_p only: log p / (1 - p).")
    satisfies: bool | None = Field(description="Meets the query's constraints (null: unknown).")
    violations: dict[str, str] = {}
    findings: dict[str, Finding]
    text: str | None = Field(None, description="The study's report text.")
    source: str
    synthetic: bool
    modality: str = ""
    form: str = Field("2d", description="The evidence form: 2d, 3d or text.")
    boxes: list[dict[str, Any]] = Field(
        [], description="Finding boxes on the image: finding, x, y (top left), w, h in pixels."
    )
    split: str | None = None
    is_training_study: bool = Field(
        description="The index's finding probes were fit on this study's labels."
    )
    p_fit: Literal["held-out", "out-of-fold", "in-sample"] | None = Field(
        None,
        description="Logic ranking: how p was obtained (a probe that never saw the study, "
        "the cross-fitted probe that left it out, or in-sample: optimistic).",
    )
    links: HitLinks


class SearchResult(BaseModel):
    """The CLI's `search --json` document, hits with links to their record and image."""

    query: str
    query_kind: Literal["text", "file"]
    model: str
    model_fingerprint: str
    index: str
    k: int
    ranking: str
    constraints: Constraints
    unknown_terms: list[str] = []
    corrections: dict[str, str] = {}
    suggestions: dict[str, list[str]] = {}
    warnings: list[str] = []
    results: list[Hit]
    timings_ms: dict[str, float] = {}


# ---------------------------------------------------------------- catalog


class Vocabulary(BaseModel):
    scheme: str | None = None
    names: list[str] = []
    labelled: bool | None = None


class IndexBuild(BaseModel):
    model: str
    model_version: str = ""
    fingerprint: str
    offered: list[str] = Field(description="Model specs that search this build.")
    kind: str
    count: int
    dims: int
    created: str = ""


class IndexSummary(BaseModel):
    name: str
    source: str = Field(description="Source kind (paths are never shown).")
    synthetic: bool
    forms: list[str]
    vocabulary: Vocabulary | None = None
    builds: list[IndexBuild]


class IndexDetail(IndexSummary):
    params: dict[str, dict[str, Any]] = Field(
        {}, description="Per model fingerprint: the FAISS search parameters recorded."
    )
    failed_items: dict[str, int] = Field({}, description="Per fingerprint: items not embedded.")


class ModelEntry(BaseModel):
    spec: str
    name: str = ""
    version: str = ""
    dims: int | None = None
    modalities: list[str] = []
    license: str = ""
    indices: list[str] = Field(description="Indices built for this model.")


class StudyRecord(BaseModel):
    index: str
    id: str
    form: str = ""
    modality: str = ""
    findings: dict[str, Finding] = {}
    report: str | None = None
    source: str = ""
    split: str | None = None
    is_training_study: bool
    synthetic: bool
    boxes: list[Any] = []
    laterality: dict[str, Any] = {}
    severity: dict[str, Any] = {}
    links: HitLinks


# ---------------------------------------------------------------- runs


class RunRow(BaseModel):
    id: int
    suite: str
    models: list[str]
    started: str
    status: str


class RunDetail(BaseModel):
    id: int
    suite: str
    kind: str
    status: str
    started: str
    finished: str
    blinded: bool = Field(description="A reader study drawn from this run is open.")
    models: dict[str, dict[str, Any]] = Field(
        description="Per model: families, splits, consistency, graded, tasks (percent)."
    )
    leaderboard: list[dict[str, Any]] = Field(
        description="The explorer's leaderboard, with 95% bootstrap CIs."
    )
    tasks: list[dict[str, Any]]
    skipped: list[dict[str, str]]


class RankedHit(BaseModel):
    rank: int
    id: str
    score: float | None = None
    gold: bool
    findings: dict[str, Any] = {}
    violated: dict[str, str] = {}


class QueryRanking(BaseModel):
    id: str
    text: str
    hit_at_1: dict[str, bool]
    ranked: dict[str, list[RankedHit]]


class QueryPage(BaseModel):
    run: int
    task: str
    models: list[str]
    total: int
    offset: int
    limit: int
    failures_only: bool
    queries: list[QueryRanking]


# ---------------------------------------------------------------- jobs


class BenchRunJob(Strict):
    """`bench run` / `cxr-retrieve eval` as a job."""

    kind: Literal["bench-run"]
    suite: Literal["medheb-lite", "cxr-retrieve"]
    models: list[Annotated[str, Field(min_length=1, max_length=300)]] = Field(
        min_length=1, max_length=8
    )
    tasks: list[str] = []
    families: list[str] = []
    data: str | None = Field(None, max_length=1000, description="cxr-retrieve: phantom, nih:...")
    setting: RelevanceSetting = "main"
    paraphrase: bool = False


class IndexBuildJob(Strict):
    """`index build` as a job."""

    kind: Literal["index-build"]
    name: str = Field(min_length=1, max_length=100)
    source: str = Field(min_length=1, max_length=1000, examples=["phantom:200"])
    model: str = Field(min_length=1, max_length=300)
    index_kind: Literal["auto", "exact", "ivf", "hnsw", "ivfpq"] = "auto"
    batch_size: int = Field(32, ge=1, le=4096)
    replace: bool = Field(False, description="rebuild an index that exists for this model")


class TrainJob(Strict):
    """`train RECIPE` as a job."""

    kind: Literal["train"]
    recipe: str = Field(min_length=1, max_length=100, examples=["label-aware"])
    tag: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_-]+$")
    epochs: int = Field(5, ge=1, le=1000)
    n: int = Field(2000, ge=1, le=10_000_000)


JobRequest = Annotated[BenchRunJob | IndexBuildJob | TrainJob, Field(discriminator="kind")]


class JobState(BaseModel):
    id: int
    kind: str
    params: dict[str, Any]
    status: str
    progress: float
    message: str
    result: dict[str, Any] | None = None
    error: str = ""
    created_at: str
    started_at: str | None = None
    finished_at: str | None = None
    log_tail: list[str] = []


# ---------------------------------------------------------------- reader studies (admin)


class StudyCreate(Strict):
    """`study create` from a stored run."""

    run: int = Field(ge=1, le=MAX_ID, description="The benchmark run's id.")
    models: list[Annotated[str, Field(min_length=1, max_length=300)]] = Field(
        min_length=2, max_length=8
    )
    n: int = Field(ge=1, le=10_000, description="Queries to sample.")
    name: str = Field(min_length=1, max_length=200)
    public_title: str = Field("", max_length=200)
    raters: int = Field(1, ge=1, le=100)
    open_enrolment: bool = False
    gold_share: float = Field(0.0, ge=0.0, le=0.5)
    seed: int = Field(0, ge=0, le=MAX_ID)
    # off unless asked: a reveal teaches a rater each model's look (e.g. its hub images), so
    # later items' sides become guessable (the adversarial pass at 2e21a9a)
    reveal_after_vote: bool = False


class StudyCreated(BaseModel):
    id: int
    name: str
    public_title: str
    n_items: int
    n_gold: int
    withheld: int


class InvitationRequest(Strict):
    n: int = Field(ge=1, le=500)
    label: str = Field("", max_length=100)


class Invitation(BaseModel):
    id: int
    code: str
    link: str
    label: str


class Invitations(BaseModel):
    study: int
    invitations: list[Invitation]


class AuditEntry(BaseModel):
    id: int
    at: str
    who: str
    channel: str
    action: str
    route: str
    index: str
    query: str
    count: int | None = None


class Problem(BaseModel):
    """RFC 9457 problem details."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None
    errors: list[dict[str, str]] | None = None
