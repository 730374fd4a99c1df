"""Peak memory of `index build` over a DICOM folder of large films: flat in the archive size?

    .venv/bin/python bench/bench_dicom_stream.py                    # 200, 1,000 and 2,000 films
    .venv/bin/python bench/bench_dicom_stream.py --films 200 1000 --model random

Writes N single-frame 2048x2048 16-bit DX films (8 MB each; one pixel array, reused with fresh
Study / Series / SOP Instance UIDs per film, so 2,000 films are 16 GB on disk) into a temporary
folder, then runs `python -m medheb_app index build --source dicom:FOLDER` as a subprocess in a
temporary DATA_DIR and records its peak resident memory two ways: psutil samples every 50 ms
(process and children) and the kernel's own high-water mark of the build process (ru_maxrss
from os.wait4, exact). Each size's films are added to the same folder (200, then 800 more, ...)
and each build starts from an empty embedding cache. Prints a markdown block for
BENCHMARKS.md; every temporary file is removed, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rss import tree_rss  # noqa: E402

SIDE = 2048


def write_films(folder: Path, start: int, stop: int, pixels: np.ndarray) -> None:
    """Films number start..stop-1, one study and series each (as a CR/DX export is)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    data = pixels.tobytes()
    for number in range(start, stop):
        ds = Dataset()
        ds.file_meta = FileMetaDataset()
        ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds.file_meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.1.1"
        ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid()
        ds.SOPClassUID = ds.file_meta.MediaStorageSOPClassUID
        ds.StudyInstanceUID, ds.SeriesInstanceUID = generate_uid(), generate_uid()
        ds.PatientID, ds.Modality = f"bench-{number % 500}", "DX"
        ds.Rows = ds.Columns = SIDE
        ds.BitsAllocated, ds.BitsStored, ds.HighBit = 16, 12, 11
        ds.PixelRepresentation, ds.SamplesPerPixel = 0, 1
        ds.PhotometricInterpretation = "MONOCHROME2"
        ds.WindowCenter, ds.WindowWidth = 2048, 4096
        ds.PixelData = data
        target = folder / f"p{number % 97:02d}" / f"IM{number:05d}.dcm"
        target.parent.mkdir(parents=True, exist_ok=True)
        ds.save_as(target, enforce_file_format=True)


def build(folder: Path, data_dir: Path, model: str, batch_size: int) -> dict[str, float]:
    """Run the build; its peak RSS from the kernel (os.wait4 of this very child) and from
    psutil samples every 50 ms (a lower bound), its seconds and its progress lines."""
    env = {
        **os.environ,
        "DATA_DIR": str(data_dir),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "MKL_NUM_THREADS": os.environ.get("MKL_NUM_THREADS", "1"),
        "HF_HUB_OFFLINE": "1",
    }
    shutil.rmtree(data_dir, ignore_errors=True)
    command = [sys.executable, "-m", "medheb_app", "index", "build", "--source",
               f"dicom:{folder}", "--model", model, "--name", "stream",
               "--batch-size", str(batch_size), "--json"]  # fmt: skip
    log = data_dir.parent / "build.err"
    started = time.perf_counter()
    with open(log, "w") as err:
        child = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            process = psutil.Process(child.pid)
            while not done.is_set():
                try:
                    peak[0] = max(peak[0], tree_rss(process))
                except psutil.NoSuchProcess:
                    return
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _pid, status, usage = os.wait4(child.pid, 0)
        done.set()
        sampler.join()
        child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    lines = log.read_text().splitlines()
    if child.returncode != 0:
        raise SystemExit(f"the build failed (exit {child.returncode}): {lines[-1:]}")
    return {
        "seconds": seconds,
        "maxrss_mb": usage.ru_maxrss / 1024,  # KiB on Linux
        "peak_rss_mb": peak[0] / 2**20,
        "header_lines": sum("DICOM headers read" in line for line in lines),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--films", type=int, nargs="+", default=[200, 1000, 2000])
    parser.add_argument("--model", default="dual-lite")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--tmp", default=tempfile.gettempdir(), help="where the films go")
    args = parser.parse_args()
    # a `timeout` or kill ends through the finally below, so 16 GB of films never stay behind
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="bench-dicom-stream-", dir=args.tmp))
    pixels = np.random.default_rng(0).integers(0, 4096, (SIDE, SIDE), dtype=np.uint16)
    rows = []
    try:
        folder, written = work / "films", 0
        for n in sorted(args.films):
            started = time.perf_counter()
            write_films(folder, written, n, pixels)
            written = n
            wrote = time.perf_counter() - started
            size = sum(p.stat().st_size for p in folder.rglob("*.dcm")) / 2**30
            load = os.getloadavg()[0]
            result = build(folder, work / "data", args.model, args.batch_size)
            rows.append((n, size, wrote, result, load, os.getloadavg()[0]))
            print(f"{n} films ({size:.1f} GiB): peak {result['maxrss_mb']:.0f} MB "
                  f"(sampled {result['peak_rss_mb']:.0f}), {result['seconds']:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nMachine: {platform.platform()}, {os.cpu_count()} CPUs; "
          f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; model {args.model}, "
          f"batch {args.batch_size}; films {SIDE}x{SIDE} 16-bit\n")  # fmt: skip
    print("| films | on disk | build s | films/s | peak RSS (ru_maxrss) | peak RSS (psutil) "
          "| header progress lines | load before / after |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for n, size, _wrote, result, before, after in rows:
        print(f"| {n:,} | {size:.1f} GiB | {result['seconds']:.0f} | "
              f"{n / result['seconds']:.1f} | {result['maxrss_mb']:,.0f} MB | "
              f"{result['peak_rss_mb']:,.0f} MB | {result['header_lines']} | "
              f"{before:.2f} / {after:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()
