"""Search tab: a compositional text query or an uploaded study against a prebuilt index.

Renders one answer of the search service (medheb_app.search): how the query was parsed
(wanted / excluded findings, words not understood), the top-k hits with their rank, score
(p and log-odds come typed from the service) and whether each meets the query (a red mark on
every hard negative, CXR-Retrieve section 3.2), and on request the similarity ranking beside
the default logic-aware one. Callbacks are plain functions of `Services` so tests call them
without a browser; the layout only wires them.

Every handler here is reachable by any anonymous session through the queue: the service
checks every request (only offered (model, index) pairs, k, ranking, query length), searches
are rate-limited per client here, uploads go through ui/search_upload.py, and no message ever
shows a file name, a path or an exception class.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np

from medheb_app import search as service
from medheb_app.access.limits import client_key
from medheb_app.api import audit
from medheb_app.evidence.readers import read_any
from medheb_app.evidence.study import EvidenceError
from medheb_app.query.parser import MAX_QUERY_CHARS
from medheb_app.search import MAX_PUBLIC_K, Score, SearchError, SearchResponse
from medheb_app.services import Services
from medheb_app.serving import default_model, offered
from medheb_app.ui import components as ui
from medheb_app.ui.query_reading import reading_html
from medheb_app.ui.search_upload import (
    GENERIC_FAILURE,
    SEARCH_CONCURRENCY,
    UPLOAD_CONCURRENCY,
    UPLOAD_TTL_S,
    UPLOAD_TYPES,
    VOLUME_CHOICES,
    TabLimits,
    Upload,
    _slider_label,
    on_slice,
    on_upload,
    on_volume_mode,
    query_study,
    user_message,
)

log = logging.getLogger(__name__)
MAX_K = MAX_PUBLIC_K  # the Top k slider's end: what the service grants a page
EXAMPLES = (  # the README's queries, plus one without negation
    "pleural effusion and no cardiomegaly",
    "atelectasis and no pneumonia",
    "cardiomegaly with edema",
)
INTRO = (
    "Type findings to want or exclude and press Search, click an example, or upload a chest "
    "radiograph, DICOM, zipped series or NIfTI volume."
)
LOGIC_NOTE = (
    "Ranked logic-aware: p = estimated probability that the study has every wanted finding and "
    "none of the excluded ones."
)
IN_SAMPLE_NOTE = (
    "This study is one of the index's training studies: the probes were fit on its labels, so "
    "its p is optimistic."
)
OUT_OF_FOLD_NOTE = (
    "This study is one of the index's training studies: the probes were fit on its labels; its "
    "p comes from the cross-fitted probe that left it out."
)
RANKING_CHOICES = [
    ("Best for this index (logic-aware where it has probes)", "auto"),
    ("Similarity (cosine to the query)", "similarity"),
]


@dataclass
class SearchOutcome:
    """Everything one search shows: parsed query, galleries, hits and messages."""

    parsed_html: str = ""
    gallery: list[tuple[np.ndarray, str]] = field(default_factory=list)
    hits: list[dict[str, Any]] = field(default_factory=list)
    notice: str = ""
    compare_gallery: list[tuple[np.ndarray, str]] = field(default_factory=list)


def error_outcome(text: str, kind: str = "error") -> SearchOutcome:
    return SearchOutcome(notice=ui.notice_html(kind, user_message(text)))


# ---------------------------------------------------------------- pickers


def _offer(services: Services) -> dict[str, list[str]]:
    return offered(services.settings)


def index_choices(services: Services) -> list[str]:
    """The indices an anonymous visitor may search: those built for at least one listed model."""
    return list(_offer(services)) or [services.settings.default_index]


def model_choices(services: Services, index: str | None = None) -> list[str]:
    """Listed models with `index` built, strongest first (read fresh: new builds appear)."""
    index = index or services.settings.default_index
    return _offer(services).get(index, []) or [default_model(services.settings, index)]


def _pick(current: str | None, choices: list[str], default: str) -> str:
    if current in choices:
        return str(current)
    return default if default in choices else choices[0]


def refresh_pickers(services: Services, model: str | None = None, index: str | None = None):
    """Dropdown updates with the offered indices and the models built for the chosen one,
    keeping the user's choice when it is still offered, else the strongest model."""
    indices = index_choices(services)
    chosen_index = _pick(index, indices, services.settings.default_index)
    models = model_choices(services, chosen_index)
    best = default_model(services.settings, chosen_index)
    return (
        gr.update(choices=models, value=_pick(model, models, best)),
        gr.update(choices=indices, value=chosen_index),
    )


# ---------------------------------------------------------------- search


def _bootstrap_notice(services: Services, index: str) -> str:
    """For a search refused because `index` is not offered: a message when that is because
    the demo index is still being prepared (or failed), else ''."""
    if index != services.settings.default_index:
        return ""
    state = services.bootstrap.state()
    if state.error:
        return "The demo could not be prepared on this server; the other tabs still work."
    if not state.done:
        percent = round(100 * state.fraction)
        return (
            f"The demo index is still being prepared ({percent}%: {state.message}). "
            "Try again shortly."
        )
    return ""


def thumbnail(path: str | None, synthetic: bool) -> np.ndarray:
    """A hit's image with its SYNTHETIC label (rendered once per file version: a repeated
    search shows the same hits), or a grey tile saying there is no image."""
    if path:
        try:
            return _rendered(path, Path(path).stat().st_mtime_ns, synthetic)
        except OSError:
            pass  # the file is gone: the tile below says so
        except EvidenceError:
            log.exception("a hit's thumbnail is unreadable")
    tile = np.full((160, 160, 3), 200, dtype=np.uint8)
    return ui.label_synthetic(tile) if synthetic else ui.label_synthetic(tile, "NO IMAGE")


@lru_cache(maxsize=512)
def _rendered(path: str, _mtime_ns: int, synthetic: bool) -> np.ndarray:
    image = ui.render_image(read_any(Path(path)).pixels, synthetic)
    image.setflags(write=False)  # shared between sessions: nobody draws on it
    return image


def score_text(score: Score) -> str:
    """A short score that separates hits: for logic-aware ranking p with enough digits to
    differ (0.973, 0.9991), and past p 0.9999 its log-odds (+9.8), where p's digits run out;
    for similarity the cosine."""
    if score.p is None or score.log_odds is None:
        return f"cos {score.value:.3f}"
    if score.p < 0.99:
        return f"p {score.p:.3f}"
    if score.p < 0.9999:
        return f"p {score.p:.4f}"
    return f"log-odds {score.log_odds:+.1f}"


def caption(rank: int, score: Score, satisfies: bool | None, broken: list) -> str:
    """Gallery caption in the order a cut-off caption keeps: rank, whether the hit meets the
    query, score, then what it breaks."""
    parts = [f"#{rank}"]
    if satisfies is False or broken:
        parts += ["✗ violates", score_text(score)]
        parts.append("; ".join(broken) if broken else "breaks the query")
    elif satisfies is True:
        parts += ["✓ meets", score_text(score)]
    else:
        parts.append(score_text(score))
    return " · ".join(parts)


def _score(record: dict[str, Any]) -> Score:
    return Score("log_p" if record.get("score_kind") == "log_p" else "cosine", record["score"])


def _ranked(answer: SearchResponse) -> tuple[list[dict], list[tuple]]:
    """(hit records for the detail view, gallery items) of one search answer."""
    hits, gallery = [], []
    for hit in answer.results:
        record = asdict(hit)
        broken = ui.violation_words(hit.violations)
        record.update(broken=broken, positive=answer.positive, negative=answer.negative)
        record["index"] = answer.index  # opening the hit is audited against it
        text = caption(hit.rank, hit.typed_score, hit.satisfies, broken)
        text += " · training study" if hit.training else ""  # issue 23: the typed mark
        hits.append(record)
        gallery.append((thumbnail(hit.path, hit.synthetic), text))
    return hits, gallery


def run_search(
    services: Services,
    query: str | None,
    upload: Upload | None,
    model: str | None,
    index: str | None,
    k: float | None,
    ranking: str | None = "auto",
    compare: bool = False,
    volume_mode: str | None = "volume",
    slice_index: float | None = None,
    client: str = "local",
    limits: TabLimits | None = None,
) -> SearchOutcome:
    """Ask the search service as an anonymous request and render its answer.

    The service checks everything (the offered pairs, k, the ranking, the query's length);
    its refusals become messages. With `compare`, the similarity ranking of the same query is
    shown beside the default one."""
    query = (query or "").strip()
    index = index or services.settings.default_index
    if upload is not None and not isinstance(upload, Upload):
        return error_outcome("Upload the study again.")
    if limits is not None:  # the page's handlers always pass theirs
        decision = limits.searches.hit(client)
        if not decision.allowed:
            return error_outcome(decision.message("searches"))
    study = query_study(upload, volume_mode, slice_index) if upload and not query else None

    def _one(order: str | None) -> SearchResponse:
        return service.search(  # through the module: one seam for tests
            query_text=query or None, study=study, model_spec=model or None, index=index,
            k=10 if k is None else k, settings=services.settings, ranking=order, public=True,
        )  # fmt: skip

    try:
        answer = _one(ranking)
        audit.ui_search(services, client, answer.to_json())  # real (non-synthetic) indices only
        other = _one("similarity") if compare and answer.ranking != "similarity" else None
    except SearchError as error:
        waiting = _bootstrap_notice(services, index) if error.field == "index" else ""
        if waiting:  # not offered yet: the demo is still being prepared (or failed)
            return error_outcome(waiting, "warning")
        if error.field == "query":  # shown where the query is read back, too
            message = user_message(error)
            return SearchOutcome(
                parsed_html=ui.constraints_html([], [], error=message),
                notice=ui.notice_html("error", message),
            )
        return error_outcome(str(error))
    except EvidenceError as error:
        return error_outcome(str(error))
    except Exception:
        log.exception("search failed")
        return error_outcome(GENERIC_FAILURE)
    return _outcome(answer, other, compare)


def _outcome(answer: SearchResponse, other: SearchResponse | None, compare: bool) -> SearchOutcome:
    outcome = SearchOutcome(
        parsed_html=ui.constraints_html(
            answer.positive, answer.negative, answer.unknown_terms, answer.corrections,
            answer.suggestions, uncertain=answer.uncertain,
        )
        if answer.query_kind == "text"
        else "",
        notice=ui.notices_html(warnings=[user_message(w) for w in answer.warnings]),
    )  # fmt: skip
    if answer.query_kind == "text":  # issue 20 item 5
        outcome.parsed_html += reading_html(answer.query, answer.to_json())
    if answer.ranking == "logic":
        outcome.notice += ui.notice_html("info", LOGIC_NOTE)
    outcome.hits, outcome.gallery = _ranked(answer)
    if other is not None:
        _, outcome.compare_gallery = _ranked(other)
    elif compare:
        outcome.notice += ui.notice_html(
            "info", "This search is already ranked by similarity; nothing to compare with."
        )
    if not outcome.hits:
        outcome.notice += ui.notice_html("warning", "No results.")
    return outcome


def hit_detail(hits: list[dict[str, Any]] | None, position: int | None):
    """The selected hit large, with its findings against the query and its report."""
    if not isinstance(hits, list) or not isinstance(position, int):
        return None, ""
    if not 0 <= position < len(hits) or not isinstance(hits[position], dict):
        return None, ""
    hit = hits[position]
    try:
        image = thumbnail(hit.get("path"), bool(hit.get("synthetic")))
        logic = hit.get("score_kind") == "log_p"
        verdict = (
            ui.notice_html("error", "Breaks the query: " + "; ".join(hit["broken"]))
            if hit.get("broken") or hit.get("satisfies") is False
            else ""
        )
        if logic and hit.get("training"):
            in_sample = hit.get("p_fit") == "in-sample"
            verdict += ui.notice_html("info", IN_SAMPLE_NOTE if in_sample else OUT_OF_FOLD_NOTE)
        report = hit.get("text") or "No report text stored for this study."
        chips = ui.finding_chips_html(
            hit.get("findings") or {}, hit.get("positive") or [], hit.get("negative") or []
        )
        score = score_text(_score(hit))
        if logic:
            score = (
                f"p(meets the query) {float(hit['p_query']):.4f} · "
                f"log-odds {float(hit['log_odds']):+.2f}"
            )
        body = (
            f"<h3>#{hit['rank']} · {ui.html.escape(str(hit['id']))} · {score}</h3>"
            f"<div>Source: {ui.html.escape(str(hit.get('source') or 'unknown'))}"
            f"{' · SYNTHETIC phantom' if hit.get('synthetic') else ''}</div>"
            f"{verdict}<div>{chips}</div>"
            f"<h4>Report</h4><p>{ui.html.escape(report)}</p>"
        )
    except (KeyError, TypeError, ValueError):
        return None, ""
    return image, body


def bootstrap_status(services: Services, model: str | None = None, index: str | None = None):
    """Progress HTML for the demo bootstrap; when it ends the timer stops and pickers refresh."""
    state = services.bootstrap.state()
    if not state.done:
        bar = ui.progress_html(state.fraction, f"Preparing the demo: {state.message}")
        return bar, gr.Timer(), gr.update(), gr.update()
    note = (
        ui.notice_html("error", "The demo could not be prepared on this server.")
        if state.error
        else ""
    )
    return note, gr.Timer(active=False), *refresh_pickers(services, model, index)


# ---------------------------------------------------------------- layout


def build_search_tab(services: Services, limits: TabLimits | None = None) -> dict[str, Any]:
    """Lay out the search tab inside the current Blocks context and wire its callbacks.

    Results come right under the query bar, so a search's hits are visible at 1400x900
    without scrolling; the upload preview appears only once there is an upload."""
    limits = limits or TabLimits()
    gr.HTML(ui.SYNTHETIC_BANNER)
    with gr.Row(equal_height=False):
        with gr.Column(scale=3):
            query = gr.Textbox(
                label="Query",
                info=INTRO,
                placeholder="e.g. pleural effusion and no cardiomegaly",
                elem_id="search-query",
                max_length=MAX_QUERY_CHARS,
                lines=1,
            )
            examples = gr.Examples(
                [[text] for text in EXAMPLES],
                [query],
                label="Examples (click one to search)",
                elem_id="search-examples",
            )
            with gr.Row():
                button = gr.Button("Search", variant="primary", elem_id="search-button", scale=2)
                upload_file = gr.UploadButton(
                    "Upload a study",
                    file_types=UPLOAD_TYPES,
                    type="filepath",
                    scale=1,
                    size="md",
                    elem_id="search-upload",
                )
                clear_upload = gr.Button("Clear upload", scale=1, visible=False)
            parsed = gr.HTML(elem_id="search-parsed")
            notice = gr.HTML(elem_id="search-notice")
        with gr.Column(scale=2):
            with gr.Row():
                # choices arrive on load; a custom value lets an API call pass the names the
                # page shows (the handler refuses any pair not offered, in words)
                model = gr.Dropdown(label="Model", choices=[], allow_custom_value=True)
                index = gr.Dropdown(label="Index", choices=[], allow_custom_value=True)
            ranking = gr.Radio(
                RANKING_CHOICES,
                value="auto",
                label="Ranking",
                elem_id="search-ranking",
            )
            with gr.Row():
                compare = gr.Checkbox(
                    label="Show the similarity ranking side by side", elem_id="search-compare"
                )
                k = gr.Slider(label="Top k", minimum=1, maximum=MAX_K, value=10, step=1)
            status = gr.HTML(elem_id="bootstrap-status")
            timer = gr.Timer(1.0)
    with gr.Row():
        gallery = gr.Gallery(
            label="Top hits (click one for its report)",
            columns=6,
            height=270,
            elem_id="search-hits",
            allow_preview=False,
            scale=2,
        )
        compare_gallery = gr.Gallery(
            label="Similarity ranking of the same query",
            columns=3,
            height=270,
            elem_id="search-compare-hits",
            allow_preview=False,
            visible=False,
            scale=1,
        )
    with gr.Row():
        with gr.Column(scale=1):
            preview = gr.Image(label="Uploaded study", interactive=False, height=256, visible=False)
            volume_mode = gr.Radio(
                VOLUME_CHOICES, value="volume", label="Search with", visible=False
            )
            slice_slider = gr.Slider(
                label=_slider_label("volume"), minimum=0, maximum=1, step=1, visible=False
            )
        large = gr.Image(label="Selected hit", interactive=False, height=320)
        detail = gr.HTML(elem_id="search-detail")
    # An upload lives in memory for its session only; an idle one is dropped after 20 minutes.
    upload_state = gr.State(None, time_to_live=UPLOAD_TTL_S)
    hits_state = gr.State([])

    hops = services.settings.trusted_proxy_hops  # TRUST_PROXY_HEADERS (access.limits)

    def _search(q, up, m, ix, kk, rk, cmp, mode, position, request: gr.Request):
        outcome = run_search(
            services,
            q,
            up,
            m,
            ix,
            kk,
            rk,
            bool(cmp),
            mode,
            position,
            client_key(request, hops),
            limits,
        )
        return (
            outcome.parsed_html,
            outcome.notice,
            outcome.gallery,
            gr.update(value=outcome.compare_gallery, visible=bool(cmp)),
            outcome.hits,
            None,
            "",
        )

    def _upload(f, request: gr.Request):
        state, shown, slider, mode, message = on_upload(
            services, f, client_key(request, hops), limits
        )
        return state, shown, slider, mode, message, gr.update(visible=state is not None)

    def _clear():
        hidden = gr.update(visible=False)
        return None, gr.update(value=None, visible=False), hidden, hidden, "", hidden

    def _select(hits, evt: gr.SelectData, request: gr.Request):
        position = evt.index if isinstance(evt.index, int) else None
        image, body = hit_detail(hits, position)
        if body:  # a record shown: a read of a real study is audited (api/audit.py)
            audit.ui_record(services, client_key(request, hops), hits[position])
        return image, body

    outputs = [parsed, notice, gallery, compare_gallery, hits_state, large, detail]
    inputs = [query, upload_state, model, index, k, ranking, compare, volume_mode, slice_slider]
    search_events = dict(concurrency_limit=SEARCH_CONCURRENCY, concurrency_id="search")
    button.click(
        _search, inputs, outputs, api_name="search_page", api_visibility="private", **search_events
    )
    query.submit(_search, inputs, outputs, api_visibility="private", **search_events)
    examples.load_input_event.then(
        _search, inputs, outputs, api_visibility="private", **search_events
    )
    upload_outputs = [upload_state, preview, slice_slider, volume_mode, notice, clear_upload]
    upload_file.upload(
        _upload,
        [upload_file],
        upload_outputs,
        api_visibility="private",
        concurrency_limit=UPLOAD_CONCURRENCY,
        concurrency_id="upload",
    )
    clear_upload.click(_clear, None, upload_outputs, api_visibility="private")
    slice_slider.change(on_slice, [upload_state, slice_slider], [preview], api_visibility="private")
    volume_mode.change(on_volume_mode, [volume_mode], [slice_slider], api_visibility="private")
    gallery.select(_select, [hits_state], [large, detail], api_visibility="private")
    index.change(
        lambda m, i: refresh_pickers(services, m, i),
        [model, index],
        [model, index],
        api_visibility="private",
    )
    timer.tick(
        lambda m, i: bootstrap_status(services, m, i),
        [model, index],
        [status, timer, model, index],
        api_visibility="private",
    )
    return {
        "query": query,
        "examples": examples,
        "upload": upload_file,
        "preview": preview,
        "slice": slice_slider,
        "volume_mode": volume_mode,
        "model": model,
        "index": index,
        "k": k,
        "ranking": ranking,
        "compare": compare,
        "button": button,
        "parsed": parsed,
        "notice": notice,
        "gallery": gallery,
        "compare_gallery": compare_gallery,
        "large": large,
        "detail": detail,
        "status": status,
        "timer": timer,
        "hits": hits_state,
        "upload_state": upload_state,
        "refresh_pickers": lambda m=None, i=None: refresh_pickers(services, m, i),
    }
