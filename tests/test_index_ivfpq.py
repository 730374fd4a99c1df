"""IVF-PQ: trained on a sample, filled chunk by chunk, on-disk lists beyond a memory budget."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from medheb_app.index.faiss_index import (
    ONDISK_FILE,
    VectorIndex,
    default_pq_m,
    resolve_kind,
)

N, D = 3000, 16


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, list[str], np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((300, D)).astype(np.float32)
    x = centres[rng.integers(0, 300, N)] + 0.1 * rng.standard_normal((N, D)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = [f"v{i}" for i in range(N)]
    truth = VectorIndex.build(x, ids, kind="exact").search(x[:50], 10)[1]
    return x, ids, truth


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, truth, strict=True)]))


PARAMS = {"nlist": 16, "m": 4, "nbits": 6, "opq": False, "train_size": 2000, "nprobe": 2}


def test_auto_kind_thresholds_and_pq_size() -> None:
    assert resolve_kind("auto", 199_999) == "exact"
    assert resolve_kind("auto", 200_000) == "ivf"
    assert resolve_kind("auto", 10_000_000) == "ivfpq"
    assert default_pq_m(256) == 32 and default_pq_m(384) == 32 and default_pq_m(12) == 3


def test_on_disk_lists_match_in_memory_and_survive_a_move(data, tmp_path: Path) -> None:
    x, ids, truth = data

    def chunks():
        return (x[i : i + 700] for i in range(0, N, 700))

    memory = VectorIndex.build_ivfpq(chunks, ids, D, "fp", **PARAMS)
    disk = VectorIndex.build_ivfpq(
        chunks, ids, D, "fp", work_dir=tmp_path / "work", memory_budget_mb=0, **PARAMS
    )
    assert memory.params["on_disk"] is False and disk.params["on_disk"] is True
    assert memory.count == disk.count == N
    found_memory = memory.search(x[:50], 10)[1]
    assert (disk.search(x[:50], 10)[1] == found_memory).all()
    disk.save(tmp_path / "saved")
    assert (tmp_path / "saved" / ONDISK_FILE).is_file()
    shutil.move(tmp_path / "saved", tmp_path / "moved")  # what the staging rename does
    loaded = VectorIndex.load(tmp_path / "moved")
    assert loaded.kind == "ivfpq" and loaded.params["nprobe"] == 2
    assert (loaded.search(x[:50], 10)[1] == found_memory).all()
    # nprobe is tunable per search and restored afterwards
    wide = recall(loaded.search(x[:50], 10, nprobe=16)[1], truth)
    narrow = recall(loaded.search(x[:50], 10)[1], truth)
    assert wide > narrow and wide >= 0.6
    assert (loaded.search(x[:50], 10)[1] == found_memory).all()
    with pytest.raises(ValueError, match="nprobe must be at least 1"):
        loaded.search(x[:1], 10, nprobe=0)


def test_index_build_kind_ivfpq_on_disk_and_search_nprobe(settings, tmp_path, monkeypatch) -> None:
    from dataclasses import replace

    from medheb_app.index.build import build_from_source
    from medheb_app.index.catalog import load_index
    from medheb_app.search import search
    from medheb_app.settings import Settings
    from tests.test_index_command import png_folder

    monkeypatch.setenv("MEDHEB_INDEX_MEMORY_MB", "0")  # force the memory-mapped lists
    assert Settings.from_env().index_memory_mb == 0.0
    settings = replace(settings, index_memory_mb=0.0)
    root = png_folder(tmp_path / "pngs", n=40, corrupt=0)
    report = build_from_source(f"folder:{root}", "random", "pq", settings, kind="ivfpq",
                               shard_size=16)  # fmt: skip
    assert report.kind == "ivfpq" and report.n_items == 40
    loaded = load_index("pq", "8edde42cb6a477b6", settings)
    assert loaded.info["params"]["on_disk"] is True
    assert (loaded.directory / ONDISK_FILE).is_file()
    response = search(query_text="nodule", model_spec="random", index="pq", settings=settings,
                      k=5, nprobe=1)  # fmt: skip
    assert 1 <= len(response.results) <= 5
