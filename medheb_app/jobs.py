"""Background jobs (benchmark runs, training, index builds) run in threads and recorded in
the store, so the admin panel can show progress, logs, cancel and history, and a restart
loses nothing.

A job function is `fn(params, progress, log, stop) -> dict`: `progress(fraction, message="")`
reports how far it is, `log(line)` appends a persisted line, and `stop` is a threading.Event
the function should check between batches (return early, or raise Cancelled, from
medheb_app.cancellation, when it is set; the exception's text says what was kept). A plain
InterruptedError raised while `stop` is set counts as a cancel too; one raised unasked is a
failure.

Cancel is acknowledged at once: `cancel` writes "stop requested: stopping after this batch"
to the log and the job's message, and every progress message after that keeps the
"stopping" prefix, so the panel never shows a running job that ignores its cancel. A job
reports its first stage ("started") as soon as a worker picks it up.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import select, update

from medheb_app.cancellation import Cancelled
from medheb_app.public_text import public_message
from medheb_app.settings import Settings
from medheb_app.store.db import Store, iso_seconds
from medheb_app.store.jobs_table import FINISHED_STATUSES, Job, JobLogLine, utcnow
from medheb_app.store.owners import owner_alive, process_owner
from medheb_app.store.runs import mark_interrupted_runs

log_server = logging.getLogger(__name__)
JOB_FAILED = "the job failed unexpectedly; the server log has the details"

Progress = Callable[..., None]
Log = Callable[[str], None]
JobFunction = Callable[[dict[str, Any], Progress, Log, threading.Event], Mapping[str, Any] | None]

PROGRESS_WRITE_INTERVAL_S = 0.25
STOP_ACK = "stop requested: stopping after this batch"


# The one cancellation type (medheb_app.cancellation), under the name job functions know it by.
JobCancelled = Cancelled


class JobError(ValueError):
    """A request about a job that cannot be met (unknown id, bad parameters)."""


@dataclass(frozen=True)
class JobInfo:
    """A job as the UI shows it."""

    id: int
    kind: str
    params: dict[str, Any]
    status: str
    progress: float
    message: str
    result: dict[str, Any] | None
    error: str
    created_at: str
    started_at: str | None
    finished_at: str | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _info(job: Job) -> JobInfo:
    iso = iso_seconds
    return JobInfo(
        id=job.id,
        kind=job.kind,
        params=dict(job.params or {}),
        status=job.status,
        progress=job.progress,
        message=job.message,
        result=job.result,
        error=job.error,
        created_at=iso(job.created_at) or "",
        started_at=iso(job.started_at),
        finished_at=iso(job.finished_at),
    )


def _jsonable(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """Params and results go into JSON columns: non-JSON values (paths, numpy) become text."""
    return json.loads(json.dumps(dict(value or {}), default=str))


def mark_interrupted(store: Store) -> int:
    """Jobs left queued or running by a process that is gone become "interrupted"."""
    with store.session() as session:
        jobs = session.scalars(select(Job).where(Job.status.in_(("queued", "running")))).all()
        orphans = [job for job in jobs if not owner_alive(job.owner)]
        now = utcnow()
        for job in orphans:
            job.error = f"The app stopped while this job was {job.status}; submit it again."
            job.status = "interrupted"
            job.finished_at = job.updated_at = now
        return len(orphans)


class JobRunner:
    """Runs job functions on a small thread pool and records everything in the store."""

    def __init__(self, store: Store, settings: Settings | None = None, max_workers: int = 1):
        self.store = store
        self.settings = settings
        self.owner = process_owner()
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="medheb-job")
        self._stops: dict[int, threading.Event] = {}
        self._futures: dict[int, Future] = {}
        self._lock = threading.Lock()
        # rows a dead process left "running": its jobs, and benchmark runs (a killed `bench run`)
        self.interrupted_at_start = mark_interrupted(store)
        self.runs_interrupted_at_start = mark_interrupted_runs(store)

    def submit(self, kind: str, params: Mapping[str, Any], fn: JobFunction) -> int:
        """Queue `fn(params, progress, log, stop)`; returns the job id at once."""
        if not kind.strip():
            raise JobError("A job needs a kind (e.g. 'bench-run').")
        params = _jsonable(params)
        with self.store.session() as session:
            job = Job(kind=kind, params=params, status="queued", owner=self.owner)
            session.add(job)
            session.flush()
            job_id = job.id
        stop = threading.Event()
        with self._lock:
            self._stops[job_id] = stop
            self._futures[job_id] = self._executor.submit(self._run, job_id, params, fn, stop)
        return job_id

    def cancel(self, job_id: int) -> bool:
        """Ask a job to stop; a queued job is cancelled at once. False if already finished."""
        info = self.status(job_id)
        if info.finished:
            return False
        with self._lock:
            stop = self._stops.get(job_id)
        if stop is None:
            return False  # queued or running under another process: only it can stop it
        if info.status == "running":  # heard before the job can react, so the log reads in order
            self._acknowledge(job_id)
        stop.set()
        self._finish(job_id, "cancelled", from_statuses=("queued",), message="cancelled")
        return True

    def _acknowledge(self, job_id: int) -> None:
        """Say in the log and the job's message that the stop was heard."""
        with self.store.session() as session:
            session.add(JobLogLine(job_id=job_id, line=STOP_ACK))
            session.execute(
                update(Job)
                .where(Job.id == job_id, Job.status == "running")
                .values(message=STOP_ACK, updated_at=utcnow())
            )

    def status(self, job_id: int) -> JobInfo:
        with self.store.session() as session:
            job = session.get(Job, job_id)
            if job is None:
                raise JobError(f"No job with id {job_id}.")
            return _info(job)

    def logs(self, job_id: int, since: int = 0) -> list[str]:
        """Log lines of a job from line number `since` on (0-based), oldest first."""
        self.status(job_id)
        with self.store.session() as session:
            return list(
                session.scalars(
                    select(JobLogLine.line)
                    .where(JobLogLine.job_id == job_id)
                    .order_by(JobLogLine.id)
                    .offset(since)
                ).all()
            )

    def history(self, limit: int = 50, kind: str | None = None) -> list[JobInfo]:
        """Most recent jobs first."""
        query = select(Job).order_by(Job.id.desc()).limit(limit)
        if kind:
            query = query.where(Job.kind == kind)
        with self.store.session() as session:
            return [_info(job) for job in session.scalars(query).all()]

    def wait(self, job_id: int, timeout: float | None = None) -> JobInfo:
        """Block until the job ends (or the timeout passes) and return its state."""
        with self._lock:
            future = self._futures.get(job_id)
        if future is not None:
            future.exception(timeout=timeout)
        return self.status(job_id)

    def shutdown(self, wait: bool = True) -> None:
        """Ask every running job to stop and release the threads."""
        with self._lock:
            for stop in self._stops.values():
                stop.set()
        self._executor.shutdown(wait=wait, cancel_futures=True)

    def _run(
        self, job_id: int, params: dict[str, Any], fn: JobFunction, stop: threading.Event
    ) -> None:
        try:
            if not self._start(job_id):
                return  # cancelled while queued
            progress, log, flush = self._reporters(job_id, stop)
            started = time.monotonic()
            progress(0.0, "started")
            try:
                result = fn(dict(params), progress, log, stop)
            except Exception as error:
                flush()
                if isinstance(error, Cancelled) or (
                    isinstance(error, InterruptedError) and stop.is_set()
                ):
                    kept = str(error) or "nothing kept"
                    log(f"cancelled after {time.monotonic() - started:.1f} s: {kept}")
                    self._finish(job_id, "cancelled", message=f"cancelled: {kept}")
                    return
                # the traceback (paths, class names) goes to the server log, never to a page
                log_server.error("job %s failed:\n%s", job_id, traceback.format_exc().rstrip())
                said = public_message(error, JOB_FAILED)
                log(f"failed: {said}")
                self._finish(job_id, "failed", error=said)
                return
            flush()
            if stop.is_set():
                self._finish(job_id, "cancelled", result=result, message="cancelled")
            else:
                self._finish(job_id, "done", result=result, progress=1.0)
        finally:
            with self._lock:
                self._stops.pop(job_id, None)

    def _start(self, job_id: int) -> bool:
        now = utcnow()
        with self.store.session() as session:
            started = session.execute(
                update(Job)
                .where(Job.id == job_id, Job.status == "queued")
                .values(status="running", started_at=now, updated_at=now)
            ).rowcount
        return started == 1

    def _finish(
        self,
        job_id: int,
        status: str,
        *,
        from_statuses: tuple[str, ...] = ("queued", "running"),
        result: Mapping[str, Any] | None = None,
        error: str = "",
        message: str | None = None,
        progress: float | None = None,
    ) -> None:
        now = utcnow()
        values: dict[str, Any] = {"status": status, "finished_at": now, "updated_at": now}
        if result is not None:
            values["result"] = _jsonable(result)
        if error:
            values["error"] = error
        if message is not None:
            values["message"] = message
        if progress is not None:
            values["progress"] = progress
        with self.store.session() as session:
            session.execute(
                update(Job).where(Job.id == job_id, Job.status.in_(from_statuses)).values(**values)
            )

    def _reporters(
        self, job_id: int, stop: threading.Event | None = None
    ) -> tuple[Progress, Log, Callable[[], None]]:
        """progress and log for the job function, and a flush for the last throttled report.
        Once `stop` is set, each message says the job is stopping."""
        last_write = [0.0]
        pending: list[tuple[float, str]] = []

        def write(fraction: float, message: str) -> None:
            with self.store.session() as session:
                session.execute(
                    update(Job)
                    .where(Job.id == job_id)
                    .values(progress=fraction, message=message, updated_at=utcnow())
                )

        def progress(fraction: float, message: str = "") -> None:
            fraction = float(fraction)
            if not math.isfinite(fraction):
                return
            fraction = min(max(fraction, 0.0), 1.0)
            if stop is not None and stop.is_set():
                message = f"{STOP_ACK} · {message}" if message else STOP_ACK
            now = time.monotonic()
            if now - last_write[0] < PROGRESS_WRITE_INTERVAL_S:
                pending[:] = [(fraction, str(message))]  # a tight loop must not flood the db
                return
            last_write[0] = now
            pending.clear()
            write(fraction, str(message))

        def flush() -> None:
            if pending:
                write(*pending.pop())

        def log(line: str) -> None:
            with self.store.session() as session:
                session.add(JobLogLine(job_id=job_id, line=str(line)))

        return progress, log, flush
