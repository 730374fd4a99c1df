"""Shared by the process-start benches: a program run in a fresh Python, and the heading of
their BENCHMARKS.md sections (machine, date, commit, command)."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

from bench.rss import git_commit

ROOT = Path(__file__).resolve().parent.parent


def fresh_python(program: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """What a new interpreter running `program` with `args` (in the repository, the current
    environment plus `env`) prints, split on whitespace; a failure raises."""
    done = subprocess.run(
        [sys.executable, "-c", program, *args],
        cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.split()


def section_heading(script: str, rounds: int) -> list[str]:
    """The machine, date, commit and `--write` command lines that open a bench's section."""
    return [
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; {dt.date.today()}, commit {git_commit(ROOT)}.",
        f"Command: `.venv/bin/python bench/{script} --rounds {rounds} --write`",
    ]
