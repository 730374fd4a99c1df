"""Peak memory of `index build` with the local engine and with `--engine ray`, same corpus.

    .venv/bin/python bench/bench_ray_memory.py [--n 200] [--model dual-lite] [--ray-actors N]

Writes `--n` PNG films (512x512, 8-bit) once, then runs `python -m medheb_app index build
--source folder:... --model M --engine E` for each engine in a fresh DATA_DIR (nothing cached),
sampling every 100 ms the sum of the resident memory (RSS) of the build's process tree: the
driver and, for Ray, every process of the cluster it starts (gcs_server, raylet, agents,
workers, actors are all its descendants; processes of other users' Ray clusters on a shared
machine are not counted). RSS counts a shared page once per process that maps it (Ray's object
store in /dev/shm, shared libraries), so the sum is an upper bound on what the build holds.
Prints a markdown block (peak MB, process count at the peak, wall s, load), each process's RSS
at the peak, and the Ray / local ratio for BENCHMARKS.md; the target is <= 1.5x (issue 23
item 8).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rss import git_commit  # noqa: E402

RAY_NAMES = ("raylet", "gcs_server", "ray::", "dashboard", "runtime_env", "log_monitor")


def write_films(folder: Path, n: int) -> Path:
    """`n` 512x512 greyscale PNGs with smooth structure (compress like films, decode for real)."""
    if folder.is_dir() and len(list(folder.glob("*.png"))) == n:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:512, 0:512] / 512.0
    for i in range(n):
        a, b, c = rng.uniform(2, 9, 3)
        image = 127 + 60 * np.sin(a * x + i) * np.cos(b * y) + 30 * np.sin(c * (x + y))
        image += rng.normal(0, 6, image.shape)
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(folder / f"film{i:04d}.png")
    return folder


def is_ray(process: psutil.Process) -> bool:
    try:
        text = " ".join([process.name(), *process.cmdline()[:3]])
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return any(name in text for name in RAY_NAMES)


def sample(root: psutil.Process) -> tuple[int, list[tuple[str, int]]]:
    """(bytes, [(process, bytes)]): RSS summed over `root` and all its live descendants."""
    members = [root]
    with contextlib.suppress(psutil.NoSuchProcess):
        members += root.children(recursive=True)
    total, each = 0, []
    for process in members:
        try:
            rss = process.memory_info().rss
            name = " ".join(process.cmdline()[:1]).rsplit("/", 1)[-1] or process.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        total += rss
        each.append((name[:40], rss))
    return total, each


def measure(command: list[str], env: dict[str, str], interval_s: float = 0.1) -> dict:
    since = time.time()
    load = os.getloadavg()[0]
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    root = psutil.Process(child.pid)
    peak, at_peak = 0, []
    while child.poll() is None:
        total, each = sample(root)
        if total > peak:
            peak, at_peak = total, each
        time.sleep(interval_s)
    err = child.stderr.read() if child.stderr else ""
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command[3:])} failed:\n{err[-2000:]}")
    time.sleep(1.0)  # a cluster the build started must be gone by now
    leftovers = 0  # a Ray process of this build's cluster still running (it must stop all)
    for process in psutil.process_iter(["create_time", "ppid"]):
        if (process.info["create_time"] or 0) >= since and is_ray(process):
            with contextlib.suppress(psutil.Error):
                if str(ROOT) in " ".join(process.cmdline()) and process.info["ppid"] == 1:
                    leftovers += 1
    return {
        "peak_mb": peak / 2**20,
        "processes": len(at_peak),
        "at_peak": sorted(at_peak, key=lambda pair: -pair[1]),
        "wall_s": time.perf_counter() - started,
        "load": (load, os.getloadavg()[0]),
        "leftover_ray_processes": leftovers,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200, help="films in the corpus")
    parser.add_argument("--model", default="dual-lite")
    parser.add_argument("--work", type=Path, default=Path("/tmp/bench-ray-memory"))
    parser.add_argument("--ray-actors", type=int, default=None, help="default: the engine's")
    args = parser.parse_args()
    films = write_films(args.work / "films", args.n)
    rows = {}
    for engine in ("local", "ray"):
        data = args.work / f"data-{engine}"
        shutil.rmtree(data, ignore_errors=True)
        env = {**os.environ, "DATA_DIR": str(data), "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}  # fmt: skip
        command = [sys.executable, "-m", "medheb_app", "index", "build", "--source",
                   f"folder:{films}", "--model", args.model, "--name", "mem",
                   "--engine", engine]  # fmt: skip
        if engine == "ray" and args.ray_actors:
            command += ["--ray-actors", str(args.ray_actors)]
        rows[engine] = measure(command, env)
    commit = git_commit(ROOT)
    print(f"Run {dt.datetime.now(dt.UTC).isoformat(timespec='minutes')} on "
          f"{platform.machine()} ({os.cpu_count()} cores, "
          f"{psutil.virtual_memory().total / 2**30:.0f} GiB), commit {commit}. Command: "
          f"`python bench/bench_ray_memory.py --n {args.n} --model {args.model}"
          f"{f' --ray-actors {args.ray_actors}' if args.ray_actors else ''}` "
          f"({args.n} PNG films 512x512, fresh DATA_DIR each, OMP_NUM_THREADS=1)\n")  # fmt: skip
    print("| engine | peak RSS MB (sum) | processes at peak | wall s | load before -> after |")
    print("|---|---:|---:|---:|---|")
    for engine, row in rows.items():
        before, after = row["load"]
        print(f"| {engine} | {row['peak_mb']:.0f} | {row['processes']} | {row['wall_s']:.1f} | "
              f"{before:.1f} -> {after:.1f} |")  # fmt: skip
    for engine, row in rows.items():
        parts = ", ".join(f"{name} {rss / 2**20:.0f}" for name, rss in row["at_peak"])
        print(f"\n{engine} at its peak (process MB): {parts}")
    ratio = rows["ray"]["peak_mb"] / rows["local"]["peak_mb"]
    print(f"\nRay / local peak memory: {ratio:.2f}x (target <= 1.5x); Ray processes left after "
          f"the build: {rows['ray']['leftover_ray_processes']}")  # fmt: skip


if __name__ == "__main__":
    main()
