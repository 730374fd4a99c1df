"""Tables of background jobs (benchmark runs, training, index builds) and their log lines.

A job row is updated as it moves queued -> running -> done | failed | cancelled (or
"interrupted" when the app restarted under it); log lines are appended, never rewritten.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from medheb_app.store.db import Base, utcnow

JOB_STATUSES = ("queued", "running", "done", "failed", "cancelled", "interrupted")
FINISHED_STATUSES = ("done", "failed", "cancelled", "interrupted")


class Job(Base):
    """One submitted job: what it runs (kind, params), where it stands, what it returned."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(100))
    params: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20), default="queued", index=True)
    progress: Mapped[float] = mapped_column(Float, default=0.0)
    message: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True, default=None)
    error: Mapped[str] = mapped_column(Text, default="")
    owner: Mapped[str] = mapped_column(String(200), default="")  # host:pid:process start time
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    updated_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class JobLogLine(Base):
    """One appended log line of a job."""

    __tablename__ = "job_log_lines"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), index=True)
    line: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
