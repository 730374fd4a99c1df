"""Admin panel, study administration: a blinded study from a stored run, and its invitations.

Part of the admin panel (medheb_app.ui.admin_tab builds the tabs here inside its panel). Every
handler re-reads the signed admin cookie from its gr.Request: the panel being hidden is no
protection, since any handler is callable by fn_index from any session.
"""

from __future__ import annotations

import html
import logging
from typing import Any

import gradio as gr
import pandas as pd

from medheb_app.access.auth import Authenticator
from medheb_app.services import Services
from medheb_app.services.studies import (
    GOLD_SHARE_HELP,
    StudyError,
    creation_note,
    fraction,
    item_counts,
)
from medheb_app.ui import components as ui

NOT_ADMIN = "Sign in as admin first."

log = logging.getLogger(__name__)


def create_study(
    services: Services,
    is_admin: bool,
    run_id: Any,
    models: list[str] | None,
    name: str,
    n_items: float,
    raters_per_item: float,
    reveal: bool,
    seed: float,
    public_title: str = "",
    open_enrolment: bool = False,
    gold_share: float = 0.0,
    who: str = "admin",
) -> str:
    """Create a blinded study from a stored benchmark run's outputs. `name` is internal (admin
    pages only); raters see `public_title`. `gold_share` (a fraction, as in the CLI) of the
    items are quality-control items (one side the oracle's top-3), indistinguishable to
    raters."""
    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    if run_id in (None, ""):
        return ui.notice_html("error", "Pick a finished benchmark run.")
    try:
        summary = services.runs.summary(int(run_id))
        created = services.studies.create(
            name or "",
            list(models or []),
            summary,
            n_items=int(n_items),
            raters_per_item=int(raters_per_item),
            reveal_after_vote=bool(reveal),
            seed=int(seed),
            public_title=public_title or "",
            open_enrolment=bool(open_enrolment),
            gold_share=fraction(gold_share or 0.0, "gold share", 0.5),
        )
    except (ValueError, KeyError, FileNotFoundError) as error:
        return ui.notice_html("error", str(error))
    services.audit.admin("study-create", f"study {created.id}", who=who)
    withheld = (
        f" {len(created.withheld)} queries could not be shown and were withheld."
        if created.withheld
        else ""
    )

    return ui.notice_html(
        "info",
        f"Created study {created.id} ({item_counts(created.n_items, created.n_gold)})."
        f"{withheld} Issue invitations "
        "under Invitations; raters sign in on the /rate page. "
        + creation_note(created.n_items, int(raters_per_item)),
    )


def study_picker(services: Services) -> list[tuple[str, int]]:
    """Every study by internal name and public title (admin only)."""
    return [
        (f"Study {s['id']}: {s['name']} · raters see {s.get('public_title') or '-'!r}", s["id"])
        for s in services.studies.list()
    ]


def issue_invitations(
    services: Services, is_admin: bool, study_id: Any, n: float, label: str, who: str = "admin"
) -> str:
    """New invitations, each shown ONCE as a link and a short code (stored hashed)."""
    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    if study_id in (None, ""):
        return ui.notice_html("error", "Pick a study.")
    try:
        made = services.studies.invite(int(study_id), int(n or 1), label or "")
    except StudyError as error:
        return ui.notice_html("error", str(error))
    services.audit.admin("study-invite", f"study {int(study_id)}: {len(made)} invitations", who=who)
    rows = "".join(
        f"<tr><td>{i.id}</td><td><code>{html.escape(i.link)}</code></td>"
        f"<td><code>{html.escape(i.code)}</code></td><td>{html.escape(i.label)}</td></tr>"
        for i in made
    )
    return ui.notice_html(
        "warning",
        "Copy these now: they are shown only once (the server keeps only their hashes). "
        "Prefix each link with this server's address.",
    ) + (
        '<table id="admin-invitations"><tr><th>id</th><th>link</th><th>code</th>'
        f"<th>label</th></tr>{rows}</table>"
    )


def invitation_table(services: Services, is_admin: bool, study_id: Any) -> pd.DataFrame | None:
    if not is_admin or study_id in (None, ""):
        return None
    rows = [
        {
            "id": i.id,
            "label": i.label,
            "used": i.used,
            "rater": i.display_name,
            "revoked": i.revoked,
            "created": i.created_at,
        }
        for i in services.studies.invitations(int(study_id))
    ]
    return pd.DataFrame(rows, columns=["id", "label", "used", "rater", "revoked", "created"])


def revoke(services: Services, is_admin: bool, invitation_id: Any, who: str = "admin") -> str:
    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    if not invitation_id:
        return ui.notice_html("error", "Type the id of the invitation to revoke.")
    try:
        info = services.studies.revoke_invitation(int(invitation_id))
    except StudyError as error:
        return ui.notice_html("error", str(error))
    services.audit.admin("study-revoke-invitation", f"invitation {info.id}", who=who)
    return ui.notice_html("info", f"Invitation {info.id} revoked; its rater can no longer vote.")


def build_study_admin(services: Services, auth: Authenticator) -> dict[str, Any]:
    """The "Create study" and "Invitations" tabs and their handlers; returns the pickers the
    panel fills when an admin opens the page."""
    with gr.Tab("Create study"):
        run = gr.Dropdown(label="Benchmark run", choices=[])
        study_models = gr.Dropdown(label="Models to compare", choices=[], multiselect=True)
        study_name = gr.Textbox(label="Internal study name (admins only)")
        public_title = gr.Textbox(
            label="Public title (what raters see: do not name the models)",
            elem_id="admin-public-title",
        )
        open_enrolment = gr.Checkbox(
            label="Open enrolment (anyone with the /rate address can join as a new rater)",
            value=False,
        )
        gold = gr.Number(
            label=f"Gold (quality-control) items, share of all items ({GOLD_SHARE_HELP})",
            value=0,
            minimum=0,
            maximum=0.5,
            step=0.05,
            elem_id="admin-gold-share",
        )
        n_items = gr.Number(label="Queries", value=30, precision=0, minimum=1)
        raters = gr.Number(label="Raters per item", value=1, precision=0, minimum=1)
        reveal = gr.Checkbox(
            label="Reveal model names after each vote (teaches raters each model's look)",
            value=False,
        )
        seed = gr.Number(label="Seed", value=0, precision=0)
        create = gr.Button("Create study")
        study_note = gr.HTML()
    with gr.Tab("Invitations"):
        with gr.Row():
            invite_study = gr.Dropdown(label="Study", choices=[], elem_id="admin-invite-study")
            refresh_studies = gr.Button("Refresh", size="sm")
        with gr.Row():
            n_invites = gr.Number(label="How many", value=1, precision=0, minimum=1)
            invite_label = gr.Textbox(label="Label (e.g. the rater's initials)")
            invite = gr.Button("Issue invitations", elem_id="admin-invite")
        invite_note = gr.HTML(elem_id="admin-invite-note")
        invitations = gr.Dataframe(label="Invitations", interactive=False)
        with gr.Row():
            revoke_id = gr.Number(label="Invitation id", precision=0)
            revoke_button = gr.Button("Revoke", variant="stop")

    def _run_models(run_id, request: gr.Request):
        if run_id in (None, "") or not auth.is_admin(request):
            return gr.update(choices=[], value=[])
        try:
            names = list(services.runs.summary(int(run_id)).models)
        except (KeyError, OSError, ValueError) as error:  # an unknown run, or its files gone
            log.warning("run %s has no readable summary for the study picker: %s", run_id, error)
            return gr.update(choices=[], value=[])
        return gr.update(choices=names, value=names[:2])

    def _create(request: gr.Request, *values):
        who = auth.admin_identity(request)
        return create_study(services, auth.is_admin(request), *values, who=who)

    def _studies(request: gr.Request):
        if not auth.is_admin(request):
            return gr.update(choices=[], value=None)
        choices = study_picker(services)
        return gr.update(choices=choices, value=choices[-1][1] if choices else None)

    def _invite(study_id, n, label, request: gr.Request):
        admin = auth.is_admin(request)
        note = issue_invitations(services, admin, study_id, n, label, auth.admin_identity(request))
        return note, invitation_table(services, admin, study_id)

    def _invitations(study_id, request: gr.Request):
        return invitation_table(services, auth.is_admin(request), study_id)

    def _revoke(study_id, invitation_id, request: gr.Request):
        admin = auth.is_admin(request)
        note = revoke(services, admin, invitation_id, auth.admin_identity(request))
        return note, invitation_table(services, admin, study_id)

    refresh_studies.click(_studies, None, [invite_study], api_visibility="private")
    invite.click(
        _invite,
        [invite_study, n_invites, invite_label],
        [invite_note, invitations],
        api_visibility="private",
    )
    invite_study.change(_invitations, [invite_study], [invitations], api_visibility="private")
    revoke_button.click(
        _revoke, [invite_study, revoke_id], [invite_note, invitations], api_visibility="private"
    )
    run.change(_run_models, [run], [study_models], api_visibility="private")
    create.click(
        _create,
        [
            run,
            study_models,
            study_name,
            n_items,
            raters,
            reveal,
            seed,
            public_title,
            open_enrolment,
            gold,
        ],
        [study_note],
        api_visibility="private",
    )
    return {"run": run, "invite_study": invite_study}
