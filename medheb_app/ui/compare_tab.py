"""Blinded comparison: a rater signs in and judges two anonymous top-3 lists, one item at a time.

Blinding lives on the server (FastChat's arena): the item's models, gold and task stay in the
database; the page holds only the rater id and an opaque item token in gr.State (server-side
session memory), and images are sent as rendered pixels, never as file paths. Model names
appear only after a vote, and only when the study allows it. Votes go through
medheb_app.study.session.record_vote, the single vote writer.
"""

from __future__ import annotations

import html
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gradio as gr
import numpy as np

from medheb_app.services import Services
from medheb_app.ui import components as ui

log = logging.getLogger(__name__)
CHOICE_LABELS = {"A": "A is better", "B": "B is better", "tie": "Tie", "both_poor": "Both poor"}


@dataclass
class Rater:
    """The signed-in rater, kept in server-side session state."""

    id: int
    name: str
    token: str
    study_id: int


@dataclass
class ItemRender:
    """One item as the page shows it; built only from the blinded ItemView."""

    token: str = ""
    query_html: str = ""
    query_image: np.ndarray | None = None
    side_a_html: str = ""
    side_a_images: list[tuple[np.ndarray, str]] = field(default_factory=list)
    side_b_html: str = ""
    side_b_images: list[tuple[np.ndarray, str]] = field(default_factory=list)
    progress_html: str = ""
    message: str = ""


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every model name replaced, so a study titled after its models stays blind."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = re.sub(re.escape(secret), "•••", text, flags=re.IGNORECASE)
    return text


def study_choices(services: Services) -> list[tuple[str, int]]:
    """Open studies as (public title, id): raters never see a study's internal name."""
    from medheb_app.study.items import list_open_studies

    return [(f"{s.title} (study {s.id})", s.id) for s in list_open_studies(services.store)]


def _image(services: Services, payload: dict[str, Any]) -> np.ndarray | None:
    """Pixels of a payload's image reference, rendered and SYNTHETIC-labelled when generated."""
    from medheb_app.evidence.readers import read_any

    path = payload.get("image") or payload.get("path")
    if not path or not Path(str(path)).is_file():
        return None
    try:
        pixels = read_any(Path(str(path))).pixels
    except Exception:
        log.exception("study image %s unreadable", path)
        return None
    synthetic = payload.get("synthetic")
    if synthetic is None:
        synthetic = Path(str(path)).resolve().is_relative_to(services.settings.data_dir.resolve())
    return ui.render_image(pixels, bool(synthetic))


def _text_html(payload: dict[str, Any], rank: int | None = None) -> str:
    text = payload.get("text") or payload.get("caption")
    if not text and not (payload.get("image") or payload.get("path")):
        text = f"item {payload.get('ref', '?')}"
    if not text:
        return ""
    head = f"<b>{rank}.</b> " if rank is not None else ""
    return f'<div class="medheb-candidate">{head}{html.escape(str(text))}</div>'


def _side(services: Services, payloads: list[dict[str, Any]]):
    texts, images = [], []
    for rank, payload in enumerate(payloads, start=1):
        texts.append(_text_html(payload, rank))
        picture = _image(services, payload)
        if picture is not None:
            images.append((picture, f"{rank}"))
    return "".join(texts), images


def render_item(services: Services, view: Any) -> ItemRender:
    """ItemView -> what the page shows. Only the view's blinded fields are read."""
    query_html = _text_html(view.query) or "<i>(image query)</i>"
    a_html, a_images = _side(services, list(view.side_a))
    b_html, b_images = _side(services, list(view.side_b))
    return ItemRender(
        token=view.token,
        query_html=f"<h3>Query</h3>{query_html}",
        query_image=_image(services, view.query),
        side_a_html=a_html,
        side_a_images=a_images,
        side_b_html=b_html,
        side_b_images=b_images,
        progress_html=ui.progress_html(
            view.done / max(view.total, 1), f"{view.done} of {view.total} items rated"
        ),
    )


def sign_in(services: Services, study_id: Any, code_or_name: str) -> tuple[Rater | None, str]:
    """Sign a rater in with their invitation code; in an open-enrolment study, text that is not
    an invitation code is taken as a display name for a fresh rater. A name never resumes
    anyone and no credential is printed on the page."""
    from medheb_app.study.identity import sign_in_open, sign_in_with_invitation
    from medheb_app.study.items import list_open_studies

    if study_id in (None, ""):
        return None, ui.notice_html("error", "Choose a study first.")
    open_ids = {s.id for s in list_open_studies(services.store) if s.open_enrolment}
    try:
        try:
            info = sign_in_with_invitation(services.store, code_or_name)
        except ValueError:
            if int(study_id) not in open_ids or not (code_or_name or "").strip():
                raise
            info = sign_in_open(services.store, int(study_id), code_or_name)
    except ValueError as error:
        return None, ui.notice_html("error", str(error))
    if info.study_id != int(study_id):
        return None, ui.notice_html("error", "This invitation is for another study.")
    rater = Rater(info.rater_id, info.display_name, info.resume_secret, info.study_id)
    return rater, ui.notice_html("info", f"Signed in as {info.display_name}.")


def next_item(services: Services, rater: Rater | None) -> ItemRender:
    """The rater's next blinded item, or a message when nothing is left."""
    from medheb_app.study.session import next_item as fetch

    if rater is None:
        return ItemRender(message=ui.notice_html("error", "Sign in first."))
    try:
        view = fetch(services.store, rater.study_id, rater.id)
    except ValueError as error:
        return ItemRender(message=ui.notice_html("error", str(error)))
    if view is None:
        return ItemRender(
            message=ui.notice_html("info", "All items are rated. Thank you!"),
            progress_html=ui.progress_html(1.0, "study complete for you"),
        )
    return render_item(services, view)


def vote(services: Services, rater: Rater | None, token: str, choice: str) -> tuple[bool, str]:
    """Record a vote; returns (locked, message with the reveal when the study allows it)."""
    from medheb_app.study.session import record_vote

    if rater is None or not token:
        return False, ui.notice_html("error", "There is no item to vote on; sign in first.")
    try:
        receipt = record_vote(services.store, token, rater.id, choice)
    except ValueError as error:
        return False, ui.notice_html("error", str(error))
    text = f"Vote recorded: {CHOICE_LABELS[choice]} ({receipt.done} of {receipt.total} done)."
    if receipt.can_reveal:
        from medheb_app.study.session import reveal

        revealed = reveal(services.store, token, rater.id)  # makes this vote final
        text += f" Side A was {revealed['A']}; side B was {revealed['B']}."
    return True, ui.notice_html("info", text)


def undo(services: Services, rater: Rater | None) -> tuple[bool, str]:
    """Retract the last vote within the window; returns (undone, message)."""
    from medheb_app.study.session import undo_last_vote

    if rater is None:
        return False, ui.notice_html("error", "Sign in first.")
    try:
        undo_last_vote(services.store, rater.study_id, rater.id)
    except ValueError as error:
        return False, ui.notice_html("error", str(error))
    return True, ui.notice_html("info", "Your last vote was withdrawn; rate the item again.")


# ---------------------------------------------------------------- layout


def build_compare_tab(services: Services) -> dict[str, Any]:
    """The rater's page: sign in, item, four vote buttons, undo, next."""
    gr.Markdown(
        "Two anonymous systems answered the same query. Judge which top-3 list is more useful. "
        "The systems are revealed only after your vote (if the study allows it)."
    )
    with gr.Row():
        study = gr.Dropdown(label="Study", choices=[], elem_id="rater-study")
        name = gr.Textbox(label="Your invitation code", elem_id="rater-name")
        sign_in_button = gr.Button("Sign in", elem_id="rater-sign-in")
    message = gr.HTML(elem_id="rater-message")
    progress = gr.HTML(elem_id="rater-progress")
    query_html = gr.HTML(elem_id="rater-query")
    query_image = gr.Image(label="Query image", interactive=False, visible=False, height=256)
    with gr.Row():
        with gr.Column():
            gr.Markdown("### Side A")
            a_images = gr.Gallery(label="A", columns=3, height=220, allow_preview=False)
            a_html = gr.HTML(elem_id="rater-side-a")
        with gr.Column():
            gr.Markdown("### Side B")
            b_images = gr.Gallery(label="B", columns=3, height=220, allow_preview=False)
            b_html = gr.HTML(elem_id="rater-side-b")
    with gr.Row():
        buttons = {
            choice: gr.Button(label, elem_id=f"vote-{choice}", interactive=False)
            for choice, label in CHOICE_LABELS.items()
        }
    with gr.Row():
        undo_button = gr.Button("Undo last vote", size="sm", elem_id="vote-undo")
        next_button = gr.Button("Next item", variant="primary", elem_id="vote-next")
    rater_state = gr.State(None)
    token_state = gr.State("")

    vote_buttons = list(buttons.values())
    item_outputs = [
        token_state,
        query_html,
        query_image,
        a_html,
        a_images,
        b_html,
        b_images,
        progress,
        message,
        *vote_buttons,
    ]

    def _show(rater):
        item = next_item(services, rater)
        enabled = gr.update(interactive=bool(item.token))
        return (
            item.token,
            item.query_html,
            gr.update(value=item.query_image, visible=item.query_image is not None),
            item.side_a_html,
            item.side_a_images,
            item.side_b_html,
            item.side_b_images,
            item.progress_html,
            item.message,
            *[enabled] * len(vote_buttons),
        )

    def _sign_in(study_id, who):
        rater, note = sign_in(services, study_id, who)
        shown = _show(rater) if rater is not None else (gr.update(),) * len(item_outputs)
        shown = list(shown)
        shown[8] = note + (shown[8] if isinstance(shown[8], str) else "")
        return rater, *shown

    def _vote(choice):
        def handler(rater, token):
            locked, note = vote(services, rater, token, choice)
            lock = gr.update(interactive=not locked)
            return note, *[lock] * len(vote_buttons)

        return handler

    def _undo(rater):
        undone, note = undo(services, rater)
        shown = list(_show(rater)) if undone else [gr.update()] * len(item_outputs)
        shown[8] = note
        return shown

    sign_in_button.click(_sign_in, [study, name], [rater_state, *item_outputs], api_name=False)
    for choice, button in buttons.items():
        button.click(
            _vote(choice), [rater_state, token_state], [message, *vote_buttons], api_name=False
        )
    next_button.click(_show, [rater_state], item_outputs, api_name=False)
    undo_button.click(_undo, [rater_state], item_outputs, api_name=False)
    return {
        "study": study,
        "name": name,
        "sign_in": sign_in_button,
        "message": message,
        "progress": progress,
        "buttons": buttons,
        "next": next_button,
        "undo": undo_button,
        "refresh_studies": lambda: gr.update(choices=study_choices(services)),
    }
