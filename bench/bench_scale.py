"""Scale benchmark for `index build`: engines, resume after a kill, and ANN kinds at 1M+.

Writes its section of BENCHMARKS.md (between markers, other sections kept) and prints it.

    .venv/bin/python bench/bench_scale.py --studies 120 --ann-n 1000000 --kinds exact,ivf,ivfpq

- engines: wall time and items/s to index `--studies` phantom demo studies with dual-lite on
  the local engine, the Ray engine with 1 actor and with 2 actors (each in a fresh DATA_DIR,
  so nothing comes from the embedding cache; Ray's start-up is included in the wall time and
  the embedding rate is reported from the build's own seconds).
- resume: a build killed (SIGKILL) once half its shards are committed, then run again:
  seconds to finish, and items embedded twice = cache rows before restart + embedded after -
  total (target 0; at most the batches of the shard in flight).
- ann: `--ann-n` 256-d unit vectors generated in chunks into a memory-mapped float32 file
  under `--work` (10M x 256 is 10 GB on disk, never in RAM), either perturbed copies of real
  dual-lite embeddings (from a built index given with --base-index, e.g. the demo's) or
  isotropic ones: build time, size on disk, serving RSS (a fresh process that loads the index
  and answers 200 queries), recall@10 against exact (the file scanned chunk by chunk) on
  1,000 queries and search-only p50 at one thread; for IVF-PQ also the PQ codes alone
  (rerank 0) and an nprobe x rerank sweep. `--keep-ivfpq DIR` keeps the IVF-PQ index.
- e2e: `--e2e-index DIR` (a kept IVF-PQ index) moves it into a fresh DATA_DIR as index
  `scale` for dual-lite and times `search()` for the 145 CXR-Retrieve text queries at one
  thread (text encoding included), as a user's `search --index scale --ranking similarity`.
- `--include REPORT.json` (from `--save-json`) puts an earlier run's ANN rows and e2e line in.

    .venv/bin/python bench/bench_scale.py --ann-n 1000000 --kinds ivfpq --data perturbed \
        --base-index DATA_DIR/indices/demo-cxr/<dual-lite fingerprint> --work /tmp \
        --keep-ivfpq /tmp/pq1m --save-json /tmp/pq1m.json --out /tmp/scratch.md
    .venv/bin/python bench/bench_scale.py --include /tmp/pq1m.json --e2e-index /tmp/pq1m \
        --base-index DATA_DIR/indices/demo-cxr/<dual-lite fingerprint>
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rss import git_commit  # noqa: E402

START = "<!-- bench_scale:start -->"
END = "<!-- bench_scale:end -->"
ANN_START = "<!-- bench_scale_ann:start -->"
ANN_END = "<!-- bench_scale_ann:end -->"
ENGINES_START = "<!-- bench_scale_engines:start -->"
ENGINES_END = "<!-- bench_scale_engines:end -->"
CHUNK = 100_000
SWEEP_NPROBES = (16, 32, 64, 128)
SWEEP_RERANKS = (4, 16, 64)  # IVF-PQ shortlist factors: the sweep's runs and its table's columns


def _cli(args: list[str], data_dir: Path) -> dict[str, Any]:
    env = {**os.environ, "DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "medheb_app", *args, "--json"],
        cwd=ROOT, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    payload = json.loads(out.stdout)
    payload["wall_s"] = round(time.perf_counter() - started, 1)
    return payload


_TIMED_BUILD = """
import json, sys, time
from medheb_app.index.build import build_from_source
from medheb_app.settings import Settings
source, engine, actors, shard = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
marks = []
def progress(fraction, message):
    if message.startswith("embedded "):
        marks.append((time.perf_counter(), int(message.split()[1])))
report = build_from_source(source, "dual-lite", "e", Settings.from_env(), engine=engine,
    batch_size=16, shard_size=shard, progress=progress, ray_actors=actors or None)
(t0, n0), (t1, n1) = marks[0], marks[-1]
print(json.dumps({"n_items": report.n_items, "embedded": report.embedded,
    "seconds": report.seconds, "steady_items_per_s": round((n1 - n0) / (t1 - t0), 2)}))
"""

ENGINE_RUNS = (  # label, engine, actors, extra environment
    ("local, torch 2 threads", "local", 0, {}),
    ("local, torch 1 thread", "local", 0, {"OMP_NUM_THREADS": "1"}),
    ("ray, 1 actor (1 CPU, 1 thread)", "ray", 1, {}),
    ("ray, 2 actors (1 CPU, 1 thread each)", "ray", 2, {}),
)


def engines(studies: int, work: Path) -> list[dict[str, Any]]:
    """Each engine indexes the same phantom studies with dual-lite into a fresh cache.

    `items_per_s` is the steady embedding rate: items of every shard after the first over the
    seconds from the first shard's result to the last (start-up, Ray's and the actors' model
    loads, and index building excluded; the same definition for every engine). `build_s` is
    the build's own seconds, start-up included; `wall_s` adds the process start."""
    source = f"phantom:{studies}"
    shared = work / "corpus"  # generate the corpus once; each run gets a fresh cache
    _cli(["index", "build", "--source", source, "--model", "random", "--name", "warm"], shared)
    shard = max(8, studies // 25)
    rows = []
    for label, engine, actors, extra in ENGINE_RUNS:
        data = work / f"engine-{len(rows)}"
        shutil.copytree(shared / "demo", data / "demo")
        env = {**os.environ, "DATA_DIR": str(data), "HF_HUB_OFFLINE": "1", **extra}
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", _TIMED_BUILD, source, engine, str(actors), str(shard)],
            cwd=ROOT, env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        report = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(
            {
                "engine": label,
                "items": report["n_items"],
                "wall_s": round(time.perf_counter() - started, 1),
                "build_s": report["seconds"],
                "items_per_s": report["steady_items_per_s"],
                "load": f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}",
            }
        )
        print(rows[-1], flush=True)
    return rows


def engine_ratios(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's two targets, from the steady rates of one run."""
    rate = {r["engine"].split(" (")[0]: r["items_per_s"] for r in rows}
    local2, local1 = rate["local, torch 2 threads"], rate["local, torch 1 thread"]
    ray1, ray2 = rate["ray, 1 actor"], rate["ray, 2 actors"]
    return [
        f"- Ray 2 actors / Ray 1 actor: {ray2 / ray1:.2f}x (target >= 1.6x)",
        f"- Ray 1 actor / local at the same parallelism (1 thread): {ray1 / local1:.2f}x "
        "(target 0.8-1.2x)",
        f"- Ray 2 actors / local at the same parallelism (2 threads): {ray2 / local2:.2f}x",
        f"- Ray 1 actor / local at torch's default 2 threads: {ray1 / local2:.2f}x",
    ]


def resume(studies: int, work: Path) -> dict[str, Any]:
    from medheb_app.index.cache import EmbeddingCache
    from medheb_app.index.shards import BUILD_MANIFEST

    data = work / "resume"
    shutil.copytree(work / "corpus" / "demo", data / "demo")
    args = ["index", "build", "--source", f"phantom:{studies}", "--model", "dual-lite",
            "--name", "r", "--shard-size", "8", "--batch-size", "8", "--json"]  # fmt: skip
    env = {**os.environ, "DATA_DIR": str(data), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "medheb_app", *args], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    shards = -(-studies // 8)
    committed = 0
    while process.poll() is None and committed < shards // 2:
        manifests = list((data / "indices" / "r").glob(f".build-*/{BUILD_MANIFEST}"))
        if manifests:
            with contextlib.suppress(OSError, ValueError, KeyError):
                committed = len(json.loads(manifests[0].read_text())["shards"])
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    before = EmbeddingCache(data / "embedding-cache").count()
    report = _cli(args[:-1], data)
    return {
        "items": studies,
        "killed_after_shards": committed,
        "cached_before_restart": before,
        "finish_s": report["seconds"],
        "reused": report["reused"],
        "embedded_after": report["embedded"],
        "embedded_twice": before + report["embedded"] - studies,
    }


def vectors(kind: str, n: int, base: np.ndarray | None, seed: int, start: int = 0):
    """Chunks of unit vectors: perturbed copies of `base` rows, or isotropic."""
    for lo in range(start, n, CHUNK):
        count = min(CHUNK, n - lo)
        rng = np.random.default_rng([seed, lo])
        if kind == "perturbed" and base is not None:
            rows = base[rng.integers(0, len(base), count)]
            x = rows + rng.standard_normal(rows.shape).astype(np.float32) * 0.05
        else:
            x = rng.standard_normal((count, 256)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        yield x.astype(np.float32)


def materialise(kind: str, n: int, base: np.ndarray | None, path: Path) -> np.ndarray:
    """The n vectors written chunk by chunk into a float32 .npy file and memory-mapped, so
    10M x 256 (10 GB) never sits in RAM; a file already there with the right shape is reused."""
    if path.is_file():
        array = np.load(path, mmap_mode="r")
        if array.shape == (n, 256):
            return array
        path.unlink()
    array = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, 256))
    for lo, chunk in zip(range(0, n, CHUNK), vectors(kind, n, base, seed=1), strict=True):
        array[lo : lo + len(chunk)] = chunk
    array.flush()
    del array
    return np.load(path, mmap_mode="r")


def file_chunks(array: np.ndarray):
    """A restartable chunk stream over a memory-mapped vector file."""
    return lambda: (np.asarray(array[lo : lo + CHUNK]) for lo in range(0, len(array), CHUNK))


def exact_truth(array: np.ndarray, queries: np.ndarray, k: int = 10) -> np.ndarray:
    """Exact top-k rows for each query, by scanning the vector file chunk by chunk."""
    best_scores = np.full((len(queries), k), -np.inf, dtype=np.float32)
    best_rows = np.full((len(queries), k), -1, dtype=np.int64)
    for lo, chunk in zip(range(0, len(array), CHUNK), file_chunks(array)(), strict=True):
        scores = queries @ chunk.T
        take = min(k, len(chunk))  # the last chunk may hold fewer than k rows
        top = np.argpartition(-scores, take - 1, axis=1)[:, :take]
        scores = np.concatenate([best_scores, np.take_along_axis(scores, top, 1)], axis=1)
        rows = np.concatenate([best_rows, top + lo], axis=1)
        keep = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        best_scores = np.take_along_axis(scores, keep, 1)
        best_rows = np.take_along_axis(rows, keep, 1)
    return best_rows


def serving_rss(directory: Path, queries: Path) -> float:
    """Peak RSS (MB) of a fresh process that loads the index and answers 200 queries."""
    from bench.rss import peak_rss_of_command

    code = (
        f"import sys, numpy as np; sys.path.insert(0, {str(ROOT)!r});"
        "from medheb_app.index.faiss_index import VectorIndex;"
        f"ix = VectorIndex.load({str(directory)!r}); q = np.load({str(queries)!r})[:200];"
        "[ix.search(q[i:i+1], 10) for i in range(len(q))]"
    )
    return round(float(peak_rss_of_command([sys.executable, "-c", code])["peak_rss_mb"]), 1)


def recall_at_10(found: np.ndarray, truth: np.ndarray) -> float:
    return float(
        np.mean([len(set(map(int, f)) & set(t)) / 10 for f, t in zip(found, truth, strict=True)])
    )


def p50_ms(index: Any, queries: np.ndarray, **knobs: Any) -> float:
    """Median single-query search time (ms) over 300 queries, at one thread."""
    times = []
    for i in range(300):
        t0 = time.perf_counter()
        index.search(queries[i : i + 1], 10, **knobs)
        times.append((time.perf_counter() - t0) * 1000)
    return round(float(np.percentile(times, 50)), 2)


def ann(
    n: int,
    kinds: list[str],
    data_kind: str,
    base: np.ndarray | None,
    work: Path,
    pq_params: dict[str, Any],
    keep: Path | None = None,
) -> list[dict[str, Any]]:
    """One row per index kind over the same n vectors (a memory-mapped file in `work`)."""
    import faiss

    from medheb_app.index.faiss_index import VectorIndex

    ids = [str(i) for i in range(n)]
    queries = next(vectors(data_kind, 1000, base, seed=99))
    qfile = work / "queries.npy"
    np.save(qfile, queries)
    started = time.perf_counter()
    data = materialise(data_kind, n, base, work / f"vectors-{data_kind}-{n}.npy")
    print(f"{data_kind} {n}: vectors file in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    truth = exact_truth(data, queries)
    print(f"exact truth in {time.perf_counter() - started:.0f} s", flush=True)
    rows = []
    for kind in kinds:
        started = time.perf_counter()
        if kind == "ivfpq":
            index = VectorIndex.build_ivfpq(
                file_chunks(data), ids, 256, "bench", work_dir=work / f"pq-{data_kind}",
                memory_budget_mb=float(os.environ.get("MEDHEB_INDEX_MEMORY_MB", 2048)),
                **pq_params,
            )  # fmt: skip
        else:
            index = VectorIndex.build(np.asarray(data), ids, kind=kind)
        build_s = time.perf_counter() - started
        folder = work / f"{kind}-{data_kind}"
        index.save(folder)
        size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
        faiss.omp_set_num_threads(1)
        row: dict[str, Any] = {
            "data": data_kind,
            "kind": kind,
            "n": n,
            "params": {k: v for k, v in index.params.items() if not k.endswith("_path")},
            "build_s": round(build_s, 1),
            "disk_mb": round(size, 1),
            "recall_at_10": round(recall_at_10(index.search(queries, 10)[1], truth), 3),
            "search_p50_ms": p50_ms(index, queries),
        }
        if index.params.get("rerank"):  # what the PQ codes alone give, on the same index
            row["recall_pq_only"] = round(
                recall_at_10(index.search(queries, 10, rerank=0)[1], truth), 3
            )
            row["p50_pq_only_ms"] = p50_ms(index, queries, rerank=0)
            row["sweep"] = [  # the per-search knobs: recall@10 and p50 at other settings
                {"nprobe": nprobe, "rerank": factor,
                 "recall_at_10": round(recall_at_10(
                     index.search(queries, 10, nprobe=nprobe, rerank=factor)[1], truth), 3),
                 "p50_ms": p50_ms(index, queries, nprobe=nprobe, rerank=factor)}
                for nprobe in SWEEP_NPROBES for factor in SWEEP_RERANKS
            ]  # fmt: skip
        faiss.omp_set_num_threads(os.cpu_count() or 1)
        del index
        row["serving_rss_mb"] = serving_rss(folder, qfile)
        rows.append(row)
        print(row, flush=True)
        if keep is not None and kind == "ivfpq":
            shutil.rmtree(keep, ignore_errors=True)
            shutil.move(str(folder), keep)
        shutil.rmtree(folder, ignore_errors=True)
    del data
    (work / f"vectors-{data_kind}-{n}.npy").unlink(missing_ok=True)
    return rows


E2E_SCRIPT = """
import json, sys, time
import numpy as np
sys.path.insert(0, sys.argv[1])
import faiss, torch
faiss.omp_set_num_threads(1)
torch.set_num_threads(1)
from medheb_app.search import search
from medheb_app.settings import Settings
from medheb_app.tasks.cxr_retrieve import benchmark_queries
settings = Settings.from_env()
started = time.perf_counter()
search(query_text="warm-up: lungs", model_spec="dual-lite", index="scale", settings=settings,
       ranking="similarity")
first = time.perf_counter() - started
walls, encode, lookup = [], [], []
for query in benchmark_queries():
    t0 = time.perf_counter()
    response = search(query_text=query.text, model_spec="dual-lite", index="scale",
                      settings=settings, ranking="similarity")
    walls.append((time.perf_counter() - t0) * 1000)
    encode.append(response.timings_ms.get("encode", float("nan")))
    lookup.append(response.timings_ms.get("search", float("nan")))
    assert len(response.results) == 10, query.text
print(json.dumps({"queries": len(walls), "first_call_s": round(first, 1),
                  "p50_ms": round(float(np.percentile(walls, 50)), 1),
                  "p95_ms": round(float(np.percentile(walls, 95)), 1),
                  "encode_p50_ms": round(float(np.nanpercentile(encode, 50)), 1),
                  "search_p50_ms": round(float(np.nanpercentile(lookup, 50)), 1)}))
"""


def e2e(index_dir: Path, base_index: Path, work: Path) -> dict[str, Any]:
    """Text query end to end against a built IVF-PQ index, as a user runs it: the index moved
    into a fresh DATA_DIR as `scale` for dual-lite (the model of `base_index`, whose catalog
    entry it takes), with a metadata row per item; then, in a fresh process at one thread,
    `search()` with ranking=similarity for the 145 CXR-Retrieve queries (after one warm-up
    that loads the model and the index): wall p50 per query, and its peak RSS."""
    from bench.rss import peak_rss_of_command

    info = json.loads((base_index / "catalog.json").read_text())
    data_dir = work / "e2e-data"
    target = data_dir / "indices" / "scale" / info["fingerprint"]
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(index_dir), target)  # moved back at the end
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["fingerprint"] = info["fingerprint"]
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2))
    n = int(manifest["count"])
    ids = json.loads((target / "ids.json").read_text())
    offsets = np.zeros(n + 1, dtype=np.int64)
    with open(target / "metadata.jsonl", "wb") as handle:  # rows in index order, as written
        for lo in range(0, n, CHUNK):  # by catalog.write_index (which offsets need)
            lines = [
                json.dumps({"id": item, "form": "2d", "modality": "CR", "findings": {},
                            "source": "bench-scale", "synthetic": True}).encode() + b"\n"
                for item in ids[lo : lo + CHUNK]
            ]  # fmt: skip
            handle.write(b"".join(lines))
            offsets[lo + 1 : lo + len(lines) + 1] = offsets[lo] + np.cumsum([len(x) for x in lines])
    np.save(target / "metadata.offsets.npy", offsets)
    del ids
    info.update(name="scale", kind=manifest["kind"], params=manifest["params"], count=n,
                forms=["2d"], modalities=["CR"])  # fmt: skip
    (target / "catalog.json").write_text(json.dumps(info, indent=2))
    script = work / "e2e.py"
    script.write_text(E2E_SCRIPT)
    out = work / "e2e.json"
    env = {**os.environ, "DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # fmt: skip
    command = f'"{sys.executable}" "{script}" "{ROOT}" > "{out}"'
    peak = peak_rss_of_command(["sh", "-c", command], env=env)
    if peak["exit"]:
        raise RuntimeError(f"e2e search failed (exit {peak['exit']}); see {out}")
    result = json.loads(out.read_text().strip().splitlines()[-1])
    result.update(n=n, kind=manifest["kind"], peak_rss_mb=round(float(peak["peak_rss_mb"]), 1))
    shutil.move(str(target), index_dir)  # the built index is worth keeping for another run
    return result


def base_vectors(index_dir: str | None) -> np.ndarray | None:
    if not index_dir:
        return None
    from medheb_app.index.faiss_index import VectorIndex

    return VectorIndex.load(Path(index_dir)).vectors()


def run_line(report: dict[str, Any]) -> str:
    """When, where, at which commit and load, and the command: the first line of a section."""
    m = report["machine"]
    return (
        f"Run {report['date']} on {m['cpu']} ({m['cores']} cores, load average "
        f"{m['load']:.1f} at the start: the cores were shared with other jobs, so absolute "
        f"numbers are pessimistic), commit {report['commit']}. Command: `{report['command']}`"
    )


def section(report: dict[str, Any]) -> str:
    lines = [START, "## Scale: `index build` engines, resume, ANN kinds (bench/bench_scale.py)", ""]
    lines += [run_line(report), ""]
    if report.get("resume"):
        r = report["resume"]
        lines += [
            f"Resume: killed (SIGKILL) after {r['killed_after_shards']} committed shards of 8 "
            f"({r['cached_before_restart']} of {r['items']} items already in the cache); the "
            f"restart finished in {r['finish_s']} s, reused {r['reused']}, embedded "
            f"{r['embedded_after']}; items embedded twice: {r['embedded_twice']}.",
            "",
        ]
    lines += report.get("notes", [])
    lines.append(END)
    return "\n".join(lines)


def ann_section(report: dict[str, Any], notes: bool) -> str:
    """The ANN kinds and end-to-end text search, a section of its own (ANN_START..ANN_END), so
    an engines-only run and an ANN-only run each keep the other's figures."""
    lines = [ANN_START, "## Scale: ANN kinds to 1M+ and text search end to end "
             "(bench/bench_scale.py)", "",
             run_line(report), ""]  # fmt: skip
    if report.get("ann"):
        lines += ["ANN kinds: recall@10 against exact on 1,000 queries (fresh perturbed copies, "
                  "not in the index); IVF-PQ rows in brackets: the PQ codes alone, no re-rank.",
                  "", "| data | kind | n | build s | disk MB | serving RSS MB | recall@10 | "
                  "search p50 ms (1 thread) | params |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in report["ann"]:
            recall, p50 = r["recall_at_10"], r["search_p50_ms"]
            if "recall_pq_only" in r:
                recall = f"{recall} ({r['recall_pq_only']})"
                p50 = f"{p50} ({r['p50_pq_only_ms']})"
            params = ", ".join(f"{k}={v}" for k, v in r.get("params", {}).items()
                               if k in ("nlist", "nprobe", "m", "opq", "quantizer", "rerank",
                                        "ef_search", "on_disk"))  # fmt: skip
            lines.append(
                f"| {r['data']} | {r['kind']} | {r['n']:,} | {r['build_s']} | {r['disk_mb']} | "
                f"{r['serving_rss_mb']} | {recall} | {p50} | {params} |"
            )
        lines.append("")
        for r in report["ann"]:
            if r.get("sweep"):
                by = {(s["nprobe"], s["rerank"]): s for s in r["sweep"]}
                lines += [f"IVF-PQ per-search knobs, {r['data']} {r['n']:,} (recall@10 / p50 ms):",
                          "", "| nprobe | "
                          + " | ".join(f"rerank {f}" for f in SWEEP_RERANKS) + " |",
                          "|---" * (len(SWEEP_RERANKS) + 1) + "|"]  # fmt: skip
                for nprobe in sorted({s["nprobe"] for s in r["sweep"]}):
                    cells = [by.get((nprobe, f)) for f in SWEEP_RERANKS]
                    lines.append(f"| {nprobe} | " + " | ".join(
                        f"{c['recall_at_10']} / {c['p50_ms']}" if c else "-" for c in cells
                    ) + " |")  # fmt: skip
                lines.append("")
    if report.get("e2e"):
        e = report["e2e"]
        lines += [
            f"Text query end to end ({e['kind']}, {e['n']:,} items, `search()` with dual-lite "
            f"text encoding and ranking=similarity, one thread, {e['queries']} CXR-Retrieve "
            f"queries after one warm-up): p50 {e['p50_ms']} ms, p95 {e['p95_ms']} ms (encode "
            f"p50 {e['encode_p50_ms']} ms, index search p50 {e['search_p50_ms']} ms); first "
            f"call (model + index load) {e['first_call_s']} s; peak RSS {e['peak_rss_mb']} MB.",
            "",
        ]
    lines += report.get("notes", []) if notes else []
    lines.append(ANN_END)
    return "\n".join(lines)


def engines_section(report: dict[str, Any]) -> str:
    """The engines table in its own marked section: re-running it keeps the ANN tables."""
    m = report["machine"]
    lines = [ENGINES_START, "## Scale: `index build` engines (bench/bench_scale.py)", ""]
    lines += [
        f"Run {report['date']} on {m['cpu']} ({m['cores']} cores; load average {m['load']:.1f} "
        f"at the start, {m.get('load_end', m['load']):.1f} at the end: the cores were shared "
        f"with other jobs), commit {report['commit']}. Command: `{report['command']}`",
        "",
    ]
    if report.get("engines"):
        lines += [
            "Embedding throughput, dual-lite on phantom studies (fresh cache each; items/s is "
            "the steady rate from the first shard's result to the last, start-up excluded; "
            "build s includes start-up, model loads and the index; load average before -> "
            "after each row):",
            "",
            "| engine | items | wall s | build s | items/s | load |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['engine']} | {r['items']} | {r['wall_s']} | {r['build_s']} | "
            f"{r['items_per_s']} | {r.get('load', '')} |"
            for r in report["engines"]
        ]
        lines += ["", *engine_ratios(report["engines"]), ""]
    lines += report.get("notes", [])
    lines.append(ENGINES_END)
    return "\n".join(lines)


def write_section(path: Path, text: str, start: str = START, end: str = END) -> None:
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    if start in old and end in old:
        head, rest = old.split(start, 1)
        old = head + text + rest.split(end, 1)[1]
    elif start != START and END in old:  # a new section right after the engines section
        head, rest = old.split(END, 1)
        old = head + END + "\n\n" + text + rest
    else:
        old = old.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(old)


def shown_arguments(argv: list[str]) -> str:
    """The command line for the report, each --note's text left out (it is printed below)."""
    shown, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--note":
            shown.append("--note ...")
            skip = True
        else:
            shown.append(arg)
    return " ".join(shown)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=0, help="phantom studies for engines")
    parser.add_argument("--resume", action="store_true", help="measure kill + resume")
    parser.add_argument("--ann-n", type=int, default=0, help="vectors for the ANN table")
    parser.add_argument("--kinds", default="exact,ivf,hnsw,ivfpq")
    parser.add_argument("--data", default="perturbed,isotropic")
    parser.add_argument("--base-index", default=None, help="a built index folder (real vectors)")
    parser.add_argument("--work", default=None, help="folder for the vector files (default: a "
                        "temporary one; 10M x 256 float32 needs 10 GB free)")  # fmt: skip
    parser.add_argument("--pq-params", default="{}", help="IVF-PQ build params as JSON")
    parser.add_argument("--keep-ivfpq", default=None, help="move the built IVF-PQ folder here")
    parser.add_argument("--save-json", default=None, help="write the report as JSON here")
    parser.add_argument("--e2e-index", default=None, help="an IVF-PQ folder kept by "
                        "--keep-ivfpq: time text queries end to end against it")  # fmt: skip
    parser.add_argument("--include", action="append", default=[],
                        help="an earlier report JSON: its ANN rows join the table")  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--note", action="append", default=[])
    args = parser.parse_args()
    if args.work:
        Path(args.work).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-scale-", dir=args.work))
    commit = git_commit(ROOT)
    report: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "commit": commit,
        "command": "python bench/bench_scale.py " + shown_arguments(sys.argv[1:]),
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "load": os.getloadavg()[0],
        },
        "notes": args.note,
    }
    try:
        if args.studies:
            report["engines"] = engines(args.studies, work)
            if args.resume:
                report["resume"] = resume(args.studies, work)
        report["ann"] = []
        for earlier in args.include:
            previous = json.loads(Path(earlier).read_text())
            report["ann"] += previous.get("ann", [])
            if previous.get("e2e"):
                report["e2e"] = previous["e2e"]
        if args.ann_n:
            base = base_vectors(args.base_index)
            keep = Path(args.keep_ivfpq) if args.keep_ivfpq else None
            for data_kind in args.data.split(","):
                if data_kind == "perturbed" and base is None:
                    continue
                report["ann"] += ann(args.ann_n, args.kinds.split(","), data_kind, base, work,
                                     json.loads(args.pq_params), keep)  # fmt: skip
                if args.save_json:  # a long run keeps what it has measured so far
                    Path(args.save_json).write_text(json.dumps(report, indent=2))
        if args.e2e_index:
            report["e2e"] = e2e(Path(args.e2e_index), Path(args.base_index), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_end"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))
    if args.save_json:
        Path(args.save_json).write_text(json.dumps(report, indent=2))
    if report.get("engines"):
        text = engines_section(report)
        write_section(Path(args.out), text, ENGINES_START, ENGINES_END)
        print(text)
    if report.get("resume"):
        text = section(report)
        write_section(Path(args.out), text)
        print(text)
    if report["ann"] or report.get("e2e"):  # notes go to the engines section when there is one
        text = ann_section(report, notes=not (report.get("engines") or report.get("resume")))
        write_section(Path(args.out), text, ANN_START, ANN_END)
        print(text)


if __name__ == "__main__":
    main()
