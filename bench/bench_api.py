"""REST search (/api/v1/search) against the Gradio queue's search, side by side, at 1, 4, 8 and
16 concurrent clients, plus image search by upload (/api/v1/search/image) at 4 clients.

    cp -r /path/to/built-demo /tmp/bench-api-data      # a DATA_DIR with the demo built
    DATA_DIR=/tmp/bench-api-data .venv/bin/python bench/bench_api.py [--seconds 10] [--write]
    DATA_DIR=... .venv/bin/python bench/bench_api.py --no-query-cache --write   # uncached

Starts `python app.py` (the real server: Gradio pages and /api/v1 on one FastAPI app) as a
subprocess with TRUST_PROXY_HEADERS=1, waits for the demo bootstrap, then for each level runs
C asyncio clients in this process for --seconds, each request from its own X-Forwarded-For
address (so the page's per-client limits, the same on both paths, do not throttle the load),
on the default demo index with the default model. The queries are a search log's shape, not a
loop over a few: 2,760 distinct compositional queries (10 findings through 15 templates: one
finding, "A and no B", "A with B", "A, B and no C", laterality and hedges) drawn with Zipf
popularity (s = 1), a seeded stream per level and path, so a few are asked often and most
rarely; the report says what share of each level's queries had been asked before in the run,
which is the server's query cache hit rate (medheb_app.models.query_cache), and
--no-query-cache serves with the cache off for the uncached figures. REST: one POST.
Gradio: queue/join for the page's Search button event (fn_index of api_name "search_page",
model and index left to their defaults, as the page's first search) and the server-sent events
until process_completed. Reports searches/s, p50, p95 and errors, the
search service's own time per request (timings_ms of the answers) and the load average.
`--write` puts the table into BENCHMARKS.md between bench_api markers.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rss import free_port  # noqa: E402

FINDINGS = (
    "atelectasis",
    "cardiomegaly",
    "consolidation",
    "pulmonary edema",
    "rib fracture",
    "lung lesion",
    "lung opacity",
    "pleural effusion",
    "pneumonia",
    "pneumothorax",
)
TEMPLATES = (  # how people write compositional queries: one finding, A and not B, A with B
    "{a}",
    "{a} and no {b}",
    "{a} without {b}",
    "{a} with {b}",
    "{a} and {b}",
    "possible {a}",
    "no {a}",
    "left {a}",
    "right {a} and no {b}",
    "{a}, {b} and no {c}",
    "{a} and {b} without {c}",
    "{a} with {b} and no {c}",
    "new {a} and no {b}",
    "bilateral {a}",
    "small {a}",
)
ZIPF_S = 1.0  # query popularity: the r-th most common query is asked in proportion to 1/r^s
SEED = 21


def query_space() -> list[str]:
    """Every distinct query of the mix (10 findings through the templates, A != B != C),
    in a seeded random popularity order."""
    import random

    texts: set[str] = set()
    for template in TEMPLATES:
        for a, b, c in itertools.permutations(FINDINGS, 3):
            texts.add(template.format(a=a, b=b, c=c))
    ordered = sorted(texts)
    random.Random(SEED).shuffle(ordered)
    return ordered


def query_stream(seed: int) -> Iterator[str]:
    """An endless Zipf(ZIPF_S)-distributed stream over query_space(): a few queries are asked
    often, most are rare (the long tail of a search log), so a query cache cannot hit them
    all. `seed` makes each level's stream its own."""
    import numpy as np

    space = query_space()
    weights = 1.0 / np.arange(1, len(space) + 1) ** ZIPF_S
    rng = np.random.default_rng(seed)
    while True:
        for rank in rng.choice(len(space), size=4096, p=weights / weights.sum()):
            yield space[rank]


LEVELS = (1, 4, 8, 16)
MARKERS = ("<!-- bench_api:start -->", "<!-- bench_api:end -->")
NOCACHE_MARKERS = ("<!-- bench_api_nocache:start -->", "<!-- bench_api_nocache:end -->")
_addresses = itertools.count(1)
reasons: list[str] = []  # why requests failed, reported per level


def address() -> str:
    n = next(_addresses)
    return f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255 or 1}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


async def rest_search(client: httpx.AsyncClient, query: str, search_ms: list[float]) -> bool:
    reply = await client.post(
        "/api/v1/search", json={"text": query, "k": 10}, headers={"x-forwarded-for": address()}
    )
    if reply.status_code != 200:
        reasons.append(f"HTTP {reply.status_code}: {reply.text[:120]}")
        return False
    body = reply.json()
    timings = body.get("timings_ms", {})
    search_ms.append((float(timings.get("encode", 0.0)), float(timings.get("search", 0.0))))
    if len(body["results"]) != 10:
        reasons.append(f"{len(body['results'])} hits for {query!r}")
        return False
    return True


async def gradio_search(client: httpx.AsyncClient, fn_index: int, query: str) -> bool:
    session = uuid.uuid4().hex[:11]
    headers = {"x-forwarded-for": address()}
    body = {
        "data": [query, None, None, None, 10, "auto", False, "volume", 0],
        "fn_index": fn_index,
        "session_hash": session,
        "event_data": None,
        "trigger_id": None,
    }
    joined = await client.post("/gradio_api/queue/join", json=body, headers=headers)
    if joined.status_code != 200:
        return False
    event_id = joined.json().get("event_id")
    async with client.stream(
        "GET", "/gradio_api/queue/data", params={"session_hash": session}, headers=headers
    ) as stream:
        async for line in stream.aiter_lines():
            if not line.startswith("data:"):
                continue
            message = json.loads(line[5:])
            if message.get("event_id") == event_id and message.get("msg") == "process_completed":
                data = (message.get("output") or {}).get("data") or []
                hits = data[2] if len(data) > 2 else None  # outputs: parsed, notice, hits
                if isinstance(hits, str):  # the hit cards' HTML (ui/search_tab.hits_html)
                    shown = hits.count('class="sr-hit')
                else:  # a gallery's items, on servers before the cards
                    shown = len(hits) if isinstance(hits, list) else 0
                return bool(message.get("success")) and shown == 10
    return False


async def upload_search(client: httpx.AsyncClient, png: bytes, search_ms: list[float]) -> bool:
    reply = await client.post(
        "/api/v1/search/image",
        files={"file": ("scan.png", png, "image/png")},
        data={"k": "10"},
        headers={"x-forwarded-for": address()},
    )
    if reply.status_code != 200:
        return False
    timings = reply.json().get("timings_ms", {})
    search_ms.append((float(timings.get("encode", 0.0)), float(timings.get("search", 0.0))))
    return True


async def level(base: str, clients: int, seconds: float, call) -> dict[str, float]:
    """`clients` loops calling `call(client, i)` for `seconds`; latency of each call."""
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=clients + 4)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
        deadline = time.perf_counter() + seconds
        counter = itertools.count()

        async def loop() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    ok = await call(client, next(counter))
                except httpx.HTTPError as error:
                    reasons.append(type(error).__name__)
                    ok = False
                latencies.append(time.perf_counter() - started)
                errors += 0 if ok else 1

        began = time.perf_counter()
        reasons.clear()
        await asyncio.gather(*(loop() for _ in range(clients)))
        elapsed = time.perf_counter() - began
    return {
        "clients": clients,
        "n": len(latencies),
        "rate": len(latencies) / elapsed,
        "p50": 1000 * percentile(latencies, 0.50),
        "p95": 1000 * percentile(latencies, 0.95),
        "errors": errors,
        "reasons": sorted(set(reasons))[:5],
    }


def start_server(data_dir: str, cache: bool = True) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {
        **os.environ,
        "DATA_DIR": data_dir,
        "PORT": str(port),
        "TRUST_PROXY_HEADERS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "MEDHEB_QUERY_CACHE": os.environ.get("MEDHEB_QUERY_CACHE", "4096") if cache else "0",
    }
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py")],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            reply = httpx.post(f"{base}/api/v1/search", json={"text": "cardiomegaly"}, timeout=30)
            if reply.status_code == 200:
                return server, base
        except httpx.HTTPError:
            pass
        if server.poll() is not None:
            raise SystemExit("the app exited before it served a search")
        time.sleep(1)
    server.kill()
    raise SystemExit("the demo was not ready within 300 s")


def search_fn_index(base: str) -> int:
    """The page's Search button event ("search_page"; "search" on servers before it had its
    own name next to the JSON endpoint)."""
    dependencies = httpx.get(f"{base}/config", timeout=30).json()["dependencies"]
    for name in ("search_page", "search"):
        for position, dependency in enumerate(dependencies):
            if dependency.get("api_name") == name:
                return int(dependency.get("id", position))
    raise SystemExit("no Gradio event for the page's search")


class Mix:
    """The run's query draws: each level and path its own Zipf stream, and the share of draws
    whose text the server has already encoded (its query cache's hit rate while that cache is
    larger than the run's distinct queries, as with the default 4,096 entries)."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.draws = 0
        self.repeats = 0

    def stream(self, seed: int):
        queries = query_stream(seed)

        def draw() -> str:
            text = next(queries)
            self.draws += 1
            self.repeats += text in self.seen
            self.seen.add(text)
            return text

        return draw

    def share(self) -> tuple[int, int]:
        """(draws, repeats) so far; a level's own figure is the difference of two readings."""
        return self.draws, self.repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per level and path")
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument(
        "--no-query-cache",
        action="store_true",
        help="serve with MEDHEB_QUERY_CACHE=0: every query encoded (the uncached figures)",
    )
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    data_dir = os.environ.get("DATA_DIR")
    if not data_dir:
        raise SystemExit("set DATA_DIR to a data folder with the demo built")
    server, base = start_server(data_dir, cache=not args.no_query_cache)
    mix = Mix()
    mix.seen.add("cardiomegaly")  # the readiness probe's search
    try:
        fn_index = search_fn_index(base)
        png = sorted((Path(data_dir) / "demo").rglob("*.png"))[0].read_bytes()
        rows, service_ms = [], {"rest": [], "upload": []}
        for clients in [int(c) for c in args.levels.split(",")]:
            before = mix.share()
            draw = mix.stream(SEED + 2 * clients)
            rest = asyncio.run(
                level(
                    base, clients, args.seconds,
                    lambda c, i, draw=draw: rest_search(c, draw(), service_ms["rest"]),
                )
            )  # fmt: skip
            rest["repeats"] = _share(before, mix.share())
            load_rest = os.getloadavg()[0]
            before = mix.share()
            draw = mix.stream(SEED + 2 * clients + 1)
            gradio = asyncio.run(
                level(
                    base, clients, args.seconds,
                    lambda c, i, draw=draw: gradio_search(c, fn_index, draw()),
                )
            )  # fmt: skip
            gradio["repeats"] = _share(before, mix.share())
            rows.append((clients, rest, gradio, load_rest, os.getloadavg()[0]))
            print(f"{clients:>2} clients: REST {rest} | Gradio {gradio}", flush=True)
        upload = asyncio.run(
            level(base, 4, args.seconds, lambda c, i: upload_search(c, png, service_ms["upload"]))
        )
        print(f"upload at 4 clients: {upload}", flush=True)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    text = report(rows, upload, service_ms, args, len(mix.seen))
    print(text)
    if args.write:
        write_section(text, markers(args))


def _share(before: tuple[int, int], after: tuple[int, int]) -> float:
    draws = after[0] - before[0]
    return (after[1] - before[1]) / draws if draws else 0.0


def markers(args) -> tuple[str, str]:
    return NOCACHE_MARKERS if args.no_query_cache else MARKERS


def report(rows, upload, service_ms, args, distinct: int) -> str:
    now = dt.datetime.now(dt.UTC).isoformat(timespec="minutes")
    cached = not args.no_query_cache
    flag = "" if cached else " --no-query-cache"
    lines = [
        markers(args)[0],
        "#### "
        + (
            "With the query cache (default, MEDHEB_QUERY_CACHE=4096)"
            if cached
            else "Without the query cache (MEDHEB_QUERY_CACHE=0: every query encoded)"
        ),
        "",
        f"- {now}; {platform.machine()}, {os.cpu_count()} cores **shared with the other "
        "engineers' work** (load average in the table, sampled after each run); Python "
        f"{platform.python_version()}.",
        f"- Command: `DATA_DIR=<copy of the 2,000-phantom demo> .venv/bin/python "
        f"bench/bench_api.py --seconds {args.seconds:g}{flag}`; {distinct} distinct queries "
        "were asked in the run. Repeats = share of a level's queries already asked earlier in "
        "the run"
        + (" (= the server's query cache hit rate)" if cached else " (cache off: all encoded)")
        + ".",
        "",
        "| clients | REST searches/s | REST p50 ms | REST p95 ms | REST errors | REST repeats | "
        "Gradio searches/s | Gradio p50 ms | Gradio p95 ms | Gradio errors | REST / Gradio | "
        "load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for clients, rest, gradio, load_rest, load_gradio in rows:
        ratio = rest["rate"] / gradio["rate"] if gradio["rate"] else float("inf")
        lines.append(
            f"| {clients} | {rest['rate']:.1f} | {rest['p50']:.0f} | {rest['p95']:.0f} | "
            f"{rest['errors']} | {100 * rest['repeats']:.0f}% | {gradio['rate']:.1f} | "
            f"{gradio['p50']:.0f} | {gradio['p95']:.0f} | {gradio['errors']} | {ratio:.1f}x | "
            f"{load_rest:.1f} / {load_gradio:.1f} |"
        )
    encode = [e for e, _ in service_ms["rest"]]
    rank = [r for _, r in service_ms["rest"]]
    upload_encode = [e for e, _ in service_ms["upload"]]
    lines += [
        "",
        f"- Image search by upload (`POST /api/v1/search/image`, one demo PNG, 4 clients): "
        f"{upload['rate']:.1f} searches/s, p50 {upload['p50']:.0f} ms, p95 {upload['p95']:.0f} "
        f"ms, {upload['errors']} errors (image encode median "
        f"{statistics.median(upload_encode or [0]):.1f} ms).",
        f"- Where a REST text search's time goes (timings_ms of the answers, all levels): "
        f"encoding the query median {statistics.median(encode or [0]):.2f} ms (p95 "
        f"{percentile(encode, 0.95):.1f} ms; a cache hit is under 0.1 ms), FAISS / logic "
        f"ranking median {statistics.median(rank or [0]):.2f} ms; the rest of the end-to-end "
        "latency is the search service's other steps, HTTP and JSON, and waiting for one of "
        "the 2 cores that the server, the clients and the other engineers share.",
        markers(args)[1],
    ]
    return "\n".join(lines)


def write_section(text: str, marks: tuple[str, str] = MARKERS) -> None:
    path = ROOT / "BENCHMARKS.md"
    current = path.read_text()
    if marks[0] in current:
        head, rest = current.split(marks[0], 1)
        tail = rest.split(marks[1], 1)[1]
        current = head + text + tail
    else:
        current = current.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(current)


if __name__ == "__main__":
    main()
