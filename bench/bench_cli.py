"""How fast the CLI answers: cold `index list`, `index info`, `search` (issue 23 item 7).

    .venv/bin/python bench/bench_cli.py [--data-dir /tmp/bench-cli] [--n 200] [--repeats 5]

Each command runs as a fresh `python -m medheb_app ...` subprocess (what a user or a script
pays), `--repeats` times; the table gives the median and the range of wall seconds, the peak
RSS of the process (psutil, sampled every 50 ms) and the 1-minute load average before each
run. The index is built once first (`index build --source phantom:N`, the default model,
which also prepares its logic-aware probes: "warm"), and one search is run untimed, so the
timed searches find the index, its probes and the OS file cache as a user's next search would.
Scripts that search often should call a running server's POST /api/v1/search instead (torch
and the model stay loaded there); bench/bench_api.py measures that path. Prints a markdown
block for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rss import git_commit, tree_rss  # noqa: E402

INDEX = "bench-cli"
QUERY = "pleural effusion and no cardiomegaly"


def cli(*argv: str) -> list[str]:
    return [sys.executable, "-m", "medheb_app", *argv]


def environment(data_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DATA_DIR": str(data_dir),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS", "1"),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
    }


def prepare(data_dir: Path, n: int, env: dict[str, str]) -> str:
    """Build the bench index (once) and run one untimed search; returns the model spec."""
    listing = subprocess.run(cli("index", "list", "--json"), env=env, capture_output=True,
                             text=True, check=True, cwd=ROOT)  # fmt: skip
    built = [e for e in json.loads(listing.stdout) if e["name"] == INDEX and e.get("count")]
    if not built:
        subprocess.run(cli("index", "build", "--source", f"phantom:{n}", "--name", INDEX),
                       env=env, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
        listing = subprocess.run(cli("index", "list", "--json"), env=env, capture_output=True,
                                 text=True, check=True, cwd=ROOT)  # fmt: skip
        built = [e for e in json.loads(listing.stdout) if e["name"] == INDEX and e.get("count")]
    subprocess.run(cli("search", "--index", INDEX, "--text", QUERY), env=env, check=True,
                   cwd=ROOT, stdout=subprocess.DEVNULL)  # fmt: skip
    return str(built[0]["model_spec"])


def run_sampled(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MB sampled every 50 ms) of one run, its output discarded."""
    import psutil

    started = time.perf_counter()
    child = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    process, peak = psutil.Process(child.pid), 0
    while child.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            peak = max(peak, tree_rss(process))
        time.sleep(0.05)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} exited {child.returncode}")
    return time.perf_counter() - started, peak / 2**20


def time_command(argv: list[str], env: dict[str, str], repeats: int) -> dict[str, object]:
    walls, peaks, loads = [], [], []
    for _ in range(repeats):
        loads.append(os.getloadavg()[0])
        seconds, peak_mb = run_sampled(argv, env)
        walls.append(seconds)
        peaks.append(peak_mb)
    return {
        "median_s": statistics.median(walls),
        "min_s": min(walls),
        "max_s": max(walls),
        "peak_rss_mb": max(peaks),
        "load": (min(loads), max(loads)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=Path("/tmp/bench-cli"))
    parser.add_argument("--n", type=int, default=200, help="phantom studies in the index")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    env = environment(args.data_dir)
    args.data_dir.mkdir(parents=True, exist_ok=True)
    model = prepare(args.data_dir, args.n, env)
    search = f'`search --index {INDEX} --text "{QUERY}"`'
    commands = {
        "`index list`": cli("index", "list"),
        f"`index info {INDEX}`": cli("index", "info", INDEX),
        search: cli("search", "--index", INDEX, "--text", QUERY),
    }
    rows = {label: time_command(argv, env, args.repeats) for label, argv in commands.items()}
    commit = git_commit(ROOT)
    print(f"Run {dt.datetime.now(dt.UTC).isoformat(timespec='minutes')} on "
          f"{platform.machine()} ({os.cpu_count()} cores), commit {commit}; index {INDEX}: "
          f"phantom:{args.n} with {model} (probes prepared), OMP_NUM_THREADS="
          f"{env['OMP_NUM_THREADS']}. Command: `python bench/bench_cli.py --n {args.n} "
          f"--repeats {args.repeats}`\n")  # fmt: skip
    print("| command | median s | min-max s | peak RSS MB | load (1 min) |")
    print("|---|---:|---:|---:|---|")
    for label, row in rows.items():
        rss = f"{row['peak_rss_mb']:.0f}"
        low, high = row["load"]  # type: ignore[misc]
        print(f"| {label} | {row['median_s']:.2f} | {row['min_s']:.2f}-{row['max_s']:.2f} | "
              f"{rss} | {low:.1f}-{high:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
