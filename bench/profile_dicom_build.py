"""Where a streamed DICOM film's time and a build's memory go, stage by stage, in one process.

    .venv/bin/python bench/profile_dicom_build.py [--films 20] [--model dual-lite] [--batch 32]

Writes `--films` 2048x2048 16-bit films (bench_dicom_stream.write_films) into a temporary
folder, then, in this process and in the order a build does it: imports torch, loads the
model, reads the headers (load_source), and for each film times reading the file (pydicom),
decoding it to [0, 1] floats, fitting it to what the source keeps (Study.load_pixels), the
model's own preprocessing, the forward pass and the cache write; then embeds batches of
several sizes and records the resident memory each adds. RSS is sampled every 10 ms by a
thread (psutil), so each figure is the peak of its stage. Prints a markdown block.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_dicom_stream import SIDE, write_films  # noqa: E402


class Peak:
    """The peak RSS of this process since the last reset, sampled every 10 ms."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.peak = self.process.memory_info().rss
        self.done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.01)

    def reset(self) -> int:
        now = self.process.memory_info().rss
        self.peak = now
        return now

    def stage(self, function: Callable[[], Any]) -> tuple[Any, float, float, float]:
        """(result, seconds, RSS MB before, peak MB during)."""
        before = self.reset()
        started = time.perf_counter()
        result = function()
        seconds = time.perf_counter() - started
        time.sleep(0.02)
        return result, seconds, before / 2**20, max(self.peak, self.reset()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--films", type=int, default=20)
    parser.add_argument("--model", default="dual-lite")
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 16, 32])
    parser.add_argument("--tmp", default=tempfile.gettempdir())
    parser.add_argument("--fit", choices=("model", "block"), default="model",
                        help="model: fit films to the model's input (now); block: block means "
                        "to 1,024 (before)")  # fmt: skip
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="profile-dicom-", dir=args.tmp))
    os.environ["DATA_DIR"] = str(work / "data")
    peak = Peak()
    rows: list[tuple[str, float, float, float]] = []
    try:
        pixels = np.random.default_rng(0).integers(0, 4096, (SIDE, SIDE), dtype=np.uint16)
        write_films(work / "films", 0, args.films, pixels)
        _, s, before, top = peak.stage(lambda: __import__("torch"))
        rows.append(("import torch", s, before, top))
        import pydicom
        import torch

        from medheb_app.evidence.dicom import image_from_dataset
        from medheb_app.evidence.study import Evidence
        from medheb_app.index.cache import EmbeddingCache
        from medheb_app.index.catalog import study_content_key
        from medheb_app.index.sources import load_source
        from medheb_app.models.base import input_side
        from medheb_app.models.registry import load_embedder
        from medheb_app.settings import Settings

        settings = Settings.from_env()
        embedder, s, before, top = peak.stage(lambda: load_embedder(args.model, settings))
        rows.append((f"load {args.model}", s, before, top))
        loaded, s, before, top = peak.stage(
            lambda: load_source(f"dicom:{work / 'films'}", settings)
        )
        rows.append((f"read {args.films} headers", s, before, top))
        side = input_side(embedder) if args.fit == "model" else None
        for study in loaded.studies:
            study.input_side = side
        times: dict[str, list[float]] = {}
        tops: dict[str, float] = {}
        cache = EmbeddingCache(settings.cache_dir)
        image_size = getattr(embedder, "image_size", None)

        def timed(name: str, function: Callable[[], Any]) -> Any:
            result, seconds, _before, top = peak.stage(function)
            times.setdefault(name, []).append(seconds)
            tops[name] = max(tops.get(name, 0.0), top)
            return result

        for study in loaded.studies:
            path = study.files[0]
            ds = timed("read file (pydicom)", lambda p=path: pydicom.dcmread(p))
            timed("decode to [0, 1] (full size)", lambda d=ds: image_from_dataset(d, "x"))
            kept = timed("load_pixels (decode + fit)", study.load_pixels)
            if image_size:
                from medheb_app.models.towers import preprocess_images

                batch = timed("model preprocess (resize 224)",
                              lambda k=kept: preprocess_images([k], image_size))  # fmt: skip

                def forward(b=batch) -> np.ndarray:
                    with torch.inference_mode():
                        features = embedder.image_tower(b)
                        return embedder.heads.project_image(features).numpy()

                vector = timed("forward (tower + head)", forward)[0]
            else:
                vector = timed("encode", lambda k=kept: embedder.encode([Evidence(image=k)]))[0]
            key = study_content_key(study)
            timed("cache write", lambda k=key, v=vector: cache.put(embedder.card.fingerprint,
                                                                   [k], v[None]))  # fmt: skip
            study.pixels = None
        for name, values in times.items():
            rows.append((f"per film: {name}", float(np.median(values)), 0.0, tops[name]))
        for size in args.batches:
            chosen = loaded.studies[:size]
            for study in chosen:
                study.load_pixels()
            _, s, before, top = peak.stage(lambda c=chosen: embedder.encode(c))
            rows.append((f"encode a batch of {len(chosen)} decoded films", s, before, top))
            for study in chosen:
                study.pixels = None
    finally:
        peak.done.set()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.films} films {SIDE}x{SIDE} 16-bit, model {args.model}, fit {args.fit}, "
          f"torch threads {torch.get_num_threads()}, load {os.getloadavg()[0]:.2f}\n")  # fmt: skip
    print("| stage | seconds (median per film) | RSS before MB | peak MB |")
    print("|---|---:|---:|---:|")
    for name, seconds, before, top in rows:
        print(f"| {name} | {seconds:.3f} | {before:,.0f} | {top:,.0f} |")


if __name__ == "__main__":
    main()
