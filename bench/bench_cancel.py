"""Cancel latency and first-stage latency of the admin panel's background jobs.

    DATA_DIR=/tmp/bench-cancel .venv/bin/python bench/bench_cancel.py [--only train]

Each scenario submits a real job through the same JobRunner and job functions the admin
panel uses (services.admin_jobs.JOB_FACTORIES), polls its row every 0.1 s, and measures:
- first stage: submit -> the job's message is not empty (what the panel shows);
- ack: cancel() -> "stop requested: stopping after this batch" in the job log;
- end: cancel() -> the job's status is final (cancelled), and its last message.
Scenarios: the issue's training job (report recipe, 2,000 phantom studies, 20 epochs),
cancelled while it caches tower features; a 200-study one cancelled during its steps; an
index build of phantom:600 with dual-lite; a medheb-lite benchmark run with dual-lite.
Prints a markdown block for BENCHMARKS.md with the machine, the date and the load average.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCENARIOS = {
    # name: (kind, params, cancel when the message starts with this, or after N seconds)
    "train-caching": (
        "train",
        {"recipe": "report", "tag": "bench-cancel", "epochs": 20, "n": 2000},
        "caching image features",
    ),
    "train-steps": (  # smaller corpus: its features are cached in a minute, not ten
        "train",
        {"recipe": "report", "tag": "bench-cancel", "epochs": 20, "n": 200},
        "step ",
    ),
    "index-build": (
        "index-build",
        {"name": "bench-cancel", "model": "dual-lite", "source": "phantom:600"},
        8.0,
    ),
    "bench-run": ("bench-run", {"suite": "medheb-lite", "models": ["dual-lite"]}, 20.0),
}


def measure(services, kind: str, params: dict, when: str | float, limit_s: float = 600) -> dict:
    from medheb_app.jobs import STOP_ACK

    factory = __import__("medheb_app.services", fromlist=["JOB_FACTORIES"]).JOB_FACTORIES
    submitted = time.monotonic()
    job_id = services.jobs.submit(kind, params, factory[kind](services.settings))
    first = None
    while time.monotonic() - submitted < limit_s:
        info = services.jobs.status(job_id)
        now = time.monotonic()
        if first is None and info.message:
            first = now - submitted
        ready = (
            now - submitted >= when if isinstance(when, float) else info.message.startswith(when)
        )
        if ready or info.finished:
            break
        time.sleep(0.1)
    stage = services.jobs.status(job_id).message
    asked = time.monotonic()
    services.jobs.cancel(job_id)
    ack = end = None
    while time.monotonic() - asked < limit_s:
        if ack is None and STOP_ACK in services.jobs.logs(job_id):
            ack = time.monotonic() - asked
        info = services.jobs.status(job_id)
        if info.finished:
            end = time.monotonic() - asked
            break
        time.sleep(0.1)
    info = services.jobs.status(job_id)
    return {
        "first_stage_s": first,
        "cancelled_at": f"{asked - submitted:.1f} s, during '{stage}'",
        "ack_s": ack,
        "end_s": end,
        "status": info.status,
        "final_message": info.message,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="*", choices=list(SCENARIOS), default=list(SCENARIOS))
    args = parser.parse_args()
    os.environ.setdefault("DATA_DIR", tempfile.mkdtemp(prefix="bench-cancel-"))
    from medheb_app.services import create_services
    from medheb_app.settings import Settings

    services = create_services(Settings.from_env(), start_bootstrap=False)
    rows = []
    for name in args.only:
        kind, params, when = SCENARIOS[name]
        result = measure(services, kind, params, when)
        rows.append((name, result))
        print(name, result, file=sys.stderr, flush=True)
    services.jobs.shutdown()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} ")
    print(f"({os.cpu_count()} cores, shared with other engineers), load average {load} at end.")
    print()
    print("| job | first stage shown | cancelled at | ack in log | ended | final message |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:

        def s(value):
            return "never" if value is None else f"{value:.1f} s"

        print(
            f"| {name} | {s(r['first_stage_s'])} | {r['cancelled_at']} | {s(r['ack_s'])} | "
            f"{s(r['end_s'])} ({r['status']}) | {r['final_message']} |"
        )


if __name__ == "__main__":
    main()
