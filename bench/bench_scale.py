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
- ann: `--ann-n` 256-d unit vectors generated in chunks, either perturbed copies of real
  dual-lite embeddings (the NIH sample's, from a built index given with --base-index) or
  isotropic ones: build time, size on disk, serving RSS (a fresh process that loads the index
  and answers 200 queries), recall@10 against exact on 1,000 queries and search-only p50 at
  one thread.
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

START = "<!-- bench_scale:start -->"
END = "<!-- bench_scale:end -->"
ENGINES_START = "<!-- bench_scale_engines:start -->"
ENGINES_END = "<!-- bench_scale_engines:end -->"
CHUNK = 100_000


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
    from medheb_app.index.build import BUILD_MANIFEST
    from medheb_app.index.cache import EmbeddingCache

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


def ann(n: int, kinds: list[str], data_kind: str, base: np.ndarray | None, work: Path):
    import faiss

    from medheb_app.index.faiss_index import VectorIndex

    ids = [str(i) for i in range(n)]
    queries = next(vectors(data_kind, 1000, base, seed=99))
    qfile = work / "queries.npy"
    np.save(qfile, queries)
    flat = faiss.IndexFlatIP(256)
    for chunk in vectors(data_kind, n, base, seed=1):
        flat.add(chunk)
    _, truth = flat.search(queries, 10)
    del flat
    rows = []
    for kind in kinds:
        started = time.perf_counter()
        if kind == "ivfpq":
            index = VectorIndex.build_ivfpq(
                lambda: vectors(data_kind, n, base, seed=1), ids, 256, "bench",
                work_dir=work / f"pq-{data_kind}",
                memory_budget_mb=float(os.environ.get("MEDHEB_INDEX_MEMORY_MB", 2048)),
            )  # fmt: skip
        else:
            array = np.concatenate(list(vectors(data_kind, n, base, seed=1)))
            index = VectorIndex.build(array, ids, kind=kind)
            del array
        build_s = time.perf_counter() - started
        folder = work / f"{kind}-{data_kind}"
        index.save(folder)
        size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
        faiss.omp_set_num_threads(1)
        found = index.search(queries, 10)[1]
        hits = np.mean(
            [len(set(map(int, f)) & set(t)) / 10 for f, t in zip(found, truth, strict=True)]
        )
        times = []
        for i in range(300):
            t0 = time.perf_counter()
            index.search(queries[i : i + 1], 10)
            times.append((time.perf_counter() - t0) * 1000)
        faiss.omp_set_num_threads(os.cpu_count() or 1)
        del index
        rows.append(
            {
                "data": data_kind,
                "kind": kind,
                "n": n,
                "build_s": round(build_s, 1),
                "disk_mb": round(size, 1),
                "serving_rss_mb": serving_rss(folder, qfile),
                "recall_at_10": round(float(hits), 3),
                "search_p50_ms": round(float(np.percentile(times, 50)), 2),
            }
        )
        print(rows[-1], flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def base_vectors(index_dir: str | None) -> np.ndarray | None:
    if not index_dir:
        return None
    from medheb_app.index.faiss_index import VectorIndex

    return VectorIndex.load(Path(index_dir)).vectors()


def section(report: dict[str, Any]) -> str:
    lines = [START, "## Scale: `index build` engines, resume, ANN kinds (bench/bench_scale.py)", ""]
    m = report["machine"]
    lines += [
        f"Run {report['date']} on {m['cpu']} ({m['cores']} cores, load average "
        f"{m['load']:.1f} at the start: the cores were shared with other jobs, so absolute "
        f"numbers are pessimistic), commit {report['commit']}. Command: `{report['command']}`",
        "",
    ]
    if report.get("resume"):
        r = report["resume"]
        lines += [
            f"Resume: killed (SIGKILL) after {r['killed_after_shards']} committed shards of 8 "
            f"({r['cached_before_restart']} of {r['items']} items already in the cache); the "
            f"restart finished in {r['finish_s']} s, reused {r['reused']}, embedded "
            f"{r['embedded_after']}; items embedded twice: {r['embedded_twice']}.",
            "",
        ]
    if report.get("ann"):
        lines += ["| data | kind | n | build s | disk MB | serving RSS MB | recall@10 | "
                  "search p50 ms (1 thread) |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        lines += [
            f"| {r['data']} | {r['kind']} | {r['n']:,} | {r['build_s']} | {r['disk_mb']} | "
            f"{r['serving_rss_mb']} | {r['recall_at_10']} | {r['search_p50_ms']} |"
            for r in report["ann"]
        ]
        lines.append("")
    lines += report.get("notes", [])
    lines.append(END)
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
    else:
        old = old.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(old)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=0, help="phantom studies for engines")
    parser.add_argument("--resume", action="store_true", help="measure kill + resume")
    parser.add_argument("--ann-n", type=int, default=0, help="vectors for the ANN table")
    parser.add_argument("--kinds", default="exact,ivf,hnsw,ivfpq")
    parser.add_argument("--data", default="perturbed,isotropic")
    parser.add_argument("--base-index", default=None, help="a built index folder (real vectors)")
    parser.add_argument("--out", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--note", action="append", default=[])
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    report: dict[str, Any] = {
        "date": dt.date.today().isoformat(),
        "commit": commit,
        "command": "python bench/bench_scale.py " + " ".join(sys.argv[1:]),
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
        if args.ann_n:
            base = base_vectors(args.base_index)
            report["ann"] = []
            for data_kind in args.data.split(","):
                if data_kind == "perturbed" and base is None:
                    continue
                report["ann"] += ann(args.ann_n, args.kinds.split(","), data_kind, base, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["machine"]["load_end"] = os.getloadavg()[0]
    print(json.dumps(report, indent=2))
    if report.get("engines"):
        text = engines_section(report)
        write_section(Path(args.out), text, ENGINES_START, ENGINES_END)
        print(text)
    if report.get("resume") or report.get("ann"):
        text = section(report)
        write_section(Path(args.out), text)
        print(text)


if __name__ == "__main__":
    main()
