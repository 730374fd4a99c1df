"""The audit log: every search or record read on a non-synthetic index and every admin action,
from the API and the web page alike, appended to the store (medheb_app.store.api_tables).

A hospital keeps these records: who (a token id, the admin, or an anonymous client address),
when, through which route, on which index, with which query text or id, and how many results.
Synthetic (phantom) indices hold no patient, so their reads are not logged; admin actions
always are. Reading the log needs admin scope (`audit export` on the server, or the API).
"""

from __future__ import annotations

import csv
import io
import logging
from dataclasses import asdict, dataclass
from datetime import datetime

from sqlalchemy import select

from medheb_app.settings import Settings
from medheb_app.store.api_tables import AuditEvent
from medheb_app.store.db import Store, iso_utc

log = logging.getLogger(__name__)
MAX_QUERY_CHARS = 2000
EXPORT_COLUMNS = ("id", "at", "who", "channel", "action", "route", "index", "query", "count")


@dataclass(frozen=True)
class AuditRecord:
    id: int
    at: str
    who: str
    channel: str
    action: str
    route: str
    index: str
    query: str
    count: int | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def record(
    store: Store,
    *,
    who: str,
    action: str,
    channel: str = "api",
    route: str = "",
    index: str = "",
    query: str = "",
    count: int | None = None,
) -> None:
    """Append one event. A store that cannot be written raises: an audited read must not
    succeed unrecorded."""
    with store.session() as session:
        session.add(
            AuditEvent(
                who=str(who)[:200],
                channel=channel,
                action=action,
                route=str(route)[:200],
                index_name=str(index)[:200],
                query=str(query)[:MAX_QUERY_CHARS],
                result_count=count,
            )
        )


def events(
    store: Store, since: datetime | None = None, limit: int | None = None
) -> list[AuditRecord]:
    """Events from `since` (naive UTC) on, oldest first."""
    query = select(AuditEvent).order_by(AuditEvent.id)
    if since is not None:
        query = query.where(AuditEvent.at >= since)
    if limit is not None:
        query = query.limit(int(limit))
    with store.session() as session:
        return [
            AuditRecord(
                id=row.id,
                at=iso_utc(row.at),
                who=row.who,
                channel=row.channel,
                action=row.action,
                route=row.route,
                index=row.index_name,
                query=row.query,
                count=row.result_count,
            )
            for row in session.scalars(query)
        ]


def to_csv(rows: list[AuditRecord]) -> str:
    """The events as CSV, a cell that starts like a formula quoted so a spreadsheet shows it
    as text (a query text is typed by anyone)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(EXPORT_COLUMNS)
    for row in rows:
        cells = [
            row.id,
            row.at,
            row.who,
            row.channel,
            row.action,
            row.route,
            row.index,
            row.query,
            "" if row.count is None else row.count,
        ]
        writer.writerow(
            ["'" + c if isinstance(c, str) and c[:1] in ("=", "+", "-", "@") else c for c in cells]
        )
    return out.getvalue()


def index_is_synthetic(settings: Settings, name: str) -> bool:
    """Whether every build of index `name` is synthetic (phantoms hold no patient)."""
    # deferred: faiss
    from medheb_app.api.adapter import builds

    found = builds(settings, name)
    return bool(found) and all(bool(entry.get("synthetic")) for entry in found)


def record_search(
    store: Store,
    settings: Settings,
    *,
    who: str,
    channel: str,
    route: str,
    index: str,
    query: str,
    count: int,
) -> None:
    """Audit a search (page or API alike) unless its index is synthetic: with
    record_paused_search, the one place that decides which searches reach the log."""
    if not index_is_synthetic(settings, index):
        record(
            store,
            who=who,
            channel=channel,
            action="search",
            route=route,
            index=index,
            query=query,
            count=count,
        )


def record_paused_search(store: Store, *, who: str, route: str, index: str, model: str) -> None:
    """Audit a search refused because an open reader study pauses `model`, on any index
    (synthetic too): who probes the compared models is the study's concern, not the data's."""
    record(
        store,
        who=who,
        action="search-paused",
        route=route,
        index=index,
        query=f"model {model.strip()}",
        count=0,
    )


def record_read(
    store: Store, *, who: str, channel: str, route: str, index: str, row: dict[str, object]
) -> None:
    """Audit one study record read (its report and image shown, page or API alike) unless the
    study is synthetic: the one place that decides which reads reach the log."""
    if not row.get("synthetic"):
        record(
            store,
            who=who,
            channel=channel,
            action="record",
            route=route,
            index=index,
            query=str(row.get("id", "")),
            count=1,
        )
