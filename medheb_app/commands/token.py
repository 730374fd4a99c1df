"""`python -m medheb_app token create|list|revoke`: API tokens for programs (medheb_app/api).

A token's secret is printed once, at creation; the store keeps only its digest. The commands
call the admin tab's facades (services.tokens, services.audit) on the same store."""

from __future__ import annotations

import argparse
from typing import Any

from medheb_app.cli import UserError, add_json_flag
from medheb_app.services.audit import Audit
from medheb_app.services.store import open_store
from medheb_app.services.tokens import TOKEN_SCOPES, TokenError, Tokens
from medheb_app.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("token", help="bearer tokens for the HTTP API (/api/v1)")
    actions = parser.add_subparsers(dest="token_command", required=True)
    create = actions.add_parser("create", help="issue a token (its secret is shown only now)")
    create.add_argument(
        "--scope",
        choices=TOKEN_SCOPES,
        required=True,
        help="search: search any built index; read: also records, images, runs; resolve: "
        "also the file or DICOM UIDs behind an item's pseudonym; admin: also jobs, reader "
        "studies and the audit log",
    )
    create.add_argument("--days", type=float, default=90.0, help="lifetime in days (default 90)")
    create.add_argument("--never-expires", action="store_true", help="no expiry")
    create.add_argument("--name", default="", help="what the token is for (e.g. 'PACS worklist')")
    add_json_flag(create)
    create.set_defaults(handler=run_create)
    listing = actions.add_parser("list", help="every token (never a secret)")
    add_json_flag(listing)
    listing.set_defaults(handler=run_list)
    revoke = actions.add_parser("revoke", help="revoke a token at once")
    revoke.add_argument("id", type=int, help="the token's id (from `token list`)")
    add_json_flag(revoke)
    revoke.set_defaults(handler=run_revoke)


def run_create(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    days = None if args.never_expires else args.days
    store = open_store(settings)
    try:
        secret, info = Tokens(store).create(args.scope, days, args.name, "cli")
    except TokenError as error:
        raise UserError(str(error)) from None
    Audit(settings, store).cli("token-create", f"token {info.id} {info.scope}")
    expiry = f"expires {info.expires_at} UTC" if info.expires_at else "never expires"
    human = (
        f"Token {info.id} ({info.scope}, {expiry}):\n{secret}\n"
        "This is the only time it is shown; send it as 'Authorization: Bearer <token>'."
    )
    return human, {**info.to_dict(), "token": secret}


def run_list(args: argparse.Namespace, settings: Settings) -> tuple[str, list[dict[str, Any]]]:
    tokens = [info.to_dict() for info in Tokens(open_store(settings)).list()]
    if not tokens:
        return "No token has been issued.", tokens
    lines = [f"{'id':>4}  {'scope':<7} {'state':<8} {'prefix':<11} {'expires':<20} name"]
    for t in tokens:
        state = "revoked" if t["revoked_at"] else "active" if t["active"] else "expired"
        lines.append(
            f"{t['id']:>4}  {t['scope']:<7} {state:<8} {t['prefix']:<11} "
            f"{t['expires_at'] or 'never':<20} {t['name']}"
        )
    return "\n".join(lines), tokens


def run_revoke(args: argparse.Namespace, settings: Settings) -> tuple[str, dict[str, Any]]:
    store = open_store(settings)
    try:
        info = Tokens(store).revoke(args.id)
    except TokenError as error:
        raise UserError(str(error)) from None
    Audit(settings, store).cli("token-revoke", f"token {info.id}")
    return f"Revoked token {info.id} ({info.scope}).", info.to_dict()
