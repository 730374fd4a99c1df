"""The serving policy: which (index, model) pairs the app offers, and the defaults.

The one home of "what may be searched and with what": `built_pairs` (built indices and the
listed models that have them: a token's reach), `offered` (those of public indices: an
anonymous caller's reach), `default_model` (a search's model when none is named),
`build_default_model` (an index build's) and `default_demo_models` (what the demo builds,
hence what the public search offers). It reads the index catalog and the model registry,
never builds or loads a model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from medheb_app.index import catalog
from medheb_app.index.catalog import list_indices
from medheb_app.models import registry
from medheb_app.settings import Settings

# The strongest shipped models first: the default of the search tab and the CLI is the first
# of these that has the chosen index built (BENCHMARKS.md, "Logic-aware search vs cosine":
# dual-lite@label-aware leads on "A and no B" under both rankings).
PREFERRED_MODELS = ("dual-lite@label-aware", "dual-lite", "medemb-lite")
BASE_MODEL = "dual-lite"  # committed weights: every install has it
LABEL_AWARE_SPEC = "dual-lite@label-aware"
FILE_SPEC_MARKERS = ("/", "\\", ":", "..")
T = TypeVar("T")


def folder_stamp(roots: tuple[Path, ...], depth: int) -> tuple[tuple[str, int], ...]:
    """(folder, mtime_ns) of `roots` and their sub-folders `depth` levels down: what changes
    when an index or a checkpoint folder appears, is replaced (both are renamed into place)
    or goes, read with a few dozen stats instead of a walk over every file."""
    stamp: list[tuple[str, int]] = []
    level = [root for root in roots if root.is_dir()]
    for _ in range(depth + 1):
        below: list[Path] = []
        for folder in level:
            try:
                stamp.append((str(folder), folder.stat().st_mtime_ns))
                below.extend(child for child in folder.iterdir() if child.is_dir())
            except OSError:  # removed while we looked: the next call sees the new state
                continue
        level = below
    return tuple(sorted(stamp))


_MEMO: dict[str, tuple[tuple, object]] = {}
_MEMO_LOCK = threading.Lock()
# A stamp is a few dozen stats (about a third of a cached API search, BENCHMARKS.md "HTTP
# API"): one taken less than this many seconds ago is reused, so a build by another process
# shows within it (one by this process at once: fresh_stamp compares catalog.changes()).
STAMP_FRESH_S = 0.5
_STAMPS: dict[tuple, tuple[float, int, tuple]] = {}  # key -> (taken at, catalog.changes(), stamp)


def fresh_stamp(key: tuple, take: Callable[[], tuple]) -> tuple:
    """`take()`, or the stamp taken for `key` within the last STAMP_FRESH_S seconds while
    this process swapped in or removed no index (catalog.changes())."""
    now, changes = time.monotonic(), catalog.changes()
    with _MEMO_LOCK:
        held = _STAMPS.get(key)
    if held is not None and now - held[0] < STAMP_FRESH_S and held[1] == changes:
        return held[2]
    stamp = take()
    with _MEMO_LOCK:
        _STAMPS[key] = (now, changes, stamp)
    return stamp


def _memoised(name: str, stamp: tuple, compute: Callable[[], T]) -> T:
    with _MEMO_LOCK:
        held = _MEMO.get(name)
    if held is not None and held[0] == stamp:
        return held[1]  # type: ignore[return-value]
    value = compute()
    with _MEMO_LOCK:
        _MEMO[name] = (stamp, value)
    return value


def _models_stamp(settings: Settings) -> tuple:
    # checkpoints live in models/<name>/, models/dual-lite/<tag>/ and DATA_DIR/models/<tag>/
    roots = (settings.models_dir, settings.trained_models_dir)
    return fresh_stamp(("models", *roots), lambda: folder_stamp(roots, depth=2))


def _listed_models(settings: Settings) -> list[tuple[str, str]]:
    """(spec, fingerprint) of every listed model that names no file, remembered until a model
    folder changes (listing hashes every weights file: too slow per search). Weights rewritten in
    place under the same file names are not noticed: the trainers write a new folder."""

    def compute() -> list[tuple[str, str]]:
        specs = []
        for entry in registry.list_models(settings):
            spec = str(entry["spec"])
            card = entry.get("card") or {}
            if any(marker in spec for marker in FILE_SPEC_MARKERS):
                continue
            fingerprint = str(card.get("fingerprint", "")) if isinstance(card, dict) else ""
            specs.append((spec, fingerprint))
        return specs

    return _memoised("models", _models_stamp(settings), compute)


def _catalog(settings: Settings) -> tuple[dict[str, list[str]], frozenset[str]]:
    """(every built index -> the listed model specs that have it built, strongest first; the
    indices all of whose builds are synthetic), from one catalog listing. Only registered
    checkpoints and built-ins appear (never a spec that names a file), and only for indices
    that exist, so picking from it never builds, generates or loads anything by path.
    Memoised on the index and model folders' mtimes (folder_stamp), re-read at most every
    STAMP_FRESH_S seconds, so a request costs no stat in a burst; a build by this process
    shows at once, one by another process within half a second."""

    def compute() -> tuple[dict[str, list[str]], frozenset[str]]:
        built: dict[str, set[str]] = {}
        synthetic: dict[str, bool] = {}
        for entry in list_indices(settings):
            name = str(entry["name"])
            built.setdefault(name, set()).add(str(entry["fingerprint"]))
            synthetic[name] = synthetic.get(name, True) and bool(entry.get("synthetic"))
        specs = _listed_models(settings)
        order = {spec: rank for rank, spec in enumerate(PREFERRED_MODELS)}
        pairs: dict[str, list[str]] = {}
        for name in sorted(built):
            models = [spec for spec, fingerprint in specs if fingerprint in built[name]]
            if models:
                pairs[name] = sorted(models, key=lambda s: (order.get(s, len(order)), s))
        return pairs, frozenset(name for name, fake in synthetic.items() if fake)

    return _memoised("catalog", _stamp(settings), compute)


def built_pairs(settings: Settings) -> dict[str, list[str]]:
    """Every built index -> the listed model specs that have it built, strongest first: what
    an API token may search (_catalog)."""
    return dict(_catalog(settings)[0])


def offered(settings: Settings) -> dict[str, list[str]]:
    """What an anonymous request (a page visitor, a token-less API call) may search: the
    public indices -> the listed models built for each, strongest first. Public are the
    synthetic indices and the real ones the operator published (Settings.public_indices, "*"
    for all): an index of real studies is not offered until then, so a lab's archive built
    by the CLI is searched with a token, never by whoever reaches the page."""
    pairs, synthetic = _catalog(settings)
    published = set(settings.public_indices)
    every = "*" in published
    return {
        name: models
        for name, models in pairs.items()
        if every or name in synthetic or name in published
    }


def reach(settings: Settings, anonymous: bool) -> dict[str, list[str]]:
    """The (index -> models) a caller may search: `offered` with anonymous rights, every
    built pair (`built_pairs`) with a token's."""
    return offered(settings) if anonymous else built_pairs(settings)


def _stamp(settings: Settings) -> tuple:
    # index_dir/<name>/<fingerprint>/ is renamed into place whole: depth 1 sees every change
    indices = fresh_stamp(
        ("indices", settings.index_dir),
        lambda: folder_stamp((settings.index_dir,), depth=1),
    )
    return (indices, _models_stamp(settings))


def default_model(settings: Settings, index: str | None = None) -> str:
    """The model a search uses when none is named.

    A spec the operator pinned (Settings.default_model, MEDHEB_DEFAULT_MODEL) wins; with
    "auto" it is the strongest listed model that has `index` built, else the model an index
    would be built with (build_default_model; the service then says the index is missing for
    it)."""
    if settings.pinned_model:
        return settings.pinned_model
    models = built_pairs(settings).get(index or settings.default_index, [])
    return models[0] if models else build_default_model(settings)


def build_default_model(settings: Settings) -> str:
    """The model an index is built with when none is named: the pinned spec, else ("auto")
    the strongest shipped model whose weights are present (PREFERRED_MODELS), else dual-lite."""
    if settings.pinned_model:
        return settings.pinned_model
    listed = {spec for spec, _ in _listed_models(settings)}
    return next((spec for spec in PREFERRED_MODELS if spec in listed), BASE_MODEL)


def default_demo_models(settings: Settings) -> list[str]:
    """The models the demo index is built for, which are the models the public search offers:
    MEDHEB_DEMO_MODELS (comma-separated) when set, else the model the operator pinned
    (MEDHEB_DEFAULT_MODEL; dual-lite with "auto") plus the label-aware fine-tune when its
    weights are present."""
    if settings.demo_models:
        return list(settings.demo_models)
    specs = [settings.pinned_model or BASE_MODEL]
    available = {entry["spec"] for entry in registry.list_models(settings)}
    if LABEL_AWARE_SPEC in available and LABEL_AWARE_SPEC not in specs:
        specs.append(LABEL_AWARE_SPEC)
    return specs
