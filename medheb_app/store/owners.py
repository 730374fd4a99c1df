"""Which process owns a row that says "running": host:pid:process start time, so a row left
behind by a process that is gone (killed, crashed, a restarted container) can be told apart
from one whose process still works on it, even when the OS has reused the pid."""

from __future__ import annotations

import os
import socket

import psutil


def process_owner(pid: int | None = None) -> str:
    """host:pid:start-time of a process, unique even when the OS reuses the pid."""
    process = psutil.Process(pid or os.getpid())
    return f"{socket.gethostname()}:{process.pid}:{process.create_time():.3f}"


def owner_alive(owner: str) -> bool:
    """Whether the process that wrote `owner` still runs. An owner from another host counts as
    dead: a restarted container (a Space) gets a new host name, and the app assumes the
    processes that share a database run on one host (docs/deploy.md)."""
    try:
        _host, pid, _started = owner.rsplit(":", 2)
        return process_owner(int(pid)) == owner
    except (ValueError, psutil.Error):
        return False
