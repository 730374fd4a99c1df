"""Nothing a visitor uploads stays on disk (issue 19 item 6), attacked over HTTP.

Before: an upload that never reached a handler stayed under its original, patient-identifying
file name, fetchable by URL; 500 MB went up with nothing stopping it before it was written;
after a kill -9 it was never cleaned up; identical uploads from different users shared one
path, so two of three parallel uploads failed.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from medheb_app.services import create_services
from medheb_app.settings import Settings
from medheb_app.ui.server import build_server
from tests.web_client import (
    QueueClient,
    fn_index,
    free_port,
    serve,
    start_app_process,
    wait_until_serving,
)

NAME = "DOE^JOHN_MRN0042_1957-03-01.png"


def _png() -> bytes:
    pixels = (np.arange(128 * 128) % 251).astype(np.uint8).reshape(128, 128)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _files_named(root: Path, part: str) -> list[Path]:
    return [path for path in root.rglob("*") if part in path.name]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("uploads")
    settings = Settings.from_env(data_dir=root / "data", max_upload_bytes=2 * 2**20)
    services = create_services(settings, start_bootstrap=False)
    app = build_server(services)
    with serve(app) as base:
        yield {"base": base, "app": app, "intake": app.state.uploads}
    app.state.uploads.stop()
    services.jobs.shutdown(wait=False)


def _upload(client: QueueClient, body: bytes, name: str = NAME, prefix: str = ""):
    return client.http.post(
        f"{prefix}/gradio_api/upload", files={"files": (name, body, "image/png")}
    )


def test_an_unconsumed_upload_keeps_no_name_and_is_not_served(site):
    from gradio.utils import get_upload_folder

    client = QueueClient(site["base"])
    reply = _upload(client, _png())
    assert reply.status_code == 200, reply.text
    (path,) = reply.json()
    assert Path(path).is_file() and site["intake"].owns(path)
    assert "DOE" not in path and "MRN" not in path and path.endswith(".png")
    assert not _files_named(Path(get_upload_folder()), "MRN0042")  # the name never hit disk
    assert Path(path).parent.stat().st_mode & 0o077 == 0
    # neither the uploader nor anyone, by either of Gradio's file routes, under either page
    # (the adversarial pass fetched the raw upload through /gradio_api/file/<path>)
    routes = ("/gradio_api/file=", "/gradio_api/file/", "/rate/gradio_api/file/", "/file/")
    for someone in (client, QueueClient(site["base"])):
        for route in routes:
            fetched = someone.http.get(f"{route}{path}")
            assert fetched.status_code == 404, (route, fetched.status_code)
            assert b"MRN0042" not in fetched.content


def test_an_oversized_upload_is_refused_before_it_is_written(site):
    intake = site["intake"]
    before = set(intake.folder.iterdir())
    client = QueueClient(site["base"])
    big = b"\0" * (3 * 2**20)  # over the 2 MB cap
    declared = _upload(client, big)
    assert declared.status_code == 413 and "limit of 2 MB" in declared.text

    def chunks():  # no Content-Length: stopped while streaming, what was written removed
        boundary = b"--xyz\r\n"
        yield boundary + b'Content-Disposition: form-data; name="files"; filename="a.png"\r\n'
        yield b"Content-Type: image/png\r\n\r\n"
        for _ in range(48):
            yield b"\1" * 65536

    streamed = client.http.post(
        "/gradio_api/upload",
        content=chunks(),
        headers={"content-type": "multipart/form-data; boundary=xyz"},
    )
    assert streamed.status_code == 413
    assert set(intake.folder.iterdir()) == before


def test_the_raters_page_takes_no_uploads(site):
    reply = _upload(QueueClient(site["base"]), _png(), prefix="/rate")
    assert reply.status_code == 404


def test_identical_uploads_from_three_clients_do_not_collide(site):
    upload = fn_index(site["app"].state.blocks["main"], "build_search_tab.<locals>._upload")
    body = _png()

    def one(i: int) -> str:
        client = QueueClient(site["base"])
        client.http.headers["x-test-client"] = str(i)
        (path,) = _upload(client, body).json()
        data = {"path": path, "orig_name": NAME, "meta": {"_type": "gradio.FileData"}}
        return path + "\n" + str(client.call(upload, [data]))

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(one, range(3)))
    paths = {result.split("\n", 1)[0] for result in results}
    assert len(paths) == 3
    for result in results:
        assert "Loaded the upload" in result, result[-400:]
        assert "DOE" not in result.split("\n", 1)[1]


def _serve_process(data_dir: Path, port: int, env: dict) -> subprocess.Popen:
    process = start_app_process(port, {**os.environ, "DATA_DIR": str(data_dir), **env})
    try:
        wait_until_serving(process, f"http://127.0.0.1:{port}", 120)
    except (RuntimeError, TimeoutError):
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        raise
    return process


@pytest.mark.slow  # two app processes started (~11 s): its module is sent to a worker early
def test_uploads_left_by_a_killed_process_are_swept_at_the_next_start(tmp_path):
    temp = tmp_path / "gradio-temp"  # a Gradio upload folder of this test's own
    env = {"GRADIO_TEMP_DIR": str(temp), "UPLOAD_TTL_S": "0.5"}
    port = free_port()
    first = _serve_process(tmp_path / "data", port, env)
    reply = httpx.post(
        f"http://127.0.0.1:{port}/gradio_api/upload",
        files={"files": (NAME, _png(), "image/png")},
        timeout=30,
    )
    (path,) = reply.json()
    os.killpg(first.pid, signal.SIGKILL)  # no shutdown hook runs
    first.wait(timeout=30)
    assert Path(path).is_file()
    time.sleep(1.0)  # older than the TTL by the time the next process starts
    second = _serve_process(tmp_path / "data", free_port(), env)
    try:
        assert not Path(path).exists()
        assert not Path(path).parent.exists()
        assert not _files_named(temp, "MRN0042")
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(timeout=30)
