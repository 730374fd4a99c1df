"""Search tab: a compositional text query or an uploaded study against a prebuilt index.

Shows how the query was parsed (wanted / excluded findings, words not understood), the top-k
hits with their rank, score and whether each meets the query (a red mark on every hard
negative, CXR-Retrieve section 3.2), and on request the similarity ranking beside the default
logic-aware one. Callbacks are plain functions of `Services` so tests call them without a
browser; the layout only wires them.

Every handler here is reachable by any anonymous session through the queue, so each one
re-checks what it is given on the server: only built (model, index) pairs are searched
(medheb_app.search.offered), searches and uploads are rate-limited per client, uploads are
read into memory and their temporary file is deleted at once, and no message ever shows a file
name, a path or an exception class.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
import threading
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np

from medheb_app.access.limits import RateLimiter, client_key
from medheb_app.evidence.study import EvidenceError, Study
from medheb_app.query.parser import MAX_QUERY_CHARS, QueryTooLong
from medheb_app.services import Services
from medheb_app.ui import components as ui
from medheb_app.ui.query_reading import reading_html

log = logging.getLogger(__name__)
MAX_K = 50
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
RANKING_CHOICES = [
    ("Best for this index (logic-aware where it has probes)", "auto"),
    ("Similarity (cosine to the query)", "similarity"),
]
VOLUME_CHOICES = [("the whole volume", "volume"), ("this slice only", "slice")]
UPLOAD_TYPES = [".png", ".jpg", ".jpeg", ".dcm", ".dicom", ".zip", ".nii", ".gz", ".npy"]
# Suffixes a reader needs to see; everything else of the uploaded name is dropped.
_KEPT_SUFFIXES = (".nii.gz", ".nii", ".zip", ".dcm", ".dicom", ".png", ".jpg", ".jpeg", ".npy")
BUSY = "The server is busy with other requests; try again in a minute."
GENERIC_FAILURE = (
    "The search could not be completed on the server; try again, or pick another model or index."
)
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.@+-]+){2,}[\\/]?")
_CLASS = re.compile(r"\b[A-Z][A-Za-z]*(?:Error|Exception|Warning)\b:?\s*")


@dataclass
class TabLimits:
    """Per-client limits and the upload slots (each slot decodes one upload in memory)."""

    searches: RateLimiter = field(default_factory=lambda: RateLimiter(30, 60.0, lockout_s=60.0))
    uploads: RateLimiter = field(default_factory=lambda: RateLimiter(6, 600.0, lockout_s=600.0))
    upload_slots: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(UPLOAD_SLOTS)
    )


# Concurrency: Gradio runs at most this many of each event at once; an upload beyond the free
# decode slots is told the server is busy instead of queueing behind 480 MB zips.
SEARCH_CONCURRENCY = 2
UPLOAD_CONCURRENCY = 4
UPLOAD_SLOTS = 4
UPLOAD_TTL_S = 1200


@dataclass
class Upload:
    """An uploaded study held in memory for the session (its temporary file is gone)."""

    study: Study
    pixels: np.ndarray
    form: str
    modality: str
    synthetic: bool = False

    @property
    def path(self) -> None:  # kept for callers of the old Upload: there is no file any more
        return None


@dataclass
class SearchOutcome:
    """Everything one search shows: parsed query, galleries, hits and messages."""

    parsed_html: str = ""
    gallery: list[tuple[np.ndarray, str]] = field(default_factory=list)
    hits: list[dict[str, Any]] = field(default_factory=list)
    notice: str = ""
    compare_gallery: list[tuple[np.ndarray, str]] = field(default_factory=list)


def user_message(error: Exception | str) -> str:
    """One line a user can act on: never a traceback, an exception class name or a path."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    text = _PATH.sub("(a server file)", text)
    text = _CLASS.sub("", text).strip()
    return text or GENERIC_FAILURE


def error_outcome(text: str, kind: str = "error") -> SearchOutcome:
    return SearchOutcome(notice=ui.notice_html(kind, user_message(text)))


# ---------------------------------------------------------------- pickers


def _offer(services: Services) -> dict[str, list[str]]:
    from medheb_app.search import offered

    return offered(services.settings)


def index_choices(services: Services) -> list[str]:
    """The indices an anonymous visitor may search: those built for at least one listed model."""
    return list(_offer(services)) or [services.settings.default_index]


def model_choices(services: Services, index: str | None = None) -> list[str]:
    """Listed models with `index` built, strongest first (read fresh: new builds appear)."""
    from medheb_app.search import default_model

    index = index or services.settings.default_index
    return _offer(services).get(index, []) or [default_model(services.settings, index)]


def _pick(current: str | None, choices: list[str], default: str) -> str:
    if current in choices:
        return str(current)
    return default if default in choices else choices[0]


def refresh_pickers(services: Services, model: str | None = None, index: str | None = None):
    """Dropdown updates with the offered indices and the models built for the chosen one,
    keeping the user's choice when it is still offered, else the strongest model."""
    from medheb_app.search import default_model

    indices = index_choices(services)
    chosen_index = _pick(index, indices, services.settings.default_index)
    models = model_choices(services, chosen_index)
    best = default_model(services.settings, chosen_index)
    return (
        gr.update(choices=models, value=_pick(model, models, best)),
        gr.update(choices=indices, value=chosen_index),
    )


# ---------------------------------------------------------------- upload


def _private_name(original: Path) -> Path:
    """The upload renamed in place to 'upload' plus the suffix its reader needs, so no message
    can carry the visitor's file name and no other session can guess the path."""
    lower = original.name.lower()
    suffix = next((s for s in _KEPT_SUFFIXES if lower.endswith(s)), "")
    return original.with_name(f"upload-{uuid.uuid4().hex}{suffix}")


def _discard(path: Path) -> None:
    """Delete an upload's temporary file and its folder when Gradio made one just for it."""
    with contextlib.suppress(OSError):
        path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # only succeeds when empty: Gradio's per-upload hash folder


def _in_upload_folder(path: Path) -> bool:
    """Whether Gradio made this file for an upload (its cache folder): only those are consumed."""
    from gradio.utils import get_upload_folder

    try:
        return path.resolve().is_relative_to(Path(get_upload_folder()).resolve())
    except (OSError, ValueError):
        return False


def _drop_refused(path: Path) -> None:
    """A refused upload's temporary file is deleted too (never a file outside Gradio's folder)."""
    if _in_upload_folder(path) and path.is_file():
        _discard(path)


def _read_upload(services: Services, file_path: str) -> Study:
    """The upload as an in-memory Study. A file in Gradio's upload folder is first renamed to a
    random private name (no message can carry the visitor's file name, no other session can
    reuse its path) and deleted right after reading, whatever happens."""
    from medheb_app.evidence.readers import study_from_file

    original = Path(file_path)
    if original.is_dir():
        raise EvidenceError("Upload one file (a zip for a DICOM series).")
    target = original
    if _in_upload_folder(original):
        target = _private_name(original)
        try:
            original.rename(target)
        except OSError:
            raise EvidenceError("The upload could not be read; upload it again.") from None
    try:
        study = study_from_file(target, max_bytes=services.settings.max_upload_bytes)
        study.load_pixels()
    finally:
        if target != original:
            _discard(target)
    return replace(study, path=None)


def load_upload(
    services: Services,
    file_path: str | None,
    client: str = "local",
    limits: TabLimits | None = None,
) -> tuple[Upload | None, str]:
    """Read an uploaded file into memory (its temporary file is deleted), or return a message
    saying why it cannot be read. Never echoes the file's name. `limits` are the page's
    per-client limits (None: a direct call, rate-limited by nothing but the decode slots)."""
    if not file_path:
        return None, ""
    decision = limits.uploads.hit(client) if limits is not None else None
    limits = limits or _DIRECT_CALLS
    if decision is not None and not decision.allowed:
        _drop_refused(Path(file_path))
        return None, ui.notice_html("error", decision.message("uploads"))
    if not limits.upload_slots.acquire(blocking=False):
        _drop_refused(Path(file_path))
        return None, ui.notice_html("warning", BUSY)
    try:
        study = _read_upload(services, file_path)
    except EvidenceError as error:
        return None, ui.notice_html("error", user_message(error))
    except Exception:  # a reader bug must not show a traceback to a clinician
        log.exception("an upload could not be read")
        return None, ui.notice_html(
            "error", "This file could not be read; check it is an image, DICOM, zip or NIfTI."
        )
    finally:
        limits.upload_slots.release()
    pixels = study.pixels
    if pixels is None:
        return None, ui.notice_html("error", "This file holds no image or volume to search with.")
    upload = Upload(study, pixels, study.form, study.modality, bool(study.synthetic))
    if study.form == "3d":
        what = f"{study.modality} volume, {pixels.shape[0]} slices"
        total = study.meta.get("NumberOfSlices")
        if study.meta.get("SlicesKept") and total:
            what += f" (sampled evenly from {total} to fit memory)"
    else:
        what = f"{study.modality} image, {pixels.shape[1]}x{pixels.shape[0]}"
    return upload, ui.notice_html("info", f"Loaded the upload: {what}.")


def _slider_label(mode: str | None) -> str:
    if mode == "slice":
        return "Slice shown: the search uses this slice only"
    return "Slice shown: the search uses the whole volume"


def on_upload(
    services: Services,
    file_path: str | None,
    client: str = "local",
    limits: TabLimits | None = None,
):
    """Upload -> (state, preview, slice slider, volume mode radio, message)."""
    upload, message = load_upload(services, file_path, client, limits)
    if upload is None:
        hidden = gr.update(visible=False)
        return None, gr.update(value=None, visible=False), hidden, hidden, message
    preview = ui.render_image(upload.pixels, upload.synthetic)
    if upload.form == "3d":
        depth = int(upload.pixels.shape[0])
        slider = gr.update(
            visible=True,
            minimum=0,
            maximum=depth - 1,
            value=depth // 2,
            step=1,
            label=_slider_label("volume"),
        )
        mode = gr.update(visible=True, value="volume")
    else:
        slider = gr.update(visible=False, value=0)
        mode = gr.update(visible=False, value="volume")
    return upload, gr.update(value=preview, visible=True), slider, mode, message


def on_slice(upload: Upload | None, index: float | None):
    if upload is None or upload.form != "3d":
        return gr.update()
    return ui.render_image(upload.pixels, upload.synthetic, int(index or 0))


def on_volume_mode(mode: str | None):
    return gr.update(label=_slider_label(mode))


def query_study(upload: Upload, mode: str | None, slice_index: float | None) -> Study:
    """What the search embeds: the whole upload, or for a volume in 'slice' mode the slice
    shown, as a 2D study of the same modality."""
    if upload.form != "3d" or mode != "slice":
        return upload.study
    depth = int(upload.pixels.shape[0])
    position = int(min(max(int(slice_index or 0), 0), depth - 1))
    return replace(
        upload.study,
        id=f"{upload.study.id}-slice{position}",
        form="2d",
        pixels=np.ascontiguousarray(upload.pixels[position]),
    )


# ---------------------------------------------------------------- search


def _bootstrap_notice(services: Services, index: str) -> str:
    """A message when the demo index is still being prepared (or failed), else ''."""
    if index != services.settings.default_index:
        return ""
    state = services.bootstrap.state()
    if state.error:
        return "The demo could not be prepared on this server; the other tabs still work."
    if not state.done and index not in _offer(services):
        percent = round(100 * state.fraction)
        return (
            f"The demo index is still being prepared ({percent}%: {state.message}). "
            "Try again shortly."
        )
    return ""


def hit_record(result: dict[str, Any], meta: dict[str, Any]) -> dict:
    """A hit joined with its index metadata (report text, boxes) for the detail view."""
    record = dict(result)
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
            log.exception("a hit's thumbnail is unreadable")
    tile = np.full((160, 160, 3), 200, dtype=np.uint8)
    return (
        ui.label_synthetic(tile, "NO IMAGE")
        if not record.get("synthetic")
        else (ui.label_synthetic(tile))
    )


def score_text(score: float, logic: bool) -> str:
    """A short score that separates hits: for logic-aware ranking p with enough digits to
    differ (0.973, 0.9991), and past p 0.9999 its log-odds (+9.8), where p's digits run out;
    for similarity the cosine."""
    if not logic:
        return f"cos {score:.3f}"
    p = math.exp(min(score, 0.0))
    if p < 0.99:
        return f"p {p:.3f}"
    if p < 0.9999:
        return f"p {p:.4f}"
    return f"log-odds {log_odds(score):+.1f}"


def log_odds(score: float) -> float:
    """log(p / (1 - p)) of a logic-aware score log p, computed without losing p near 1."""
    score = min(score, -1e-12)
    return score - math.log(-math.expm1(score))


def caption(rank: int, score: float, logic: bool, satisfies: bool | None, broken: list) -> str:
    """Gallery caption in the order a cut-off caption keeps: rank, whether the hit meets the
    query, score, then what it breaks."""
    parts = [f"#{rank}"]
    if satisfies is False or broken:
        parts += ["✗ violates", score_text(score, logic)]
        parts.append("; ".join(broken) if broken else "breaks the query")
    elif satisfies is True:
        parts += ["✓ meets", score_text(score, logic)]
    else:
        parts.append(score_text(score, logic))
    return " · ".join(parts)


def _ranked(services: Services, payload: dict[str, Any]) -> tuple[list[dict], list[tuple]]:
    """(hit records, gallery items) of one search response."""
    from medheb_app.index.catalog import load_index

    logic = payload.get("ranking") == "logic"
    constraints = payload.get("constraints") or {}
    positive = list(constraints.get("positive") or [])
    negative = list(constraints.get("negative") or [])
    items: dict[str, Any] = {}
    try:
        loaded = load_index(payload["index"], payload["model_fingerprint"], services.settings)
        items = loaded.items
    except Exception:  # the hits still show with what the search returned
        log.exception("metadata of index %s unavailable", payload.get("index"))
    hits, gallery = [], []
    for rank, result in enumerate(payload.get("results") or [], start=1):
        record = hit_record(result, items.get(str(result["id"]), {}))
        broken = ui.violation_words(record.get("violations") or {})
        record.update(rank=rank, broken=broken, positive=positive, negative=negative)
        if logic:
            record["p_query"] = math.exp(min(float(record["score"]), 0.0))
        text = caption(rank, float(record["score"]), logic, record.get("satisfies"), broken)
        hits.append(record)
        gallery.append((_thumbnail(record), text))
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
    """Call the search service as an anonymous request and shape its answer for the page.

    Only offered (model, index) pairs are searched; errors become messages. With `compare`,
    the similarity ranking of the same query is shown beside the default one."""
    from medheb_app.api import audit
    from medheb_app.search import SearchError, default_model, search

    query = (query or "").strip()
    index = index or services.settings.default_index
    model = model or default_model(services.settings, index)
    try:
        k = int(min(max(int(k or 10), 1), MAX_K))
    except (TypeError, ValueError):
        return error_outcome("Top k must be a whole number.")
    if ranking not in ("auto", "logic", "similarity"):
        return error_outcome("Pick a ranking from the list.")
    if not query and upload is None:
        return error_outcome("Type a query or upload a study.")
    if len(query) > MAX_QUERY_CHARS:  # answered at once, before any model or index work
        message = str(QueryTooLong(len(query)))
        return SearchOutcome(
            parsed_html=ui.constraints_html([], [], error=message),
            notice=ui.notice_html("error", message),
        )
    if upload is not None and not isinstance(upload, Upload):
        return error_outcome("Upload the study again.")
    if limits is not None:  # the page's handlers always pass theirs
        decision = limits.searches.hit(client)
        if not decision.allowed:
            return error_outcome(decision.message("searches"))
    waiting = _bootstrap_notice(services, index)
    if waiting:
        return error_outcome(waiting, "warning")
    study = query_study(upload, volume_mode, slice_index) if upload is not None else None

    def _one(order: str):
        return search(
            query_text=query or None,
            study=study if not query else None,
            model_spec=model,
            index=index,
            k=k,
            settings=services.settings,
            ranking=order,
            public=True,
        ).to_json()

    try:
        payload = _one(ranking)
        audit.ui_search(services, client, payload)  # real (non-synthetic) indices only
        other = _one("similarity") if compare and payload["ranking"] != "similarity" else None
    except (EvidenceError, SearchError) as error:
        return error_outcome(str(error))
    except Exception:
        log.exception("search failed")
        return error_outcome(GENERIC_FAILURE)
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
        notice=ui.notices_html(warnings=[user_message(w) for w in payload.get("warnings") or []]),
    )
    outcome.parsed_html += reading_html(query, payload) if query else ""  # issue 20 item 5
    if payload.get("ranking") == "logic":
        outcome.notice += ui.notice_html("info", LOGIC_NOTE)
    outcome.hits, outcome.gallery = _ranked(services, payload)
    if other is not None:
        _, outcome.compare_gallery = _ranked(services, other)
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
        image = _thumbnail(hit)
        verdict = (
            ui.notice_html("error", "Breaks the query: " + "; ".join(hit["broken"]))
            if hit.get("broken") or hit.get("satisfies") is False
            else ""
        )
        if "p_query" in hit and hit.get("split") == "train":
            verdict += ui.notice_html("info", IN_SAMPLE_NOTE)
        report = hit.get("text") or "No report text stored for this study."
        chips = ui.finding_chips_html(
            hit.get("findings") or {}, hit.get("positive") or [], hit.get("negative") or []
        )
        score = score_text(float(hit["score"]), "p_query" in hit)
        if "p_query" in hit:
            odds = log_odds(float(hit["score"]))
            score = f"p(meets the query) {hit['p_query']:.4f} · log-odds {odds:+.2f}"
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


# Direct calls (tests, scripts) share the decode slots but have no per-client rate limits.
_DIRECT_CALLS = TabLimits()


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

    def _select(hits, evt: gr.SelectData):
        return hit_detail(hits, evt.index if isinstance(evt.index, int) else None)

    outputs = [parsed, notice, gallery, compare_gallery, hits_state, large, detail]
    inputs = [query, upload_state, model, index, k, ranking, compare, volume_mode, slice_slider]
    search_events = dict(concurrency_limit=SEARCH_CONCURRENCY, concurrency_id="search")
    button.click(_search, inputs, outputs, api_name="search", **search_events)
    query.submit(_search, inputs, outputs, api_name=False, **search_events)
    examples.load_input_event.then(_search, inputs, outputs, api_name=False, **search_events)
    upload_outputs = [upload_state, preview, slice_slider, volume_mode, notice, clear_upload]
    upload_file.upload(
        _upload,
        [upload_file],
        upload_outputs,
        api_name=False,
        concurrency_limit=UPLOAD_CONCURRENCY,
        concurrency_id="upload",
    )
    clear_upload.click(_clear, None, upload_outputs, api_name=False)
    slice_slider.change(on_slice, [upload_state, slice_slider], [preview], api_name=False)
    volume_mode.change(on_volume_mode, [volume_mode], [slice_slider], api_name=False)
    gallery.select(_select, [hits_state], [large, detail], api_name=False)
    index.change(
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
