"""An idle server's CPU and a queued event's round trip, at Gradio's own queue poll (1 ms) and
at QUEUE_POLL_MS values, one after the other in one run.

    DATA_DIR=/tmp/bench-idle-data MEDHEB_DEMO_SIZE=300 .venv/bin/python bench/bench_idle.py \\
        [--polls 1,10,25] [--idle-seconds 30] [--searches 200] [--write]

For each poll interval: starts `python app.py` (the workbench and the raters' page, as
deployed) with QUEUE_POLL_MS set, waits for the demo bootstrap and 10 s more, then reads the
server's CPU seconds (/proc) over --idle-seconds with no request at all; then runs --searches
sequential searches through the Gradio queue (queue/join and its event stream, one client,
bench_api.gradio_search) and --searches REST searches (/api/v1/search, which no queue serves)
for the p50 / p95 round trip. The first start builds the demo in DATA_DIR; later ones load it.
`--write` puts the table into BENCHMARKS.md between bench_idle markers.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_api import (  # noqa: E402
    Connection,
    cpu_seconds,
    gradio_search,
    percentile,
    rest_search,
    search_fn_index,
    start_server,
    write_section,
)
from bench.rss import git_commit, stop_process  # noqa: E402

MARKERS = ("<!-- bench_idle:start -->", "<!-- bench_idle:end -->")
QUERIES = ("pleural effusion", "cardiomegaly and no pleural effusion", "pneumothorax")


def timed(call, n: int) -> list[float]:
    """Milliseconds of `n` calls of `call(i)`, each required to succeed."""
    times = []
    for i in range(n):
        started = time.perf_counter()
        if not call(i):
            raise SystemExit(f"call {i} failed")
        times.append(1000 * (time.perf_counter() - started))
    return times


def measure(data_dir: str, poll_ms: float, idle_s: float, searches: int) -> dict[str, float]:
    server, base = start_server(data_dir, extra_env={"QUEUE_POLL_MS": str(poll_ms)})
    try:
        time.sleep(10)  # the bootstrap's last steps and the first requests' after-work
        before, started = cpu_seconds(server.pid), time.monotonic()
        time.sleep(idle_s)
        idle = (cpu_seconds(server.pid) - before) / (time.monotonic() - started)
        url = urlparse(base)
        conn = Connection(url.hostname or "127.0.0.1", url.port or 80)
        fn = search_fn_index(base)
        queued = timed(lambda i: gradio_search(conn, fn, QUERIES[i % len(QUERIES)]), searches)
        rest = timed(lambda i: rest_search(conn, QUERIES[i % len(QUERIES)], []), searches)
    finally:
        stop_process(server)
    return {
        "poll_ms": poll_ms,
        "idle_core": idle,
        "queued_p50": statistics.median(queued),
        "queued_p95": percentile(queued, 0.95),
        "rest_p50": statistics.median(rest),
    }


def report(rows: list[dict[str, float]], args: argparse.Namespace) -> str:
    load = os.getloadavg()[0]
    lines = [
        MARKERS[0],
        f"## Idle server: Gradio's queue poll (bench/bench_idle.py), {dt.date.today()}",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores; load {load:.2f} at the end; "
        f"commit {git_commit(ROOT)}. Command: `DATA_DIR=... MEDHEB_DEMO_SIZE="
        f"{os.environ.get('MEDHEB_DEMO_SIZE', '2000')} .venv/bin/python bench/bench_idle.py "
        f"--polls {args.polls} --idle-seconds {args.idle_seconds:g} --searches {args.searches}`."
        " `python app.py` (workbench and raters' page), no request during the idle window; "
        "then sequential searches, one client, Gradio queue (page's Search event) and REST.",
        "",
        "| QUEUE_POLL_MS | idle CPU (% of a core) | queued search p50 (ms) | p95 (ms) "
        "| REST search p50 (ms) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['poll_ms']:g}{' (Gradio)' if row['poll_ms'] == 1 else ''} "
            f"| {100 * row['idle_core']:.1f} | {row['queued_p50']:.1f} "
            f"| {row['queued_p95']:.1f} | {row['rest_p50']:.1f} |"
        )
    lines.append(MARKERS[1])
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", default="1,10", help="QUEUE_POLL_MS values, ms")
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    data_dir = os.environ.get("DATA_DIR")
    if not data_dir:
        raise SystemExit("set DATA_DIR (a folder the demo is built in, or will be)")
    rows = [
        measure(data_dir, float(poll), args.idle_seconds, args.searches)
        for poll in args.polls.split(",")
    ]
    text = report(rows, args)
    print(text)
    if args.write:
        write_section(text, MARKERS)


if __name__ == "__main__":
    main()
