"""Saved phantom corpora: the one place that generates, saves and finds them on disk.

A saved corpus is keyed by (kind, n, seed, generator version) and lives in
`<root>/<kind>-seed<seed>-n<n>-g<version>/` (root is `settings.demo_dir` unless a caller
names another), written by `save_corpus` into a staging folder, marked complete with a
`COMPLETE` file and renamed into place, all under one file lock, so an interrupted first
start never leaves half a corpus behind and two processes never generate the same one twice.

Every reader of phantoms (the demo bootstrap, the `phantom` index source, the CXR-Retrieve
and MedHEB-lite tasks, the report-matching recipe, the benchmarks) reads the saved copy
(8-bit images, float16 volumes), so a cold and a warm run see exactly the same pixels.
This module imports only the phantom generators below it: nothing above evidence/.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

from medheb_app.evidence.phantoms.chest import generate_chest_corpus
from medheb_app.evidence.phantoms.corpus import load_corpus, save_corpus
from medheb_app.evidence.phantoms.volumes import generate_volume_corpus
from medheb_app.evidence.study import Study
from medheb_app.settings import Settings

Kind = Literal["cxr", "volumes"]
Progress = Callable[[float, str], None]
COMPLETE = "COMPLETE"
LOCK = ".lock"
_PACKAGE = Path(__file__).parent
_THREAD_LOCK = threading.Lock()  # flock is per open file; this keeps threads of one process in line


@lru_cache(maxsize=1)
def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.glob("*.py")):
        if path.name != Path(__file__).name:  # the generator's code, not this storage module
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:10]


def generator_version() -> str:
    """Hash of the phantom generator's source (read once per process): a changed generator
    means a new corpus, and the task revisions and index records that name it change too."""
    return _source_hash()


@dataclass(frozen=True)
class CorpusKey:
    """Which saved corpus: chest radiographs ("cxr", n studies) or volumes (n subjects)."""

    kind: Kind
    n: int
    seed: int
    generator: str = field(default_factory=lambda: generator_version())

    def __post_init__(self) -> None:
        if self.kind not in ("cxr", "volumes"):
            raise ValueError(f"Unknown phantom corpus kind {self.kind!r}.")
        if self.n < 1:
            raise ValueError(f"A phantom corpus needs at least one study; got n={self.n}.")

    @property
    def folder_name(self) -> str:
        return f"{self.kind}-seed{self.seed}-n{self.n}-g{self.generator}"

    def record(self, directory: Path) -> dict[str, object]:
        """What an index built from this corpus records, to know later whether it still matches."""
        return {
            "kind": f"phantom-{self.kind}",
            "dir": str(directory),
            "n": self.n,
            "seed": self.seed,
            "generator": self.generator,
        }


def corpora_root(settings: Settings) -> Path:
    """The folder every saved phantom corpus of this DATA_DIR lives in."""
    return settings.demo_dir


def demo_key(settings: Settings, n: int | None = None) -> CorpusKey:
    """The demo chest corpus the app indexes: settings.demo_size studies (or n), demo_seed."""
    return CorpusKey("cxr", settings.demo_size if n is None else n, settings.demo_seed)


def demo_corpus(settings: Settings, n: int | None = None, progress: Progress | None = None) -> Path:
    """The folder of the saved demo chest corpus (generated first when absent)."""
    return ensure_saved(corpora_root(settings), demo_key(settings, n), progress)[0]


def corpus_path(root: Path, key: CorpusKey) -> Path:
    """Where the corpus for `key` lives (or will) under `root`; nothing is created."""
    return Path(root) / key.folder_name


def is_saved(root: Path, key: CorpusKey) -> bool:
    return (corpus_path(root, key) / COMPLETE).is_file()


@contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Exclusive across processes (flock on root/.lock) and threads of this process."""
    root.mkdir(parents=True, exist_ok=True)
    with _THREAD_LOCK, open(root / LOCK, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _generate(key: CorpusKey) -> list[Study]:
    if key.kind == "cxr":
        return generate_chest_corpus(n=key.n, seed=key.seed)
    return generate_volume_corpus(n_subjects=key.n, seed=key.seed)


def ensure_saved(root: Path, key: CorpusKey, progress: Progress | None = None) -> tuple[Path, bool]:
    """The folder of the saved corpus for `key`, generated and saved first when absent.

    Returns (directory, generated). progress(fraction, message) reports generation on 0..1.
    """
    root = Path(root)
    directory = corpus_path(root, key)
    if is_saved(root, key):
        return directory, False
    with _locked(root):
        if is_saved(root, key):  # another process finished it while we waited
            return directory, False
        what = "synthetic chest radiographs" if key.kind == "cxr" else "synthetic CT/MR subjects"
        if progress:
            progress(0.0, f"generating {key.n} {what} (seed {key.seed})")
        studies = _generate(key)
        if progress:
            progress(0.8, "saving the phantom corpus")
        staging = root / f".staging-{directory.name}-{uuid.uuid4().hex[:8]}"
        save_corpus(studies, staging)
        marker = {"kind": key.kind, "n": key.n, "seed": key.seed, "generator": key.generator}
        (staging / COMPLETE).write_text(json.dumps(marker))
        if directory.exists():  # an incomplete folder left by an older layout
            shutil.rmtree(directory)
        os.replace(staging, directory)
    if progress:
        progress(1.0, "phantom corpus saved")
    return directory, True


@lru_cache(maxsize=8)
def _load(directory: Path, generator: str) -> tuple[Study, ...]:
    return tuple(load_corpus(directory))


def saved_studies(root: Path, key: CorpusKey) -> tuple[Study, ...]:
    """The saved corpus's studies (generated first when absent), memoised per folder so the
    tasks of one suite share one copy. Pixels load lazily from the saved files."""
    directory, _ = ensure_saved(root, key)
    return _load(directory, key.generator)
