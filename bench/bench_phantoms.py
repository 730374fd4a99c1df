"""Phantom generator timing: chest studies per second, volume subjects, save to disk.

    .venv/bin/python bench/bench_phantoms.py                  # 2,000 chest studies, 48 subjects
    .venv/bin/python bench/bench_phantoms.py --n 500 --subjects 8

Prints wall-clock and CPU seconds (wall includes waiting for a shared CPU; CPU time is what the
generator itself costs). The one-off load of the CheXpert table is timed separately.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from medheb_app.evidence.phantoms import (  # noqa: E402
    generate_chest_corpus,
    generate_volume_corpus,
    save_corpus,
)
from medheb_app.evidence.phantoms.labels import frontal_label_table  # noqa: E402


def timed(label: str, fn, count: int, unit: str):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(
        f"{label:<34} wall {wall:7.2f} s  cpu {cpu:7.2f} s  "
        f"({1000 * wall / count:.1f} ms wall, {1000 * cpu / count:.1f} ms cpu per {unit})"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="chest studies")
    parser.add_argument("--subjects", type=int, default=48, help="volume subjects")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    timed("CheXpert label table (once)", frontal_label_table, 1, "load")
    chest = timed(
        f"{args.n} chest studies (256x256)",
        lambda: generate_chest_corpus(n=args.n, seed=args.seed),
        args.n,
        "study",
    )
    volumes = timed(
        f"{args.subjects} subjects (CT, T1, T2, DRR)",
        lambda: generate_volume_corpus(n_subjects=args.subjects, seed=args.seed),
        args.subjects,
        "subject",
    )
    with tempfile.TemporaryDirectory() as directory:
        studies = chest + volumes
        timed(
            "save_corpus (PNG + .npy)",
            lambda: save_corpus(studies, Path(directory)),
            len(studies),
            "study",
        )
        size = sum(p.stat().st_size for p in Path(directory).rglob("*") if p.is_file())
        print(f"{'corpus on disk':<34} {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
