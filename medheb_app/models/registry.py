"""Spec string -> embedder, resolved in layers like open_clip's factory.

  1. a built-in name           "dual-lite" (its shipped report checkpoint), "random", "oracle"
  2. name@tag                  "dual-lite@label-aware": a checkpoint folder found under
                               models/dual-lite/<tag>/, models/<tag>/ or
                               DATA_DIR/models/<tag>/ (trained at run time), or
                               "dual-lite@/path/to/checkpoint"
  3. "open_clip:..."           see open_clip_embedder.py
  4. "mllm:..."                medheb_app/models/mllm.py (Qwen-VL style embedders)
  5. "medemb-lite[@tag|@path]" medheb_app/models/medemb_lite.py: the committed checkpoint
                               models/medemb-lite/, or one trained by `train medemb`
Anything else is an error that lists the valid specs. Loaded embedders are memoised per
process; a checkpoint is reloaded when its weights file changes.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from medheb_app.models.base import CardOnly, Embedder, ModelCard
from medheb_app.models.baselines import OracleEmbedder, RandomEmbedder
from medheb_app.models.device import check_device_text, place, resolve_device
from medheb_app.models.dual_lite_checkpoint import (
    DUAL_LITE,
    HEADS_FILE,
    checkpoint_card,
    read_checkpoint_config,
)
from medheb_app.models.medemb_lite_checkpoint import MEDEMB_LITE, PROJECTION_FILE
from medheb_app.models.medemb_lite_checkpoint import checkpoint_card as medemb_lite_card
from medheb_app.models.medemb_lite_checkpoint import checkpoint_folder as medemb_lite_folder
from medheb_app.models.medemb_lite_checkpoint import checkpoints as medemb_lite_checkpoints
from medheb_app.models.medemb_lite_checkpoint import (
    read_checkpoint_config as read_medemb_lite_config,
)
from medheb_app.models.tower_names import IMAGE_SIZE
from medheb_app.settings import Settings

log = logging.getLogger(__name__)
DEFAULT_DUAL_LITE_TAG = "report"


@dataclass(frozen=True)
class Builtin:
    """A named model: how to load it, and its card without loading it (for listings).
    `torch_free`: it has no torch weights, so it runs on the CPU and loading it never needs
    torch (not even to ask whether a GPU exists)."""

    load: Callable[[Settings], Embedder]
    card: Callable[[Settings], ModelCard]
    torch_free: bool = False


BUILTINS: dict[str, Builtin] = {
    "random": Builtin(lambda s: RandomEmbedder(), lambda s: RandomEmbedder().card, True),
    "oracle": Builtin(lambda s: OracleEmbedder(), lambda s: OracleEmbedder().card, True),
}
# Other model modules add their built-ins here, e.g. BUILTINS["medemb-lite"] = Builtin(...).

_CACHE: dict[tuple, Embedder] = {}
_LOCK = threading.Lock()


class UnknownModelError(KeyError):
    """No layer of the resolver matched; the message lists what would have."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown model"


def checkpoint_folders(settings: Settings) -> dict[str, Path]:
    """tag -> folder of every dual-lite checkpoint, committed ones first (they win ties)."""
    candidates = [
        *sorted((settings.models_dir / DUAL_LITE).glob("*/")),
        *sorted(settings.models_dir.glob("*/")),
        *sorted(settings.trained_models_dir.glob("*/")),
    ]
    found: dict[str, Path] = {}
    for folder in candidates:
        if not (folder / HEADS_FILE).is_file():
            continue
        try:
            config = read_checkpoint_config(folder)
        except (OSError, ValueError) as error:  # listed without it; the app keeps serving
            log.warning("skipping checkpoint folder %s: %s", folder, error)
            continue
        if config.get("name") != DUAL_LITE:
            continue
        found.setdefault(folder.name, folder)
    return found


def _dual_lite_folder(tag: str, settings: Settings) -> Path:
    if "/" in tag or tag.startswith("."):
        folder = Path(tag).expanduser()
        read_checkpoint_config(folder)  # raises a clear error when it is not a checkpoint
        return folder
    folders = checkpoint_folders(settings)
    if tag not in folders:
        if tag == DEFAULT_DUAL_LITE_TAG:
            raise FileNotFoundError(
                f"The default dual-lite weights are missing from "
                f"{settings.models_dir / DUAL_LITE / tag}; recreate them with "
                f"`python -m medheb_app train report --out models/{DUAL_LITE}/{tag}`."
            )
        raise UnknownModelError(
            f"No dual-lite checkpoint tagged {tag!r}. "
            f"Valid specs: {', '.join(valid_specs(settings))}."
        )
    return folders[tag]


def _load_mllm(spec: str) -> Embedder:
    try:
        module = importlib.import_module("medheb_app.models.mllm")
    except ModuleNotFoundError as error:
        raise UnknownModelError(f"mllm models are not available in this build ({error}).") from None
    return module.load(spec)


def _dual_lite(folder: Path) -> Embedder:
    # deferred: safetensors, torch
    from medheb_app.models.dual_lite import DualLiteEmbedder  # deferred: torch, at first load

    return DualLiteEmbedder.from_checkpoint(folder)


def _medemb_lite(folder: Path) -> Embedder:
    # deferred: safetensors, torch
    from medheb_app.models.medemb_lite import MedEmbLiteEmbedder  # deferred: torch, first load

    return MedEmbLiteEmbedder.from_checkpoint(folder)


def _resolve(spec: str, settings: Settings) -> tuple[tuple, Callable[[], Embedder]]:
    """(memo key, loader) for a spec; raises when no layer matches."""
    if spec in BUILTINS:
        return (spec,), lambda: BUILTINS[spec].load(settings)
    name, at, tag = spec.partition("@")
    if name == DUAL_LITE:
        folder = _dual_lite_folder(tag if at else DEFAULT_DUAL_LITE_TAG, settings)
        stamp = (folder / HEADS_FILE).stat().st_mtime_ns
        return (DUAL_LITE, str(folder.resolve()), stamp), lambda: _dual_lite(folder)
    if name == MEDEMB_LITE:
        folder = medemb_lite_folder(tag if at else "", settings)
        key = (MEDEMB_LITE, str(folder.resolve()), (folder / PROJECTION_FILE).stat().st_mtime_ns)
        return key, lambda: _medemb_lite(folder)
    if spec.startswith("open_clip:"):
        # deferred: torch
        from medheb_app.models.open_clip_embedder import OpenClipEmbedder

        return (spec,), lambda: OpenClipEmbedder(spec)
    if spec.startswith("mllm:"):
        return (spec,), lambda: _load_mllm(spec)
    raise UnknownModelError(
        f"Unknown model spec {spec!r}. Valid specs: {', '.join(valid_specs(settings))}, "
        "open_clip:<ARCH>@<weights.pt>, open_clip:<config.json>@<weights.pt>, "
        "open_clip:hf-hub:org/name, mllm:<model folder>, mllm:org/name (local HF cache)."
    )


def names_files(spec: str) -> bool:
    """Whether `spec` loads files or a hub model it names (layers 3 and 4, or a checkpoint
    path), rather than a built-in or a checkpoint the resolver finds by its tag."""
    return spec.startswith(("open_clip:", "mllm:")) or "/" in spec or "\\" in spec


def check_spec(spec: str, settings: Settings) -> None:
    """Raise UnknownModelError (its message lists the valid specs) unless `spec` names a model
    the resolver knows; loads nothing, so a job can be refused before it is queued."""
    _resolve(spec.strip(), settings)


def identity(spec: str, settings: Settings) -> tuple:
    """What `spec` loads, as a comparable key: two specs naming one model (`dual-lite` and
    `dual-lite@report`) give the same key; an unknown spec is its own key. Costs a stat."""
    try:
        key = _resolve(spec.strip(), settings)[0]
    except (UnknownModelError, OSError, ValueError):
        return (spec.strip(),)
    return key[:2]  # the weights' modification time is not who the model is


TRAINED_FAMILIES = (DUAL_LITE, MEDEMB_LITE)  # trained here from the same pretrained towers


def lineage(spec: str, settings: Settings) -> tuple:
    """The family whose answers `spec`'s would resemble: every checkpoint this project trains
    (dual-lite's report, label-aware or any fine-tune, and medemb-lite's) starts from the same
    pretrained towers, so one ranks a gallery much as another does; the adversarial pass at
    65cb8e6 named 6 of 6 sides of a dual-lite study with dual-lite@label-aware. Other specs are
    their own family (identity)."""
    key = identity(spec, settings)
    return ("trained-towers",) if key[0] in TRAINED_FAMILIES else key


def device_for(specs: Iterable[str], wanted: str) -> str:
    """The resolved device that `specs` run on when `wanted` is asked for: "cpu" when every
    one is a torch-free built-in and "auto" or "cpu" is asked for, without importing torch
    (3-7 s of a start, a build or a run that uses only the oracle or random); otherwise
    resolve_device, which says when an asked-for GPU does not exist."""
    torch_free = all(
        (builtin := BUILTINS.get(spec.strip())) is not None and builtin.torch_free for spec in specs
    )
    if torch_free and check_device_text(wanted) in ("auto", "cpu"):
        return "cpu"
    return resolve_device(wanted)


def load_embedder(spec: str, settings: Settings, device: str | None = None) -> Embedder:
    """The embedder for `spec` on `device` (default settings.device; "auto" picks CUDA when
    present), loaded once per process and device (the same object on later calls).

    A checkpoint folder whose weights file changed (retrained in place) is reloaded, and the
    superseded copy is evicted, so a long-running app holds one model per folder and device."""
    spec = spec.strip()
    resolved = device_for([spec], device or settings.device)
    key, loader = _resolve(spec, settings)
    cache_key = (*key, resolved, settings.precision)
    with _LOCK:
        if cache_key not in _CACHE:
            # a cache key is (*key, device, precision)
            for old in superseded(key, [cached[:-2] for cached in _CACHE]):
                for stale in [cached for cached in _CACHE if cached[:-2] == old]:
                    del _CACHE[stale]
            _CACHE[cache_key] = place(loader(), resolved, settings.precision)
        return _CACHE[cache_key]


def card_only(spec: str, settings: Settings) -> CardOnly:
    """The card (and image input side) of `spec` read from its files, without loading weights
    or torch, where they say it (built-ins, dual-lite and medemb-lite checkpoints: the card
    load_embedder's model carries); any other spec is loaded once to read them."""
    spec = spec.strip()
    if spec in BUILTINS:
        return CardOnly(BUILTINS[spec].card(settings))
    name, at, tag = spec.partition("@")
    if name == DUAL_LITE:
        folder = _dual_lite_folder(tag if at else DEFAULT_DUAL_LITE_TAG, settings)
        config = read_checkpoint_config(folder)
        return CardOnly(checkpoint_card(folder, config), int(config.get("image_size", IMAGE_SIZE)))
    if name == MEDEMB_LITE:
        folder = medemb_lite_folder(tag if at else "", settings)
        return CardOnly(medemb_lite_card(folder, read_medemb_lite_config(folder)))
    loaded = load_embedder(spec, settings, device="cpu")
    return CardOnly(loaded.card, getattr(loaded, "input_side", None))


def superseded(key: tuple, cached: Iterable[tuple]) -> list[tuple]:
    """Cached keys of the same checkpoint folder with another weights stamp than `key`."""
    if len(key) != 3:
        return []
    return [old for old in cached if len(old) == 3 and old[:2] == key[:2] and old != key]


def valid_specs(settings: Settings) -> list[str]:
    """Built-in names and every dual-lite and medemb-lite checkpoint spec that resolves now."""
    return [DUAL_LITE, *BUILTINS, *registered_checkpoints(settings)]


def registered_checkpoints(settings: Settings) -> dict[str, Path]:
    """spec -> folder of every checkpoint the resolver finds: the one place a checkpoint
    gets its name, so logs and pickers say what `load_embedder` accepts."""
    specs = {f"{DUAL_LITE}@{tag}": folder for tag, folder in checkpoint_folders(settings).items()}
    specs.update(_medemb_lite_specs(settings))
    return specs


def spec_of_folder(folder: Path | str, settings: Settings) -> str | None:
    """The spec a checkpoint folder registers as, or None when none resolves to it (not a
    checkpoint, or its tag is taken by a committed checkpoint, which wins)."""
    wanted = Path(folder).resolve()
    for spec, found in registered_checkpoints(settings).items():
        if Path(found).resolve() == wanted:
            return spec
    return None


def _medemb_lite_specs(settings: Settings) -> dict[str, Path]:
    """spec -> folder of every medemb-lite checkpoint ("medemb-lite" is the default one)."""
    return {
        MEDEMB_LITE if tag == MEDEMB_LITE else f"{MEDEMB_LITE}@{tag}": folder
        for tag, folder in medemb_lite_checkpoints(settings).items()
    }


def list_models(settings: Settings) -> list[dict[str, object]]:
    """[{spec, card}] for built-ins and every checkpoint, without loading any tower."""
    models: list[dict[str, object]] = []
    folders = checkpoint_folders(settings)
    default = folders.get(DEFAULT_DUAL_LITE_TAG)
    if default is not None:
        models.append({"spec": DUAL_LITE, "card": _card_dict(default)})
    for name, builtin in BUILTINS.items():
        models.append({"spec": name, "card": builtin.card(settings).to_dict()})
    for tag, folder in folders.items():
        models.append({"spec": f"{DUAL_LITE}@{tag}", "card": _card_dict(folder)})  # as registered
    for spec, folder in _medemb_lite_specs(settings).items():
        card = medemb_lite_card(folder, read_medemb_lite_config(folder))
        models.append({"spec": spec, "card": card.to_dict()})
    return models


def _card_dict(folder: Path) -> dict[str, object]:
    """The checkpoint's card computed from its files (card.json is only for people)."""
    return checkpoint_card(folder, read_checkpoint_config(folder)).to_dict()


def clear_cache() -> None:
    """Forget loaded embedders (tests, or after deleting a checkpoint)."""
    with _LOCK:
        _CACHE.clear()
