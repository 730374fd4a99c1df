"""Benchmark tasks: validated metadata, builders that make tasks from sources, and suites."""
