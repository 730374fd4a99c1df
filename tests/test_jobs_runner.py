"""JobRunner: progress and logs persisted, cancel, failure recorded, restart marks orphans."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from medheb_app.jobs import (
    STOP_ACK,
    JobCancelled,
    JobError,
    JobRunner,
    mark_interrupted,
    process_owner,
)
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.store.jobs_table import Job


@pytest.fixture
def runner(store: Store, settings: Settings):
    runner = JobRunner(store, settings)
    yield runner
    runner.shutdown()


def count_to(params, progress, log, stop):
    for step in range(params["n"]):
        log(f"step {step}")
        progress((step + 1) / params["n"], f"step {step + 1} of {params['n']}")
    return {"counted": params["n"]}


def test_job_reports_progress_logs_and_result(runner: JobRunner, store: Store, settings):
    job_id = runner.submit("count", {"n": 4}, count_to)
    info = runner.wait(job_id, timeout=30)
    assert info.status == "done"
    assert info.result == {"counted": 4}
    assert info.progress == 1.0
    assert info.message == "step 4 of 4"
    assert runner.logs(job_id) == ["step 0", "step 1", "step 2", "step 3"]
    assert runner.logs(job_id, since=3) == ["step 3"]
    assert info.started_at is not None and info.finished_at is not None
    # a second runner on the same database (an app restart) sees the finished job unchanged
    again = JobRunner(Store.open(store.engine.url.render_as_string(hide_password=False)), settings)
    assert again.status(job_id).result == {"counted": 4}
    assert again.interrupted_at_start == 0
    again.shutdown()


def test_cancel_running_job_sets_stop_and_records_cancelled(runner: JobRunner):
    started = threading.Event()

    def wait_for_stop(params, progress, log, stop):
        started.set()
        if not stop.wait(timeout=20):
            return {"stopped": False}
        log("stop seen")
        raise JobCancelled

    job_id = runner.submit("wait", {}, wait_for_stop)
    assert started.wait(timeout=20)
    assert runner.status(job_id).status == "running"
    assert runner.cancel(job_id) is True
    info = runner.wait(job_id, timeout=30)
    assert info.status == "cancelled"
    logs = runner.logs(job_id)
    assert logs[:2] == [STOP_ACK, "stop seen"] and logs[2].startswith("cancelled after ")
    assert runner.cancel(job_id) is False  # finished jobs cannot be cancelled again


def test_cancel_queued_job_never_runs_it(runner: JobRunner):
    release = threading.Event()
    ran = []

    def block(params, progress, log, stop):
        release.wait(timeout=20)
        return {}

    first = runner.submit("block", {}, block)
    second = runner.submit("never", {}, lambda p, progress, log, stop: ran.append(1) or {})
    assert runner.status(second).status == "queued"
    assert runner.cancel(second) is True
    release.set()
    assert runner.wait(first, timeout=30).status == "done"
    assert runner.wait(second, timeout=30).status == "cancelled"
    assert ran == []


def test_failing_job_records_its_sentence_and_logs_the_traceback_server_side(
    runner: JobRunner, caplog
):
    def broken(params, progress, log, stop):
        progress(0.5, "half way")
        raise RuntimeError("index file /srv/data/indices/x/index.faiss is corrupt")

    job_id = runner.submit("broken", {"path": "x"}, broken)
    info = runner.wait(job_id, timeout=30)
    assert info.status == "failed"
    assert info.error == "index file (a server file) is corrupt"  # no class name, no path
    assert info.progress == 0.5
    assert runner.logs(job_id)[-1] == "failed: index file (a server file) is corrupt"
    assert "Traceback" in caplog.text and "RuntimeError" in caplog.text  # for the operator


def test_history_newest_first_and_filter_by_kind(runner: JobRunner):
    ids = [runner.submit(kind, {"n": 1}, count_to) for kind in ("a", "b", "a")]
    for job_id in ids:
        runner.wait(job_id, timeout=30)
    assert [job.id for job in runner.history()] == ids[::-1]
    assert [job.id for job in runner.history(kind="a")] == [ids[2], ids[0]]
    with pytest.raises(JobError, match="No job"):
        runner.status(999)


def test_restart_marks_jobs_of_a_dead_process_interrupted(store: Store, settings):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    dead_owner = process_owner(child.pid)
    child.wait()
    alive_owner = process_owner()
    with store.session() as session:
        session.add_all(
            [
                Job(kind="bench-run", params={}, status="running", owner=dead_owner),
                Job(kind="train", params={}, status="queued", owner=dead_owner),
                Job(kind="index", params={}, status="running", owner=alive_owner),
            ]
        )
    assert mark_interrupted(store) == 2
    runner = JobRunner(store, settings)
    statuses = {job.kind: job.status for job in runner.history()}
    assert statuses == {"bench-run": "interrupted", "train": "interrupted", "index": "running"}
    assert "stopped" in runner.history(kind="train")[0].error
    runner.shutdown()


def test_a_killed_bench_run_is_marked_interrupted_at_the_next_start(store: Store, settings):
    """Issue 19 item 7: a run row written by a process killed with SIGKILL said "running" for
    good. A real second process opens the same database, starts a run and is killed."""
    import signal

    from medheb_app.store.runs import list_runs, start_run

    script = (
        "import sys, time\n"
        "from medheb_app.store.db import Store\n"
        "from medheb_app.store.runs import start_run\n"
        "store = Store.open(sys.argv[1])\n"
        "print(start_run(store, 'medheb-lite', ['random'], '/tmp/out', {}), flush=True)\n"
        "time.sleep(120)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script, store.engine.url.render_as_string(hide_password=False)],
        stdout=subprocess.PIPE,
        text=True,
    )
    killed_run = int(child.stdout.readline())
    live_run = start_run(store, "medheb-lite", ["oracle"], "/tmp/live", {})  # this process
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert {run.id: run.status for run in list_runs(store)}[killed_run] == "running"
    runner = JobRunner(store, settings)
    assert runner.runs_interrupted_at_start == 1
    runs = {run.id: run for run in list_runs(store)}
    assert runs[killed_run].status == "interrupted" and runs[killed_run].finished is not None
    assert "stopped before it finished" in runs[killed_run].error
    assert runs[live_run].status == "running"  # its process (this one) still runs
    runner.shutdown()
