"""`python -m medheb_app audit export --since DATE [--out FILE]`: the audit log (api/audit.py)
for the hospital's records: CSV on stdout or into a file, or JSON with --json. Read through
the audit facade (services.audit) that the web page writes with."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from medheb_app.cli import UserError, add_json_flag
from medheb_app.services.audit import Audit
from medheb_app.services.store import open_store
from medheb_app.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("audit", help="the audit log of searches, reads, admin actions")
    actions = parser.add_subparsers(dest="audit_command", required=True)
    export = actions.add_parser("export", help="events since a date, as CSV (or --json)")
    export.add_argument(
        "--since", default=None, help="ISO date or time, UTC unless it says (default: all)"
    )
    export.add_argument("--out", default=None, help="write the CSV here instead of stdout")
    add_json_flag(export)
    export.set_defaults(handler=run_export)


def parse_since(text: str | None) -> datetime | None:
    """'2026-12-01' or '2026-12-01T08:00:00+01:00' as naive UTC (how the store keeps time)."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(f"--since {text!r} is not an ISO date, e.g. 2026-12-01.") from None
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment


def run_export(args: argparse.Namespace, settings: Settings) -> tuple[str, Any]:
    audit = Audit(settings, open_store(settings))
    rows = audit.events(parse_since(args.since))
    payload = {"since": args.since, "events": [row.to_dict() for row in rows]}
    text = audit.to_csv(rows)
    if args.out:
        out = Path(args.out)  # query texts and client addresses: readable by its owner only
        out.touch(mode=0o600, exist_ok=True)
        out.chmod(0o600)
        out.write_text(text, encoding="utf-8")
        return f"Wrote {len(rows)} event(s) to {args.out}.", {**payload, "out": args.out}
    return text.rstrip("\n"), payload
