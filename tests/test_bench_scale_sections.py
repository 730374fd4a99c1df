"""bench_scale.py's engines table: its own BENCHMARKS section and the issue's ratios."""

from __future__ import annotations

from pathlib import Path

from bench.bench_scale import (
    END,
    ENGINE_RUNS,
    ENGINES_END,
    ENGINES_START,
    START,
    engine_ratios,
    engines_section,
    write_section,
)


def rows(*rates: float) -> list[dict]:
    return [
        {"engine": label, "items": 400, "wall_s": 1.0, "build_s": 1.0, "items_per_s": rate,
         "load": "7.0 -> 7.5"}
        for (label, *_), rate in zip(ENGINE_RUNS, rates, strict=True)
    ]  # fmt: skip


def test_ratios_compare_ray_with_local_at_the_same_thread_count() -> None:
    lines = engine_ratios(rows(4.0, 10.0, 9.0, 18.0))  # local 2 threads, 1 thread, ray 1, 2
    assert lines[0].startswith("- Ray 2 actors / Ray 1 actor: 2.00x")
    assert "(1 thread): 0.90x" in lines[1]
    assert "(2 threads): 4.50x" in lines[2]


def test_the_engines_section_leaves_the_ann_section_alone(tmp_path: Path) -> None:
    path = tmp_path / "BENCHMARKS.md"
    path.write_text(f"# Benchmarks\n\n{START}\nANN table\n{END}\n")
    report = {
        "date": "2026-12-01",
        "commit": "abc",
        "command": "python bench/bench_scale.py --studies 400",
        "machine": {"cpu": "x86_64", "cores": 2, "load": 7.0, "load_end": 8.0},
        "engines": rows(4.0, 10.0, 9.0, 18.0),
    }
    for _ in range(2):
        write_section(path, engines_section(report), ENGINES_START, ENGINES_END)
    text = path.read_text()
    assert "ANN table" in text and text.count(ENGINES_START) == 1
    assert "load average 7.0 at the start, 8.0 at the end" in text
    assert "| ray, 2 actors (1 CPU, 1 thread each) | 400 |" in text
