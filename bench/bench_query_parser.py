"""The query parser: latency per query and how it reads report sentences against labels.

    .venv/bin/python bench/bench_query_parser.py            # 1,000 phantom reports, seed 0

Parses, with the CXR-Retrieve ten and the CheXpert 14: the 145 CXR-Retrieve benchmark
queries, `--reports` phantom reports (radiologist phrasing that asserts, negates or hedges each
coded finding; pixels are not rendered) and worst cases at the 1,000-character limit (one made
of words the parser does not know, so every word goes through the spelling check). Prints
p50 / p95 / max milliseconds per query, and for the reports how often a finding the labels say
is present was excluded, a confirmed-absent one required, and what share of present findings
was read as required. Results are markdown; BENCHMARKS.md quotes them with this command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from medheb_app.evidence.findings import CHEXPERT_14, CXR_RETRIEVE_10  # noqa: E402
from medheb_app.evidence.phantoms.labels import sample_label_rows  # noqa: E402
from medheb_app.evidence.phantoms.plan import plan_findings  # noqa: E402
from medheb_app.evidence.phantoms.reports import write_report  # noqa: E402
from medheb_app.query.parser import MAX_QUERY_CHARS, parse_query  # noqa: E402
from medheb_app.tasks.cxr_retrieve import benchmark_queries  # noqa: E402


def reports(n: int, seed: int) -> list[tuple[str, dict]]:
    rows = []
    for index, row in enumerate(sample_label_rows(n, seed)):
        specs = plan_findings(row.findings, np.random.default_rng([seed, 1, index]))
        text = write_report(row.findings, specs, row.view, np.random.default_rng([seed, 2, index]))
        rows.append((text, dict(row.findings)))
    return rows


def worst_cases() -> list[str]:
    unknown = " ".join(f"zorbl{chr(97 + i % 26)}x" for i in range(200))[:MAX_QUERY_CHARS]
    misspelt = " ".join(["efusion and no pneumothrax"] * 60)[:MAX_QUERY_CHARS]
    sentences = " ".join(["Heart size is normal. No effusion or pneumothorax."] * 30)
    return [unknown, misspelt, sentences[:MAX_QUERY_CHARS]]


def timed(texts: list[str], parse: Callable[[str], object]) -> list[float]:
    for text in texts[:5]:
        parse(text)  # warm the per-vocabulary phrase table
    times = []
    for text in texts:
        started = time.perf_counter()
        parse(text)
        times.append((time.perf_counter() - started) * 1000)
    return times


def row(name: str, times: list[float]) -> str:
    p50, p95 = np.percentile(times, [50, 95])
    return f"| {name} | {len(times)} | {p50:.2f} | {p95:.2f} | {max(times):.2f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    corpus = reports(args.reports, args.seed)
    texts = {
        "CXR-Retrieve benchmark queries": [q.text for q in benchmark_queries()],
        "phantom reports": [text for text, _ in corpus],
        "1,000-character worst cases (x20)": worst_cases() * 20,
    }
    print(
        f"{dt.date.today()} · {platform.processor() or platform.machine()} · Python "
        f"{platform.python_version()} · {args.reports} reports, seed {args.seed}\n"
    )
    print("| vocabulary: texts | n | p50 ms | p95 ms | max ms |\n|---|---|---|---|---|")
    for vocabulary, label in ((CXR_RETRIEVE_10, "CXR-Retrieve 10"), (CHEXPERT_14, "CheXpert 14")):
        for name, items in texts.items():
            print(row(f"{label}: {name}", timed(items, lambda t, v=vocabulary: parse_query(t, v))))
    print("\n| vocabulary | present excluded | absent (0) required | present read as required |")
    print("|---|---|---|---|")
    for vocabulary, label in ((CXR_RETRIEVE_10, "CXR-Retrieve 10"), (CHEXPERT_14, "CheXpert 14")):
        excluded = required = read = present = 0
        for text, labels in corpus:
            parsed = parse_query(text, vocabulary)
            excluded += sum(labels.get(n) == 1 for n in parsed.negative)
            required += sum(labels.get(n) == 0 for n in parsed.positive)
            wanted = [n for n in vocabulary if labels.get(n) == 1 and n != "No Finding"]
            present += len(wanted)
            read += sum(n in parsed.positive for n in wanted)
        print(f"| {label} | {excluded} | {required} | {read} / {present} |")


if __name__ == "__main__":
    main()
