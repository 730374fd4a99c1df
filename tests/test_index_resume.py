"""A build killed mid-way (SIGKILL to a real subprocess) resumes without re-embedding."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from medheb_app.index.build import build_from_source
from medheb_app.index.catalog import load_index
from medheb_app.index.provenance import pseudonym, pseudonym_key
from medheb_app.index.shards import BUILD_MANIFEST, build_dir
from medheb_app.models.registry import load_embedder
from medheb_app.settings import PROJECT_ROOT, Settings

# six shards: the build is killed after two, with four still to embed (the margin that keeps
# it from finishing first); each item more costs the resume and the check an encode each
N, SHARD = 24, 4


def write_pngs(root: Path) -> Path:
    rng = np.random.default_rng(3)
    root.mkdir(parents=True)
    for i in range(N):
        pixels = rng.integers(0, 255, (64, 64), dtype=np.uint8)
        Image.fromarray(pixels).save(root / f"img{i:03d}.png")
    return root


def committed_shards(directory: Path) -> int:
    try:
        return len(json.loads((directory / BUILD_MANIFEST).read_text())["shards"])
    except (OSError, ValueError, KeyError):
        return 0


@pytest.mark.slow
def test_killed_build_resumes_reusing_everything_committed(settings, tmp_path) -> None:
    source = f"folder:{write_pngs(tmp_path / 'pngs')}"
    argv = [
        sys.executable, "-m", "medheb_app", "index", "build", "--source", source,
        "--model", "dual-lite", "--name", "resume", "--shard-size", str(SHARD),
        "--batch-size", "2", "--json",
    ]  # fmt: skip
    env = {**os.environ, "DATA_DIR": str(settings.data_dir)}
    fingerprint = load_embedder("dual-lite", settings).card.fingerprint
    directory = build_dir(settings, "resume", fingerprint)
    process = subprocess.Popen(argv, env=env, cwd=PROJECT_ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 300
    while committed_shards(directory) < 2 and time.monotonic() < deadline:
        assert process.poll() is None, "the build finished before it could be killed"
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    committed = committed_shards(directory)
    assert 2 <= committed < N // SHARD
    report = build_from_source(source, "dual-lite", "resume", settings, shard_size=SHARD)
    # everything committed (and any finished batch of the shard in flight) was reused
    assert report.reused >= committed * SHARD
    assert report.embedded + report.reused == N and report.n_items == N
    assert not directory.exists()  # the shards are cleaned up once the index is written

    loaded = load_index("resume", fingerprint, settings)
    embedder = load_embedder("dual-lite", settings)
    order = sorted(tmp_path.joinpath("pngs").iterdir())
    key = pseudonym_key(settings)  # ids: keyed pseudonyms of the relative paths
    assert loaded.index.ids == [pseudonym(key, "folder", path.name) for path in order]
    from medheb_app.evidence.readers import read_any
    from medheb_app.evidence.study import Evidence

    expected = embedder.encode([Evidence(image=read_any(path).pixels) for path in order])
    got = loaded.index.vectors()
    assert np.abs(got - expected).max() <= 1e-5
    query = embedder.encode(["a round opacity"])
    top_expected = np.argsort(-(expected @ query[0]))[:10]
    _, ids = loaded.search(query, 10)
    assert list(ids[0]) == [loaded.index.ids[i] for i in top_expected]


def test_the_next_batch_is_decoded_while_this_one_is_embedded(tmp_path, monkeypatch) -> None:
    """The local engine reads batch n+1 on a second thread during batch n's encode."""
    import threading

    from medheb_app.evidence.study import Study
    from medheb_app.index import shards
    from medheb_app.index.cache import EmbeddingCache

    studies = [
        Study(id=f"s{i}", form="2d", pixels=np.full((8, 8), i / 10, np.float32)) for i in range(6)
    ]
    second_batch_decoding = threading.Event()
    decode = shards.decode

    def recording_decode(study: Study) -> str | None:
        if study.id == "s2":
            second_batch_decoding.set()
        return decode(study)

    class WaitingEmbedder:
        card = load_embedder("random", Settings(data_dir=tmp_path)).card

        def __init__(self) -> None:
            self.overlapped: list[bool] = []

        def encode(self, items: list) -> np.ndarray:
            if items[0].id == "s0":  # the first batch waits for the second's decode to start
                self.overlapped.append(second_batch_decoding.wait(timeout=10))
            return np.ones((len(items), 4), np.float32)

    monkeypatch.setattr(shards, "decode", recording_decode)
    shard = shards.Shard(0, studies, [f"k{i}" for i in range(6)])
    embedder = WaitingEmbedder()
    result = shards.embed_shard(shard, embedder, EmbeddingCache(tmp_path / "cache"), batch_size=2)
    assert embedder.overlapped == [True]
    assert result.ids == [s.id for s in studies] and result.embedded == 6
