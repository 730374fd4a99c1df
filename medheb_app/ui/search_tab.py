"""Search tab: a compositional text query or an uploaded study against a prebuilt index.

Renders one answer of the search service (services.search, over medheb_app.search): how the
query was parsed (wanted / excluded findings, words not understood), the top-k hits with their
rank, score (p and log-odds come typed from the service) and whether each meets the query (a
red mark on every hard negative, CXR-Retrieve section 3.2), and on request the similarity
ranking beside the default logic-aware one. Callbacks are plain functions of `Services` so
tests call them without a browser; the layout only wires them.

Every handler here is reachable by any anonymous session through the queue: the service
checks every request (only offered (model, index) pairs, k, ranking, query length), searches
are rate-limited per client here, uploads go through ui/search_upload.py, and no message ever
shows a file name, a path or an exception class.
"""

from __future__ import annotations

import html
import logging
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np

from medheb_app.access.limits import client_key
from medheb_app.services import Services
from medheb_app.services.search import (
    MAX_PUBLIC_K,
    MAX_QUERY_CHARS,
    EvidenceError,
    Score,
    SearchError,
    SearchResponse,
)
from medheb_app.ui import components as ui
from medheb_app.ui import evidence_view
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
    """Everything one search shows: parsed query, hit lists (cards and their HTML), the hits'
    records for the detail pane, messages, and whether the index searched is synthetic."""

    parsed_html: str = ""
    gallery: list[HitCard] = field(default_factory=list)
    hits: list[dict[str, Any]] = field(default_factory=list)
    notice: str = ""
    compare_gallery: list[HitCard] = field(default_factory=list)
    gallery_html: str = ""
    compare_html: str = ""


def error_outcome(text: str, kind: str = "error") -> SearchOutcome:
    return SearchOutcome(notice=ui.notice_html(kind, user_message(text)))


# ---------------------------------------------------------------- pickers


def _offer(services: Services) -> dict[str, list[str]]:
    return services.search.offered()


def index_choices(services: Services) -> list[str]:
    """The indices an anonymous visitor may search: those built for at least one listed model."""
    return list(_offer(services)) or [services.settings.default_index]


def model_choices(services: Services, index: str | None = None) -> list[str]:
    """Listed models with `index` built, strongest first (read fresh: new builds appear)."""
    index = index or services.settings.default_index
    return _offer(services).get(index, []) or [services.search.default_model(index)]


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
    best = services.search.default_model(chosen_index)
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


THUMB_SIDE = 192  # a hit's thumbnail in the list (inlined PNG)
SCORE_LINES = {
    "log_p": (
        "Ranked logic-aware. Score p = estimated probability that the study has every wanted "
        "finding and none excluded; equal p are ordered by similarity to the query. Click a hit "
        "for its p."
    ),
    "cosine": (
        "Ranked by similarity. Score = cosine similarity to the query (1 = same direction), in "
        "exact order even where the digits shown are equal. Click a hit for its score."
    ),
}
P_LIMIT = -5e-7  # scores are stored to 6 decimals: from here on p is 1 at their precision
# A gallery click sends the card's position to the server as a select event (gr.SelectData).
SELECT_JS = """
element.addEventListener('click', (event) => {
  const card = event.target.closest && event.target.closest('.sr-hit');
  if (!card || !element.contains(card)) return;
  element.querySelectorAll('.sr-hit[aria-pressed=true]')
    .forEach((other) => other.setAttribute('aria-pressed', 'false'));
  card.setAttribute('aria-pressed', 'true');
  trigger('select', {index: Number(card.dataset.pos), value: card.dataset.rank, selected: true});
});
"""


@dataclass(frozen=True)
class HitCard:
    """One thumbnail of the hit list: rank and verdict under the image, the SYNTHETIC mark
    under the image (never over it), a training-study tag when the hit carries one."""

    rank: int
    caption: str
    uri: str | None
    synthetic: bool
    verdict: bool | None  # True meets the query, False breaks it, None not checked
    training: bool = False
    alt: str = ""


def is_training(hit: dict[str, Any]) -> bool:
    """Whether a hit says it is one of the index's training studies (the service's mark, by
    whichever name it carries it, or its split)."""
    for name in ("training", "is_training_study", "training_study"):
        if name in hit and hit[name] is not None:
            return bool(hit[name])  # the service's own mark decides where it gives one
    return hit.get("split") == "train"


def thumbnail_uri(path: str | None) -> str | None:
    """A hit's image (a volume's middle slice) as a small inline PNG, unmarked (the page puts
    the SYNTHETIC mark under it); rendered once per file version; None when unreadable."""
    if not path:
        return None
    try:
        return _thumbnail(path, Path(path).stat().st_mtime_ns)
    except OSError:
        return None  # the file is gone: the card says there is no image
    except EvidenceError:
        log.exception("a hit's thumbnail is unreadable")
        return None


@lru_cache(maxsize=512)
def _thumbnail(path: str, _mtime_ns: int) -> str:
    return evidence_view.png_data_uri(_pixels(path), max_side=THUMB_SIDE)


def _pixels(path: str) -> np.ndarray:
    return ui.render_image(evidence_view.file_pixels(Path(path)), synthetic=False)


def caption(rank: int, satisfies: bool | None, broken: list) -> str:
    """A thumbnail's caption, short enough for a phone: rank and ✓ (meets the query) or ✗
    (breaks it); the score and what is broken are in the detail pane."""
    if satisfies is False or broken:
        return f"#{rank} ✗"
    return f"#{rank} ✓" if satisfies is True else f"#{rank}"


def p_text(score: float) -> str:
    """p of a logic-aware score (log p, stored to 6 decimals) with the digits that separate
    hits: 3 decimals below 0.999, then 6, and "> 0.999999" where the stored precision ends."""
    if score >= P_LIMIT:
        return "> 0.999999"
    p = Score("log_p", score).p or 0.0
    return f"{p:.3f}" if p < 0.999 else f"{p:.6f}"


def score_text(score: Score) -> str:
    """The score in the one kind of its list: "p 0.973" (logic-aware) or "cos 0.412"."""
    if score.kind == "log_p":
        return f"p {p_text(score.value)}"
    return f"cos {score.value:.3f}"


def _ties(records: list[dict[str, Any]]) -> None:
    """Each record's `ties`: the ranks of the other hits whose score reads the same."""
    shown = [score_text(_score(record)) for record in records]
    for record, text in zip(records, shown, strict=True):
        record["ties"] = [
            other["rank"] for other, seen in zip(records, shown, strict=True)
            if seen == text and other is not record
        ]  # fmt: skip


def _score(record: dict[str, Any]) -> Score:
    return Score("log_p" if record.get("score_kind") == "log_p" else "cosine", record["score"])


def _ranked(answer: SearchResponse) -> tuple[list[dict], list[HitCard]]:
    """(hit records for the detail view, thumbnail cards) of one search answer."""
    hits, cards = [], []
    for hit in answer.results:
        record = asdict(hit)
        broken = hit.broken
        record.update(broken=broken, positive=answer.positive, negative=answer.negative)
        record["index"] = answer.index  # opening the hit is audited against it
        hits.append(record)
        cards.append(
            HitCard(
                hit.rank, caption(hit.rank, hit.satisfies, broken), thumbnail_uri(hit.path),
                hit.synthetic, False if broken else hit.satisfies, is_training(record),
                f"hit {hit.rank}",
            )
        )  # fmt: skip
    _ties(hits)
    return hits, cards


def card_html(card: HitCard, position: int) -> str:
    """One clickable thumbnail: the image, SYNTHETIC under it when generated, the caption."""
    if card.uri:
        picture = f'<img alt="{html.escape(card.alt)}" src="{card.uri}">'
    else:
        picture = '<div class="sr-noimage">no image</div>'
    mark = ui.SYNTHETIC_MARK if card.synthetic else ""
    css = {True: "good", False: "bad"}.get(card.verdict, "")
    tag = '<span class="sr-tag">training study</span>' if card.training else ""
    state = {True: "meets the query", False: "breaks the query"}.get(card.verdict, "")
    return (
        f'<button type="button" class="sr-hit{" violates" if card.verdict is False else ""}" '
        f'data-pos="{position}" data-rank="{card.rank}" aria-pressed="false" '
        f'title="#{card.rank}{" " + state if state else ""}">'
        f'<figure class="ev-figure">{picture}{mark}</figure>'
        f'<span class="sr-cap {css}">{html.escape(card.caption)}</span>{tag}</button>'
    )


def hits_html(cards: list[HitCard], kind: str | None) -> str:
    """The hit list: one line saying what its (one kind of) score means and how ties are
    ordered, then the thumbnails; '' without hits."""
    if not cards:
        return ""
    line = SCORE_LINES.get(kind or "cosine", SCORE_LINES["cosine"])
    items = "".join(card_html(card, position) for position, card in enumerate(cards))
    return f'<div class="sr-line">{html.escape(line)}</div><div class="sr-list">{items}</div>'


def index_is_synthetic(services: Services, index: str | None) -> bool:
    """Whether the index catalog says `index` holds generated studies only (every build of it
    for any model); an unknown index is not called synthetic."""
    name = index or services.settings.default_index
    builds = services.search.builds(name)
    return bool(builds) and all(bool(entry.get("synthetic")) for entry in builds)


def banner(services: Services, index: str | None) -> str:
    """The SYNTHETIC DEMO DATA banner when the selected index is synthetic, else nothing."""
    return ui.banner_html(index_is_synthetic(services, index))


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
        return services.search.public(
            query or None, study, model or None, index, 10 if k is None else k, order
        )

    try:
        answer = _one(ranking)
        services.audit.search(client, answer.to_json())  # real (non-synthetic) indices only
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
        notice=ui.warnings_html([user_message(w) for w in answer.warnings]),
    )  # fmt: skip
    if answer.query_kind == "text":  # issue 20 item 5
        outcome.parsed_html += reading_html(answer.query, answer.to_json())
    outcome.hits, outcome.gallery = _ranked(answer)
    kind = "log_p" if answer.ranking == "logic" else "cosine"
    outcome.gallery_html = hits_html(outcome.gallery, kind)
    if other is not None:
        _, outcome.compare_gallery = _ranked(other)
        outcome.compare_html = hits_html(outcome.compare_gallery, "cosine")
    elif compare:
        outcome.notice += ui.notice_html(
            "info", "This search is already ranked by similarity; nothing to compare with."
        )
    if not outcome.hits:
        outcome.notice += ui.notice_html("warning", "No results.")
    return outcome


def score_detail(hit: dict[str, Any]) -> str:
    """The selected hit's score in its list's one kind, what it means, and its ties."""
    score = _score(hit)
    if score.kind == "log_p":
        text = f"p(meets the query) {p_text(score.value)}"
        meaning = "estimated probability that it has every wanted finding and none excluded"
    else:
        text = f"cosine {score.value:.3f}"
        meaning = "similarity of its embedding to the query's"
    ties = hit.get("ties") or []
    if ties:
        others = ", ".join(f"#{rank}" for rank in ties[:8]) + (" …" if len(ties) > 8 else "")
        rule = "closer to the query (cosine) first" if score.kind == "log_p" else "exact cosine"
        meaning += f"; same score as {others} at these digits, ordered by {rule}"
    return f"{text} ({meaning})"


def large_html(path: str | None, synthetic: bool, alt: str) -> str:
    """The selected hit's image for the large pane: a small image upscaled by a whole factor
    (nearest neighbour) with its true size stated, the SYNTHETIC mark under it when generated."""
    if not path:
        return "<div><i>No image stored for this study.</i></div>"
    try:
        pixels = _pixels(path)
    except (OSError, EvidenceError):
        return "<div><i>This study's image cannot be read.</i></div>"
    height, width = pixels.shape[:2]
    shown, factor = ui.upscaled(pixels)
    size = f"original {width}x{height} px"
    note = f"shown at {factor}x; {size}" if factor > 1 else size
    mark = ui.SYNTHETIC_MARK if synthetic else ""
    return (
        f'<div class="sr-large"><figure class="ev-figure"><img class="ev-zoomable" '
        f'alt="{html.escape(alt)}" src="{evidence_view.png_data_uri(shown, max_side=2048)}" '
        f'title="Click to zoom">{mark}<div class="ev-caption sr-size">{note}</div>'
        "</figure></div>"
    )


def hit_detail(hits: list[dict[str, Any]] | None, position: int | None) -> tuple[str, str]:
    """(the selected hit large, its score, findings against the query and report) as HTML;
    ('', '') for a position that names no hit."""
    if not isinstance(hits, list) or not isinstance(position, int):
        return "", ""
    if not 0 <= position < len(hits) or not isinstance(hits[position], dict):
        return "", ""
    hit = hits[position]
    try:
        logic = hit.get("score_kind") == "log_p"
        verdict = (
            ui.notice_html("error", "Breaks the query: " + "; ".join(hit["broken"]))
            if hit.get("broken") or hit.get("satisfies") is False
            else ""
        )
        if logic and is_training(hit):
            in_sample = hit.get("p_fit") == "in-sample"
            verdict += ui.notice_html("info", IN_SAMPLE_NOTE if in_sample else OUT_OF_FOLD_NOTE)
        elif is_training(hit):
            verdict += ui.notice_html("info", "This study is one of the index's training studies.")
        report = hit.get("text") or "No report text stored for this study."
        chips = ui.finding_chips_html(
            hit.get("findings") or {}, hit.get("positive") or [], hit.get("negative") or []
        )
        image = large_html(hit.get("path"), bool(hit.get("synthetic")), f"hit {hit['rank']}")
        body = (
            f"<h3>#{hit['rank']} · {ui.html.escape(str(hit['id']))}</h3>"
            f'<div class="sr-score">{ui.html.escape(score_detail(hit))}</div>'
            f"<div>Source: {ui.html.escape(str(hit.get('source') or 'unknown'))}"
            f"{' · SYNTHETIC phantom' if hit.get('synthetic') else ''}</div>"
            f"{verdict}<div>{chips}</div>"
            f"<h4>Report</h4><p>{ui.html.escape(report)}</p>"
        )
    except (KeyError, TypeError, ValueError):
        return "", ""
    return image, body


def bootstrap_status(services: Services):
    """Progress HTML for the demo bootstrap and the timer: ticking while it runs, stopped
    when it ends (the pickers are refreshed after each tick: pickers_when_ready)."""
    state = services.bootstrap.state()
    if not state.done:
        bar = ui.progress_html(state.fraction, f"Preparing the demo: {state.message}")
        return bar, gr.Timer()
    note = (
        ui.notice_html("error", "The demo could not be prepared on this server.")
        if state.error
        else ""
    )
    return note, gr.Timer(active=False)


def pickers_when_ready(services: Services, model: str | None, index: str | None):
    """Once the bootstrap is done, the pickers refreshed from their values as the page shows
    them now (refresh_pickers), else left alone. Chained after the tick rather than answered
    by it: the tick's answer would carry the values it was sent with, up to a second old, and
    revert an index the user had picked meanwhile."""
    if not services.bootstrap.state().done:
        return gr.update(), gr.update()
    return refresh_pickers(services, model, index)


# ---------------------------------------------------------------- layout


def build_search_tab(services: Services, limits: TabLimits | None = None) -> dict[str, Any]:
    """Lay out the search tab inside the current Blocks context and wire its callbacks.

    Results come right under the query bar, so a search's hits are visible at 1400x900
    and on a 375x812 phone without scrolling; the upload preview appears only once there is
    an upload. The SYNTHETIC DEMO DATA banner shows only over a synthetic index."""
    limits = limits or TabLimits()
    banner_box = gr.HTML(banner(services, None), elem_id="search-banner")
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
            with gr.Row():
                # min_width=0: the buttons share one row on a phone too
                button = gr.Button(
                    "Search", variant="primary", elem_id="search-button", scale=2, min_width=0
                )
                upload_file = gr.UploadButton(
                    "Upload a study",
                    file_types=UPLOAD_TYPES,
                    type="filepath",
                    scale=1,
                    size="md",
                    elem_id="search-upload",
                    min_width=0,
                )
                clear_upload = gr.Button("Clear upload", scale=1, visible=False, min_width=0)
            # the hits come right under the query (on a phone too), their one line above them;
            # the messages follow (with no hits, an error sits right under the buttons)
            gallery = gr.HTML(elem_id="search-hits", js_on_load=SELECT_JS)
            notice = gr.HTML(elem_id="search-notice")
            examples = gr.Examples(
                [[text] for text in EXAMPLES],
                [query],
                label="Examples (click one to search)",
                elem_id="search-examples",
            )
            parsed = gr.HTML(elem_id="search-parsed")
        with gr.Column(scale=2):
            with gr.Row():
                # choices arrive on load; a custom value lets an API call pass the names the
                # page shows (the handler refuses any pair not offered, in words)
                model = gr.Dropdown(
                    label="Model", choices=[], allow_custom_value=True, elem_id="search-model"
                )
                index = gr.Dropdown(
                    label="Index", choices=[], allow_custom_value=True, elem_id="search-index"
                )
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
            compare_gallery = gr.HTML(elem_id="search-compare-hits", visible=False, js_on_load=None)
    with gr.Row():
        with gr.Column(scale=1):
            preview = gr.Image(label="Uploaded study", interactive=False, height=256, visible=False)
            volume_mode = gr.Radio(
                VOLUME_CHOICES, value="volume", label="Search with", visible=False
            )
            slice_slider = gr.Slider(
                label=_slider_label("volume"), minimum=0, maximum=1, step=1, visible=False
            )
        large = gr.HTML(elem_id="search-large")
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
            outcome.gallery_html,
            gr.update(value=outcome.compare_html, visible=bool(cmp)),
            outcome.hits,
            "",
            "",
            banner(services, ix),
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
            services.audit.record_opened(client_key(request, hops), hits[position])
        return image, body

    outputs = [parsed, notice, gallery, compare_gallery, hits_state, large, detail, banner_box]
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
        lambda m, i: (*refresh_pickers(services, m, i), banner(services, i)),
        [model, index],
        [model, index, banner_box],
        api_visibility="private",
    )
    timer.tick(
        lambda: bootstrap_status(services), None, [status, timer], api_visibility="private"
    ).then(
        lambda m, i: pickers_when_ready(services, m, i),
        [model, index],
        [model, index],
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
        "banner": banner_box,
        "status": status,
        "timer": timer,
        "hits": hits_state,
        "upload_state": upload_state,
        "refresh_pickers": lambda m=None, i=None: refresh_pickers(services, m, i),
    }
