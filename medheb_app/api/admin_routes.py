"""Admin scope: jobs (bench run, index build, training with the CLI's parameters), reader
studies (creation, invitations, analysis) and the audit log. Every action is audited.

Jobs go through services.jobs with the same job functions the admin tab submits
(services.admin_jobs); studies through medheb_app.study, as `study
create/invite/analyse`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request

from medheb_app.api import audit
from medheb_app.api.problems import ApiProblem
from medheb_app.api.schemas import (
    AuditEntry,
    DbId,
    InvitationRequest,
    Invitations,
    JobRequest,
    JobState,
    StudyCreate,
    StudyCreated,
)
from medheb_app.api.search_routes import ERRORS
from medheb_app.api.security import Principal, access, services_of
from medheb_app.jobs import JobError
from medheb_app.services import Services
from medheb_app.study import create_invitations, find_study, list_studies
from medheb_app.train.recipes import get_recipe

router = APIRouter(tags=["admin"], responses=ERRORS)
Admin = Annotated[Principal, Depends(access("admin", anonymous=False))]
LOG_TAIL = 50


def _audit(services: Services, caller: Principal, action: str, route: str, what: str) -> None:
    audit.record(services.store, who=caller.who, action=action, route=route, query=what)


def _job_state(services: Services, job_id: int) -> dict[str, Any]:
    try:
        info = services.jobs.status(job_id)
    except JobError:
        raise ApiProblem("not-found", f"There is no job {job_id}.") from None
    return {**info.to_dict(), "log_tail": services.jobs.logs(job_id)[-LOG_TAIL:]}


def _job_params(body: Any) -> dict[str, Any]:
    """The job function's params (services.bench_job / index_job / train_job)."""
    params = body.model_dump(exclude={"kind"})
    if body.kind == "index-build":
        params["kind"] = params.pop("index_kind")
    if body.kind == "bench-run" and params.get("data") is None:
        params.pop("data")
    return params


@router.post("/jobs", response_model=JobState, status_code=202, summary="Start a job")
def start_job(body: JobRequest, request: Request, caller: Admin) -> dict[str, Any]:
    services = services_of(request)
    params = _job_params(body)
    if body.kind == "train":
        try:
            get_recipe(body.recipe)
        except (KeyError, ValueError) as error:
            raise ApiProblem("invalid-request", str(error)) from None
    try:
        job_id = services.admin_jobs.start(body.kind, params)
    except ValueError as error:  # a sentence: a source outside the server's roots
        raise ApiProblem("invalid-request", str(error)) from None
    _audit(services, caller, "job-start", "POST /api/v1/jobs", f"job {job_id} {body.kind}")
    return _job_state(services, job_id)


@router.get("/jobs/{job_id}", response_model=JobState, summary="A job's progress and log")
def job(job_id: DbId, request: Request, caller: Admin) -> dict[str, Any]:
    return _job_state(services_of(request), job_id)


@router.delete("/jobs/{job_id}", response_model=JobState, summary="Cancel a job")
def cancel_job(job_id: DbId, request: Request, caller: Admin) -> dict[str, Any]:
    services = services_of(request)
    state = _job_state(services, job_id)
    services.jobs.cancel(job_id)
    _audit(services, caller, "job-cancel", "DELETE /api/v1/jobs/{id}", f"job {job_id}")
    return {**state, **_job_state(services, job_id)}


# ---------------------------------------------------------------- reader studies


@router.post(
    "/reader-studies", response_model=StudyCreated, status_code=201, summary="Create a study"
)
def create_reader_study(body: StudyCreate, request: Request, caller: Admin) -> dict[str, Any]:
    services = services_of(request)
    try:
        summary = services.runs.summary(body.run)
    except (KeyError, FileNotFoundError, ValueError, OSError):
        raise ApiProblem("not-found", f"There is no readable run {body.run}.") from None
    try:
        created = services.studies.create(
            body.name,
            body.models,
            summary,
            n_items=body.n,
            raters_per_item=body.raters,
            reveal_after_vote=body.reveal_after_vote,
            seed=body.seed,
            public_title=body.public_title,
            open_enrolment=body.open_enrolment,
            gold_share=body.gold_share,
        )
    except (ValueError, KeyError) as error:
        raise ApiProblem("invalid-request", str(error)) from None
    study = next(s for s in list_studies(services.store) if s["id"] == created.id)
    _audit(services, caller, "study-create", "POST /api/v1/reader-studies", f"study {created.id}")
    return {
        "id": created.id,
        "name": study["name"],
        "public_title": study["public_title"],
        "n_items": created.n_items,
        "n_gold": created.n_gold,
        "withheld": len(created.withheld),
    }


def _study_id(services: Services, study_id: int) -> int:
    try:
        return find_study(services.store, study_id).id
    except (ValueError, KeyError):
        raise ApiProblem("not-found", f"There is no reader study {study_id}.") from None


@router.post(
    "/reader-studies/{study_id}/invitations",
    response_model=Invitations,
    status_code=201,
    summary="Issue rater invitations (shown once)",
)
def invite(
    study_id: DbId, body: InvitationRequest, request: Request, caller: Admin
) -> dict[str, Any]:
    services = services_of(request)
    sid = _study_id(services, study_id)
    try:
        issued = create_invitations(services.store, sid, body.n, body.label)
    except ValueError as error:
        raise ApiProblem("invalid-request", str(error)) from None
    _audit(
        services,
        caller,
        "study-invite",
        "POST /api/v1/reader-studies/{id}/invitations",
        f"study {sid}: {len(issued)} invitations",
    )
    return {
        "study": sid,
        "invitations": [
            {"id": i.id, "code": i.code, "link": i.link, "label": i.label} for i in issued
        ],
    }


@router.get(
    "/reader-studies/{study_id}/analysis", summary="A study's analysis (as `study analyse`)"
)
def analysis(
    study_id: DbId,
    request: Request,
    caller: Admin,
    min_gold_accuracy: Annotated[float | None, Query(ge=0.0, le=1.0)] = None,
) -> dict[str, Any]:
    services = services_of(request)
    sid = _study_id(services, study_id)
    studies = services.studies  # as `study analyse`: the raters an admin excluded stay out
    summary = studies.summarise(sid, studies.votes(sid), min_gold_accuracy=min_gold_accuracy)
    _audit(
        services,
        caller,
        "study-analysis",
        "GET /api/v1/reader-studies/{id}/analysis",
        f"study {sid}",
    )
    return {"study": sid, **summary}


@router.get("/audit", response_model=list[AuditEntry], summary="The audit log")
def audit_log(
    request: Request,
    caller: Admin,
    since: datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[dict[str, Any]]:
    """Events from `since` (UTC) on, oldest first."""
    services = services_of(request)
    if since is not None and since.tzinfo is not None:  # the store keeps naive UTC
        since = since.astimezone(UTC).replace(tzinfo=None)
    rows = audit.events(services.store, since, limit)
    _audit(services, caller, "audit-read", "GET /api/v1/audit", f"since {since}")
    return [row.to_dict() for row in rows]
