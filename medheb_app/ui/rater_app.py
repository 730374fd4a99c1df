"""The raters' page, its own Gradio app mounted at /rate: one blinded item at a time.

Its queue holds only these handlers, so a rater's session cannot call the workbench's analysis
or explorer by `fn_index`. Who the rater is comes from the signed HTTP-only cookie set by the
sign-in routes (medheb_app.ui.server), checked against the store in every handler; the page
keeps only an opaque item token. It links nowhere but the sign-in and sign-out routes.

Keys: 1 = A better, 2 = B better, 3 = tie, 4 = both poor, 5 = cannot judge (with a reason),
S = clinically significant, C = comment, U = undo (only in a study that never reveals the
names: the keys line and the Undo button follow the study's settings), Enter = next. After a
vote the identities (when the study reveals them, which makes the vote final) are shown over
each side and the next item follows on its own.
"""

from __future__ import annotations

import html
import json
import logging
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import gradio as gr

from medheb_app.access.auth import Authenticator
from medheb_app.services import Services
from medheb_app.services.raters import (
    CANNOT_JUDGE_REASONS,
    UNDO_WINDOW_SECONDS,
    ItemGoneError,
    StudyError,
)
from medheb_app.services.raters import INSTRUCTIONS as KIND_INSTRUCTIONS
from medheb_app.ui import components as ui
from medheb_app.ui import evidence_view

log = logging.getLogger(__name__)
CHOICE_LABELS = {
    "A": "A is better  [1]",
    "B": "B is better  [2]",
    "tie": "Tie  [3]",
    "both_poor": "Both poor  [4]",
    "cannot_judge": "Cannot judge  [5]",
}
KEYS = {
    "1": "vote-A",
    "2": "vote-B",
    "3": "vote-tie",
    "4": "vote-both_poor",
    "5": "vote-cannot_judge",
    "s": "rater-significant",
    "S": "rater-significant",
    "c": "rater-comment",
    "C": "rater-comment",
    "u": "vote-undo",
    "U": "vote-undo",
    "Enter": "vote-next",
}
NEXT_WITHOUT_VOTE = (
    "This item has no vote yet: choose A better, B better, tie or both poor (keys 1-4) first; "
    "Next moves on after a vote."
)
REVEAL_PAUSE_MS = 1500  # the reveal stays over each side this long
SIGNED_OUT_HERE = (
    "You signed out. To rate again, open the link from your invitation, or "
    '<a href="/auth/rater">sign in with its code</a>.'
)
NOT_SIGNED_IN = (
    "You are not signed in. Open the link from your invitation, or "
    '<a href="/auth/rater">sign in with its code</a>.'
)
# What "better" means, per task family, for items made before each item stored its own line
# (study.instructions, from the task's kind); MB-VR tasks are pairings (the same patient's
# other scan), never "the same finding".
INSTRUCTIONS = {
    family: KIND_INSTRUCTIONS[kind]
    for family, kind in {
        "I-I": "finding",
        "MB-VR": "pairing-scan",
        "I-Lab": "label",
        "I-Rep": "report",
        "T-I": "finding-text",
        "T-T": "text",
        "VQA": "answer",
        "VG": "region",
    }.items()
}
DEFAULT_INSTRUCTION = "Better = its top-3 list is more useful for the query."

RATER_CSS = """
#rater-sides{flex-wrap:nowrap !important;gap:8px}
#rater-sides > div{min-width:0 !important}
#rater-votes{position:fixed !important;left:0;right:0;bottom:0;z-index:20;margin:0 !important;
 background:var(--background-fill-primary);padding:6px 12px;border-top:1px solid #d1d5db;
 box-shadow:0 -2px 6px rgba(0,0,0,.12);flex-wrap:wrap;gap:6px}
#rater-votes button{min-width:0;flex:1 1 14%}
.gradio-container{padding-bottom:96px !important}
.ev-mark{color:#ffffff !important;background:#7a1020 !important}
.rater-side-head{font-weight:700;font-size:15px;margin:0 0 4px}
.rater-reveal{background:#0f5132;color:#fff !important;font-weight:700;padding:6px 8px;
 border-radius:6px;margin-bottom:6px}
.rater-instruction{font-size:14px;background:#fff7e0;color:#3b2f00;padding:4px 8px;
 border-radius:4px}
.rater-query .ev-figure img{width:min(100%, 420px);height:auto;max-height:420px}
.rater-query .ev-list .ev-item{flex:0 1 420px}
@media (max-width: 700px){
 #rater-sides .ev-list{flex-direction:column}
 .ev-figure img{max-height:150px}
 .rater-query .ev-figure img{max-height:200px}
 .ev-text{max-height:7em;font-size:12px}
 #rater-votes{position:fixed;left:0;right:0;bottom:0;padding:6px 8px;margin:0 !important;
  box-shadow:0 -2px 6px rgba(0,0,0,.15)}
 #rater-votes button{flex:1 1 45%;font-size:13px;padding:6px 2px;min-height:36px}
 .gradio-container{padding-bottom:150px !important}
}
"""

KEYBOARD_JS = f"""
const MEDHEB_KEYS = {json.dumps(KEYS)};
document.addEventListener('keydown', (event) => {{
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  const t = event.target;
  const tag = t && t.tagName ? t.tagName.toLowerCase() : '';
  if (tag === 'input' || tag === 'textarea' || tag === 'select' || (t && t.isContentEditable))
    return;
  const id = MEDHEB_KEYS[event.key];
  if (!id) return;
  const root = document.getElementById(id);
  const target = root && (root.tagName === 'BUTTON' ? root
    : root.querySelector('button, input[type=checkbox], textarea, input'));
  event.preventDefault();
  if (!target || target.disabled) return;
  const kind = target.tagName.toLowerCase();
  if (kind === 'textarea' || (kind === 'input' && target.type !== 'checkbox')) target.focus();
  else target.click();
}});
{evidence_view.SCRIPT}
"""

RATER_HEAD = (
    f"<style>{evidence_view.CSS}{RATER_CSS}</style>"
    f"<script>{KEYBOARD_JS}</script>"
    '<meta name="referrer" content="no-referrer">'
)


@dataclass
class Screen:
    """Everything the page shows for one state of the rater's session."""

    token: str = ""
    header: str = ""
    instruction: str = ""
    query: str = ""
    side_a: str = ""
    side_b: str = ""
    message: str = ""
    can_vote: bool = False
    can_next: bool = True  # False at the end: nothing is left that this rater may rate
    can_undo: bool = False  # the study keeps names hidden, so a vote may be withdrawn
    keys: str = ""


def _form(payload: dict[str, Any]) -> str:
    form = str(payload.get("form") or "text")
    if form == "mixed":
        media = payload.get("media") or {}
        return "region" if media.get("form") == "region" else "mixed"
    return form


def family_of(query: dict[str, Any], candidates: list[dict[str, Any]]) -> str:
    """The task family an item belongs to, read from the evidence forms the rater sees anyway
    (the item itself names no task): which instruction line to show."""
    q = _form(query)
    forms = {_form(c) for c in candidates}
    if q == "region" or "region" in forms:
        return "VG"
    if q == "mixed":
        return "VQA"
    if q == "volume" or "volume" in forms:
        return "MB-VR"
    if q == "image":
        if forms <= {"image"}:
            return "I-I"
        texts = [str(c.get("text") or "") for c in candidates]
        return "I-Lab" if all(len(t) <= 40 for t in texts) else "I-Rep"
    return "T-I" if forms & {"image"} else "T-T"


def instruction_for(family: str, line: str = "") -> str:
    """The instruction line: the item's own (from its task's kind), else the family's."""
    line = line or INSTRUCTIONS.get(family, DEFAULT_INSTRUCTION)
    return f'<div class="rater-instruction" id="rater-instruction-line">{html.escape(line)}</div>'


def keys_line(can_undo: bool, named_later: bool = False) -> str:
    """The keys a rater has in this study: U = undo only where a vote can be withdrawn (names
    never shown, or shown only once every rater of the item has voted: until then); where
    names are revealed right after each vote, that vote is final at once."""
    until = ", until the systems are named" if named_later else ""
    undo = f"U = undo (within {UNDO_WINDOW_SECONDS:g} s of a vote{until}), " if can_undo else ""
    final = (
        "" if can_undo else " Each vote is final: the two systems' names are shown right after it."
    )
    return (
        '<div id="rater-keys-line">Two anonymous systems answered the same query. Judge which '
        "top-3 list is better for it. Click an image to see it at full resolution. Keys: "
        "1 = A better, 2 = B better, 3 = tie, 4 = both poor, 5 = cannot judge (pick a reason "
        f"first), S = clinically significant, C = comment, {undo}Enter = next; Tab reaches "
        f"every control.{final}</div>"
    )


def _undo_rule(services: Services, study_id: int) -> tuple[bool, bool]:
    """(can undo, names come later): a vote can be withdrawn while its names are unseen, so
    in a study that never reveals them, or reveals them once all raters of an item voted
    (several raters per item); with one rater per item and reveal on, never."""
    try:
        study = services.raters.study(study_id)
    except StudyError:
        return False, False
    if not study.reveal_after_vote:
        return True, False
    later = int(study.raters_per_item or 1) > 1
    return later, later


def _side(label: str, body: str, reveal: str = "") -> str:
    banner = f'<div class="rater-reveal">{html.escape(reveal)}</div>' if reveal else ""
    return f'{banner}<div class="rater-side-head">Side {label}</div>{body}'


def _title(services: Services, study_id: int) -> str:
    for card in services.raters.public_studies():
        if int(card.id) == study_id:
            return str(card.title)
    return "Reader study"


def _header(title: str, done: int, total: int) -> str:
    bar = ui.progress_html(done / max(total, 1), f"{done} of {total} items rated")
    return (
        f'<div style="display:flex;justify-content:space-between;gap:8px;align-items:center">'
        f"<b>{html.escape(title)}</b>"
        f'<a href="/auth/signout" id="rater-sign-out">Sign out</a></div>{bar}'
    )


def current_rater(services: Services, auth: Authenticator, request: Any):
    """(rater id, study id) from the request's cookie, checked against the store; or None."""
    claim = auth.rater(request)
    rater_id = services.raters.resolve(claim)
    if rater_id is None or claim is None:
        return None
    return rater_id, claim.study_id


def signed_out_html(services: Services, auth: Authenticator, request: Any) -> str:
    """Why this request has no rater: revoked, study closed, or simply not signed in."""
    reason = services.raters.signed_out_reason(auth.rater(request))
    if reason:
        return ui.notice_html("warning", reason)
    if auth.rater_state(request) == "signed out":  # the server ended this cookie's session
        # the text holds a link: its words are ours, so the box is built around it unescaped
        return f'<div class="medheb-notice info" role="status">{SIGNED_OUT_HERE}</div>'
    return _signed_out()


def render_view(view: Any) -> tuple[str, str, str]:
    """(query, side A, side B) HTML of an item; Unrenderable when any part cannot be shown."""
    query = evidence_view.render_payload(view.query, alt="query")
    side_a = evidence_view.render_list(list(view.side_a), "A")
    side_b = evidence_view.render_list(list(view.side_b), "B")
    return f'<div class="rater-query"><b>Query</b>{query}</div>', side_a, side_b


def next_screen(services: Services, auth: Authenticator, request: Any, note: str = "") -> Screen:
    """The rater's next item (or why there is none)."""
    who = current_rater(services, auth, request)
    if who is None:
        return Screen(message=signed_out_html(services, auth, request))
    rater_id, study_id = who
    title = _title(services, study_id)
    can_undo, named_later = _undo_rule(services, study_id)
    keys = {"can_undo": can_undo, "keys": keys_line(can_undo, named_later)}
    try:
        view = services.raters.next_item(study_id, rater_id)
    except StudyError as error:
        return Screen(message=note + ui.notice_html("error", str(error)))
    if view is None:
        counts = services.raters.progress(study_id, rater_id)
        done, total = int(counts.get("done", 0)), int(counts.get("total", 0))
        text, finished = end_message(counts)
        return Screen(
            header=_header(title, done, total),
            message=note + ui.notice_html("info", text),
            can_next=not finished,
            **keys,
        )
    try:
        query, side_a, side_b = render_view(view)
    except evidence_view.Unrenderable as error:
        # study-core withholds unrenderable items; if one slips through it is not shown
        log.error("study %s item withheld from rater %s: %s", study_id, rater_id, error)
        return Screen(
            header=_header(title, view.done, view.total),
            message=note + ui.notice_html("error", "This item cannot be shown; it was logged."),
            **keys,
        )
    return Screen(
        token=view.token,
        header=_header(title, view.done, view.total),
        instruction=instruction_for(
            family_of(view.query, [*view.side_a, *view.side_b]), getattr(view, "instruction", "")
        ),
        query=query,
        side_a=_side("A", side_a),
        side_b=_side("B", side_b),
        message=note
        + (ui.notice_html("info", notice) if (notice := getattr(view, "notice", "")) else ""),
        can_vote=True,
        **keys,
    )


def end_message(counts: dict[str, Any]) -> tuple[str, bool]:
    """(what to tell a rater who got no item, whether their part is over: no Next then)."""
    done = int(counts.get("done", 0))
    rated = f"You rated {done} item{'s' if done != 1 else ''}."
    if counts.get("study_complete"):
        return f"Study complete, thank you. {rated}", True
    if counts.get("capped"):
        return f"You reached this study's limit of votes per rater, thank you. {rated}", True
    if counts.get("finished"):
        return (
            f"You have rated every item open to you, thank you. {rated} Other raters are "
            "finishing the rest of the study.",
            True,
        )
    held = int(counts.get("held_by_others", 0))
    expires = counts.get("expires_at")
    when = ""
    if expires is not None:
        left = expires - datetime.now(UTC).replace(tzinfo=None)  # the store's naive UTC
        minutes = max(1, math.ceil(left.total_seconds() / 60))
        when = (
            f" If they do not vote, the first of their claims expires by "
            f"{expires:%H:%M} UTC (in about {minutes} min); press Next then."
        )
    items = f"{held} item{'s' if held != 1 else ''}"
    return (
        f"{rated} The {items} left for you {'are' if held != 1 else 'is'} being rated by "
        f"other raters right now.{when or ' Press Next in a few minutes.'}",
        False,
    )


def _signed_out() -> str:
    return f'<div class="medheb-notice medheb-info" role="status">{NOT_SIGNED_IN}</div>'


def cast_vote(
    services: Services,
    auth: Authenticator,
    request: Any,
    token: str,
    choice: str,
    reason: str | None = None,
    comment: str = "",
    significant: bool | None = None,
) -> tuple[bool, str, str, str]:
    """Record a vote (with the optional cannot-judge reason, comment and clinical-significance
    flag); returns (recorded, message, reveal over A, reveal over B)."""
    who = current_rater(services, auth, request)
    if who is None:
        return False, signed_out_html(services, auth, request), "", ""
    if not token:
        return False, ui.notice_html("error", "There is no item to vote on."), "", ""
    try:
        receipt = services.raters.vote(
            token,
            who[0],
            choice,
            reason=reason or None,
            comment=comment or "",
            significant=True if significant else None,
        )
    except ItemGoneError as error:  # e.g. the claim expired: move on to the next item
        return True, ui.notice_html("warning", str(error)), "", ""
    except StudyError as error:
        return False, ui.notice_html("error", str(error)), "", ""
    label = CHOICE_LABELS[choice].split("  [")[0]
    text = f"Vote recorded: {label} ({receipt.done} of {receipt.total} done)."
    if receipt.can_reveal:
        try:
            names = services.raters.reveal(token, who[0])  # makes this vote final
        except StudyError as error:
            return True, ui.notice_html("info", f"{text} {error}"), "", ""
        return (
            True,
            ui.notice_html("info", text + " The names are shown, so this vote is final."),
            f"A was {names['A']}",
            f"B was {names['B']}",
        )
    if receipt.named_later:
        text += " The systems are named once every rater of this item has voted."
    return True, ui.notice_html("info", text), "", ""


def undo_vote(services: Services, auth: Authenticator, request: Any) -> tuple[bool, str]:
    """Withdraw the rater's last vote in this study, if the study allows it (not revealed)."""
    who = current_rater(services, auth, request)
    if who is None:
        return False, signed_out_html(services, auth, request)
    rater_id, study_id = who
    try:
        services.raters.undo_last_vote(study_id, rater_id)
    except StudyError as error:
        return False, ui.notice_html("error", str(error))
    return True, ui.notice_html("info", "Your last vote was withdrawn; rate the item again.")


# ---------------------------------------------------------------- layout


def build_rater_app(services: Services, auth: Authenticator) -> gr.Blocks:
    """The /rate Blocks: header, instruction, query, two sides, a sticky row of buttons."""
    with gr.Blocks(title="Reader study", delete_cache=(600, 1800)) as blocks:
        header = gr.HTML(elem_id="rater-header")
        message = gr.HTML(elem_id="rater-message")
        instruction = gr.HTML(elem_id="rater-instruction")
        query = gr.HTML(elem_id="rater-query")
        with gr.Row(elem_id="rater-sides", equal_height=False):
            with gr.Column(min_width=0):
                side_a = gr.HTML(elem_id="rater-side-a")
            with gr.Column(min_width=0):
                side_b = gr.HTML(elem_id="rater-side-b")
        with gr.Row(elem_id="rater-votes"):
            buttons = {
                choice: gr.Button(label, elem_id=f"vote-{choice}", interactive=False)
                for choice, label in CHOICE_LABELS.items()
            }
            undo = gr.Button("Undo  [U]", size="sm", elem_id="vote-undo", visible=False)
            nxt = gr.Button("Next  [Enter]", variant="primary", size="sm", elem_id="vote-next")
        with gr.Row(elem_id="rater-options"):
            reason = gr.Radio(
                choices=[(label, key) for key, label in CANNOT_JUDGE_REASONS.items()],
                label="Cannot judge [5]? Say why first",
                elem_id="rater-reason",
            )
            comment = gr.Textbox(
                label="Comment (optional) [C]",
                max_length=1000,
                lines=1,
                elem_id="rater-comment",
            )
            significant = gr.Checkbox(
                label="The difference matters clinically [S]", elem_id="rater-significant"
            )
        keys = gr.HTML(elem_id="rater-keys")  # filled per study: U = undo only if it works
        token = gr.State("")
        advance = gr.State(False)
        vote_buttons = list(buttons.values())
        screen_outputs = [
            token, header, instruction, query, side_a, side_b, message, *vote_buttons, nxt,
            keys, undo,
        ]  # fmt: skip

        def _screen(screen: Screen) -> tuple:
            enabled = gr.update(interactive=screen.can_vote)
            return (
                screen.token,
                screen.header or gr.update(),
                screen.instruction,
                screen.query,
                screen.side_a,
                screen.side_b,
                screen.message,
                *[enabled] * len(vote_buttons),
                gr.update(visible=screen.can_next),
                screen.keys or gr.update(),
                gr.update(visible=screen.can_undo, interactive=screen.can_undo)
                if screen.keys
                else gr.update(),
            )

        def show(request: gr.Request):
            return _screen(next_screen(services, auth, request))

        def press_next(current: str, request: gr.Request):
            """Next: the next item, or, when the shown item has no vote yet, that item again
            with a line saying so (it used to reload silently)."""
            screen = next_screen(services, auth, request)
            if current and screen.token == current:
                screen.message = ui.notice_html("warning", NEXT_WITHOUT_VOTE) + screen.message
            return _screen(screen)

        def make_vote(choice: str):
            def vote(
                current: str,
                shown_a: str,
                shown_b: str,
                why: str | None = None,
                remark: str = "",
                matters: bool = False,
                request: gr.Request = None,
            ):
                ok, note, reveal_a, reveal_b = cast_vote(
                    services, auth, request, current, choice, why, remark, matters
                )
                locked = gr.update(interactive=not ok)
                if not ok:
                    return False, note, gr.update(), gr.update(), *[gr.update()] * len(vote_buttons)
                return (
                    True,
                    note,
                    _reveal(shown_a, reveal_a),
                    _reveal(shown_b, reveal_b),
                    *[locked] * len(vote_buttons),
                )

            return vote

        def after_vote(go: bool, request: gr.Request):
            if not go:
                return (False, *[gr.update()] * (len(screen_outputs) + 3))
            cleared = (None, "", False)  # reason, comment, flag start empty on the next item
            return (False, *_screen(next_screen(services, auth, request)), *cleared)

        def do_undo(request: gr.Request):
            undone, note = undo_vote(services, auth, request)
            if not undone:
                return (*[gr.update()] * 6, note, *[gr.update()] * (len(vote_buttons) + 3))
            return _screen(next_screen(services, auth, request, note))

        blocks.load(show, None, screen_outputs, api_visibility="private")
        for choice, button in buttons.items():
            button.click(
                make_vote(choice),
                [token, side_a, side_b, reason, comment, significant],
                [advance, message, side_a, side_b, *vote_buttons],
                api_visibility="private",
            ).then(
                None,
                None,
                None,
                js=f"() => new Promise((done) => setTimeout(done, {REVEAL_PAUSE_MS}))",
                api_visibility="private",
            ).then(
                after_vote,
                [advance],
                [advance, *screen_outputs, reason, comment, significant],
                api_visibility="private",
            )
        nxt.click(press_next, [token], screen_outputs, api_visibility="private")
        undo.click(do_undo, None, screen_outputs, api_visibility="private")
    return blocks


def _reveal(shown: str, reveal: str) -> str:
    if not reveal:
        return gr.update()
    return f'<div class="rater-reveal">{html.escape(reveal)}</div>{shown}'
