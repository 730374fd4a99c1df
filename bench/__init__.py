"""Benchmark scripts (run as files, e.g. `python bench/bench_retrieval.py`), not a library."""
