"""IVF-PQ: trained on a sample, filled chunk by chunk, on-disk lists beyond a memory budget."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from medheb_app.index.faiss_index import (
    DEFAULT_RERANK,
    ONDISK_FILE,
    RERANK_FILE,
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


def test_index_build_kind_ivfpq_on_disk_and_search_nprobe(
    settings, tmp_path, monkeypatch, capsys
) -> None:
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
    # 40 items are too few for IVF-PQ's default quantisers (the build would fall back to
    # exact, test_cli_safe_defaults); naming nbits asks for a 4-centroid PQ all the same
    report = build_from_source(f"folder:{root}", "random", "pq", settings, kind="ivfpq",
                               shard_size=16, index_params={"nbits": 2})  # fmt: skip
    assert report.kind == "ivfpq" and report.n_items == 40
    loaded = load_index("pq", "8edde42cb6a477b6", settings)
    assert loaded.info["params"]["on_disk"] is True
    assert (loaded.directory / ONDISK_FILE).is_file()
    response = search(
        query_text="nodule",
        model_spec="random",
        index="pq",
        settings=settings,
        k=5,
        nprobe=1,
        include_training=True,
    )  # fmt: skip  (no split: all train)
    assert 1 <= len(response.results) <= 5
    assert loaded.info["params"]["rerank"] == DEFAULT_RERANK
    assert not any(key.endswith("_path") for key in loaded.info["params"])  # no staging paths
    assert (loaded.directory / RERANK_FILE).is_file()  # moved into the index folder
    exact = search(query_text="nodule", model_spec="random", index="pq", settings=settings,
                   k=5, nprobe=64, rerank=8, include_training=True)  # fmt: skip
    pq_only = search(query_text="nodule", model_spec="random", index="pq", settings=settings,
                     k=5, nprobe=64, rerank=0, include_training=True)  # fmt: skip
    assert len(exact.results) == len(pq_only.results) == 5
    from medheb_app.cli import main as cli

    assert cli(["search", "--index", "pq", "--model", "random", "--text", "nodule",
                "--rerank", "-1", "--json"]) == 2  # fmt: skip
    assert "rerank must be at least 0; got -1" in capsys.readouterr().err


@pytest.fixture(scope="module")
def clustered() -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray, np.ndarray]:
    """20k vectors in 200 tight clusters (like perturbed copies of real embeddings): PQ codes
    alone cannot tell the near copies apart; the exact re-rank can."""
    rng = np.random.default_rng(1)
    d, n = 32, 20_000
    centres = rng.standard_normal((200, d)).astype(np.float32)
    x = centres[rng.integers(0, 200, n)] + 0.15 * rng.standard_normal((n, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    queries = centres[rng.integers(0, 200, 100)] + 0.15 * rng.standard_normal((100, d))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    ids = [f"c{i}" for i in range(n)]
    truth = VectorIndex.build(x, ids, kind="exact").search(queries, 10)[1]
    return x, ids, queries, truth, centres


PQ_SMALL = {"nlist": 64, "m": 4, "nprobe": 8, "train_size": 6000}


def test_rerank_reaches_recall_the_pq_codes_alone_do_not(clustered, tmp_path: Path) -> None:
    x, ids, queries, truth, _ = clustered

    def chunks():
        return (x[i : i + 5000] for i in range(0, len(x), 5000))

    index = VectorIndex.build_ivfpq(chunks, ids, 32, "fp", work_dir=tmp_path, **PQ_SMALL)
    assert index.params["rerank"] == DEFAULT_RERANK and index.params["rerank_dtype"] == "float16"
    pq_only = recall(index.search(queries, 10, rerank=0)[1], truth)
    reranked = recall(index.search(queries, 10)[1], truth)
    assert reranked >= 0.90 > pq_only
    # the re-ranked scores are the exact cosines (to float16 precision), best first
    scores, found = index.search(queries[:5], 10)
    lookup = {item: row for row, item in enumerate(ids)}
    for query, row_scores, row_ids in zip(queries[:5], scores, found, strict=True):
        exact = x[[lookup[i] for i in row_ids]] @ query
        np.testing.assert_allclose(row_scores, exact, atol=2e-3)
        assert (np.diff(row_scores) <= 0).all()


def test_rerank_is_never_worse_than_the_shortlist(clustered, tmp_path: Path) -> None:
    x, ids, queries, truth, _ = clustered
    index = VectorIndex.build_ivfpq(lambda: iter([x]), ids, 32, "fp", work_dir=tmp_path,
                                    **PQ_SMALL)  # fmt: skip
    lookup = {item: row for row, item in enumerate(ids)}
    plain = index.search(queries, 10, rerank=0)[1]
    for factor in (1, 2, 4, 16):
        found = index.search(queries, 10, rerank=factor)[1]
        for query, mine, theirs, best in zip(queries, found, plain, truth, strict=True):
            exact_mine = np.sort(x[[lookup[i] for i in mine]] @ query)[::-1]
            exact_theirs = np.sort(x[[lookup[i] for i in theirs]] @ query)[::-1]
            assert (exact_mine >= exact_theirs - 2e-3).all()  # rank by rank
            assert len(set(mine) & set(best)) >= len(set(theirs) & set(best))
    with pytest.raises(ValueError, match="rerank must be 0"):
        index.search(queries[:1], 10, rerank=-1)


def test_rerank_vectors_are_memory_mapped_and_params_round_trip(clustered, tmp_path) -> None:
    x, ids, queries, _, _ = clustered
    index = VectorIndex.build_ivfpq(lambda: iter([x]), ids, 32, "fp", work_dir=tmp_path / "w",
                                    rerank=8, **PQ_SMALL)  # fmt: skip
    before = index.search(queries, 10)
    index.save(tmp_path / "saved")
    shutil.move(tmp_path / "saved", tmp_path / "moved")
    assert not (tmp_path / "w" / RERANK_FILE).exists()  # moved along, not copied
    loaded = VectorIndex.load(tmp_path / "moved")
    assert isinstance(loaded._stored, np.memmap) and loaded._stored.dtype == np.float16
    assert loaded._stored.filename == str((tmp_path / "moved" / RERANK_FILE).resolve())
    manifest = json.loads((tmp_path / "moved" / "manifest.json").read_text())
    assert manifest["params"]["rerank"] == 8 and manifest["params"]["nprobe"] == 8
    assert not any(key.endswith("_path") for key in manifest["params"])  # no stale paths
    assert {k: v for k, v in loaded.params.items() if not k.endswith("_path")} == manifest["params"]
    after = loaded.search(queries, 10)
    assert (after[1] == before[1]).all()
    np.testing.assert_allclose(after[0], before[0])
    # per-search overrides leave the recorded values in place
    loaded.search(queries, 10, rerank=1, nprobe=1)
    assert (loaded.search(queries, 10)[1] == before[1]).all()
    # the stored vectors are the originals (float16), not the PQ reconstruction
    np.testing.assert_allclose(loaded.vectors(), x, atol=1e-3)


def test_rerank_zero_keeps_no_vectors_and_refuses_a_rerank(clustered, tmp_path) -> None:
    """Without a re-rank the build trains an OPQ rotation by default (from 1,000 sampled rows):
    trained on 1,000 rows, not PQ_SMALL's 6,000, it took 0.5 s of CPU instead of 3.7 s."""
    x, ids, queries, _, _ = clustered
    params = {**PQ_SMALL, "train_size": 1000}
    index = VectorIndex.build_ivfpq(lambda: iter([x]), ids, 32, "fp", work_dir=tmp_path / "w",
                                    rerank=0, **params)  # fmt: skip
    assert index.params["opq"] is True  # the default without a re-rank, still exercised
    assert not (tmp_path / "w" / RERANK_FILE).exists() and "rerank_dtype" not in index.params
    assert index.search(queries, 10)[1].shape == (100, 10)
    with pytest.raises(ValueError, match="keeps no vectors to re-rank"):
        index.search(queries, 10, rerank=4)


def test_large_ivfpq_uses_an_hnsw_cell_quantizer(tmp_path) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((9000, 16)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    ids = [str(i) for i in range(len(x))]
    index = VectorIndex.build_ivfpq(lambda: iter([x]), ids, 16, "fp", work_dir=tmp_path,
                                    nlist=4096, m=4, nbits=4, train_size=9000)  # fmt: skip
    assert index.params["quantizer"] == "hnsw" and index.params["nprobe"] == 32
    found = index.search(x[:20], 1)[1][:, 0]
    assert (found == np.asarray(ids[:20], dtype=object)).mean() >= 0.9  # finds itself
    with pytest.raises(ValueError, match="quantizer must be"):
        VectorIndex.build_ivfpq(lambda: iter([x]), ids, 16, "fp", quantizer="lsh", m=4)


def test_training_without_polysemous_codes_ranks_as_faiss_default_does(data) -> None:
    """The build skips FAISS's polysemous reordering of the PQ centroids (95% of the training
    time, BENCHMARKS.md): the codes are permuted, the ADC ranking the search uses is not."""
    import faiss

    from medheb_app.index.faiss_index import _sample_rows

    x, ids, _ = data
    ours = VectorIndex.build_ivfpq(lambda: iter([x]), ids, D, "fp", rerank=0, **PARAMS)
    theirs = faiss.index_factory(D, "IVF16,PQ4x6", faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.downcast_index(faiss.extract_index_ivf(theirs))
    assert ivf.do_polysemous_training  # FAISS's default, which the build turns off
    assert not faiss.downcast_index(faiss.extract_index_ivf(ours.index)).do_polysemous_training
    ivf.cp.seed = 0
    theirs.train(_sample_rows(lambda: iter([x]), N, PARAMS["train_size"], 0))  # ours
    theirs.add(x)
    ivf.nprobe = 2
    mine = ours.search(x[:50], 10)[1]
    rows = theirs.search(x[:50], 10)[1]
    assert (mine == np.asarray(ids, dtype=object)[rows]).all()
