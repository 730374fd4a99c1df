"""One build at a time per index name: a lock file that says who holds it and since when.

A build of the index NAME creates index_dir/.locks/NAME.lock (O_CREAT | O_EXCL, so exactly one
of two racing builds gets it) holding the builder's pid, host, process start time and start
time. A second build of the same name, from this process or another one, is refused with a
sentence naming the holder, instead of sharing the first one's staging folder and dying when
the first swaps its result in. A lock whose process is gone (killed with -9, a crashed
container: store/owners.owner_alive, which also sees through a reused pid) is taken over with
a note. Within one thread the lock is re-entrant, so build_from_source can hold it while
build_index takes it again.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from medheb_app.settings import Settings
from medheb_app.store.owners import owner_alive, process_owner

LOCK_DIR = ".locks"  # under settings.index_dir; a dot folder, so list_indices never sees it
_held: dict[Path, tuple[int, int]] = {}  # lock file -> (thread id, depth) in this process
_held_guard = threading.Lock()


class IndexLockedError(ValueError):
    """Another build of the same index name is running; the message names it."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or held) a build lock, as written in its lock file."""

    name: str
    pid: int
    host: str
    owner: str  # host:pid:process start time (store/owners.process_owner)
    since: str  # ISO time the build started
    token: str

    @property
    def alive(self) -> bool:
        return owner_alive(self.owner)

    def describe(self) -> str:
        return f"process {self.pid} on {self.host}, since {self.since}"


def lock_file(settings: Settings, name: str) -> Path:
    return settings.index_dir / LOCK_DIR / f"{name}.lock"


def read_holder(path: Path) -> LockHolder | None:
    """The holder recorded in `path`, or None when there is none (or it is unreadable)."""
    try:
        data = json.loads(path.read_text())
        return LockHolder(
            name=str(data["name"]),
            pid=int(data["pid"]),
            host=str(data["host"]),
            owner=str(data["owner"]),
            since=str(data["since"]),
            token=str(data["token"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def current_holder(settings: Settings, name: str) -> LockHolder | None:
    """The live holder of `name`'s build lock, or None (no lock, or a stale one)."""
    holder = read_holder(lock_file(settings, name))
    return holder if holder is not None and holder.alive else None


def _try_create(path: Path, holder: LockHolder) -> bool:
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(descriptor, "w") as handle:
        json.dump(holder.__dict__, handle)
    return True


def _acquire(path: Path, name: str, note: Callable[[str], None]) -> LockHolder:
    path.parent.mkdir(parents=True, exist_ok=True)
    owner = process_owner()
    host = owner.rsplit(":", 2)[0]
    mine = LockHolder(
        name=name,
        pid=os.getpid(),
        host=host,
        owner=owner,
        since=datetime.now(UTC).isoformat(timespec="seconds"),
        token=uuid.uuid4().hex,
    )
    for _attempt in range(3):
        if _try_create(path, mine):
            return mine
        holder = read_holder(path)
        if holder is None:  # half-written by a racing builder, or garbage: look again
            if _age(path) < 5:
                continue
        elif holder.alive:
            raise IndexLockedError(
                f"Index {name!r} is being built by {holder.describe()}; wait for that build "
                f"to finish (or stop it) before building {name!r} again."
            )
        # stale: its process is gone. Rename it away (only one taker wins the rename).
        retired = path.with_name(f".{path.name}.stale-{uuid.uuid4().hex[:8]}")
        try:
            os.rename(path, retired)
        except FileNotFoundError:
            continue  # another builder took it over first; try to create ours again
        retired.unlink(missing_ok=True)
        if holder is not None:
            note(
                f"taking over the build lock of {name!r} left by {holder.describe()}, "
                "which is no longer running"
            )
    raise IndexLockedError(f"Index {name!r} is being built by another process; try again.")


def _age(path: Path) -> float:
    try:
        return datetime.now(UTC).timestamp() - path.stat().st_mtime
    except OSError:
        return 0.0


@contextmanager
def build_lock(
    settings: Settings, name: str, note: Callable[[str], None] | None = None
) -> Iterator[None]:
    """Hold `name`'s build lock for the block; re-entrant within one thread.

    Raises IndexLockedError (a ValueError: the CLI says it in one line, exit 2) when a live
    build holds it; `note` hears about a stale lock that was taken over."""
    path = lock_file(settings, name)
    thread = threading.get_ident()
    with _held_guard:
        held = _held.get(path)
        if held is not None and held[0] == thread:
            _held[path] = (thread, held[1] + 1)
            reentered = True
        else:
            reentered = False
    if reentered:
        try:
            yield
        finally:
            with _held_guard:
                _held[path] = (thread, _held[path][1] - 1)
        return
    mine = _acquire(path, name, note or (lambda message: None))
    with _held_guard:
        _held[path] = (thread, 1)
    try:
        yield
    finally:
        with _held_guard:
            _held.pop(path, None)
        current = read_holder(path)
        if current is not None and current.token == mine.token:
            path.unlink(missing_ok=True)
