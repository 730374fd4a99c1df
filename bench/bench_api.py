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
import datetime as dt
import http.client
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rss import free_port, stop_process  # noqa: E402

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


class Connection:
    """One client's keep-alive HTTP/1.1 connection (http.client: a fraction of httpx's CPU per
    request, so the clients, which share the 2 cores with the server, take less from it; the
    same client for both paths)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.conn = http.client.HTTPConnection(host, port, timeout=60)

    def request(self, method: str, path: str, body: bytes | None, headers: dict[str, str]):
        """(status, response) of one request; the caller reads the response."""
        try:
            self.conn.request(method, path, body=body, headers=headers)
            return self.conn.getresponse()
        except (http.client.HTTPException, OSError):  # the server closed a kept-alive one
            self.reopen()
            self.conn.request(method, path, body=body, headers=headers)
            return self.conn.getresponse()

    def reopen(self) -> None:
        self.conn.close()
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)


def rest_search(conn: Connection, query: str, search_ms: list) -> bool:
    body = json.dumps({"text": query, "k": 10}).encode()
    headers = {"content-type": "application/json", "x-forwarded-for": address()}
    reply = conn.request("POST", "/api/v1/search", body, headers)
    data = reply.read()
    if reply.status != 200:
        reasons.append(f"HTTP {reply.status}: {data[:120]!r}")
        return False
    answer = json.loads(data)
    timings = answer.get("timings_ms", {})
    search_ms.append(
        (
            float(timings.get("encode", 0.0)),
            float(timings.get("search", 0.0)),
            "cached" in timings,
        )
    )
    if len(answer["results"]) != 10:
        reasons.append(f"{len(answer['results'])} hits for {query!r}")
        return False
    return True


def gradio_search(conn: Connection, fn_index: int, query: str) -> bool:
    """queue/join, then the session's server-sent events until our event completes (the
    stream is left when it does, so its connection is opened anew for the next search)."""
    session = uuid.uuid4().hex[:11]
    client = address()
    body = json.dumps(
        {
            "data": [query, None, None, None, 10, "auto", False, "volume", 0],
            "fn_index": fn_index,
            "session_hash": session,
            "event_data": None,
            "trigger_id": None,
        }
    ).encode()
    headers = {"content-type": "application/json", "x-forwarded-for": client}
    joined = conn.request("POST", "/gradio_api/queue/join", body, headers)
    data = joined.read()
    if joined.status != 200:
        reasons.append(f"join HTTP {joined.status}: {data[:120]!r}")
        return False
    event_id = json.loads(data).get("event_id")
    stream = conn.request(
        "GET", f"/gradio_api/queue/data?session_hash={session}", None, {"x-forwarded-for": client}
    )
    try:
        while line := stream.readline():
            if not line.startswith(b"data:"):
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
    finally:
        conn.reopen()


def upload_body(png: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body with the PNG as `file` and k=10."""
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="k"\r\n\r\n10\r\n'.encode(),
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="scan.png"\r\n'
        "Content-Type: image/png\r\n\r\n".encode(),
        png,
        f"\r\n--{boundary}--\r\n".encode(),
    ]
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def upload_search(conn: Connection, body: bytes, kind: str, search_ms: list) -> bool:
    headers = {"content-type": kind, "x-forwarded-for": address()}
    reply = conn.request("POST", "/api/v1/search/image", body, headers)
    data = reply.read()
    if reply.status != 200:
        reasons.append(f"HTTP {reply.status}: {data[:120]!r}")
        return False
    timings = json.loads(data).get("timings_ms", {})
    search_ms.append((float(timings.get("encode", 0.0)), float(timings.get("search", 0.0)), False))
    return True


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def level(base: str, server_pid: int, clients: int, seconds: float, call) -> dict[str, Any]:
    """`clients` threads, each with its own connection, calling `call(conn)` for `seconds`;
    the latency of each call, and the CPU the server and these clients spent per call."""
    host, port = base.removeprefix("http://").split(":")
    latencies: list[float] = []
    errors = 0
    lock = threading.Lock()
    deadline = time.perf_counter() + seconds

    def loop() -> None:
        nonlocal errors
        conn = Connection(host, int(port))
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    ok = call(conn)
                except (http.client.HTTPException, OSError, ValueError) as error:
                    reasons.append(type(error).__name__)
                    conn.reopen()
                    ok = False
                elapsed = time.perf_counter() - started
                with lock:
                    latencies.append(elapsed)
                    errors += 0 if ok else 1
        finally:
            conn.conn.close()

    reasons.clear()
    threads = [threading.Thread(target=loop) for _ in range(clients)]
    server_before, client_before = cpu_seconds(server_pid), time.process_time()
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    server_cpu = cpu_seconds(server_pid) - server_before
    client_cpu = time.process_time() - client_before
    n = max(1, len(latencies))
    return {
        "clients": clients,
        "n": len(latencies),
        "rate": len(latencies) / elapsed,
        "p50": 1000 * percentile(latencies, 0.50),
        "p95": 1000 * percentile(latencies, 0.95),
        "errors": errors,
        "server_ms": 1000 * server_cpu / n,
        "client_ms": 1000 * client_cpu / n,
        "reasons": sorted(set(reasons))[:5],
    }


def start_server(
    data_dir: str, cache: bool = True, root: Path = ROOT, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str]:
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
        "MEDHEB_ANSWER_CACHE": os.environ.get("MEDHEB_ANSWER_CACHE", "2048") if cache else "0",
        **(extra_env or {}),
    }
    server = subprocess.Popen(
        [sys.executable, str(root / "app.py")],
        env=env,
        cwd=root,
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
        lock = threading.Lock()  # the clients are threads; a generator is not thread-safe

        def draw() -> str:
            with lock:
                return self._count(next(queries))

        return draw

    def _count(self, text: str) -> str:
        self.draws += 1
        self.repeats += text in self.seen
        self.seen.add(text)
        return text

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
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="serve the app.py of another checkout (old against new in one sitting)",
    )
    parser.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = parser.parse_args()
    data_dir = os.environ.get("DATA_DIR")
    if not data_dir:
        raise SystemExit("set DATA_DIR to a data folder with the demo built")
    server, base = start_server(data_dir, cache=not args.no_query_cache, root=args.root)
    print(f"serving {args.root} as process {server.pid} at {base}", flush=True)
    mix = Mix()
    mix.seen.add("cardiomegaly")  # the readiness probe's search
    try:
        fn_index = search_fn_index(base)
        png = sorted((Path(data_dir) / "demo").rglob("*.png"))[0].read_bytes()
        upload, kind = upload_body(png)
        rows, service_ms = [], {"rest": [], "upload": []}
        for clients in [int(c) for c in args.levels.split(",")]:
            before = mix.share()
            draw = mix.stream(SEED + 2 * clients)
            rest = level(
                base, server.pid, clients, args.seconds,
                lambda conn, draw=draw: rest_search(conn, draw(), service_ms["rest"]),
            )  # fmt: skip
            rest["repeats"] = _share(before, mix.share())
            load_rest = os.getloadavg()[0]
            before = mix.share()
            draw = mix.stream(SEED + 2 * clients + 1)
            gradio = level(
                base, server.pid, clients, args.seconds,
                lambda conn, draw=draw: gradio_search(conn, fn_index, draw()),
            )  # fmt: skip
            gradio["repeats"] = _share(before, mix.share())
            rows.append((clients, rest, gradio, load_rest, os.getloadavg()[0]))
            print(f"{clients:>2} clients: REST {rest} | Gradio {gradio}", flush=True)
        uploads = level(
            base, server.pid, 4, args.seconds,
            lambda conn: upload_search(conn, upload, kind, service_ms["upload"]),
        )  # fmt: skip
        print(f"upload at 4 clients: {uploads}", flush=True)
    finally:
        stop_process(server)
    text = report(rows, uploads, service_ms, args, len(mix.seen))
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
        "server CPU ms per search, REST / Gradio | client CPU ms per search, REST / Gradio | "
        "load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for clients, rest, gradio, load_rest, load_gradio in rows:
        ratio = rest["rate"] / gradio["rate"] if gradio["rate"] else float("inf")
        lines.append(
            f"| {clients} | {rest['rate']:.1f} | {rest['p50']:.0f} | {rest['p95']:.0f} | "
            f"{rest['errors']} | {100 * rest['repeats']:.0f}% | {gradio['rate']:.1f} | "
            f"{gradio['p50']:.0f} | {gradio['p95']:.0f} | {gradio['errors']} | {ratio:.1f}x | "
            f"{rest['server_ms']:.1f} / {gradio['server_ms']:.1f} | "
            f"{rest['client_ms']:.2f} / {gradio['client_ms']:.2f} | "
            f"{load_rest:.1f} / {load_gradio:.1f} |"
        )
    answered = service_ms["rest"]
    computed = [(e, r) for e, r, cached in answered if not cached]
    encode = [e for e, _ in computed]
    rank = [r for _, r in computed]
    upload_encode = [e for e, *_ in service_ms["upload"]]
    share = 1 - len(computed) / len(answered) if answered else 0.0
    lines += [
        "",
        f"- Image search by upload (`POST /api/v1/search/image`, one demo PNG, 4 clients): "
        f"{upload['rate']:.1f} searches/s, p50 {upload['p50']:.0f} ms, p95 {upload['p95']:.0f} "
        f"ms, {upload['errors']} errors (image encode median "
        f"{statistics.median(upload_encode or [0]):.1f} ms; server CPU "
        f"{upload['server_ms']:.1f} ms per search).",
        f"- REST answers served from the server's result cache (medheb_app/api/answers.py; "
        f"timings_ms says `cached`): {100 * share:.0f}% over all levels. In the answers that "
        f"were computed: encoding the query median {statistics.median(encode or [0]):.2f} ms "
        f"(p95 {percentile(encode, 0.95):.1f} ms; a query-cache hit is under 0.1 ms), FAISS / "
        f"logic ranking median {statistics.median(rank or [0]):.2f} ms.",
        "- Server CPU per search: the server process's user + system CPU (/proc, all threads) "
        "over the level divided by the searches answered; client CPU the same for the bench "
        "process, whose client threads (one keep-alive http.client connection each, the same "
        "client for both paths) share the 2 cores with the server.",
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
