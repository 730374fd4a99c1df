"""What the web page and the CLI write to the audit log (`services.audit`): searches and record
reads on real indices and every admin action, through medheb_app.api.audit's one `record`; and
the log read back for `audit export`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from medheb_app.api.audit import AuditRecord, events, record, record_read, record_search, to_csv
from medheb_app.settings import Settings
from medheb_app.store.db import Store

__all__ = ["Audit", "AuditRecord"]


class Audit:
    """The page's and the CLI's audit events, bound to the settings (which indices are
    synthetic) and store."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store

    def search(self, client: str, payload: dict[str, Any]) -> None:
        """A search from the web page, logged when its index holds real studies."""
        record_search(
            self.store,
            self.settings,
            who=f"anonymous:{client}",
            channel="ui",
            route="search tab",
            index=str(payload.get("index", "")),
            query=str(payload.get("query", "")),
            count=len(payload.get("results") or []),
        )

    def record_opened(self, client: str, hit: dict[str, Any]) -> None:
        """A hit opened on the web page (its large image and report shown), logged as a record
        read, as GET /api/v1/studies/{index}/{id} is, when the study is not synthetic."""
        record_read(
            self.store,
            who=f"anonymous:{client}",
            channel="ui",
            route="search tab hit",
            index=str(hit.get("index", "")),
            row=hit,
        )

    def admin(self, action: str, what: str, route: str = "admin tab", who: str = "admin") -> None:
        """An admin action taken on the web page (job start or cancel, token issue, ...) by
        `who` (Authenticator.admin_identity: the Hugging Face user or the sign-in session)."""
        record(self.store, who=who, channel="ui", action=action, route=route, query=what)

    def cli(self, action: str, what: str) -> None:
        """An admin action taken from the command line (token issue or revoke)."""
        record(self.store, who="cli", channel="cli", action=action, query=what)

    def events(self, since: datetime | None = None) -> list[AuditRecord]:
        """Every event from `since` (naive UTC) on, oldest first."""
        return events(self.store, since)

    @staticmethod
    def to_csv(rows: list[AuditRecord]) -> str:
        """`rows` as the CSV a hospital's records take (api.audit.EXPORT_COLUMNS)."""
        return to_csv(rows)
