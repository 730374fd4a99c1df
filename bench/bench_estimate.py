"""Estimate vs actual for a sequence of benchmark runs in one (fresh) data folder.

    DATA_DIR=/tmp/bench-estimate .venv/bin/python bench/bench_estimate.py [runs] [training]

Each step estimates a run exactly as `bench run --estimate` and the admin panel do (rates
from the store's earlier runs, items from the embedding cache), then runs it through
run_suite with the store recording it, and compares the estimate (and its range) with the
measured seconds of each model's part of the run (`{model}_s`, model loading included) and
with the whole run (`total_s`, task building included). Then two training jobs (TRAINING) are
estimated as the admin panel's "Estimate training time" does and run as background jobs. The
first step has no history: it is
estimated with the 0.3 s/item default (`bench run --estimate`) and with the calibration batch
(`--calibrate`, the admin panel); later steps reuse the rates the earlier ones measured, per
input kind where they can. The calibration loads the model, so the run after it finds the
model in memory: `{model}_s` then counts less loading than a cold start would. Prints a
markdown block for BENCHMARKS.md.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = [  # (label, suite, tasks, models)
    (
        "medheb-lite phantom-cxr-t2i, fresh folder",
        "medheb-lite",
        ["phantom-cxr-t2i"],
        ["dual-lite"],
    ),
    (
        "medheb-lite phantom-cxr-i2report + T-T iu, after one run",
        "medheb-lite",
        ["phantom-cxr-i2report", "iu-findings2impression"],
        ["dual-lite", "oracle"],
    ),
    ("cxr-retrieve phantom, after two runs", "cxr-retrieve", None, ["dual-lite", "oracle"]),
]
TRAINING = [  # (label, params of an admin training job)
    ("training report, 2 epochs x 120 studies, fresh folder (calibrated)",
     {"recipe": "report", "tag": "bench-a", "epochs": 2, "n": 120}),
    ("training report, 4 epochs x 120 studies, after one job",
     {"recipe": "report", "tag": "bench-b", "epochs": 4, "n": 120}),
]  # fmt: skip


def main() -> None:
    os.environ.setdefault("DATA_DIR", tempfile.mkdtemp(prefix="bench-estimate-"))
    from medheb_app.eval.estimate import estimate_run, human_seconds, rates_from_store
    from medheb_app.eval.runner import run_suite
    from medheb_app.settings import Settings
    from medheb_app.store.db import Store
    from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite
    from medheb_app.tasks.medheb import get_suite

    settings = Settings.from_env()
    store = Store.open(settings.database_url)
    rows = []
    parts = sys.argv[1:] or ["runs", "training"]  # either part alone: `... training`
    for i, (label, suite_name, tasks, models) in enumerate(STEPS if "runs" in parts else []):
        suite = CxrRetrieveSuite() if suite_name == "cxr-retrieve" else get_suite(suite_name)
        rates = rates_from_store(store, models)
        guess = estimate_run(suite, models, settings, rates, tasks)  # `bench run --estimate`
        # the admin panel's estimate: never-measured models timed on a calibration batch
        estimate = estimate_run(suite, models, settings, rates, tasks, calibrate=True)
        started = time.perf_counter()
        summary = run_suite(suite, models, settings.runs_dir / f"step{i}", settings, only=tasks)
        wall = time.perf_counter() - started
        embedding = sum(summary.timing.get(f"{m}_s", 0.0) for m in models)
        low, high = estimate.range_seconds
        qualities = sorted({c.rate.quality for c in estimate.cells})
        rows.append(
            (
                label,
                guess.total_seconds,
                estimate.total_seconds,
                low,
                high,
                embedding,
                wall,
                qualities,
            )
        )
        print(rows[-1], file=sys.stderr, flush=True)
    training = training_steps(settings) if "training" in parts else []
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"Measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} ")
    print(f"({os.cpu_count()} cores, shared with other engineers), load average {load} at end.")
    print()
    print(
        "| run | without calibration | estimate (range) | models' measured time | actual / "
        "estimate | whole run | rates used |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, plain, est, low, high, embedding, wall, qualities in rows:
        ratio = f"{embedding / est:.2f}x" if est else "n/a"
        print(
            f"| {label} | {human_seconds(plain)} | {human_seconds(est)} ({human_seconds(low)} "
            f"to {human_seconds(high)}) | {embedding:.1f} s | {ratio} | {wall:.1f} s | "
            f"{', '.join(qualities)} |"
        )
    print()
    print("| training job | estimate (range) | estimating took | job's measured time | "
          "actual / estimate | from |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for label, est, low, high, spent, wall, source in training:
        print(
            f"| {label} | {human_seconds(est)} ({human_seconds(low)} to {human_seconds(high)}) "
            f"| {spent:.1f} s | {wall:.1f} s | {wall / est:.2f}x | {source} |"
        )


def training_steps(settings) -> list[tuple]:
    """Each TRAINING job estimated as the admin panel does (the newest earlier job of the
    recipe, else calibration runs), then run as a background job; its wall time measured."""
    from medheb_app.eval.estimate import training_estimate
    from medheb_app.services import create_services
    from medheb_app.services.admin_jobs import train_job

    services = create_services(settings, start_bootstrap=False)
    rows = []
    try:
        for label, params in TRAINING:
            started = time.perf_counter()
            history = services.jobs.history(limit=100, kind="train")
            estimate = training_estimate(
                params["recipe"], params["epochs"], params["n"], history, settings
            )
            spent = time.perf_counter() - started
            started = time.perf_counter()
            job = services.jobs.submit("train", params, train_job(settings))
            info = services.jobs.wait(job)
            wall = time.perf_counter() - started
            if info.status != "done":
                raise RuntimeError(f"training job {job} ended {info.status}: {info.error}")
            low, high = estimate.range_seconds
            rows.append((label, estimate.seconds, low, high, spent, wall, estimate.source))
            print(rows[-1], file=sys.stderr, flush=True)
    finally:
        services.jobs.shutdown(wait=False)
    return rows


if __name__ == "__main__":
    main()
