"""The retrieval benchmark's helpers: query set, recall, synthetic collections, report section."""

from __future__ import annotations

import sys

import numpy as np

from bench.bench_retrieval import (
    END,
    START,
    query_texts,
    recall_at_k,
    synthetic_collection,
    write_section,
)
from bench.rss import peak_rss_of_command


def test_query_set_has_the_cxr_retrieve_shapes() -> None:
    texts = query_texts()
    assert len(texts) == 145 == len(set(texts))
    assert sum(" and no " in text for text in texts) == 90
    assert sum(" and " in text and " no " not in text for text in texts) == 45


def test_recall_at_k_counts_shared_neighbours() -> None:
    exact = np.array([list("abcdefghij"), list("abcdefghij")], dtype=object)
    approx = np.array([list("abcdefghij"), list("abcdeXYZWV")], dtype=object)
    assert recall_at_k(approx, exact) == 0.75


def test_synthetic_collections_are_unit_vectors_near_their_anchors() -> None:
    anchors = synthetic_collection(5, 32, seed=0)
    vectors = synthetic_collection(200, 32, seed=1, anchors=anchors)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    nearest_anchor_similarity = (vectors @ anchors.T).max(axis=1)
    assert nearest_anchor_similarity.min() > 0.8


def test_write_section_replaces_only_its_own_part(tmp_path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    path.write_text("# Benchmarks\n\n## Training\nkeep me\n")
    write_section(path, f"{START}\nfirst\n{END}")
    write_section(path, f"{START}\nsecond\n{END}")
    text = path.read_text()
    assert "keep me" in text and "second" in text and "first" not in text
    assert text.count(START) == 1


def test_peak_rss_of_a_command_sees_its_allocation() -> None:
    script = "import numpy as np, time; a = np.ones(200 * 2**20 // 8); time.sleep(0.5)"
    result = peak_rss_of_command([sys.executable, "-c", script], interval_s=0.02)
    assert result["exit"] == 0
    assert result["peak_rss_mb"] > 200
