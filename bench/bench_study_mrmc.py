"""Coverage of the reader study's 95% intervals over simulated studies where the truth is
known (issue 18 item 1): ORH RRRC / FRRC / RRFC, the rater x query cluster bootstrap and the
per-vote Wilson interval, for several designs. Prints a Markdown table for BENCHMARKS.md.

    OMP_NUM_THREADS=1 python bench/bench_study_mrmc.py [--studies 500] [--boot 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import UTC, datetime

from medheb_app.study.simulation import coverage

DESIGNS = [
    # (raters, queries, raters per query or None = every rater on every query, sd_reader, sd_case)
    (5, 40, None, 0.6, 1.0),
    (10, 50, None, 0.5, 0.8),
    (8, 60, 2, 0.6, 1.0),
    (4, 100, 1, 0.6, 1.0),
    (5, 40, None, 0.0, 0.0),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=500)
    parser.add_argument("--boot", type=int, default=200)
    args = parser.parse_args()
    print(
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
        f"load {os.getloadavg()[0]:.2f}; {args.studies} studies per design, bootstrap "
        f"{args.boot} draws, mu 0.4 (truth about 0.58)\n"
    )
    print(
        "| raters x queries | raters per query | sd rater, sd query | truth | RRRC | FRRC | "
        "RRFC | bootstrap | Wilson | RRRC half-width | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for readers, cases, per_case, sd_r, sd_c in DESIGNS:
        start = time.perf_counter()
        result = coverage(
            args.studies, readers, cases, sd_reader=sd_r, sd_case=sd_c, per_case=per_case,
            boot=args.boot,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        print(
            f"| {readers} x {cases} | {per_case or 'all'} | {sd_r}, {sd_c} | "
            f"{result['truth']:.3f} | {result['RRRC']:.1%} | {result['FRRC']:.1%} | "
            f"{result['RRFC']:.1%} | {result['bootstrap']:.1%} | {result['wilson']:.1%} | "
            f"{result['rrrc_half_width']:.3f} | {seconds:.1f} |"
        )


if __name__ == "__main__":
    main()
