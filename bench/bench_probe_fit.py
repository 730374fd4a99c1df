"""The logic-aware probes' fit (ranking/probes.py) with the probe's own ROC AUC scorer against
scikit-learn's `scoring="roc_auc"`, in one run, on the same features.

    .venv/bin/python bench/bench_probe_fit.py                 # NIH sample, dual-lite features
    .venv/bin/python bench/bench_probe_fit.py --repeats 5

The features are dual-lite's image embeddings of the NIH ChestX-ray14 sample in ../shared/data
(1,000 real radiographs, their 14 labels from labels.csv), embedded once; then `fit_probe` runs
`--repeats` times with each scorer, alternating, and the chosen C per finding is compared. This
is the step every index build ends with ("preparing logic-aware ranking"). Prints a markdown
block for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
NIH = ROOT.parent / "shared" / "data" / "nih-cxr14-1000"


def nih_features(n: int) -> tuple[np.ndarray, list[dict[str, object]], list[str]]:
    """dual-lite's embeddings of the first n NIH studies (as an index build stores them) and
    their label rows, read through the project's own `nih:` source."""
    from medheb_app.index.sources import load_source
    from medheb_app.models.registry import load_embedder
    from medheb_app.settings import Settings

    settings = Settings.from_env()
    loaded = load_source(f"nih:{NIH}", settings)
    studies = loaded.studies[:n]
    embedder = load_embedder("dual-lite", settings)
    vectors = np.concatenate(
        [embedder.encode(studies[i : i + 32]) for i in range(0, len(studies), 32)]
    )
    return vectors, [s.findings for s in studies], list(loaded.vocabulary.names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from medheb_app.ranking import probes

    vectors, rows, findings = nih_features(args.n)
    own = probes._roc_auc_scorer
    seconds: dict[str, list[float]] = {"own": [], "sklearn": []}
    chosen: dict[str, tuple[float, ...]] = {}
    for _ in range(args.repeats):
        for name, scorer in (("sklearn", "roc_auc"), ("own", own)):
            probes._roc_auc_scorer = scorer  # read by _fit_one at call time
            started = time.perf_counter()
            probe = probes.fit_probe(vectors, rows, findings, "bench")
            seconds[name].append(time.perf_counter() - started)
            chosen[name] = probe.c
    probes._roc_auc_scorer = own
    fitted = sum(c > 0 for c in chosen["own"])
    own_s, sk_s = float(np.median(seconds["own"])), float(np.median(seconds["sklearn"]))
    print(f"### Probe fit ({dt.date.today()}, {platform.node()}, {os.cpu_count()} CPUs)\n")
    print(f"`{' '.join([Path(sys.executable).name, *sys.argv])}`\n")
    print(f"{len(vectors)} NIH images, dual-lite {vectors.shape[1]}-d, {fitted} of")
    print(f"{len(findings)} findings fit, median of {args.repeats} fits each:\n")
    print("| scorer | fit_probe | ratio |")
    print("|---|---:|---:|")
    print(f"| scikit-learn `roc_auc` | {sk_s:.2f} s | 1.00 |")
    print(f"| probes.roc_auc | {own_s:.2f} s | {own_s / sk_s:.2f} |")
    print(f"\nSame C for every finding: {chosen['own'] == chosen['sklearn']}.")


if __name__ == "__main__":
    main()
