"""The admin tab's "API tokens" panel: issue a token (shown once), list and revoke tokens.

The same calls as `python -m medheb_app token ...` (services.tokens); every
handler checks the admin cookie itself, since any Gradio handler is callable by fn_index.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

from medheb_app.access.auth import Authenticator
from medheb_app.services import Services
from medheb_app.services.tokens import TOKEN_SCOPES, TokenError
from medheb_app.ui import components as ui

NOT_ADMIN = "Sign in as admin to manage API tokens."
TOKEN_COLUMNS = ("id", "name", "scope", "active", "prefix", "expires_at", "revoked_at")


def token_table(services: Services) -> pd.DataFrame:
    rows = [info.to_dict() for info in services.tokens.list()]
    return pd.DataFrame(
        [{key: row[key] for key in TOKEN_COLUMNS} for row in rows], columns=list(TOKEN_COLUMNS)
    )


def issue_token(
    services: Services,
    is_admin: bool,
    scope: str | None,
    days: float | None,
    name: str | None,
    who: str = "admin",
) -> tuple[str, str]:
    """(the secret or '', a notice). The secret is shown once and never stored in clear."""
    if not is_admin:
        return "", ui.notice_html("error", NOT_ADMIN)
    try:
        lifetime = float(days) if days not in (None, 0) else None
        secret, info = services.tokens.create(str(scope or ""), lifetime, name or "", "admin")
    except (TokenError, TypeError, ValueError) as error:
        return "", ui.notice_html("error", str(error))
    services.audit.admin("token-create", f"token {info.id} {info.scope}", route="", who=who)
    expiry = f"expires {info.expires_at} UTC" if info.expires_at else "never expires"
    return secret, ui.notice_html(
        "info", f"Token {info.id} ({info.scope}, {expiry}). Copy it now: it is not shown again."
    )


def revoke(services: Services, is_admin: bool, token_id: float | None, who: str = "admin") -> str:
    if not is_admin:
        return ui.notice_html("error", NOT_ADMIN)
    try:
        info = services.tokens.revoke(int(token_id or 0))
    except TokenError as error:
        return ui.notice_html("error", str(error))
    services.audit.admin("token-revoke", f"token {info.id}", route="", who=who)
    return ui.notice_html("info", f"Revoked token {info.id}.")


def build_token_admin(services: Services, auth: Authenticator) -> dict[str, Any]:
    """The tab's components; call inside the admin panel (visible to admins only)."""
    with gr.Tab("API tokens"):
        gr.Markdown(
            "Tokens let programs call the JSON API at `/api/v1` (docs at `/api/v1/docs`): "
            "`search` searches any built index, `read` also reads records, images and runs, "
            "`resolve` also turns an item's pseudonym into its file or DICOM UIDs, `admin` "
            "also runs jobs, reader studies and the audit log. No token rates."
        )
        with gr.Row():
            scope = gr.Dropdown(label="Scope", choices=list(TOKEN_SCOPES), value="read")
            days = gr.Number(label="Days until it expires (0: never)", value=90, minimum=0)
            name = gr.Textbox(label="What it is for", max_length=200)
        issue = gr.Button("Issue token", elem_id="admin-issue-token")
        secret = gr.Textbox(
            label="New token (shown once)", interactive=False, elem_id="admin-token-secret"
        )
        note = gr.HTML()
        table = gr.Dataframe(label="Tokens", interactive=False, elem_id="admin-tokens")
        with gr.Row():
            token_id = gr.Number(label="Token id", precision=0)
            revoke_button = gr.Button("Revoke token", variant="stop")

    def _issue(s, d, n, request: gr.Request):
        admin = auth.is_admin(request)
        shown, message = issue_token(services, admin, s, d, n, auth.admin_identity(request))
        return shown, message, token_table(services) if admin else gr.update()

    def _revoke(chosen, request: gr.Request):
        admin = auth.is_admin(request)
        note = revoke(services, admin, chosen, auth.admin_identity(request))
        return note, token_table(services) if admin else gr.update()

    issue.click(_issue, [scope, days, name], [secret, note, table], api_visibility="private")
    revoke_button.click(_revoke, [token_id], [note, table], api_visibility="private")
    return {"table": table}
