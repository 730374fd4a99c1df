"""What full cycle collections cost a process's start (medheb_app/startup_heap.py).

    .venv/bin/python bench/bench_startup_gc.py [--rounds 5] [--write]

Each round starts fresh Pythons, alternating with and without `startup_phase()`, and reads
each one's own CPU seconds (time.process_time) and the full collections it made:
- app.py's start: its imports, the services (no bootstrap thread) and build_server;
- a Ray actor's start: a dual-lite load, as EmbedActor.__init__ does.
Reports medians and the ratio phase / plain. `--write` puts the table into BENCHMARKS.md
between bench_startup_gc markers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_api import write_section  # noqa: E402
from bench.fresh_starts import fresh_python, section_heading  # noqa: E402

MARKERS = ("<!-- bench_startup_gc:start -->", "<!-- bench_startup_gc:end -->")
STARTS = {
    "app.py's start (imports, services, build_server)": "app",
    "a Ray actor's start (dual-lite loaded)": "actor",
}
CHILD = """
import contextlib, gc, sys, time
full = []
gc.callbacks.append(lambda phase, info: phase == "stop" and full.append(info["generation"] == 2))
started = time.process_time()
from medheb_app.startup_heap import startup_phase
with startup_phase() if sys.argv[2] == "phase" else contextlib.nullcontext():
    from medheb_app.settings import Settings
    settings = Settings.from_env()
    if sys.argv[1] == "app":
        from medheb_app.services import create_services
        from medheb_app.ui.server import build_server
        build_server(create_services(settings, start_bootstrap=False))
    else:
        from medheb_app.models import registry
        registry.load_embedder("dual-lite", settings, device="cpu")
print(time.process_time() - started, sum(full))
"""


def one_start(what: str, mode: str, data_dir: str) -> tuple[float, int]:
    """CPU seconds of one fresh Python's start, and its full collections."""
    env = {"DATA_DIR": data_dir, "OMP_NUM_THREADS": "1"}
    seconds, collections = fresh_python(CHILD, what, mode, env=env)
    return float(seconds), int(collections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as data_dir:
        for label, what in STARTS.items():
            one_start(what, "phase", data_dir)  # warm the page cache for both ways alike
            plain, phased, plain_full, phased_full = [], [], [], []
            for _ in range(args.rounds):
                seconds, full = one_start(what, "plain", data_dir)
                plain.append(seconds)
                plain_full.append(full)
                seconds, full = one_start(what, "phase", data_dir)
                phased.append(seconds)
                phased_full.append(full)
            a, b = statistics.median(phased), statistics.median(plain)
            fa, fb = statistics.median(phased_full), statistics.median(plain_full)
            rows.append((label, b, fb, a, fa, b - a, a / b))
            print(f"{label}: plain {b:.2f} s ({fb:g} full collections), phase {a:.2f} s", end="")
            print(f" ({fa:g}), saved {b - a:.2f} s (phase / plain {a / b:.2f})")
    lines = [
        MARKERS[0],
        *section_heading("bench_startup_gc.py", args.rounds),
        "",
        "| start of a fresh Python | plain (CPU s) | full collections | startup_phase (CPU s) "
        "| full collections | saved | phase / plain |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r[0]} | {r[1]:.2f} | {r[2]:g} | {r[3]:.2f} | {r[4]:g} | {r[5]:.2f} | {r[6]:.2f} |"
            for r in rows
        ),
        "",
        f"Medians of {args.rounds} starts each way, alternating.",
        MARKERS[1],
    ]
    if args.write:
        write_section("\n".join(lines), MARKERS)


if __name__ == "__main__":
    main()
