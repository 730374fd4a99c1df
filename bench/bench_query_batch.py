"""Does batching query encodes change what a search answers? Every query of bench_api's mix
searched on the built demo twice: once encoded alone (MEDHEB_QUERY_BATCH=1's path) and once
from vectors encoded in batches of --batch (what QueryBatcher gives under load), through the
real search() with the default model, index and logic-aware ranking.

    DATA_DIR=/tmp/bench-api-data .venv/bin/python bench/bench_query_batch.py [--limit 2760]

Reports the largest vector difference, how many queries ranked the same top 10 (ids and order)
and the largest score difference, and the time per text of one-at-a-time against batched
encodes (one torch thread, as the server's MEDHEB_QUERY_THREADS=1).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_api import query_space  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=len(query_space()))
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    import numpy as np
    import torch

    from medheb_app.models import registry
    from medheb_app.models.query_cache import cache_of
    from medheb_app.search import search
    from medheb_app.settings import Settings

    torch.set_num_threads(1)
    base = Settings.from_env()
    plain = dataclasses.replace(base, query_cache=0, query_batch=1)
    texts = query_space()[: args.limit]
    first = search(texts[0], settings=plain)
    embedder = registry.load_embedder(first.model, plain)
    started = time.perf_counter()
    alone = np.concatenate([embedder.encode([text]) for text in texts])
    alone_s = time.perf_counter() - started
    started = time.perf_counter()
    batched = np.concatenate(
        [embedder.encode(texts[i : i + args.batch]) for i in range(0, len(texts), args.batch)]
    )
    batched_s = time.perf_counter() - started
    cached = dataclasses.replace(base, query_cache=len(texts) + 8, query_batch=1)
    cache = cache_of(embedder)
    key = (first.model, embedder.card.fingerprint)
    for text, vector in zip(texts, batched, strict=True):
        cache.put((*key, text), vector[None], cached.query_cache)  # searches read these
    same, score_diff, refused = 0, 0.0, 0
    for text in texts:
        try:
            a = search(text, settings=plain).results
        except Exception:  # a query this index refuses is refused the same either way
            refused += 1
            continue
        b = search(text, settings=cached).results
        same += [h.id for h in a] == [h.id for h in b]
        diffs = [abs(x.score - y.score) for x, y in zip(a, b, strict=False)]
        score_diff = max(score_diff, *diffs)
    hits = cache.stats().hits
    print(
        f"{len(texts)} queries ({refused} refused), model {first.model}, index {first.index}, "
        f"load {os.getloadavg()[0]:.1f}: largest vector difference "
        f"{np.abs(alone - batched).max():.2e}; same top 10 (ids and order) for "
        f"{same} of {len(texts) - refused}; largest score difference {score_diff:.2e} "
        f"({hits} cache hits = batched vectors used); encode per text alone "
        f"{1000 * alone_s / len(texts):.2f} ms, in batches of {args.batch} "
        f"{1000 * batched_s / len(texts):.2f} ms"
    )


if __name__ == "__main__":
    main()
