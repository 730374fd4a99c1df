"""Peak resident memory of a command, sampled with psutil (the process and its children)."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Sequence
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


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def peak_rss_of_server(
    command: Sequence[str],
    ready_text: str,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    after_ready: Callable[[], object] | None = None,
    settle_s: float = 3.0,
    interval_s: float = 0.05,
    timeout_s: float = 1800.0,
) -> dict[str, object]:
    """Start a server, sample its memory until `ready_text` appears in its output, call
    `after_ready` (e.g. one request), keep sampling `settle_s` more seconds, then stop it.

    Returns peak MB, RSS once ready, seconds to ready, and what `after_ready` returned.
    """
    started = time.perf_counter()
    child = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    process = psutil.Process(child.pid)
    ready = threading.Event()
    tail: list[str] = []

    def read_output() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            tail[:] = [*tail[-20:], line.rstrip()]
            if ready_text in line:
                ready.set()

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    peak, ready_rss, ready_at, outcome = 0, 0, None, None
    try:
        while child.poll() is None and time.perf_counter() - started < timeout_s:
            peak = max(peak, tree_rss(process))
            if ready.is_set():
                ready_at = time.perf_counter() - started
                ready_rss = tree_rss(process)
                break
            time.sleep(interval_s)
        if ready_at is not None:
            sampler_stop = threading.Event()
            samples: list[int] = []

            def sample() -> None:
                while not sampler_stop.is_set():
                    samples.append(tree_rss(process))
                    time.sleep(interval_s)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                outcome = after_ready() if after_ready else None
            except Exception as error:  # reported, the memory numbers still stand
                outcome = f"{type(error).__name__}: {error}"
            time.sleep(settle_s)
            sampler_stop.set()
            sampler.join()
            peak = max([peak, *samples])
    finally:
        stop_process(child)
    return {
        "peak_rss_mb": peak / 2**20,
        "ready_rss_mb": ready_rss / 2**20,
        "ready_s": ready_at,
        "after_ready": outcome,
        "output_tail": tail[-5:] if ready_at is None else [],
    }


def git_commit(root: Path) -> str:
    """The checkout's short commit for a report header; "unknown" outside a git checkout."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def stop_process(process: subprocess.Popen, timeout: float = 30.0) -> None:
    """Terminate a child, kill it if it has not exited after `timeout` s, and reap it."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
