"""Server-side source references: which file or DICOM instances each pseudonymous item is.

Index folders hold only pseudonyms (index/provenance.py). This table maps (index, pseudonym)
back to the item's source: the root it was read under, its path relative to the source, and
for DICOM the study / series / instance UIDs. Only admins (CLI `index resolve`, or the API with
a read-scope token) read it; nothing here is ever sent to an anonymous visitor. A rebuild of
an index replaces its rows in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Integer, String, Text, UniqueConstraint, delete, select
from sqlalchemy.orm import Mapped, mapped_column

from medheb_app.store.db import Base, Store, utcnow


class SourceReference(Base):
    """One indexed item's source: (index, item id) -> root, relative path, UIDs."""

    __tablename__ = "source_references"
    __table_args__ = (UniqueConstraint("index_name", "item_id", name="uq_source_ref_item"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    index_name: Mapped[str] = mapped_column(String(200), index=True)
    item_id: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(20))  # "file" | "dicom"
    root_name: Mapped[str] = mapped_column(String(100), default="")
    root_path: Mapped[str] = mapped_column(Text, default="")  # the source folder on the server
    relative_path: Mapped[str] = mapped_column(Text, default="")  # first file, relative
    study_uid: Mapped[str] = mapped_column(String(64), default="")
    series_uid: Mapped[str] = mapped_column(String(64), default="")
    instance_uids: Mapped[str] = mapped_column(Text, default="[]")  # JSON list
    files: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of relative paths
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


def replace_references(store: Store, index_name: str, references: Iterable[dict[str, Any]]) -> int:
    """Replace every row of `index_name` by `references` (dicts of the columns); returns how
    many were written."""
    rows = [
        SourceReference(
            index_name=index_name,
            item_id=str(ref["item_id"]),
            kind=str(ref.get("kind", "file")),
            root_name=str(ref.get("root_name", "")),
            root_path=str(ref.get("root_path", "")),
            relative_path=str(ref.get("relative_path", "")),
            study_uid=str(ref.get("study_uid", "")),
            series_uid=str(ref.get("series_uid", "")),
            instance_uids=json.dumps(list(ref.get("instance_uids", []))),
            files=json.dumps(list(ref.get("files", []))),
        )
        for ref in references
    ]
    with store.session() as session:
        session.execute(delete(SourceReference).where(SourceReference.index_name == index_name))
        session.add_all(rows)
    return len(rows)


def find_reference(store: Store, index_name: str, item_id: str) -> dict[str, Any] | None:
    """The source of one item as a dict, or None when the index has no such reference."""
    with store.session() as session:
        row = session.scalars(
            select(SourceReference).where(
                SourceReference.index_name == index_name, SourceReference.item_id == item_id
            )
        ).first()
        if row is None:
            return None
        return {
            "index": row.index_name,
            "item_id": row.item_id,
            "kind": row.kind,
            "root_name": row.root_name,
            "root_path": row.root_path,
            "relative_path": row.relative_path,
            "study_uid": row.study_uid or None,
            "series_uid": row.series_uid or None,
            "instance_uids": json.loads(row.instance_uids or "[]"),
            "files": json.loads(row.files or "[]"),
        }


def files_of(store: Store, index_name: str) -> dict[str, str]:
    """item id -> the server file of each item of `index_name` that has one (root joined with
    its relative path), in one query: what the page and the API read to show a hit's image."""
    with store.session() as session:
        rows = session.execute(
            select(
                SourceReference.item_id, SourceReference.root_path, SourceReference.relative_path
            ).where(SourceReference.index_name == index_name)
        ).all()
    return {item: f"{root.rstrip('/')}/{relative}" for item, root, relative in rows if relative}
