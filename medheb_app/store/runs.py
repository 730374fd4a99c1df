"""Tables of benchmark runs and their per-task results, plus the few queries the app needs.

The files under a run's out_dir stay the full record (every query's ranked list); these rows
index them so the UI can list runs and compare models without reading every file.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, Text, select
from sqlalchemy.orm import Mapped, mapped_column

from medheb_app.store.db import Base, Store, utcnow
from medheb_app.store.owners import owner_alive, process_owner

RUN_STATUSES = ("running", "finished", "failed", "cancelled", "interrupted")


class Run(Base):
    """One `bench run`: a suite against one or more models."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    suite: Mapped[str] = mapped_column(String(200))
    models: Mapped[list[str]] = mapped_column(JSON)
    started: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    finished: Mapped[datetime | None] = mapped_column(DateTime, nullable=True, default=None)
    status: Mapped[str] = mapped_column(String(20), default="running", index=True)
    out_dir: Mapped[str] = mapped_column(Text)
    settings: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str] = mapped_column(Text, default="")
    # host:pid:start time of the process running it (medheb_app.store.owners); "" before
    owner: Mapped[str] = mapped_column(String(200), default="", server_default="")


class TaskResult(Base):
    """One model's scores on one task of a run (metrics in percent)."""

    __tablename__ = "task_results"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    model: Mapped[str] = mapped_column(String(500), index=True)
    task: Mapped[str] = mapped_column(String(200), index=True)
    family: Mapped[str] = mapped_column(String(20))
    split: Mapped[str] = mapped_column(String(20))
    metrics: Mapped[dict[str, float]] = mapped_column(JSON)
    path: Mapped[str] = mapped_column(Text)


def start_run(store: Store, suite: str, models: list[str], out_dir: str, settings: dict) -> int:
    """Insert a running Run and return its id."""
    with store.session() as session:
        run = Run(
            suite=suite, models=models, out_dir=out_dir, settings=settings, owner=process_owner()
        )
        session.add(run)
        session.flush()
        return run.id


def mark_interrupted_runs(store: Store) -> int:
    """Runs left "running" by a process that is gone become "interrupted", with the reason:
    a killed `bench run` (or an app killed under a benchmark job) otherwise shows as running
    for good. Returns how many."""
    with store.session() as session:
        runs = session.scalars(select(Run).where(Run.status == "running")).all()
        orphans = [run for run in runs if not owner_alive(run.owner)]
        now = utcnow()
        for run in orphans:
            who = f"process {run.owner.rsplit(':', 1)[0]}" if run.owner else "an older version"
            run.status = "interrupted"
            run.error = (
                f"Interrupted: the {who} running it stopped before it finished (found at "
                f"the next start, {now:%Y-%m-%d %H:%M} UTC); run it again."
            )
            run.finished = now
        return len(orphans)


def add_task_result(store: Store, run_id: int, **values: Any) -> None:
    with store.session() as session:
        session.add(TaskResult(run_id=run_id, **values))


def finish_run(store: Store, run_id: int, status: str, error: str = "") -> None:
    if status not in RUN_STATUSES:
        raise ValueError(f"Unknown run status {status!r}; expected one of {RUN_STATUSES}.")
    with store.session() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise KeyError(f"No run with id {run_id}.")
        run.status = status
        run.error = error
        run.finished = utcnow()


def list_runs(store: Store, limit: int = 50) -> list[Run]:
    """Most recent runs first."""
    with store.session() as session:
        return list(session.scalars(select(Run).order_by(Run.id.desc()).limit(limit)))


def results_of(store: Store, run_id: int) -> list[TaskResult]:
    with store.session() as session:
        return list(
            session.scalars(
                select(TaskResult)
                .where(TaskResult.run_id == run_id)
                .order_by(TaskResult.model, TaskResult.task)
            )
        )


def run_listing(store: Store, limit: int = 200, status: str | None = None) -> list[dict[str, Any]]:
    """Most recent runs first as plain rows (id, suite, models, started, status, out_dir)."""
    with store.session() as session:
        query = select(Run).order_by(Run.id.desc()).limit(limit)
        if status is not None:
            query = query.where(Run.status == status)
        return [
            {
                "id": int(run.id),
                "suite": run.suite,
                "models": list(run.models),
                "started": run.started,
                "status": run.status,
                "out_dir": run.out_dir,
                "error": run.error,
            }
            for run in session.scalars(query)
        ]


def run_out_dir(store: Store, run_id: int) -> str:
    """Where a run's files are; KeyError for an unknown id."""
    with store.session() as session:
        run = session.get(Run, int(run_id))
        if run is None:
            raise KeyError(f"No run with id {run_id}.")
        return run.out_dir
