"""What a medemb-lite checkpoint folder is, read without torch: its files, config and card.

The model registry lists and resolves checkpoints through this module, so listing models never
imports torch; models/medemb_lite.py loads the weights.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from medheb_app.evidence.pixels import K_FRAMES
from medheb_app.models.base import ModelCard
from medheb_app.models.checkpoint_files import read_config_beside, weights_sha256
from medheb_app.models.tower_names import IMAGE_ARCH, TEXT_DIM, TOWERS_LICENSE
from medheb_app.settings import Settings

MEDEMB_LITE = "medemb-lite"
PROJECTION_FILE = "projection.safetensors"
ADAPTER_DIR = "adapter"
CARD_FILE = "card.json"
BASE = f"all-MiniLM-L6-v2 backbone + {IMAGE_ARCH} (ImageNet) visual tokens"
Pooling = Literal["last", "mean"]


@dataclass(frozen=True)
class MedEmbLiteConfig:
    """Shape of the sequence; travels in config.json with the weights."""

    image_size: int = 224
    grid: int = 4  # visual tokens per image = grid * grid
    frame_size: int = 128  # volume frames are small: 64 of them per volume
    frames: int = K_FRAMES
    max_text_tokens: int = 128
    pooling: Pooling = "last"

    def __post_init__(self) -> None:
        if not 32 <= self.frame_size <= self.image_size <= 1024:
            raise ValueError("need 32 <= frame_size <= image_size <= 1024")
        if not 1 <= self.grid <= 7 or self.frames < 1 or self.max_text_tokens < 8:
            raise ValueError("need 1 <= grid <= 7, frames >= 1 and max_text_tokens >= 8")
        if self.pooling not in ("last", "mean"):
            raise ValueError(f"pooling must be 'last' or 'mean'; got {self.pooling!r}")


def read_checkpoint_config(folder: Path | str) -> dict:
    """config.json of a medemb-lite checkpoint, with a clear error when it is not one."""
    advice = "train one with `python -m medheb_app train medemb`"
    config = read_config_beside(folder, MEDEMB_LITE, PROJECTION_FILE, advice)
    if config.get("name") != MEDEMB_LITE:
        raise FileNotFoundError(f"{folder} holds a {config.get('name')!r} checkpoint.")
    return config


def checkpoint_sha256(folder: Path) -> str:
    """One digest over the projection and the adapter files."""
    paths = [folder / PROJECTION_FILE]
    if (folder / ADAPTER_DIR).is_dir():
        paths += sorted(p for p in (folder / ADAPTER_DIR).rglob("*.safetensors"))
    return weights_sha256(folder, paths)


def _card(config: MedEmbLiteConfig, weights: str, digest: str, version: str, description=""):
    return ModelCard(
        name=MEDEMB_LITE,
        version=version,
        dims=TEXT_DIM,
        modalities=("text", "2d", "3d"),
        license=TOWERS_LICENSE,
        base=BASE,
        description=description,
        weights=weights,
        weights_sha256=digest,
        extra={k: str(v) for k, v in asdict(config).items()},
    )


def checkpoint_card(folder: Path, saved: dict) -> ModelCard:
    config = MedEmbLiteConfig(**saved["model"])
    version = str(saved.get("tag") or folder.name)
    return _card(
        config, str(folder), checkpoint_sha256(folder), version, saved.get("description", "")
    )


def _is_checkpoint(folder: Path) -> bool:
    try:
        read_checkpoint_config(folder)
    except (OSError, ValueError):
        return False
    return True


def checkpoints(settings: Settings) -> dict[str, Path]:
    """tag -> folder of every medemb-lite checkpoint; committed ones (models/) win ties."""
    roots = [settings.models_dir, settings.trained_models_dir]
    found: dict[str, Path] = {}
    for root in roots:
        for folder in [
            root / MEDEMB_LITE,
            *sorted(root.glob(f"{MEDEMB_LITE}/*/")),
            *sorted(root.glob("*/")),
        ]:
            if folder.is_dir() and _is_checkpoint(folder):
                found.setdefault(folder.name, folder)
    return found


def checkpoint_folder(tag: str, settings: Settings) -> Path:
    """ "" -> the default checkpoint (models/medemb-lite); a tag or a path -> that folder."""
    if "/" in tag or tag.startswith("."):
        folder = Path(tag).expanduser()
        read_checkpoint_config(folder)  # clear error when it is not a checkpoint
        return folder
    found = checkpoints(settings)
    folder = found.get(tag or MEDEMB_LITE)
    if folder is None:
        raise FileNotFoundError(
            f"No medemb-lite checkpoint {tag or MEDEMB_LITE!r} under {settings.models_dir} or "
            f"{settings.trained_models_dir}; train one with `python -m medheb_app train medemb "
            f"--out models/{MEDEMB_LITE}`."
        )
    return folder
