"""The served app in-process or in a child process, and a raw Gradio queue client that acts
like an attacker.

`serve(app)` runs a FastAPI app under uvicorn on a free port in a thread;
`start_app_process(port, env)` runs the whole app in a process of its own (for tests that kill
it or run two replicas), and `wait_until_serving` waits until it answers. `QueueClient`
speaks Gradio's own protocol (gradio_client does the same): POST {prefix}/gradio_api/queue/join
with any `fn_index` and session hash, then read the server-sent events of
{prefix}/gradio_api/queue/data until the event completes. Cookies are per client, like browsers.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import httpx
import uvicorn

from medheb_app.access.header_cap import HeadCappedProtocol
from medheb_app.settings import PROJECT_ROOT

# One TLS context for the test clients (QueueClient, wait_until_serving's polls, the clients of
# tests.api_site): httpx builds one per client otherwise, loading the CA bundle again (25 ms of
# CPU each), and the suite makes hundreds of clients of its local http servers.
LOCAL_TLS = httpx.create_ssl_context()

# The app as `python -c APP_PROCESS PORT` serves it: services from the environment's Settings,
# no bootstrap thread, the page and the JSON API on 127.0.0.1:PORT.
APP_PROCESS = (
    "import sys, uvicorn\n"
    "from medheb_app.startup_heap import startup_phase\n"
    "with startup_phase():\n"
    "    from medheb_app.services import create_services\n"
    "    from medheb_app.settings import Settings\n"
    "    from medheb_app.ui.server import build_server\n"
    "    services = create_services(Settings.from_env(), start_bootstrap=False)\n"
    "    server = build_server(services)\n"
    "from medheb_app.access.header_cap import HeadCappedProtocol\n"
    "uvicorn.run(server, host='127.0.0.1', port=int(sys.argv[1]),"
    " log_level='warning', http=HeadCappedProtocol)\n"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """The app on http://127.0.0.1:PORT until the block ends; at the end, connections still
    open after 2 s (a client's event stream, Gradio's heartbeat) are closed, not waited for."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        timeout_graceful_shutdown=2,
        http=HeadCappedProtocol,  # as app.py serves it
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the app did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def start_app_process(
    port: int, env: dict[str, str], output: IO[Any] | int = subprocess.DEVNULL
) -> subprocess.Popen:
    """The app (APP_PROCESS) on 127.0.0.1:`port` in a child process with exactly `env` as its
    environment, in a session of its own (so os.killpg stops it and its children); its output
    goes to `output`. Returns at once: wait_until_serving waits for it."""
    return subprocess.Popen(
        [sys.executable, "-c", APP_PROCESS, str(port)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_until_serving(
    process: subprocess.Popen, base: str, seconds: float, log: Path | None = None
) -> None:
    """Return once GET {base}/config answers 200; RuntimeError when the process exits first,
    TimeoutError after `seconds` (each with the tail of `log`, where the output went there)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the app exited: {log.read_text()[-2000:] if log else ''}")
        try:
            if httpx.get(f"{base}/config", timeout=5, verify=LOCAL_TLS).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"the app did not start: {log.read_text()[-2000:] if log else ''}")


def fn_index(blocks: Any, qualname_part: str) -> int:
    """The fn_index of the Blocks handler whose Python function's qualname contains the text."""
    found = [
        index
        for index, block_fn in blocks.fns.items()
        if block_fn.fn is not None and qualname_part in block_fn.fn.__qualname__
    ]
    if not found:
        raise KeyError(qualname_part)
    return found[0]


class QueueClient:
    """One browser-like client: its own cookie jar, any session hash it likes."""

    def __init__(self, base: str, session_hash: str | None = None) -> None:
        self.http = httpx.Client(
            base_url=base, timeout=60, follow_redirects=False, verify=LOCAL_TLS
        )
        self.session_hash = session_hash or uuid.uuid4().hex[:11]

    def close(self) -> None:
        self.http.close()

    def post_form(self, path: str, data: dict[str, str]) -> httpx.Response:
        url = self.http.base_url
        origin = f"{url.scheme}://{url.netloc.decode()}"
        return self.http.post(path, data=data, headers={"origin": origin})

    def call(
        self, index: int, data: list[Any], prefix: str = "", session_hash: str | None = None
    ) -> dict[str, Any]:
        """Run one event; returns {"status": http status, "output": completed msg or None,
        "text": every byte the server streamed back}."""
        session = session_hash or self.session_hash
        body = {
            "data": data,
            "fn_index": index,
            "session_hash": session,
            "event_data": None,
            "trigger_id": None,
        }
        joined = self.http.post(f"{prefix}/gradio_api/queue/join", json=body)
        if joined.status_code != 200:
            return {"status": joined.status_code, "output": None, "text": joined.text}
        event_id = joined.json()["event_id"]
        streamed = []
        with self.http.stream(
            "GET", f"{prefix}/gradio_api/queue/data", params={"session_hash": session}
        ) as stream:
            for line in stream.iter_lines():
                streamed.append(line)
                if not line.startswith("data:"):
                    continue
                message = json.loads(line[5:])
                if message.get("event_id") != event_id:
                    continue
                if message.get("msg") == "process_completed":
                    return {"status": 200, "output": message, "text": "\n".join(streamed)}
        return {"status": 200, "output": None, "text": "\n".join(streamed)}
