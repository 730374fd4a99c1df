"""VectorIndex: exact search matches numpy, approximate kinds find the true neighbours."""

from __future__ import annotations

import numpy as np
import pytest

from medheb_app.index.faiss_index import AUTO_EXACT_LIMIT, VectorIndex, default_nlist, resolve_kind
from medheb_app.models.base import l2_normalise


def _unit_vectors(n: int, dims: int, seed: int = 0) -> np.ndarray:
    return l2_normalise(np.random.default_rng(seed).standard_normal((n, dims)))


def test_exact_search_matches_numpy_cosine_ranking() -> None:
    vectors = _unit_vectors(300, 16)
    ids = [f"item-{i}" for i in range(300)]
    index = VectorIndex.build(vectors, ids)
    queries = _unit_vectors(5, 16, seed=1)
    scores, found = index.search(queries, k=7)
    expected = queries @ vectors.T
    for row in range(5):
        order = np.argsort(-expected[row])[:7]
        assert list(found[row]) == [ids[i] for i in order]
        np.testing.assert_allclose(scores[row], expected[row, order], rtol=1e-5, atol=1e-6)


def test_k_is_capped_at_the_index_size() -> None:
    index = VectorIndex.build(_unit_vectors(4, 8), ["a", "b", "c", "d"])
    scores, found = index.search(_unit_vectors(1, 8, seed=3), k=10)
    assert scores.shape == (1, 4)
    assert sorted(found[0]) == ["a", "b", "c", "d"]


@pytest.mark.parametrize(("kind", "params"), [("ivf", {"nprobe": 8}), ("hnsw", {"ef_search": 64})])
def test_approximate_index_recovers_most_exact_neighbours(kind: str, params: dict) -> None:
    vectors = _unit_vectors(4000, 32)
    ids = [str(i) for i in range(4000)]
    exact = VectorIndex.build(vectors, ids)
    approx = VectorIndex.build(vectors, ids, kind=kind, **params)
    queries = vectors[:50]  # a stored item must find itself first
    _, exact_ids = exact.search(queries, 10)
    _, approx_ids = approx.search(queries, 10)
    # HNSW insertion is multi-threaded (not bit-reproducible), so allow a rare miss
    assert np.mean(approx_ids[:, 0] == np.array(ids[:50], dtype=object)) >= 0.96
    overlap = np.mean(
        [len(set(a) & set(e)) / 10 for a, e in zip(approx_ids, exact_ids, strict=True)]
    )
    assert overlap > 0.6


def test_save_and_load_round_trip_keeps_results_and_search_params(tmp_path) -> None:
    vectors = _unit_vectors(2000, 16)
    ids = [f"s{i}" for i in range(2000)]
    index = VectorIndex.build(vectors, ids, kind="ivf", nprobe=3, fingerprint="abc123")
    index.save(tmp_path / "idx")
    loaded = VectorIndex.load(tmp_path / "idx")
    assert loaded.kind == "ivf"
    assert loaded.params["nprobe"] == 3
    assert loaded.fingerprint == "abc123"
    assert loaded.params["nlist"] == default_nlist(2000)
    queries = _unit_vectors(3, 16, seed=9)
    before = index.search(queries, 5)
    after = loaded.search(queries, 5)
    np.testing.assert_array_equal(before[1], after[1])
    np.testing.assert_allclose(before[0], after[0])
    np.testing.assert_allclose(loaded.reconstruct("s7"), vectors[7], atol=1e-6)


@pytest.mark.parametrize("kind", ["exact", "ivf", "hnsw"])
def test_vectors_returns_every_stored_vector_in_id_order(kind: str, tmp_path) -> None:
    vectors = _unit_vectors(600, 12, seed=4)
    ids = [f"s{i}" for i in range(600)]
    VectorIndex.build(vectors, ids, kind=kind).save(tmp_path / kind)
    stored = VectorIndex.load(tmp_path / kind).vectors()
    assert stored.shape == (600, 12) and stored.dtype == np.float32
    np.testing.assert_allclose(stored, vectors, atol=1e-6)


def test_bad_inputs_raise_clear_errors(tmp_path) -> None:
    vectors = _unit_vectors(3, 4)
    with pytest.raises(ValueError, match="L2-normalised"):
        VectorIndex.build(vectors * 2, ["a", "b", "c"])
    with pytest.raises(ValueError, match="NaN"):
        VectorIndex.build(vectors * np.nan, ["a", "b", "c"])
    with pytest.raises(ValueError, match="unique"):
        VectorIndex.build(vectors, ["a", "b", "a"])
    with pytest.raises(ValueError, match="3 vectors but 2 ids"):
        VectorIndex.build(vectors, ["a", "b"])
    with pytest.raises(ValueError, match="Unknown index kind"):
        VectorIndex.build(vectors, ["a", "b", "c"], kind="lsh")
    index = VectorIndex.build(vectors, ["a", "b", "c"])
    with pytest.raises(ValueError, match="different model"):
        index.search(_unit_vectors(1, 5), 2)
    scores, _ = index.search(np.zeros((1, 4), np.float32), 2)  # a zero query scores 0 everywhere
    assert np.all(scores == 0)
    with pytest.raises(FileNotFoundError, match=r"manifest\.json missing"):
        VectorIndex.load(tmp_path / "nothing")


def test_auto_kind_is_exact_for_small_and_ivf_for_large_collections() -> None:
    assert VectorIndex.build(_unit_vectors(50, 8), [str(i) for i in range(50)], "auto").kind == (
        "exact"
    )
    assert resolve_kind("auto", AUTO_EXACT_LIMIT - 1) == "exact"
    assert resolve_kind("auto", AUTO_EXACT_LIMIT) == "ivf"
    assert resolve_kind("hnsw", 10) == "hnsw"
