"""The demo bootstrap: the embedded phantom corpus and its indices, built once, then loaded.

First start: generate the synthetic chest corpus (settings.demo_size studies, settings.demo_seed),
save it under settings.demo_dir, build the "demo-cxr" index for the default models
(dual-lite, plus dual-lite@label-aware when its weights exist) and fit each one's logic-aware
probes. Later starts find everything on disk and only load it (probes into memory, so the
first logic-aware search answers at once). A file lock keeps the app and a CLI build from
doing the work twice. Searches never come here: the web app offers only what is built
(medheb_app.search.offered), and other models' demo indices are built by `demo build
--model` or an admin index job.
"""

from __future__ import annotations

import fcntl
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from medheb_app.demo_showcase import ensure_showcase
from medheb_app.evidence.phantoms import saved  # saved.corpora_root: tests redirect it
from medheb_app.evidence.phantoms.saved import CorpusKey, ensure_saved
from medheb_app.index.build import build_index
from medheb_app.index.catalog import IndexNotFoundError, LoadedIndex, load_index, query_vocabulary
from medheb_app.index.sources import LoadedSource, phantom_source, phantom_volume_source
from medheb_app.models import registry
from medheb_app.ranking.index_logic import prepare_index_logic
from medheb_app.serving import default_demo_models
from medheb_app.settings import Settings

Progress = Callable[[float, str], None]
DEMO_CXR = "demo-cxr"
DEMO_3D = "demo-3d"


@dataclass
class DemoAssets:
    """What ensure_demo found or built: the corpus and one entry per index."""

    corpus_dir: Path
    n: int
    seed: int
    corpus_generated: bool
    indices: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["corpus_dir"] = str(self.corpus_dir)
        data["seconds"] = round(self.seconds, 2)
        return data


@contextmanager
def _demo_lock(settings: Settings) -> Iterator[None]:
    """An exclusive lock on building the demo's indices, across processes and threads (each
    call opens its own descriptor). The corpora have their own lock (evidence.phantoms.saved)."""
    settings.index_dir.mkdir(parents=True, exist_ok=True)
    with open(settings.index_dir / ".demo.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _stage(progress: Progress | None, start: float, end: float) -> Progress | None:
    """Map a sub-step's 0..1 progress onto [start, end] of the whole bootstrap."""
    if progress is None:
        return None
    return lambda fraction, message: progress(start + (end - start) * fraction, message)


def _index_matches(loaded: LoadedIndex, corpus: dict[str, Any]) -> bool:
    recorded = loaded.info.get("corpus", {})
    return all(recorded.get(key) == corpus[key] for key in ("kind", "n", "seed", "generator"))


def _ensure_index(
    name: str,
    spec: str,
    source: Callable[[], LoadedSource],
    corpus: dict[str, Any],
    settings: Settings,
    progress: Progress | None,
    stop: threading.Event | None,
) -> dict[str, Any]:
    """Load the demo index `name` for `spec` if it was built from this corpus, else build it
    with the one index builder (index/build.py), which also prepares logic-aware ranking.
    A loaded index gets its probes into memory, so the first logic-aware search answers at
    once; `source` is read only when a build is needed."""
    started = time.perf_counter()
    if progress:
        progress(0.0, f"loading model {spec}")
    embedder = registry.load_embedder(spec, settings)
    built = False
    try:
        loaded = load_index(name, embedder, settings)
        if not _index_matches(loaded, corpus):
            raise IndexNotFoundError("index was built from a different demo corpus")
        if progress:
            progress(1.0, f"preparing logic-aware ranking of {name} for {spec}")
        note = prepare_index_logic(loaded, embedder, settings, query_vocabulary(loaded))
    except IndexNotFoundError:
        if progress:
            progress(0.0, f"building index {name} for {spec}")
        report = build_index(
            source(), embedder, name, settings, model_spec=spec, progress=progress, stop=stop
        )
        loaded = load_index(name, embedder.card.fingerprint, settings)
        note, built = (None if report.logic else report.logic_note), True
    return {
        "name": name,
        "model": spec,
        "fingerprint": loaded.fingerprint,
        "count": loaded.index.count,
        "kind": loaded.index.kind,
        "built": built,
        "logic": note is None,
        "seconds": round(time.perf_counter() - started, 2),
        "path": str(loaded.directory),
    }


def ensure_demo(
    settings: Settings,
    progress: Progress | None = None,
    n: int | None = None,
    seed: int | None = None,
    models: Sequence[str] | None = None,
    with_3d: bool = False,
    stop: threading.Event | None = None,
) -> DemoAssets:
    """Make the demo corpus and its indices exist; cheap (load only) once they do.

    progress(fraction, message) reports the whole bootstrap on 0..1, for a progress bar.
    """
    n = settings.demo_size if n is None else n
    seed = settings.demo_seed if seed is None else seed
    if n < 10:
        raise ValueError(f"The demo corpus needs at least 10 studies; got n={n}.")
    specs = list(models) if models else default_demo_models(settings)
    started = time.perf_counter()
    key = CorpusKey("cxr", n, seed)
    with _demo_lock(settings):
        directory, generated = ensure_saved(
            saved.corpora_root(settings), key, _stage(progress, 0.0, 0.3)
        )
        corpus = key.record(directory)
        stages = len(specs) + (1 if with_3d else 0)
        entries = []
        for position, spec in enumerate(specs):
            step = _stage(
                progress, 0.3 + 0.7 * position / stages, 0.3 + 0.7 * (position + 1) / stages
            )
            entries.append(
                _ensure_index(
                    DEMO_CXR,
                    spec,
                    lambda: phantom_source(settings, n, seed),
                    corpus,
                    settings,
                    step,
                    stop,
                )
            )
        if with_3d:
            volumes_progress = _stage(progress, 0.3 + 0.7 * len(specs) / stages, 1.0)
            entries.append(_ensure_volume_index(settings, specs[0], seed, volumes_progress, stop))
    if progress:
        progress(1.0, "demo indices ready")
    return DemoAssets(
        corpus_dir=directory,
        n=n,
        seed=seed,
        corpus_generated=generated,
        indices=entries,
        seconds=time.perf_counter() - started,
    )


def _ensure_volume_index(
    settings: Settings,
    spec: str,
    seed: int,
    progress: Progress | None,
    stop: threading.Event | None,
    n_subjects: int = 12,
) -> dict[str, Any]:
    """The 3D demo index: CT, T1 and T2 MR volumes and CT projections of a few subjects."""
    key = CorpusKey("volumes", n_subjects, seed)
    directory, _ = ensure_saved(saved.corpora_root(settings), key, progress)
    source = lambda: phantom_volume_source(settings, n_subjects, seed)  # noqa: E731
    return _ensure_index(DEMO_3D, spec, source, key.record(directory), settings, progress, stop)


def bootstrap_app(settings: Settings, progress: Progress | None = None) -> DemoAssets:
    """What the app prepares on start: the demo (ensure_demo), then the small precomputed
    benchmark run and demo study (medheb_app.demo_showcase). A showcase that cannot be built
    is logged and skipped: search never depends on it."""
    import logging

    assets = ensure_demo(settings, _stage(progress, 0.0, 0.9))
    try:
        ensure_showcase(
            settings, assets.corpus_dir, assets.n, assets.seed, _stage(progress, 0.9, 1.0)
        )
    except Exception:  # the explorer then says how to start a run
        logging.getLogger(__name__).exception("the demo benchmark run could not be prepared")
    if progress:
        progress(1.0, "demo ready")
    return assets
