"""Retrieval benchmark: query latency, embedding throughput, index builds, ANN recall, app RSS.

Writes its section of BENCHMARKS.md (between markers, other sections kept) and prints it.

    .venv/bin/python bench/bench_retrieval.py                 # full run (10k and 100k)
    .venv/bin/python bench/bench_retrieval.py --sizes 10000 --images 32 --skip-rss  # quick

What is measured (numbers are wall-clock on this machine, under whatever load it has):
- text-query latency end to end = dual-lite text tower encode + FAISS top-10, p50/p95 over
  the 145 CXR-Retrieve-style queries, on indices of 10k and 100k items. The collections are
  synthetic: real dual-lite demo image embeddings perturbed with Gaussian noise (so the
  vectors have the cluster structure of real embeddings), or isotropic unit vectors when no
  demo index exists; the query encoder is the real text tower.
- the search service end to end (parse + encode + search + metadata) on the demo index.
- image embedding throughput of the dual-lite image tower (images/s) on phantom images.
- index build time (exact, IVF-Flat, HNSW) and recall@10 of the approximate kinds vs exact.
- peak RSS of a process that serves searches with the default models loaded.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from itertools import combinations, permutations
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rss import (  # noqa: E402
    free_port,
    git_commit,
    peak_rss_of_command,
    peak_rss_of_server,
)
from medheb_app.evidence.findings import CXR_RETRIEVE_10  # noqa: E402
from medheb_app.index.faiss_index import VectorIndex  # noqa: E402
from medheb_app.models.base import l2_normalise  # noqa: E402
from medheb_app.settings import Settings  # noqa: E402

START = "<!-- bench_retrieval:start -->"
END = "<!-- bench_retrieval:end -->"
ANN_KINDS: dict[str, dict[str, Any]] = {"ivf": {}, "hnsw": {}}  # the library's defaults


def query_texts() -> list[str]:
    """The 145 query shapes of CXR-Retrieve: 10 single, 45 pair, 90 negation (section 3.1)."""
    names = [name.lower() for name in CXR_RETRIEVE_10]
    single = list(names)
    pair = [f"{a} and {b}" for a, b in combinations(names, 2)]
    negation = [f"{a} and no {b}" for a, b in permutations(names, 2)]
    return single + pair + negation


def machine() -> dict[str, Any]:
    import psutil

    cpu = platform.processor() or ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "python": platform.python_version(),
        "date": dt.datetime.now().astimezone().isoformat(timespec="minutes"),
        "commit": git_commit(ROOT),
    }


def percentile_ms(samples: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(samples) * 1000, q)), 2)


def synthetic_collection(
    n: int, dims: int, seed: int, anchors: np.ndarray | None = None, noise: float = 0.35
) -> np.ndarray:
    """n unit vectors: perturbed copies of real `anchors` when given, else isotropic."""
    rng = np.random.default_rng(seed)
    if anchors is None:
        return l2_normalise(rng.standard_normal((n, dims), dtype=np.float32))
    picks = anchors[rng.integers(0, len(anchors), n)]
    jitter = rng.standard_normal((n, dims), dtype=np.float32) * (noise / np.sqrt(dims))
    return l2_normalise(picks + jitter)


def recall_at_k(approx_ids: np.ndarray, exact_ids: np.ndarray, k: int = 10) -> float:
    """Mean share of the exact top-k that the approximate top-k also returns."""
    hits = [len(set(a[:k]) & set(e[:k])) / k for a, e in zip(approx_ids, exact_ids, strict=True)]
    return float(np.mean(hits))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


def load_dual_lite(settings: Settings) -> tuple[Any, str]:
    """The registry's dual-lite; its untrained-heads twin if the weights are not committed."""
    try:
        from medheb_app.models.registry import load_embedder

        return load_embedder("dual-lite", settings), "dual-lite (registry)"
    except Exception as error:  # any failure falls back and is reported
        from medheb_app.models.dual_lite import untrained

        reason = f"{type(error).__name__}: {error}"
        return untrained(), f"dual-lite towers with untrained heads ({reason[:80]})"


def demo_anchors(settings: Settings, embedder: Any) -> np.ndarray | None:
    """Real image embeddings from the demo index, if it has been built for this model."""
    from medheb_app.index.catalog import IndexNotFoundError, load_index

    try:
        loaded = load_index(settings.default_index, embedder, settings)
    except (IndexNotFoundError, ValueError):
        return None
    return loaded.index.index.reconstruct_n(0, loaded.index.count)


def bench_indices(
    embedder: Any, sizes: list[int], anchors: np.ndarray | None, n_recall: int
) -> dict[str, Any]:
    texts = query_texts()
    dims = embedder.card.dims
    for text in texts[:20]:  # warm-up: the first calls allocate and tune kernels
        embedder.encode([text])
    results: dict[str, Any] = {"queries": len(texts), "sizes": {}}
    for size in sizes:
        vectors = synthetic_collection(size, dims, seed=size, anchors=anchors)
        ids = [f"item-{i}" for i in range(size)]
        row: dict[str, Any] = {}
        indices = {}
        for kind, params in {"exact": {}, **ANN_KINDS}.items():
            index, seconds = timed(
                lambda v=vectors, i=ids, k=kind, p=params: VectorIndex.build(v, i, k, **p)
            )
            indices[kind] = index
            row[kind] = {"build_s": round(seconds, 2), "params": index.params}
        for kind, index in indices.items():
            latencies, search_only = [], []
            for text in texts:
                started = time.perf_counter()
                vector = embedder.encode([text])
                encoded = time.perf_counter()
                index.search(vector, 10)
                done = time.perf_counter()
                latencies.append(done - started)
                search_only.append(done - encoded)
            row[kind].update(
                p50_ms=percentile_ms(latencies, 50),
                p95_ms=percentile_ms(latencies, 95),
                search_p50_ms=percentile_ms(search_only, 50),
            )
        recall_queries = np.concatenate(
            [
                embedder.encode(texts),
                synthetic_collection(max(0, n_recall - len(texts)), dims, size + 1, anchors),
            ]
        )
        _, exact_ids = indices["exact"].search(recall_queries, 10)
        for kind in ANN_KINDS:
            _, approx_ids = indices[kind].search(recall_queries, 10)
            row[kind]["recall_at_10"] = round(recall_at_k(approx_ids, exact_ids), 4)
        if anchors is not None:  # copies of real vectors are easy for ANN: add the worst case
            for kind, recall in isotropic_recall(size, dims, n_recall).items():
                row[kind]["recall_at_10_isotropic"] = recall
        results["sizes"][str(size)] = row
        print(f"  {size:>7} items: {json.dumps(row)}", flush=True)
    return results


def isotropic_recall(size: int, dims: int, n_queries: int) -> dict[str, float]:
    """recall@10 of each approximate kind on isotropic random unit vectors (ANN's worst case)."""
    vectors = synthetic_collection(size, dims, seed=size + 2)
    ids = [str(i) for i in range(size)]
    queries = synthetic_collection(n_queries, dims, seed=size + 3)
    _, exact_ids = VectorIndex.build(vectors, ids).search(queries, 10)
    recalls = {}
    for kind, params in ANN_KINDS.items():
        _, approx_ids = VectorIndex.build(vectors, ids, kind, **params).search(queries, 10)
        recalls[kind] = round(recall_at_k(approx_ids, exact_ids), 4)
    return recalls


def bench_images(embedder: Any, n_images: int) -> dict[str, Any]:
    try:
        from medheb_app.evidence.phantoms import generate_chest_corpus

        images = [study.pixels for study in generate_chest_corpus(n=n_images, seed=1)]
        what = "256x256 phantom radiographs"
    except ImportError:
        rng = np.random.default_rng(0)
        images = [rng.random((256, 256), dtype=np.float32) for _ in range(n_images)]
        what = "256x256 random images (phantom generator not installed)"
    embedder.encode_images(images[:4])  # warm-up
    _, seconds = timed(lambda: embedder.encode_images(images))
    return {
        "images": n_images,
        "seconds": round(seconds, 2),
        "per_s": round(n_images / seconds, 1),
        "what": what,
    }


def bench_service(settings: Settings) -> dict[str, Any]:
    """search() end to end on the demo index (parse, encode, search, metadata)."""
    from medheb_app.search import search

    texts = query_texts()
    search(query_text=texts[0], settings=settings)  # loads the model and index
    latencies = []
    for text in texts:
        started = time.perf_counter()
        search(query_text=text, settings=settings, k=10)
        latencies.append(time.perf_counter() - started)
    return {
        "queries": len(texts),
        "p50_ms": percentile_ms(latencies, 50),
        "p95_ms": percentile_ms(latencies, 95),
    }


SERVICE_SCRIPT = textwrap.dedent(
    """
    from medheb_app.demo import ensure_demo
    from medheb_app.serving import default_demo_models
    from medheb_app.models.registry import load_embedder
    from medheb_app.search import search
    from medheb_app.settings import Settings
    settings = Settings.from_env()
    ensure_demo(settings)
    for spec in default_demo_models(settings):
        load_embedder(spec, settings)
        for text in ["pleural effusion and no cardiomegaly", "pneumothorax", "edema"] * 5:
            search(query_text=text, model_spec=spec, settings=settings)
    """
)


WARM_START_SCRIPT = textwrap.dedent(
    """
    import time
    started = time.perf_counter()
    from medheb_app.demo import ensure_demo
    from medheb_app.search import search
    from medheb_app.settings import Settings
    settings = Settings.from_env()
    assets = ensure_demo(settings)
    search(query_text="pleural effusion and no cardiomegaly", settings=settings)
    built = any(entry["built"] for entry in assets.indices) or assets.corpus_generated
    print(round(time.perf_counter() - started, 2), built)
    """
)


def warm_start() -> dict[str, Any]:
    """Seconds from a fresh interpreter to the first answered search, demo already on disk."""
    result = subprocess.run(
        [sys.executable, "-c", WARM_START_SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    seconds, built = result.stdout.split()[-2:]
    return {"seconds": float(seconds), "had_to_build": built == "True"}


def app_rss(settings: Settings) -> dict[str, Any]:
    """Peak RSS of `python app.py` from start, through the demo bootstrap, to one search."""
    from medheb_app.serving import default_model

    port = free_port()
    url = f"http://127.0.0.1:{port}/"

    def one_search() -> str:
        from gradio_client import Client

        client = Client(url, verbose=False)
        client.predict(  # the upload is a gr.State, which the API does not expose
            "pleural effusion and no cardiomegaly",
            default_model(settings, settings.default_index),
            settings.default_index,
            10,
            api_name="/search",
        )
        return "one search through the page's API"

    env = {**os.environ, "PORT": str(port), "HOST": "127.0.0.1"}
    return peak_rss_of_server(
        [sys.executable, "app.py"], "demo ready", cwd=ROOT, env=env, after_ready=one_search
    )


def render(report: dict[str, Any], command: str) -> str:
    m = report["machine"]
    lines = [
        START,
        "## Retrieval (bench/bench_retrieval.py)",
        "",
        f"- Date: {m['date']}; commit {m['commit']}",
        f"- Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gb']} GB RAM, Python {m['python']}",
        f"- Load average at start: {m['load_average']} ({load_note(m)})",
        f"- Command: `{command}`",
        f"- Threads: {report['torch_threads']} (torch and FAISS, `--threads`); the app "
        "processes (memory, warm start) use the library defaults",
        f"- Query encoder: {report['model']}; {report['indices']['queries']} queries "
        "(CXR-Retrieve shapes: single, pair, negation)",
        f"- Collections: {report['collection']}. Copies of real vectors make ANN look easy, "
        "so recall is also measured on isotropic random unit vectors (the worst case; 1000 "
        "random queries).",
        "",
        "### Text query end to end (encode + top-10 search)",
        "",
        "| items | index | build s | p50 ms | p95 ms | search-only p50 ms | recall@10 vs exact "
        "| recall@10, isotropic |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for size, row in report["indices"]["sizes"].items():
        for kind, cell in row.items():
            recall = f"{cell['recall_at_10']:.3f}" if "recall_at_10" in cell else "1 (reference)"
            worst = cell.get("recall_at_10_isotropic")
            worst_text = f"{worst:.3f}" if worst is not None else "-"
            params = ", ".join(f"{k}={v}" for k, v in cell["params"].items() if k != "seed")
            label = f"{kind} ({params})" if params else kind
            lines.append(
                f"| {int(size):,} | {label} | {cell['build_s']} | {cell['p50_ms']} | "
                f"{cell['p95_ms']} | {cell['search_p50_ms']} | {recall} | {worst_text} |"
            )
    images = report["images"]
    lines += [
        "",
        "### Image embedding throughput (dual-lite image tower)",
        "",
        f"{images['per_s']} images/s ({images['images']} {images['what']} in "
        f"{images['seconds']} s, batch = all, torch threads {report['torch_threads']}).",
    ]
    if report.get("images_all_cores"):
        more = report["images_all_cores"]
        lines.append(
            f"With {more['threads']} torch threads (how index builds run): {more['per_s']} "
            f"images/s ({more['seconds']} s)."
        )
    if report.get("service"):
        s = report["service"]
        lines += [
            "",
            "### Search service end to end on the demo index",
            "",
            f"`medheb_app.search.search` (parse + encode + search + metadata), {s['queries']} "
            f"queries: p50 {s['p50_ms']} ms, p95 {s['p95_ms']} ms.",
        ]
    elif report.get("demo_error"):
        lines += ["", f"Service, memory and warm start not measured: {report['demo_error']}"]
    elif report.get("service_error"):
        lines += ["", f"Search service not measured: {report['service_error']}"]
    if report.get("rss"):
        r = report["rss"]
        lines += [
            "",
            "### Memory (peak RSS, sampled every 50 ms with psutil; target < 3 GB)",
            "",
            f"- Search service process (ensure_demo, then 15 searches per default model; "
            f"models {', '.join(r.get('models', []))}): {r['peak_rss_mb']:.0f} MB "
            f"(exit {r['exit']}, {r['seconds']:.0f} s).",
        ]
    if report.get("app_rss"):
        a = report["app_rss"]
        if a.get("ready_s") is None:
            lines.append(f"- `python app.py`: did not become ready: {a.get('output_tail')}")
        else:
            lines.append(
                f"- `python app.py` (Gradio app, demo bootstrap, then {a['after_ready']}): "
                f"peak {a['peak_rss_mb']:.0f} MB; {a['ready_rss_mb']:.0f} MB when the demo "
                f"was ready after {a['ready_s']:.0f} s."
            )
    if report.get("demo_seconds") is not None:
        lines += ["", f"Demo bootstrap before the run (ensure_demo): {report['demo_seconds']} s."]
    if report.get("warm_start"):
        w = report["warm_start"]
        note = " (it had to build something first: not a warm start)" if w["had_to_build"] else ""
        lines += [
            "",
            "### Warm start",
            "",
            f"Fresh interpreter to the first answered search with the demo on disk "
            f"(imports, ensure_demo loading models and index, one search): {w['seconds']} s "
            f"(target < 20 s){note}.",
        ]
    targets = report["targets"]
    lines += [
        "",
        "### Targets",
        "",
        f"- text p50 < 50 ms on 100k (exact): {targets['p50_100k']}",
        f"- app RSS < 3 GB: {targets['rss']}",
        END,
    ]
    return "\n".join(lines)


def load_note(machine: dict[str, Any]) -> str:
    """Whether the 1-minute load average says other jobs shared the cores during the run."""
    if machine["load_average"][0] < machine["cores"] / 2:
        return "nothing else was running"
    return "the machine was shared with other jobs; numbers under load are pessimistic"


def write_section(path: Path, section: str) -> None:
    """Replace this script's section of BENCHMARKS.md, keeping everything else."""
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1]
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def _print_progress() -> Callable[[float, str], None]:
    last = {"message": ""}

    def report(fraction: float, message: str) -> None:
        if message.split(" ")[0] != last["message"].split(" ")[0] or fraction >= 1.0:
            print(f"  [{fraction:4.0%}] {message}", flush=True)
        last["message"] = message

    return report


def _rss_target(report: dict[str, Any]) -> str:
    peaks = [
        report[key]["peak_rss_mb"]
        for key in ("rss", "app_rss")
        if report.get(key) and report[key].get("peak_rss_mb")
    ]
    if not peaks:
        return "not measured (--skip-rss)"
    return f"{'met' if max(peaks) < 3072 else 'NOT met'} (highest peak {max(peaks):.0f} MB)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--images", type=int, default=128, help="images for throughput")
    parser.add_argument("--recall-queries", type=int, default=1000)
    parser.add_argument("--skip-rss", action="store_true", help="skip the app memory run")
    parser.add_argument("--skip-service", action="store_true", help="skip search() on the demo")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch and FAISS threads for the latency and throughput runs (default 1: one "
        "search per core is how a server uses them, and it is stable on a shared machine)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--json", type=Path, default=None, help="also write raw numbers here")
    args = parser.parse_args(argv)
    command = "python bench/bench_retrieval.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )

    import faiss
    import torch

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    settings = Settings.from_env()
    report: dict[str, Any] = {"machine": machine(), "torch_threads": torch.get_num_threads()}
    print(f"machine: {report['machine']}", flush=True)
    if not (args.skip_service and args.skip_rss):
        print("demo (built once, then loaded) ...", flush=True)
        from medheb_app.demo import ensure_demo

        started = time.perf_counter()
        try:
            ensure_demo(settings, progress=_print_progress())
            report["demo_seconds"] = round(time.perf_counter() - started, 1)
        except Exception as error:  # the index numbers do not need it; the rest is skipped
            report["demo_error"] = f"{type(error).__name__}: {error}"
            args.skip_service = args.skip_rss = True
            print(f"  demo unavailable: {report['demo_error']}", flush=True)
    embedder, report["model"] = load_dual_lite(settings)
    anchors = demo_anchors(settings, embedder)
    report["collection"] = (
        f"perturbed copies of {len(anchors)} real dual-lite demo image embeddings "
        "(Gaussian noise, renormalised)"
        if anchors is not None
        else "isotropic random unit vectors (no demo index built for dual-lite: worst case for ANN)"
    )
    print("indices ...", flush=True)
    report["indices"] = bench_indices(embedder, args.sizes, anchors, args.recall_queries)
    print("image throughput ...", flush=True)
    report["images"] = bench_images(embedder, args.images)
    if (os.cpu_count() or 1) > args.threads:  # index builds are batch jobs: all cores
        torch.set_num_threads(os.cpu_count() or 1)
        report["images_all_cores"] = bench_images(embedder, args.images)
        report["images_all_cores"]["threads"] = torch.get_num_threads()
        torch.set_num_threads(args.threads)
    if not args.skip_service:
        print("search service ...", flush=True)
        try:
            report["service"] = bench_service(settings)
        except Exception as error:  # recorded in the report instead
            report["service_error"] = f"{type(error).__name__}: {error}"
    if not args.skip_rss:
        print("peak RSS of the serving process ...", flush=True)
        report["rss"] = peak_rss_of_command([sys.executable, "-c", SERVICE_SCRIPT], cwd=ROOT)
        from medheb_app.serving import default_demo_models

        report["rss"]["models"] = default_demo_models(settings)
        print("warm start ...", flush=True)
        report["warm_start"] = warm_start()
        if (ROOT / "app.py").is_file():
            print("peak RSS of app.py ...", flush=True)
            report["app_rss"] = app_rss(settings)
    largest = report["indices"]["sizes"].get("100000", {}).get("exact")
    report["targets"] = {
        "p50_100k": (
            f"{'met' if largest['p50_ms'] < 50 else 'NOT met'} ({largest['p50_ms']} ms)"
            if largest
            else "not measured (100k not in --sizes)"
        ),
        "rss": _rss_target(report),
    }
    section = render(report, command)
    write_section(args.out, section)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
