"""GET routes: the catalog (indices, models), study records and images, benchmark runs.

What `index list/info` and the explorer show, minus every server path. Anonymous callers (and
tokens on routes their scope does not cover) see the public indices only (serving.offered:
synthetic ones and those the operator published), as the page's pickers do; a study record
of any other index needs read scope, and runs need a read token. A run's per-query rankings
are refused while a reader study drawn from it is open (services.runs.is_blinded, the check
the explorer makes), unless the caller has admin scope, as on the page.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from medheb_app.api import adapter, audit
from medheb_app.api.problems import ApiProblem
from medheb_app.api.schemas import (
    DbId,
    IndexDetail,
    IndexSummary,
    ModelEntry,
    QueryPage,
    RunDetail,
    RunRow,
    StudyRecord,
)
from medheb_app.api.search_routes import ERRORS, study_links
from medheb_app.api.security import Principal, access, services_of
from medheb_app.eval import drilldown, reports
from medheb_app.eval.leaderboard import cxr_leaderboard, leaderboard, task_frame
from medheb_app.eval.metrics import bootstrap_ci
from medheb_app.evidence.readers import read_any
from medheb_app.evidence.render import montage, to_uint8
from medheb_app.index.build import FAILED_FILE
from medheb_app.index.catalog import CATALOG_FILE
from medheb_app.services import Services
from medheb_app.store.db import iso_utc
from medheb_app.store.runs import run_listing

router = APIRouter(tags=["catalog and runs"])
Catalog = Annotated[Principal, Depends(access("search", anonymous=True))]
Reader = Annotated[Principal, Depends(access("read", anonymous=True))]  # anonymous: public only
RunReader = Annotated[Principal, Depends(access("read", anonymous=False))]
MAX_IMAGE_SIDE = 4096
RECORD_FIELDS = (
    "form",
    "modality",
    "findings",
    "source",
    "split",
    "synthetic",
    "boxes",
    "laterality",
    "severity",
)  # never path or patient_id


def _source_kind(source: object) -> str:
    """'nih:/data/x' -> 'nih'; a bare kind is kept (the spec's path is the server's)."""
    text = str(source or "")
    return text.split(":", 1)[0] if ":" in text else text


def _public_task(task: dict[str, Any]) -> dict[str, Any]:
    """A run's task metadata without the server's paths: a data spec ('nih:/data/x', a
    CXR-Retrieve run's gallery) is reduced to its kind, as an index's source is."""
    return {
        key: _source_kind(value) if key in ("source", "data") and isinstance(value, str) else value
        for key, value in task.items()
    }


def _index_summary(services: Services, caller: Principal, name: str) -> dict[str, Any]:
    found = adapter.builds(services.settings, name)
    if not found:
        raise ApiProblem("not-found", f"There is no index named {name!r}.")
    offer = adapter.reach(services.settings, caller.anonymous).get(name, [])
    specs = _specs_by_fingerprint(services)
    first = found[0]
    vocabulary = first.get("vocabulary") or None
    return {
        "name": name,
        "source": _source_kind(first.get("source")),
        "synthetic": all(bool(entry.get("synthetic")) for entry in found),
        "forms": sorted({form for entry in found for form in entry.get("forms", [])}),
        "vocabulary": {key: vocabulary.get(key) for key in ("scheme", "names", "labelled")}
        if isinstance(vocabulary, dict)
        else None,
        "builds": [
            {
                "model": entry["model"],
                "model_version": str(entry.get("model_version", "")),
                "fingerprint": entry["fingerprint"],
                "offered": [s for s in specs.get(entry["fingerprint"], []) if s in offer],
                "kind": entry["kind"],
                "count": int(entry["count"]),
                "dims": int(entry["dims"]),
                "created": str(entry.get("created", "")),
            }
            for entry in found
        ],
    }


def _specs_by_fingerprint(services: Services) -> dict[str, list[str]]:
    specs: dict[str, list[str]] = {}
    for entry in services.list_models():
        card = entry.get("card") or {}
        if isinstance(card, dict) and card.get("fingerprint"):
            specs.setdefault(str(card["fingerprint"]), []).append(str(entry["spec"]))
    return specs


@router.get("/indices", response_model=list[IndexSummary], summary="Built indices")
def indices(request: Request, caller: Catalog) -> list[dict[str, Any]]:
    services = services_of(request)
    names = sorted({entry["name"] for entry in adapter.builds(services.settings)})
    if caller.anonymous:  # what the page's picker lists: public indices only
        names = [name for name in names if name in adapter.offered(services.settings)]
    return [_index_summary(services, caller, name) for name in names]


@router.get("/indices/{name}", response_model=IndexDetail, summary="One index", responses=ERRORS)
def index_detail(name: str, request: Request, caller: Catalog) -> dict[str, Any]:
    services = services_of(request)
    if caller.anonymous and name not in adapter.offered(services.settings):
        raise ApiProblem("not-found", f"There is no index named {name!r} offered here.")
    summary = _index_summary(services, caller, name)
    params, failed = {}, {}
    for entry in adapter.builds(services.settings, name):
        folder = Path(entry["path"])
        try:
            info = json.loads((folder / CATALOG_FILE).read_text())
        except (OSError, json.JSONDecodeError):
            continue  # being rebuilt right now
        params[entry["fingerprint"]] = dict(info.get("params") or {})
        failed_file = folder / FAILED_FILE
        lines = failed_file.read_text().splitlines() if failed_file.is_file() else []
        failed[entry["fingerprint"]] = sum(1 for line in lines if line.strip())
    return {**summary, "params": params, "failed_items": failed}


@router.get("/models", response_model=list[ModelEntry], summary="Models")
def models(request: Request, caller: Catalog) -> list[dict[str, Any]]:
    """Listed models (never a checkpoint path) with the indices built for each; anonymous
    callers see only the models offered for some index, and of its indices the public ones."""
    services = services_of(request)
    built: dict[str, set[str]] = {}
    for entry in adapter.builds(services.settings):
        built.setdefault(str(entry["fingerprint"]), set()).add(str(entry["name"]))
    reach = adapter.reach(services.settings, caller.anonymous)
    offered_specs = {spec for specs in reach.values() for spec in specs}
    rows = []
    for entry in services.list_models():
        spec = str(entry["spec"])
        if any(marker in spec for marker in ("/", "\\", "..")):
            continue
        if caller.anonymous and spec not in offered_specs:
            continue
        card = entry.get("card") if isinstance(entry.get("card"), dict) else {}
        rows.append(
            {
                "spec": spec,
                "name": str(card.get("name", "")),
                "version": str(card.get("version", "")),
                "dims": card.get("dims"),
                "modalities": [str(m) for m in card.get("modalities", [])],
                "license": str(card.get("license", "")),
                "indices": sorted(
                    name
                    for name in built.get(str(card.get("fingerprint", "")), set())
                    if name in reach or not caller.anonymous
                ),
            }
        )
    return rows


# ---------------------------------------------------------------- study records


def _row(services: Services, caller: Principal, index: str, study_id: str) -> dict[str, Any]:
    """The index row of one study: a read token reaches every built index; anonymous callers
    the public ones only (what the page shows them), and a search token is told it needs read
    scope for any other."""
    if caller.anonymous and index not in adapter.offered(services.settings):
        if adapter.builds(services.settings, index):  # exists: a token may be told so
            caller.refuse_narrow_token("read", "Reading the studies of an index that is not public")
        raise ApiProblem("not-found", f"There is no index named {index!r} offered here.")
    try:
        loaded = adapter.find_build(services.settings, index)
    except adapter.IndexNotFoundError:
        raise ApiProblem("not-found", f"There is no index named {index!r}.") from None
    if study_id not in loaded.items:
        raise ApiProblem("not-found", f"Index {index!r} holds no study {study_id!r}.")
    return dict(loaded.item(study_id))


def _audit_read(services: Services, caller: Principal, route: str, index: str, row: dict) -> None:
    audit.record_read(
        services.store, who=caller.who, channel="api", route=route, index=index, row=row
    )


@router.get(
    "/studies/{index}/{study_id}",
    response_model=StudyRecord,
    summary="A study's metadata, findings and report",
    responses=ERRORS,
)
def study_record(index: str, study_id: str, request: Request, caller: Reader) -> dict[str, Any]:
    services = services_of(request)
    row = _row(services, caller, index, study_id)
    _audit_read(services, caller, "GET /api/v1/studies/{index}/{id}", index, row)
    record = {key: row[key] for key in RECORD_FIELDS if row.get(key) is not None}
    return {
        **record,
        "index": index,
        "id": study_id,
        "report": row.get("text"),
        "synthetic": bool(row.get("synthetic")),
        "is_training_study": row.get("split") == "train",
        "links": study_links(index, study_id),
    }


def _png(pixels: np.ndarray, max_size: int | None) -> bytes:
    from PIL import Image

    pixels = np.asarray(pixels)
    if pixels.ndim == 3 and pixels.shape[-1] not in (3, 4):  # a volume: its slices as a grid
        pixels = montage(pixels[:: max(1, pixels.shape[0] // 16)][:16], gutter=2)
    image = Image.fromarray(to_uint8(pixels))
    if max_size:
        image.thumbnail((max_size, max_size))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


@router.get(
    "/studies/{index}/{study_id}/image",
    summary="A study's image as PNG (a volume as a grid of slices)",
    response_class=Response,
    responses={200: {"content": {"image/png": {}}}, **ERRORS},
)
def study_image(
    index: str,
    study_id: str,
    request: Request,
    caller: Reader,
    max_size: Annotated[int | None, Query(ge=16, le=MAX_IMAGE_SIDE)] = None,
) -> Response:
    services = services_of(request)
    row = _row(services, caller, index, study_id)
    path = row.get("path")
    if not path or not Path(path).exists():
        raise ApiProblem("not-found", f"Study {study_id!r} has no image on this server.")
    try:
        pixels = read_any(Path(path), services.settings.max_upload_bytes).pixels
    except adapter.EvidenceError:
        raise ApiProblem("not-found", f"The image of study {study_id!r} cannot be read.") from None
    _audit_read(services, caller, "GET /api/v1/studies/{index}/{id}/image", index, row)
    return Response(
        _png(pixels, max_size),
        media_type="image/png",
        headers={"Cache-Control": "private, max-age=300"},
    )


# ---------------------------------------------------------------- runs


def _summary(services: Services, run_id: int):
    try:
        return services.runs.summary(run_id)
    except (KeyError, FileNotFoundError, ValueError, OSError):
        raise ApiProblem("not-found", f"There is no readable run {run_id}.") from None


def _blinded(services: Services, summary: Any) -> bool:
    return services.runs.is_blinded(getattr(summary, "out_dir", None))


def _cxr_negation_ci(summary: Any, model: str) -> tuple[float, float]:
    """The 95% bootstrap CI (percent) of a model's negation P@5 over the negation queries, by
    the computation the explorer's "negation P@5 95% CI" column rounds (eval/cxr_tables.py)."""
    report = summary.cxr_report(model)
    values = [
        q[f"metrics_{report.setting}"]["P@5"] for q in report.queries if q["kind"] == "negation"
    ]
    _, low, high = bootstrap_ci(values)
    return round(100 * low, 2), round(100 * high, 2)


def leaderboard_rows(summary: Any) -> list[dict[str, Any]]:
    """The explorer's leaderboard of a run (eval/leaderboard.py) as JSON rows: per model the
    task-macro Hit@1, MRR@5, Hit@5 with the 95% bootstrap CI of Hit@1 (MedHEB), or P@k per
    regime with the negation P@5 CI, as the explorer's text and as numbers (CXR-Retrieve)."""
    if summary.kind == "cxr-retrieve":
        board = cxr_leaderboard(summary)
        lows, highs = [], []
        for name in board["model"]:  # the CI as numbers too (the explorer shows "[a, b]")
            low, high = _cxr_negation_ci(summary, name)
            lows.append(low)
            highs.append(high)
        board["negation P@5_ci_low"], board["negation P@5_ci_high"] = lows, highs
    else:
        frame = task_frame(summary)
        board = leaderboard(frame)
        single = frame[~frame["graded"]] if not frame.empty else frame
        lows, highs = [], []
        for name in board["model"]:
            ci = reports.hit1_ci(summary, name, list(single[single["model"] == name]["task"]))
            lows.append(ci[1] if ci else None)
            highs.append(ci[2] if ci else None)
        board["hit@1_ci_low"], board["hit@1_ci_high"] = lows, highs
    return json.loads(board.to_json(orient="records"))  # NaN as null


@router.get("/runs", response_model=list[RunRow], summary="Benchmark runs, newest first")
def runs(
    request: Request,
    caller: RunReader,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[dict[str, Any]]:
    services = services_of(request)
    return [
        {key: row[key] for key in ("id", "suite", "models", "status")}
        | {"started": iso_utc(row["started"])}
        for row in run_listing(services.store, limit=limit)
    ]


@router.get("/runs/{run_id}", response_model=RunDetail, summary="A run's summary", responses=ERRORS)
def run_detail(run_id: DbId, request: Request, caller: RunReader) -> dict[str, Any]:
    from dataclasses import asdict

    services = services_of(request)
    summary = _summary(services, run_id)
    models = {}
    for name, block in summary.models.items():
        block_dict = asdict(block)
        block_dict.pop("model_card", None)
        models[name] = block_dict
    return {
        "id": run_id,
        "suite": summary.suite,
        "kind": summary.kind,
        "status": summary.status,
        "started": summary.started,
        "finished": summary.finished,
        "blinded": _blinded(services, summary),
        "models": models,
        "leaderboard": leaderboard_rows(summary),
        "tasks": [_public_task(task) for task in summary.tasks],
        "skipped": services.runs.skipped(summary, is_admin=False),
    }


@router.get(
    "/runs/{run_id}/tasks/{task}/queries",
    response_model=QueryPage,
    summary="Per-query rankings of a task (hidden while a reader study of the run is open)",
    responses=ERRORS,
)
def run_queries(
    run_id: DbId,
    task: str,
    request: Request,
    caller: RunReader,
    models: Annotated[list[str] | None, Query(max_length=8)] = None,
    failures_only: bool = False,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> dict[str, Any]:
    services = services_of(request)
    summary = _summary(services, run_id)
    if not caller.admin and _blinded(services, summary):
        raise ApiProblem(
            "blinded",
            f"Run {run_id}'s per-query rankings are hidden while a reader study drawn from it "
            "is open.",
        )
    if task not in drilldown.drill_tasks(summary):
        raise ApiProblem("not-found", f"Run {run_id} has no task {task!r}.")
    chosen = [m for m in (models or list(summary.models)) if m in summary.models]
    if not chosen:
        raise ApiProblem("not-found", f"Run {run_id} has none of the models asked for.")
    outcomes = drilldown.query_outcomes(summary, task, chosen)
    if failures_only:
        outcomes = [outcome for outcome in outcomes if outcome.failed]
    page = outcomes[offset : offset + limit]
    queries = []
    for outcome in page:
        views = drilldown.ranked_views(summary, task, outcome.id, chosen)
        ranked = {
            view.model: [
                {
                    "rank": hit.rank,
                    "id": hit.id,
                    "score": hit.score,
                    "gold": hit.gold,
                    "findings": hit.findings,
                    "violated": hit.violated,
                }
                for hit in view.hits
            ]
            for view in views
        }
        queries.append(
            {"id": outcome.id, "text": outcome.text, "hit_at_1": outcome.hits, "ranked": ranked}
        )
    return {
        "run": run_id,
        "task": task,
        "models": chosen,
        "total": len(outcomes),
        "offset": offset,
        "limit": limit,
        "failures_only": failures_only,
        "queries": queries,
    }
