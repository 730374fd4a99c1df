"""Search with logic-aware ranking against cosine, through the search service, on one index.

    .venv/bin/python bench/bench_search_logic.py                  # dual-lite on demo-cxr
    .venv/bin/python bench/bench_search_logic.py --model dual-lite@label-aware

Runs the 145 CXR-Retrieve queries (10 single, 45 pair, 90 "A and no B") through
medheb_app.search.search with ranking="similarity" and ranking="logic" on the same index,
and prints per regime the share of the top 5 that meets the query (the service's own
`satisfies`, main setting) and, for negation, the share of hard negatives (A and B both
positive). The logic probes are fit on the index's train studies, so the top 5 is also scored
among held-out studies only (val and test: every hit ranked, train hits skipped), which is
the honest number for studies the probes never saw. Latency is the service end to end per
query (parse, encode, rank, metadata), p50 / p95 (and, for similarity, with the query encoded at
1 vs 2 torch threads, alternating per query); the first logic search also fits and caches
the probes, and that one-off time is printed separately. Results are markdown;
BENCHMARKS.md quotes them with this command.
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

from medheb_app.evidence.findings import CXR_RETRIEVE_10  # noqa: E402
from medheb_app.query.parser import is_hard_negative  # noqa: E402
from medheb_app.ranking.index_logic import index_probe_path, labelled_train_rows  # noqa: E402
from medheb_app.search import MAX_K, search  # noqa: E402
from medheb_app.settings import Settings  # noqa: E402
from medheb_app.tasks.cxr_retrieve import benchmark_queries  # noqa: E402

TOP = 5


def top_shares(results: list, constraints, heldout: bool) -> tuple[float, float]:
    """(share meeting the query, share hard negatives) in the top 5 of `results`."""
    hits = [hit for hit in results if not heldout or hit.split != "train"][:TOP]
    if not hits:
        return float("nan"), float("nan")
    met = np.mean([bool(hit.satisfies) for hit in hits])
    hard = np.mean([is_hard_negative(hit.findings, constraints) for hit in hits])
    return float(met), float(hard)


def run(args: argparse.Namespace) -> None:
    from medheb_app.index.catalog import load_index
    from medheb_app.models.registry import load_embedder

    settings = Settings.from_env()
    embedder = load_embedder(args.model, settings)
    loaded = load_index(args.index, embedder, settings)
    count = loaded.index.count
    rows = labelled_train_rows(loaded, CXR_RETRIEVE_10)
    probe_file = index_probe_path(settings, embedder, loaded, rows)
    if args.refit and probe_file.is_file():
        probe_file.unlink()
        probe_file.with_suffix(".json").unlink(missing_ok=True)
    cached = probe_file.is_file()
    started = time.perf_counter()
    search(
        query_text="pleural effusion and no cardiomegaly",
        model_spec=args.model,
        index=args.index,
        k=TOP,
        settings=settings,
        ranking="logic",
    )
    first_logic_s = time.perf_counter() - started
    queries = benchmark_queries()
    table: dict[tuple[str, str, bool], list[tuple[float, float]]] = {}
    latency: dict[str, list[float]] = {"similarity": [], "logic": []}
    for ranking in ("similarity", "logic"):
        for query in queries:
            started = time.perf_counter()
            search(query.text, None, args.model, args.index, 10, settings, ranking=ranking)
            latency[ranking].append(time.perf_counter() - started)
            response = search(
                query.text,
                None,
                args.model,
                args.index,
                min(count, MAX_K),
                settings,
                ranking=ranking,
                include_training=True,  # "whole index": training studies scored out of fold
            )
            for heldout in (False, True):
                shares = top_shares(response.results, query.constraints, heldout)
                table.setdefault((ranking, query.kind, heldout), []).append(shares)
    print(
        f"## Logic-aware search vs cosine (bench/bench_search_logic.py)\n\n"
        f"`{' '.join(sys.argv)}` on {platform.node()} ({os.cpu_count()} CPUs), "
        f"{dt.date.today()}: model {args.model}, index {args.index} ({count} studies, "
        f"{len(rows)} labelled train studies for the probes). Top-{TOP} share meeting the "
        "query (%), main setting; HN = hard negatives in the top 5 of negation queries (%).\n"
    )
    print("| ranking | hits from | single | pair | negation | negation HN ↓ | p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for ranking in ("similarity", "logic"):
        times = 1000 * np.asarray(latency[ranking])
        for heldout in (False, True):
            cells = []
            for kind in ("single", "pair", "negation"):
                values = np.asarray(table[(ranking, kind, heldout)])
                cells.append(f"{100 * np.nanmean(values[:, 0]):.1f}")
            negation = np.asarray(table[(ranking, "negation", heldout)])
            cells.append(f"{100 * np.nanmean(negation[:, 1]):.1f}")
            source = "val + test only" if heldout else "whole index"
            print(
                f"| {ranking} | {source} | {' | '.join(cells)} | "
                f"{np.percentile(times, 50):.0f} | {np.percentile(times, 95):.0f} |"
            )
    threads_table(queries, args, settings)
    what = "loaded the cached probes" if cached else "fit and cached the probes"
    print(
        f"\nFirst logic-aware search {first_logic_s:.1f} s ({what}). Latency: the search "
        f"service with k = 10 (the shares above read the top {min(count, MAX_K)})."
    )


def threads_table(queries: list, args: argparse.Namespace, settings: Settings) -> None:
    """Similarity search p50/p95 with the query encoded at 1 and at 2 torch threads
    (Settings.query_threads), alternating per query in one run, with the load average."""
    import dataclasses

    load_before = os.getloadavg()[0]
    times: dict[int, list[float]] = {1: [], 2: []}
    for query in queries:
        for threads in (1, 2):
            chosen = dataclasses.replace(settings, query_threads=threads)
            started = time.perf_counter()
            search(query.text, None, args.model, args.index, 10, chosen, ranking="similarity")
            times[threads].append(1000 * (time.perf_counter() - started))
    print(
        f"\nQuery encoding threads (MEDHEB_QUERY_THREADS), similarity, k = 10, alternating per "
        f"query; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after:\n"
    )
    print("| query threads | p50 ms | p95 ms |")
    print("|---|---|---|")
    for threads, values in times.items():
        print(f"| {threads} | {np.percentile(values, 50):.0f} | {np.percentile(values, 95):.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="dual-lite")
    parser.add_argument("--index", default="demo-cxr")
    parser.add_argument("--refit", action="store_true", help="drop cached probes first")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
