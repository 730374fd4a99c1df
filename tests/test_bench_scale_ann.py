"""bench_scale.py's ANN part: chunked ground truth, the vector file, and its own section."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import bench.bench_scale as scale
from bench.bench_scale import (
    ANN_END,
    ANN_START,
    END,
    START,
    ann_section,
    exact_truth,
    materialise,
    shown_arguments,
    write_section,
)


def test_exact_truth_scans_chunks_like_brute_force(monkeypatch) -> None:
    monkeypatch.setattr(scale, "CHUNK", 70)  # several chunks, the last one short
    rng = np.random.default_rng(0)
    data = rng.standard_normal((500, 256)).astype(np.float32)
    queries = rng.standard_normal((20, 256)).astype(np.float32)
    expected = np.argsort(-(queries @ data.T), axis=1, kind="stable")[:, :10]
    assert (exact_truth(data, queries) == expected).all()


def test_the_vector_file_is_memory_mapped_and_reused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(scale, "CHUNK", 64)
    array = materialise("isotropic", 300, None, tmp_path / "v.npy")
    assert isinstance(array, np.memmap) and array.shape == (300, 256)
    np.testing.assert_allclose(np.linalg.norm(array, axis=1), 1.0, atol=1e-5)
    stamp = (tmp_path / "v.npy").stat().st_mtime_ns
    again = materialise("isotropic", 300, None, tmp_path / "v.npy")
    assert (tmp_path / "v.npy").stat().st_mtime_ns == stamp and (again == array).all()
    assert materialise("isotropic", 200, None, tmp_path / "v.npy").shape == (200, 256)


def test_the_ann_section_sits_after_the_resume_section_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    path.write_text(f"# Benchmarks\n\n{START}\nresume line\n{END}\n\n## Other\n")
    report = {
        "date": "2026-12-01",
        "commit": "abc",
        "command": "python bench/bench_scale.py --ann-n 1000",
        "machine": {"cpu": "x86_64", "cores": 2, "load": 7.0},
        "notes": ["a note"],
        "ann": [
            {
                "data": "perturbed",
                "kind": "ivfpq",
                "n": 1000,
                "build_s": 1.0,
                "disk_mb": 1.0,
                "serving_rss_mb": 50.0,
                "recall_at_10": 0.95,
                "search_p50_ms": 1.2,
                "recall_pq_only": 0.4,
                "p50_pq_only_ms": 0.5,
                "params": {"rerank": 64, "m": 32},
                "sweep": [{"nprobe": 16, "rerank": 4, "recall_at_10": 0.7, "p50_ms": 0.9}],
            },
        ],
        "e2e": {
            "kind": "ivfpq",
            "n": 1000,
            "queries": 145,
            "p50_ms": 20.0,
            "p95_ms": 30.0,
            "encode_p50_ms": 15.0,
            "search_p50_ms": 2.0,
            "first_call_s": 9.0,
            "peak_rss_mb": 800.0,
        },
    }
    for _ in range(2):
        write_section(path, ann_section(report, notes=True), ANN_START, ANN_END)
    text = path.read_text()
    assert text.count(ANN_START) == 1 and "resume line" in text
    assert text.index(END) < text.index(ANN_START) < text.index("## Other")
    assert "| 0.95 (0.4) | 1.2 (0.5) | rerank=64, m=32 |" in text
    assert "| 16 | 0.7 / 0.9 | - | - |" in text
    assert "p50 20.0 ms, p95 30.0 ms (encode p50 15.0 ms" in text and "a note" in text


def test_the_shown_command_leaves_out_the_notes_text() -> None:
    argv = ["--include", "a.json", "--note", "a long paragraph", "--out", "B.md"]
    assert shown_arguments(argv) == "--include a.json --note ... --out B.md"
