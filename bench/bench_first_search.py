"""The first logic-aware search on a fresh start, after the (warm) demo bootstrap.

    DATA_DIR=/path/to/data .venv/bin/python bench/bench_first_search.py          # built demo
    DATA_DIR=/tmp/d .venv/bin/python bench/bench_first_search.py --build --n 200  # build first

A fresh process does what `python app.py` does before a visitor's first search: the demo
bootstrap (`ensure_demo`: everything is on disk, so it loads the models, the indices and the
logic-aware probes into memory), then the README's example query through the search service
exactly as the web page calls it (defaults: the strongest built model, ranking "auto",
public=True), then the same query again. `--build` first runs `demo build` in its own process
(not timed here: that is the one-off cold start). Prints a markdown block for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

QUERY = "pleural effusion and no cardiomegaly"


def child() -> None:
    """The fresh process: bootstrap, then two searches; one JSON line on stdout."""
    started = time.perf_counter()
    from medheb_app.demo import ensure_demo
    from medheb_app.search import search
    from medheb_app.settings import Settings

    imported = time.perf_counter()
    settings = Settings.from_env()
    assets = ensure_demo(settings)
    booted = time.perf_counter()
    first = search(query_text=QUERY, settings=settings, public=True)
    searched = time.perf_counter()
    second = search(query_text=QUERY, settings=settings, public=True)
    again = time.perf_counter()
    print(
        json.dumps(
            {
                "import_s": imported - started,
                "bootstrap_s": booted - imported,
                "built_anything": any(entry["built"] for entry in assets.indices),
                "n": assets.n,
                "models": [entry["model"] for entry in assets.indices],
                "first_ms": 1000 * (searched - booted),
                "second_ms": 1000 * (again - searched),
                "model": first.model,
                "ranking": first.ranking,
                "meets": sum(bool(hit.satisfies) for hit in first.results),
                "k": len(first.results),
                "same": [h.id for h in first.results] == [h.id for h in second.results],
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", action="store_true", help="run `demo build` first")
    parser.add_argument("--n", type=int, default=None, help="demo size for --build")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child()
        return
    env = dict(os.environ)
    if args.n:
        env["MEDHEB_DEMO_SIZE"] = str(args.n)
    if args.build:
        command = [sys.executable, "-m", "medheb_app", "demo", "build"]
        subprocess.run(command, cwd=ROOT, env=env, check=True)
    out = subprocess.run(
        [sys.executable, __file__, "--child"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    machine = platform.processor() or platform.machine()
    print("## First logic-aware search on a fresh start (bench/bench_first_search.py)\n")
    print(
        f"- Date: {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M}+00:00; {machine}, {os.cpu_count()} "
        f"cores, Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}."
    )
    size = f" --n {args.n}" if args.n else ""
    print(f"- Command: `DATA_DIR=... .venv/bin/python bench/bench_first_search.py{size}`")
    print(
        f"- Demo of {result['n']} phantoms built for {', '.join(result['models'])}; the warm "
        f"bootstrap built nothing: {not result['built_anything']}."
    )
    print(
        f"- Fresh process: imports {result['import_s']:.1f} s, warm bootstrap (models, "
        f"indices and probes into memory) {result['bootstrap_s']:.1f} s."
    )
    print(
        f"- First search of {QUERY!r} with the defaults ({result['model']}, "
        f"{result['ranking']}): **{result['first_ms']:.0f} ms**; second: "
        f"{result['second_ms']:.0f} ms; {result['meets']}/{result['k']} hits meet the query; "
        f"same ranking both times: {result['same']}."
    )


if __name__ == "__main__":
    main()
