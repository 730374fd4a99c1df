"""Time `bench run` on the medheb-lite suite cold (fresh DATA_DIR) and warm (same DATA_DIR).

Cold generates the phantom corpora and embeds everything; warm reads the saved corpora and
the embedding cache. Prints wall and CPU seconds (CPU = user + system of the child process,
which is what a busy shared machine cannot inflate) and peak memory.

    .venv/bin/python bench/bench_medheb.py --model dual-lite --model random [--data-dir D]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed_run(models: list[str], data_dir: Path, out: Path) -> dict[str, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-m", "medheb_app", "bench", "run", "--out", str(out)]
    for model in models:
        command += ["--model", model]
    subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "DATA_DIR": str(data_dir)},
        check=True,
        stdout=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "wall_s": round(time.perf_counter() - started, 1),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1),
        "peak_rss_mb": round(after.ru_maxrss / 1024, 0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True)
    parser.add_argument("--data-dir", type=Path, default=None, help="default: a fresh temp dir")
    args = parser.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="medheb-bench-"))
    print(f"DATA_DIR={data_dir} models={args.model} cores={os.cpu_count()}")
    for label in ("cold", "warm"):
        numbers = timed_run(args.model, data_dir, data_dir / f"run-{label}")
        print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in numbers.items()), flush=True)


if __name__ == "__main__":
    main()
