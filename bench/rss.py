"""Peak resident memory of a command, sampled with psutil (the process and its children)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import psutil


def tree_rss(process: psutil.Process) -> int:
    """Resident bytes of a process plus all its live descendants."""
    total = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            total += member.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def peak_rss_of_command(
    command: Sequence[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    interval_s: float = 0.05,
    timeout_s: float = 1800.0,
) -> dict[str, float | int]:
    """Run `command` to completion, sampling its memory; returns peak MB, seconds and exit code.

    Sampling misses spikes shorter than `interval_s`, so the peak is a lower bound.
    """
    started = time.perf_counter()
    child = subprocess.Popen(command, cwd=cwd, env=env)
    process = psutil.Process(child.pid)
    peak = 0
    try:
        while child.poll() is None:
            try:
                peak = max(peak, tree_rss(process))
            except psutil.NoSuchProcess:
                break
            if time.perf_counter() - started > timeout_s:
                child.kill()
                break
            time.sleep(interval_s)
    finally:
        exit_code = child.wait()
    return {
        "peak_rss_mb": peak / 2**20,
        "seconds": time.perf_counter() - started,
        "exit": exit_code,
    }
