"""A query's text encode alone and beside busy Python threads: the module against its graph.

    .venv/bin/python bench/bench_encode_contention.py [--busy 2] [--queries 30]

A served query is encoded while other request threads run Python (HTTP, access checks, JSON).
Each of the MiniLM forward's operators hands the interpreter lock back and must take it again,
and a busy thread keeps it for up to the switch interval (5 ms), so an eager forward is slowed
by its operator count; the TorchScript graph of the text tower (TextTower._inference_graph)
takes the lock only around the call. Prints median and p90 ms per one-query encode (tokenizer
included) for the eager module and the tower's graph, each alone and beside `--busy` threads
that only compute. One torch thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from medheb_app.models.dual_lite import shared_towers  # noqa: E402

FINDINGS = ("atelectasis", "cardiomegaly", "pneumonia", "rib fracture", "lung lesion")
OTHERS = ("pleural effusion", "edema", "pneumothorax", "consolidation", "lung opacity")


def timed(encode: Callable[[str], object], texts: list[str]) -> tuple[float, float]:
    """Median and p90 ms of encoding each text alone (after one warm-up pass)."""
    for text in texts[:3]:
        encode(text)
    spans = []
    for text in texts:
        started = time.perf_counter()
        encode(text)
        spans.append(1000 * (time.perf_counter() - started))
    spans.sort()
    return statistics.median(spans), spans[int(0.9 * (len(spans) - 1))]


def beside_busy_threads(
    busy: int, measure: Callable[[], tuple[float, float]]
) -> tuple[float, float]:
    """`measure()` while `busy` threads run pure-Python loops."""
    stop = threading.Event()

    def spin() -> None:
        total = 0
        while not stop.is_set():
            for i in range(1000):
                total += i

    threads = [threading.Thread(target=spin, daemon=True) for _ in range(busy)]
    for thread in threads:
        thread.start()
    try:
        return measure()
    finally:
        stop.set()
        for thread in threads:
            thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy Python threads beside it")
    parser.add_argument("--queries", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(1)
    _, tower = shared_towers()
    tower.eval()
    pairs = [f"{a} and no {b}" for a in FINDINGS for b in OTHERS]
    texts = (pairs * (1 + args.queries // len(pairs)))[: args.queries]

    def module(text: str) -> object:
        tokens = tower.tokenize([text])
        with torch.no_grad():  # autograd on: the module runs, not the graph
            return tower(tokens["input_ids"], tokens["attention_mask"])

    def graph(text: str) -> object:
        with torch.inference_mode():
            return tower.encode([text])

    print(f"torch {torch.__version__}, 1 thread, {len(texts)} one-query encodes per cell")
    print(f"| encode | alone: median / p90 ms | beside {args.busy} busy threads |")
    print("|---|---|---|")
    for name, encode in (("eager module", module), ("traced graph", graph)):
        alone = timed(encode, texts)
        busy = beside_busy_threads(args.busy, lambda encode=encode: timed(encode, texts))
        print(f"| {name} | {alone[0]:.1f} / {alone[1]:.1f} | {busy[0]:.1f} / {busy[1]:.1f} |")


if __name__ == "__main__":
    main()
