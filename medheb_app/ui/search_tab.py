"""Search tab: a compositional text query or an uploaded study against a prebuilt index.

Shows how the query was parsed (wanted / excluded findings, words not understood), the top-k
hits with their findings and scores, and a red mark on every hit that breaks the query (the
hard negatives of CXR-Retrieve section 3.2). Callbacks are plain functions of `Services` so
tests call them without a browser; the layout only wires them.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np

from medheb_app.evidence.study import EvidenceError
from medheb_app.query.parser import MAX_QUERY_CHARS, QueryTooLong
from medheb_app.services import Services
from medheb_app.ui import components as ui

log = logging.getLogger(__name__)
MAX_K = 50
LOGIC_NOTE = (
    "Ranked logic-aware: p is the estimated probability that the study has every wanted "
    "finding and none of the excluded ones (per-finding probes fit on the index's training "
    "studies, whose own p is therefore optimistic)."
)
IN_SAMPLE_NOTE = (
    "This study is one of the index's training studies: the probes were fit on its labels, so "
    "its p is optimistic."
)
RANKING_CHOICES = [
    ("Similarity (cosine to the query)", "similarity"),
    ("Logic-aware (wanted AND not excluded findings)", "logic"),
]


@dataclass
class Upload:
    """An uploaded study held server-side for the session: its path and pixels for preview."""

    path: str
    pixels: np.ndarray
    form: str
    modality: str
    synthetic: bool = False


@dataclass
class SearchOutcome:
    """Everything one search shows: parsed query, gallery, hits and messages."""

    parsed_html: str = ""
    gallery: list[tuple[np.ndarray, str]] = field(default_factory=list)
    hits: list[dict[str, Any]] = field(default_factory=list)
    notice: str = ""


def user_message(error: Exception) -> str:
    """One line a user can act on, never a traceback (KeyError's repr quotes are dropped)."""
    if isinstance(error, KeyError) and error.args:
        return str(error.args[0])
    return str(error) or type(error).__name__


# ---------------------------------------------------------------- pickers


def model_choices(services: Services) -> list[str]:
    """Model specs for the picker, read fresh so newly trained models appear without restart."""
    specs = [str(entry["spec"]) for entry in services.list_models()]
    return specs or [services.settings.default_model]


def index_choices(services: Services) -> list[str]:
    return sorted({str(entry["name"]) for entry in services.list_indices()}) or [
        services.settings.default_index
    ]


def _pick(current: str | None, choices: list[str], default: str) -> str:
    if current in choices:
        return str(current)
    return default if default in choices else choices[0]


def refresh_pickers(services: Services, model: str | None = None, index: str | None = None):
    """Dropdown updates with the current models and indices, keeping the user's choice."""
    models, indices = model_choices(services), index_choices(services)
    return (
        gr.update(choices=models, value=_pick(model, models, services.settings.default_model)),
        gr.update(choices=indices, value=_pick(index, indices, services.settings.default_index)),
    )


# ---------------------------------------------------------------- upload


def load_upload(services: Services, file_path: str | None) -> tuple[Upload | None, str]:
    """Read an uploaded file into an Upload, or return a message saying why it cannot be read."""
    if not file_path:
        return None, ""
    from medheb_app.evidence.readers import study_from_file

    try:
        study = study_from_file(Path(file_path), max_bytes=services.settings.max_upload_bytes)
        pixels = study.load_pixels()
    except EvidenceError as error:
        return None, ui.notice_html("error", user_message(error))
    except Exception as error:  # a reader bug must not show a traceback to a clinician
        log.exception("upload %s could not be read", file_path)
        return None, ui.notice_html(
            "error", f"This file could not be read ({type(error).__name__}: {error})."
        )
    if pixels is None:
        return None, ui.notice_html("error", "This file holds no image or volume to search with.")
    upload = Upload(str(file_path), pixels, study.form, study.modality, bool(study.synthetic))
    what = (
        f"{study.modality} volume, {pixels.shape[0]} slices"
        if study.form == "3d"
        else (f"{study.modality} image, {pixels.shape[1]}x{pixels.shape[0]}")
    )
    return upload, ui.notice_html("info", f"Loaded {Path(file_path).name}: {what}.")


def on_upload(services: Services, file_path: str | None):
    """Upload -> (state, preview, slice slider, message)."""
    upload, message = load_upload(services, file_path)
    if upload is None:
        return None, None, gr.update(visible=False, value=0), message
    preview = ui.render_image(upload.pixels, upload.synthetic)
    if upload.form == "3d":
        depth = int(upload.pixels.shape[0])
        slider = gr.update(visible=True, minimum=0, maximum=depth - 1, value=depth // 2, step=1)
    else:
        slider = gr.update(visible=False, value=0)
    return upload, preview, slider, message


def on_slice(upload: Upload | None, index: float | None):
    if upload is None or upload.form != "3d":
        return gr.update()
    return ui.render_image(upload.pixels, upload.synthetic, int(index or 0))


# ---------------------------------------------------------------- search


def _bootstrap_notice(services: Services, index: str) -> str:
    """A message when the demo index is still being prepared (or failed), else ''."""
    if index != services.settings.default_index:
        return ""
    state = services.bootstrap.state()
    if state.error:
        return f"The demo index could not be prepared: {state.error}"
    if not state.done and index not in index_choices_built(services):
        percent = round(100 * state.fraction)
        return (
            f"The demo index is still being prepared ({percent}%: {state.message}). "
            "Try again shortly."
        )
    return ""


def index_choices_built(services: Services) -> set[str]:
    return {str(entry["name"]) for entry in services.list_indices()}


def hit_record(services: Services, index: str, model: str, result: dict[str, Any]) -> dict:
    """A hit joined with its index metadata (report text, boxes) for the detail view."""
    from medheb_app.index.catalog import load_index

    record = dict(result)
    try:
        loaded = load_index(index, services.load_embedder(model), services.settings)
        meta = loaded.items.get(str(result["id"]), {})
    except Exception:  # the hit still shows with what the search returned
        log.exception("metadata for %s in %s unavailable", result.get("id"), index)
        meta = {}
    for key in ("path", "text", "synthetic", "boxes", "form", "modality", "split"):
        if record.get(key) is None:
            record[key] = meta.get(key)
    return record


def _thumbnail(record: dict[str, Any]) -> np.ndarray:
    """The hit's image with its SYNTHETIC label, or a grey tile with the report's first words."""
    from medheb_app.evidence.readers import read_any

    path = record.get("path")
    if path and Path(path).is_file():
        try:
            return ui.render_image(read_any(Path(path)).pixels, bool(record.get("synthetic")))
        except Exception:
            log.exception("thumbnail for %s unreadable", path)
    tile = np.full((160, 160, 3), 200, dtype=np.uint8)
    return (
        ui.label_synthetic(tile, "NO IMAGE")
        if not record.get("synthetic")
        else (ui.label_synthetic(tile))
    )


def run_search(
    services: Services,
    query: str | None,
    upload: Upload | None,
    model: str | None,
    index: str | None,
    k: float | None,
    ranking: str | None = "similarity",
) -> SearchOutcome:
    """Call the search service and shape its answer for the page; errors become messages."""
    from medheb_app.search import search

    query = (query or "").strip()
    model = model or services.settings.default_model
    index = index or services.settings.default_index
    k = int(min(max(int(k or 10), 1), MAX_K))
    if not query and upload is None:
        return SearchOutcome(notice=ui.notice_html("error", "Type a query or upload a study."))
    if len(query) > MAX_QUERY_CHARS:  # answered at once, before any model or index work
        message = str(QueryTooLong(len(query)))
        return SearchOutcome(
            parsed_html=ui.constraints_html([], [], error=message),
            notice=ui.notice_html("error", message),
        )
    waiting = _bootstrap_notice(services, index)
    if waiting:
        return SearchOutcome(notice=ui.notice_html("warning", waiting))
    try:
        response = search(
            query_text=query or None,
            file=Path(upload.path) if upload is not None else None,
            model_spec=model,
            index=index,
            k=k,
            settings=services.settings,
            ranking=ranking or "similarity",
        )
    except (EvidenceError, ValueError, KeyError, FileNotFoundError) as error:
        return SearchOutcome(notice=ui.notice_html("error", user_message(error)))
    except Exception as error:
        log.exception("search failed")
        return SearchOutcome(
            notice=ui.notice_html("error", f"Search failed ({type(error).__name__}: {error}).")
        )
    payload = response.to_json() if hasattr(response, "to_json") else dict(response)
    constraints = payload.get("constraints") or {}
    positive = list(constraints.get("positive") or [])
    negative = list(constraints.get("negative") or [])
    unknown = list(payload.get("unknown_terms") or [])
    outcome = SearchOutcome(
        parsed_html=ui.constraints_html(
            positive,
            negative,
            unknown,
            payload.get("corrections") or {},
            payload.get("suggestions") or {},
            uncertain=list(constraints.get("uncertain") or []),
        )
        if query
        else "",
        notice=ui.notices_html(warnings=list(payload.get("warnings") or [])),
    )
    logic = payload.get("ranking") == "logic"
    if logic:
        outcome.notice += ui.notice_html("info", LOGIC_NOTE)
    for rank, result in enumerate(payload.get("results") or [], start=1):
        record = hit_record(services, index, model, result)
        broken = ui.violation_words(record.get("violations") or {})
        record.update(rank=rank, broken=broken, positive=positive, negative=negative)
        shown = math.exp(min(float(record["score"]), 0.0)) if logic else float(record["score"])
        if logic:
            record["p_query"] = shown
        caption = ui.hit_caption(
            rank, shown, broken, record.get("satisfies"), "p " if logic else ""
        )
        outcome.hits.append(record)
        outcome.gallery.append((_thumbnail(record), caption))
    if not outcome.hits:
        outcome.notice += ui.notice_html("warning", "No results.")
    return outcome


def hit_detail(hits: list[dict[str, Any]] | None, position: int | None):
    """The selected hit large, with its findings against the query and its report."""
    if not hits or position is None or not 0 <= int(position) < len(hits):
        return None, ""
    hit = hits[int(position)]
    image = _thumbnail(hit)
    verdict = (
        ui.notice_html("error", "Breaks the query: " + "; ".join(hit["broken"]))
        if hit.get("broken") or hit.get("satisfies") is False
        else ""
    )
    if "p_query" in hit and hit.get("split") == "train":
        verdict += ui.notice_html("info", IN_SAMPLE_NOTE)
    report = hit.get("text") or "No report text stored for this study."
    chips = ui.finding_chips_html(hit.get("findings") or {}, hit["positive"], hit["negative"])
    score = (
        f"p(meets the query) {hit['p_query']:.3f}"
        if "p_query" in hit
        else f"score {hit['score']:.3f}"
    )
    body = (
        f"<h3>#{hit['rank']} · {ui.html.escape(str(hit['id']))} · {score}</h3>"
        f"<div>Source: {ui.html.escape(str(hit.get('source') or 'unknown'))}"
        f"{' · SYNTHETIC phantom' if hit.get('synthetic') else ''}</div>"
        f"{verdict}<div>{chips}</div>"
        f"<h4>Report</h4><p>{ui.html.escape(report)}</p>"
    )
    return image, body


def bootstrap_status(services: Services, model: str | None = None, index: str | None = None):
    """Progress HTML for the demo bootstrap; when it ends the timer stops and pickers refresh."""
    state = services.bootstrap.state()
    if not state.done:
        bar = ui.progress_html(state.fraction, f"Preparing the demo: {state.message}")
        return bar, gr.Timer(), gr.update(), gr.update()
    note = ui.notice_html("error", f"Demo not available: {state.error}") if state.error else ""
    return note, gr.Timer(active=False), *refresh_pickers(services, model, index)


# ---------------------------------------------------------------- layout


def build_search_tab(services: Services) -> dict[str, Any]:
    """Lay out the search tab inside the current Blocks context and wire its callbacks."""
    gr.HTML(ui.SYNTHETIC_BANNER)
    status = gr.HTML(elem_id="bootstrap-status")
    timer = gr.Timer(1.0)
    with gr.Row():
        with gr.Column(scale=3):
            query = gr.Textbox(
                label="Query",
                placeholder="e.g. pleural effusion and no cardiomegaly",
                elem_id="search-query",
            )
            upload_file = gr.File(
                label="Or upload a study: PNG/JPG, DICOM (file, multi-frame, zipped series), NIfTI",
                file_types=[
                    ".png",
                    ".jpg",
                    ".jpeg",
                    ".dcm",
                    ".dicom",
                    ".zip",
                    ".nii",
                    ".gz",
                    ".npy",
                ],
                type="filepath",
            )
            upload_note = gr.HTML()
            with gr.Row():
                preview = gr.Image(label="Uploaded study", interactive=False, height=256)
            slice_slider = gr.Slider(label="Slice", minimum=0, maximum=1, step=1, visible=False)
        with gr.Column(scale=1):
            model = gr.Dropdown(label="Model", choices=[], allow_custom_value=True)
            index = gr.Dropdown(label="Index", choices=[], allow_custom_value=True)
            k = gr.Slider(label="Top k", minimum=1, maximum=MAX_K, value=10, step=1)
            ranking = gr.Radio(
                RANKING_CHOICES,
                value="similarity",
                label="Ranking",
                info="Logic-aware honours 'no B' even for a model that reads it as 'B'.",
                elem_id="search-ranking",
            )
            button = gr.Button("Search", variant="primary", elem_id="search-button")
            refresh = gr.Button("Refresh models and indices", size="sm")
    parsed = gr.HTML(elem_id="search-parsed")
    notice = gr.HTML(elem_id="search-notice")
    gallery = gr.Gallery(
        label="Top hits (click one for its report)",
        columns=5,
        height="auto",
        elem_id="search-hits",
        allow_preview=False,
    )
    with gr.Row():
        large = gr.Image(label="Selected hit", interactive=False, height=384)
        detail = gr.HTML(elem_id="search-detail")
    upload_state = gr.State(None)
    hits_state = gr.State([])

    def _search(q, up, m, ix, kk, rk):
        outcome = run_search(services, q, up, m, ix, kk, rk)
        return outcome.parsed_html, outcome.notice, outcome.gallery, outcome.hits, None, ""

    def _select(hits, evt: gr.SelectData):
        return hit_detail(hits, evt.index)

    outputs = [parsed, notice, gallery, hits_state, large, detail]
    inputs = [query, upload_state, model, index, k, ranking]
    button.click(_search, inputs, outputs, api_name="search")
    query.submit(_search, inputs, outputs, api_name=False)
    upload_file.change(
        lambda f: on_upload(services, f),
        [upload_file],
        [upload_state, preview, slice_slider, upload_note],
        api_name=False,
    )
    slice_slider.change(on_slice, [upload_state, slice_slider], [preview], api_name=False)
    gallery.select(_select, [hits_state], [large, detail], api_name=False)
    refresh.click(
        lambda m, i: refresh_pickers(services, m, i), [model, index], [model, index], api_name=False
    )
    timer.tick(
        lambda m, i: bootstrap_status(services, m, i),
        [model, index],
        [status, timer, model, index],
        api_name=False,
    )
    return {
        "query": query,
        "upload": upload_file,
        "preview": preview,
        "slice": slice_slider,
        "model": model,
        "index": index,
        "k": k,
        "ranking": ranking,
        "button": button,
        "parsed": parsed,
        "notice": notice,
        "gallery": gallery,
        "large": large,
        "detail": detail,
        "status": status,
        "timer": timer,
        "hits": hits_state,
        "upload_state": upload_state,
        "refresh_pickers": lambda m=None, i=None: refresh_pickers(services, m, i),
    }
