"""Peak memory of the running app while N visitors upload large zipped DICOM series at once,
or (--bombs) decompression bombs of every format, one at a time and four at once.

    .venv/bin/python bench/bench_upload_rss.py                  # 4 x 480 MB, as the issue asks
    .venv/bin/python bench/bench_upload_rss.py --n 2 --zip-mb 100
    .venv/bin/python bench/bench_upload_rss.py --bombs          # every format's bomb (issue 19)

Generates N distinct zips of 512x512 CT slices (stored, so a 480 MB zip is 480 MB of slices)
in a temporary folder, pre-builds a tiny demo (oracle, 20 phantoms) in a temporary DATA_DIR,
starts `python app.py` as a subprocess, and uploads the zips in parallel through Gradio's
upload route, then the search tab's upload event by fn_index through the queue, as a
browser does).
The app's resident memory (process and children) is sampled every 50 ms from start to the
last answer. Prints a markdown block for BENCHMARKS.md; the temporary files are removed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import io
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rss import free_port, peak_rss_of_server  # noqa: E402

SLICE = 512


def write_zip(path: Path, megabytes: int, variant: int) -> int:
    """A zip of one CT series of SLICE x SLICE int16 slices totalling about `megabytes`."""
    import pydicom
    from pydicom.data import get_testdata_file

    template = pydicom.dcmread(get_testdata_file("CT_small.dcm", download=False))
    template.Rows = template.Columns = SLICE
    template.PixelRepresentation, template.RescaleSlope, template.RescaleIntercept = 1, 1, 0
    n = max(2, megabytes * 2**20 // (SLICE * SLICE * 2))
    rng = np.random.default_rng(variant)
    base = rng.integers(-1000, 1000, size=(SLICE, SLICE), dtype=np.int16)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for i in range(n):
            template.InstanceNumber = i + 1
            template.ImagePositionPatient = [0.0, 0.0, float(i)]
            template.PixelData = np.roll(base, i, axis=0).tobytes()
            buffer = io.BytesIO()
            template.save_as(buffer, enforce_file_format=True)
            archive.writestr(f"series/slice{i:05d}.dcm", buffer.getvalue())
    return n


def upload_fn_index(url: str) -> int:
    """The fn_index of the search tab's upload event, read from the page's config."""
    with urllib.request.urlopen(f"{url}/config", timeout=30) as response:
        config = json.load(response)
    buttons = {c["id"] for c in config["components"] if c.get("type") == "uploadbutton"}
    for position, dependency in enumerate(config["dependencies"]):
        targets = dependency.get("targets") or []
        if any(t[0] in buttons and t[1] == "upload" for t in targets):
            return int(dependency.get("id", position))
    raise RuntimeError("no upload event in the app's config")


def upload_one(
    url: str, fn_index: int, path: Path, headers: dict[str, str] | None = None
) -> dict[str, object]:
    """What a browser does: stream the file to /gradio_api/upload, join the queue for the upload
    event with the returned server path, read the event stream until the answer."""
    import uuid

    import httpx

    started = time.perf_counter()
    session = uuid.uuid4().hex[:11]
    try:
        with (
            httpx.Client(base_url=url, timeout=600, headers=headers or {}) as client,
            open(path, "rb") as handle,
        ):
            uploaded = client.post("/gradio_api/upload", files={"files": (path.name, handle)})
            uploaded.raise_for_status()
            server_path = uploaded.json()[0]
            file_data = {
                "path": server_path,
                "orig_name": path.name,
                "meta": {"_type": "gradio.FileData"},
            }
            joined = client.post(
                "/gradio_api/queue/join",
                json={
                    "data": [file_data],
                    "fn_index": fn_index,
                    "session_hash": session,
                    "event_data": None,
                    "trigger_id": None,
                },
            )
            joined.raise_for_status()
            message = "no answer"
            with client.stream("GET", f"/gradio_api/queue/data?session_hash={session}") as events:
                for line in events.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    event = json.loads(line[5:])
                    if event.get("msg") == "process_completed":
                        output = (event.get("output") or {}).get("data") or []
                        text = output[4] if len(output) > 4 else event.get("output")
                        message = re.sub(r"<[^>]+>", "", str(text))
                        break
    except Exception as error:
        message = f"{type(error).__name__}: {error}"
    return {"seconds": round(time.perf_counter() - started, 1), "message": message[:160]}


def wait_for_upload_fn_index(url: str, timeout_s: float = 120.0) -> int:
    """The upload event's fn_index, once the server answers (it logs its address just before
    it binds, so the first requests may be refused)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return upload_fn_index(url)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def upload_all(url: str, zips: list[Path]) -> list[dict[str, object]]:
    fn_index = wait_for_upload_fn_index(url)
    with concurrent.futures.ThreadPoolExecutor(len(zips)) as pool:
        return list(pool.map(lambda path: upload_one(url, fn_index, path), zips))


BOMBS = {
    # kind: (what, how to write it); sizes are what the file declares, not what it weighs
    "nifti-gz": ("NIfTI-gz of 1024x1024x1024 int16 zeros (2 GB declared)", "nifti"),
    "nifti-gz-wide": ("NIfTI-gz with one 8192x8192 slice (128 MB declared, refused)", "wide"),
    "dicom-deflated": ("deflated DICOM of 16384x16384 int16 (512 MB declared)", "deflated"),
    "dicom-deflated-frames": ("deflated DICOM of 150 frames of 512x512 (75 MB)", "frames"),
    "png-refused": ("PNG of 20000x20000 zeros (400 M pixels declared)", "png-big"),
    "png-largest": ("PNG of 4096x4096 zeros (16.8 M pixels, the largest decoded)", "png"),
    "jpeg-refused": ("JPEG declaring 20000x20000", "jpeg"),
}


def write_bomb(kind: str, folder: Path, variant: int) -> Path:
    from tests import bombs

    how = BOMBS[kind][1]
    if how == "nifti":
        return bombs.nifti_gz(folder / f"b{variant}.nii.gz", (1024, 1024, 1024))
    if how == "wide":
        return bombs.nifti_gz(folder / f"w{variant}.nii.gz", (8192, 8192, 1))
    if how == "deflated":
        return bombs.deflated_dicom(folder / f"d{variant}.dcm", 16384, 16384)
    if how == "frames":
        return bombs.deflated_dicom(folder / f"f{variant}.dcm", 512, 512, frames=150)
    if how == "png-big":
        return bombs.png(folder / f"p{variant}.png", 20000, 20000)
    if how == "png":
        return bombs.png(folder / f"q{variant}.png", 4096, 4096)
    return bombs.jpeg(folder / f"j{variant}.jpg", 20000, 20000)


def _phase_peak(app, run) -> tuple[int, int, object]:
    """(RSS before, peak RSS while `run()` runs and 1 s after, what it returned)."""
    from bench.rss import tree_rss

    before = tree_rss(app)
    peak = [before]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], tree_rss(app))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        outcome = run()
        time.sleep(1.0)
    finally:
        stop.set()
        sampler.join()
    return before, peak[0], outcome


def bomb_phases(url: str, files: dict[str, list[Path]]) -> list[dict[str, object]]:
    """Each kind once, then four at once (from four client addresses), sampling the app's RSS
    per phase: the RSS before the phase, its peak, and what the page said."""
    import psutil

    fn_index = wait_for_upload_fn_index(url)
    (app,) = psutil.Process().children()
    rows: list[dict[str, object]] = []
    for kind, paths in files.items():
        for count in (1, 4):
            time.sleep(2.0)
            first = len(rows) * 4
            jobs = [
                (path, {"x-forwarded-for": f"198.51.100.{first + i}"})
                for i, path in enumerate(paths[:count])
            ]
            started = time.perf_counter()

            def run(jobs=jobs, count=count) -> list[dict[str, object]]:
                with concurrent.futures.ThreadPoolExecutor(count) as pool:
                    return list(pool.map(lambda job: upload_one(url, fn_index, *job), jobs))

            before, peak, outcomes = _phase_peak(app, run)
            rows.append(
                {
                    "kind": kind,
                    "count": count,
                    "before_mb": before / 2**20,
                    "peak_mb": peak / 2**20,
                    "seconds": time.perf_counter() - started,
                    "message": outcomes[0]["message"],
                }
            )
    return rows


def app_env(work: Path, port: int, **extra: str) -> dict[str, str]:
    """The environment of the measured `python app.py`: a tiny oracle demo in work/data,
    its own Gradio temp folder, on 127.0.0.1:port."""
    return {
        **os.environ,
        "DATA_DIR": str(work / "data"),
        "MEDHEB_DEMO_SIZE": "20",
        "MEDHEB_DEMO_MODELS": "oracle",
        "MEDHEB_DEFAULT_MODEL": "oracle",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "GRADIO_TEMP_DIR": str(work / "gradio"),
        "HOST": "127.0.0.1",
        "PORT": str(port),
        **extra,
    }


def run_bombs(work: Path) -> None:
    folder = work / "bombs"
    folder.mkdir()
    files = {kind: [write_bomb(kind, folder, i) for i in range(4)] for kind in BOMBS}
    port = free_port()
    # four client addresses, so no per-client limit interferes
    env = app_env(work, port, TRUST_PROXY_HEADERS="1")
    url = f"http://127.0.0.1:{port}"
    result = peak_rss_of_server(
        [sys.executable, str(ROOT / "app.py")],
        ready_text="serving on http://",
        cwd=ROOT,
        env=env,
        after_ready=lambda: bomb_phases(url, files),
        settle_s=1.0,
    )
    machine = platform.processor() or platform.machine()
    print("## Decompression bombs per format (bench/bench_upload_rss.py --bombs)\n")
    print(
        f"- Date: {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M}+00:00; {machine}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, load average "
        f"{os.getloadavg()[0]:.1f} at the end."
    )
    print("- Command: `.venv/bin/python bench/bench_upload_rss.py --bombs`")
    print(
        "- `python app.py` (tiny oracle demo); each bomb uploaded over HTTP and read by the "
        "search tab's upload event, once, then four at once from four client addresses. "
        f"RSS of the app once ready: {result['ready_rss_mb']:.0f} MB.\n"
    )
    print("| bomb | file | uploads | RSS before | peak RSS | added | s | the page said |")
    print("|---|---|---|---|---|---|---|---|")
    rows = result["after_ready"]
    if not isinstance(rows, list):
        print(f"- failed: {rows}")
        return
    for row in rows:
        kind = str(row["kind"])
        size = files[kind][0].stat().st_size
        print(
            f"| {BOMBS[kind][0]} | {size / 2**20:.1f} MB | {row['count']} | "
            f"{row['before_mb']:.0f} MB | {row['peak_mb']:.0f} MB | "
            f"{row['peak_mb'] - row['before_mb']:.0f} MB | {row['seconds']:.1f} | "
            f"{str(row['message'])[:90]} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4, help="parallel uploads (default 4)")
    parser.add_argument("--zip-mb", type=int, default=480, help="size of each zip (default 480)")
    parser.add_argument("--bombs", action="store_true", help="every format's bomb instead")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-upload-"))
    if args.bombs:
        try:
            run_bombs(work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    try:
        zips, slices = [], 0
        for variant in range(args.n):
            path = work / f"series-{variant}.zip"
            slices = write_zip(path, args.zip_mb, variant)
            zips.append(path)
        sizes = [round(p.stat().st_size / 2**20) for p in zips]
        port = free_port()
        env = app_env(work, port)
        url = f"http://127.0.0.1:{port}"
        started = time.perf_counter()
        result = peak_rss_of_server(
            [sys.executable, str(ROOT / "app.py")],
            ready_text="serving on http://",
            cwd=ROOT,
            env=env,
            after_ready=lambda: upload_all(url, zips),
            settle_s=2.0,
        )
        wall = time.perf_counter() - started
        left = [p for p in (work / "gradio").rglob("*.zip") if p.is_file()]
        print("## Parallel zip uploads (bench/bench_upload_rss.py)\n")
        machine = platform.processor() or platform.machine()
        print(
            f"- Date: {dt.datetime.now(dt.UTC):%Y-%m-%dT%H:%M}+00:00; {machine}, "
            f"{os.cpu_count()} cores, Python {platform.python_version()}, load average "
            f"{os.getloadavg()[0]:.1f}."
        )
        command = f"bench/bench_upload_rss.py --n {args.n} --zip-mb {args.zip_mb}"
        print(f"- Command: `.venv/bin/python {command}`")
        print(
            f"- {args.n} zips of {sizes} MB ({slices} slices of {SLICE}x{SLICE} CT each), "
            "uploaded at once over HTTP to `python app.py` (tiny oracle demo), as a browser does."
        )
        print(
            f"- Peak RSS of the app: **{result['peak_rss_mb']:.0f} MB** (ready: "
            f"{result['ready_rss_mb']:.0f} MB); wall {wall:.0f} s; upload files left in "
            f"Gradio's folder after the handlers: {len(left)}."
        )
        outcomes = result["after_ready"]
        if not isinstance(outcomes, list):
            outcomes = [outcomes]
        for position, outcome in enumerate(outcomes):
            print(f"- upload {position + 1}: {outcome}")
        if result.get("output_tail"):
            print("- app output:", *result["output_tail"], sep="\n  ")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
