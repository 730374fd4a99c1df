"""Tables of the blinded preference study (MedHEB section 5.6): studies, invitations, items,
raters, assignments and the append-only vote log.

Secrets (model names, gold ids, task, top-1 correctness) live on `StudyItem` and never leave
the server before a vote; a rater only ever sees an `Assignment.token`, which is random and
says nothing about the item. Credentials (invitation secrets and codes, rater resume secrets)
are stored only as SHA-256 digests. Votes are never updated or deleted: an undo is a new row of
kind "undo" pointing at the vote it retracts, a reveal of the model names a row of kind
"reveal". Only portable SQLAlchemy types are used so the same schema runs on SQLite and
PostgreSQL; columns added after the first release are nullable or carry a server default, so
`store.db.create_schema` can add them to an existing database.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from medheb_app.store.db import Base, utcnow


class PreferenceStudy(Base):
    """One study: which models are compared, how many raters each item needs, reveal policy.

    `name` is the admin's internal name; raters only ever see `public_title`. `open_enrolment`
    lets anyone sign in with a display name (a fresh rater each time); otherwise a rater needs
    an invitation. `claim_timeout_s`: an unvoted claim idle that long gives its slot back.
    `closed_at` set: the study no longer appears in the raters' list and serves no items.
    `max_votes_per_rater` (0: no cap): a rater who has that many votes in force gets no more
    items, so no single rater dominates the result."""

    __tablename__ = "studies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    models: Mapped[list[str]] = mapped_column(JSON)
    n_queries: Mapped[int] = mapped_column(Integer)
    raters_per_item: Mapped[int] = mapped_column(Integer)
    reveal_after_vote: Mapped[bool] = mapped_column(Boolean)
    seed: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(String(1000), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    public_title: Mapped[str] = mapped_column(String(200), default="", server_default="")
    open_enrolment: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    gold_share: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    claim_timeout_s: Mapped[float] = mapped_column(Float, default=600.0, server_default=text("600"))
    closed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    max_votes_per_rater: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))


class StudyInvitation(Base):
    """One rater's invitation to one study. Only digests of the link secret and of the short
    code are kept; the first sign-in binds it to a rater, later ones resume that rater."""

    __tablename__ = "study_invitations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    label: Mapped[str] = mapped_column(String(200), default="")
    rater_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    used_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class StudyItem(Base):
    """One query shown with two models' top-3 lists; `model_a`/`model_b` is the canonical pair
    order used in analysis (the left/right order a rater sees is drawn per assignment).
    `instruction`: what "better" means for the task's kind (study.instructions), shown above
    the item; empty on items made before it existed (the page then infers it)."""

    __tablename__ = "study_items"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    task: Mapped[str] = mapped_column(String(200))
    family: Mapped[str] = mapped_column(String(50), default="")
    split: Mapped[str] = mapped_column(String(50), default="")
    query_id: Mapped[str] = mapped_column(String(500))
    query_payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    model_a: Mapped[str] = mapped_column(String(500))
    model_b: Mapped[str] = mapped_column(String(500))
    top_a: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    top_b: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    gold: Mapped[list[str]] = mapped_column(JSON)
    hit_a: Mapped[bool] = mapped_column(Boolean)
    hit_b: Mapped[bool] = mapped_column(Boolean)
    is_gold: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    instruction: Mapped[str] = mapped_column(String(300), default="", server_default="")
    n_assigned: Mapped[int] = mapped_column(Integer, default=0)
    withdrawn_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Rater(Base):
    """A person who votes in one study. `name` is a unique internal handle and `token` a
    random value nobody is shown (both kept for databases written before invitations);
    `display_name` is only a label. The credential is the invitation (or, between visits, the
    resume secret whose digest is `resume_hash`). Legacy raters (no `study_id`) cannot sign in.
    `enrol_key`: for an open-enrolment sign-in, a digest of (study, client address), never the
    address itself, so sign-ins per address per hour can be capped."""

    __tablename__ = "raters"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    token: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    study_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None, index=True)
    display_name: Mapped[str] = mapped_column(String(200), default="", server_default="")
    resume_hash: Mapped[str | None] = mapped_column(
        String(64), nullable=True, default=None, index=True
    )
    invitation_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    enrol_key: Mapped[str | None] = mapped_column(
        String(64), nullable=True, default=None, index=True
    )


class Assignment(Base):
    """An item handed to a rater, with the side order drawn for them and the opaque token the
        UI holds. `vote_id` is the vote currently in force (None: not voted, or undone);
        `released_at` is set when an unvoted claim gave its slot back, `released_reason` says why
        ("idle", "taken": another rater completed the item first, "revoked"). `served_at` is the
        last time the item was handed out (idleness counts from it). `revealed_at`: the model names
        were shown to this rater, so the vote in force is final. `model_left` is a CSPRNG draw made
    when the claim was created (nothing a rater sees predicts it). `cover`: for a gold
    (quality-control) item, the pair of study models its reveal names, drawn the same way, so a
    reveal does not tell a rater which items were quality checks."""

    __tablename__ = "study_assignments"
    __table_args__ = (UniqueConstraint("item_id", "rater_id", name="uq_assignment_item_rater"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token: Mapped[str] = mapped_column(String(64), unique=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("study_items.id"), index=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("raters.id"), index=True)
    model_left: Mapped[str] = mapped_column(String(500))
    model_right: Mapped[str] = mapped_column(String(500))
    vote_id: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    released_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    released_reason: Mapped[str | None] = mapped_column(String(20), nullable=True, default=None)
    served_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    revealed_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    cover: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True, default=None)


class Vote(Base):
    """Append-only log: kind "vote" (choice A | B | tie | both_poor | cannot_judge as shown on
    screen; a cannot_judge vote carries its `reason`; any vote may carry a free-text `comment`
    and a clinical-significance flag `significant`),
    kind "undo" (choice empty, `retracts` = the vote id it withdraws) or kind "reveal" (the
    model names were shown after the vote `retracts` points at; that vote is final)."""

    __tablename__ = "study_votes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("study_assignments.id"), index=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("study_items.id"), index=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("raters.id"), index=True)
    choice: Mapped[str] = mapped_column(String(20), default="")
    model_left: Mapped[str] = mapped_column(String(500))
    model_right: Mapped[str] = mapped_column(String(500))
    retracts: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    reason: Mapped[str | None] = mapped_column(String(30), nullable=True, default=None)
    comment: Mapped[str] = mapped_column(String(1000), default="", server_default="")
    significant: Mapped[bool | None] = mapped_column(Boolean, nullable=True, default=None)


class RaterExclusion(Base):
    """Append-only log of an admin's decisions on a rater's votes: action "exclude" (with the
    reason) or "reinstate". The latest row per (study, rater) is in force; votes are never
    deleted, an exclusion only leaves them out of the analysis (vote quality, issue 18)."""

    __tablename__ = "study_rater_exclusions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("raters.id"), index=True)
    action: Mapped[str] = mapped_column(String(10))
    reason: Mapped[str] = mapped_column(String(500), default="")
    decided_by: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
