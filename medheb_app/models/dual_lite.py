"""dual-lite: an open_clip-style dual encoder from two pretrained towers and trained heads.

image -> EfficientNet-Lite0 -> 1280-d -> projection head \\
                                                          > shared space (L2-normalised)
text  -> all-MiniLM-L6-v2  ->  384-d -> projection head /

The towers come from pip packages (see towers.py); the heads (and optionally LoRA adapters on
the towers) are trained here, LiT-style, and saved as a checkpoint folder:

    heads.safetensors          projection heads + logit scale
    adapter_image/, adapter_text/   optional peft LoRA folders
    config.json                {name, tag, base, dims, image_size, heads, training,
                                data_fingerprint, results}
    card.json                  the ModelCard, for people and the UI

Mixed inputs (text with an image or a volume) are embedded field by field, mean-pooled and
renormalised; a volume is up to K=64 uniformly sampled frames, each embedded as an image,
mean-pooled and renormalised (MedHEB section 5.1).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from medheb_app.evidence.pixels import K_FRAMES
from medheb_app.evidence.study import EmbedItem
from medheb_app.models.base import ModelCard
from medheb_app.models.checkpoint_files import CONFIG_FILE
from medheb_app.models.device import autocast, is_shared, module_device, shared_on
from medheb_app.models.dual_lite_checkpoint import (  # re-exported: the checkpoint format
    ADAPTER_DIRS,
    BASE,
    CARD_FILE,
    DUAL_LITE,
    HEADS_FILE,
    checkpoint_card,
    read_checkpoint_config,
)
from medheb_app.models.dual_lite_checkpoint import checkpoint_sha256 as checkpoint_sha256
from medheb_app.models.fieldwise import encode_fieldwise, encode_volumes, with_instruction
from medheb_app.models.towers import (
    IMAGE_DIM,
    IMAGE_SIZE,
    TEXT_DIM,
    TOWERS_LICENSE,
    ImageTower,
    TextTower,
    preprocess_images,
)

# Images per image-tower forward pass on a CPU. Against 32 (BENCHMARKS.md "The image forward
# chunk"): a 32-film pass held 1,652 MB and 8 held 1,184 MB; 64 NIH films took 2.35 s at 8
# against 4.70 s at 32 (1 thread); the vectors agree within 1e-6. A GPU keeps batch_size.
CPU_IMAGE_CHUNK = 8


@dataclass(frozen=True)
class HeadConfig:
    """Shape of the projection heads; travels in config.json with the weights."""

    embed_dim: int = 256
    hidden_dim: int = 0  # 0: a linear projection as in open_clip; >0: one GELU hidden layer
    init_temperature: float = 0.07  # CLIP's initial softmax temperature

    def __post_init__(self) -> None:
        if self.embed_dim < 1 or self.hidden_dim < 0:
            raise ValueError("embed_dim must be >= 1 and hidden_dim >= 0")
        if not 0 < self.init_temperature < 1:
            raise ValueError("init_temperature must be in (0, 1)")


def _projection(in_dim: int, config: HeadConfig) -> nn.Module:
    if config.hidden_dim == 0:
        return nn.Linear(in_dim, config.embed_dim, bias=False)
    return nn.Sequential(
        nn.Linear(in_dim, config.hidden_dim),
        nn.GELU(),
        nn.Linear(config.hidden_dim, config.embed_dim, bias=False),
    )


class ProjectionHeads(nn.Module):
    """Tower features -> shared, L2-normalised space, plus CLIP's learned log logit scale."""

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.config = config
        self.image = _projection(IMAGE_DIM, config)
        self.text = _projection(TEXT_DIM, config)
        self.log_logit_scale = nn.Parameter(torch.tensor(math.log(1 / config.init_temperature)))

    def project_image(self, features: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(self.image(features), dim=-1)

    def project_text(self, features: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(self.text(features), dim=-1)

    def logit_scale(self) -> torch.Tensor:
        """exp(log scale), clamped at 100 as in CLIP so training cannot blow it up."""
        return self.log_logit_scale.exp().clamp(max=100.0)


@cache
def shared_towers() -> tuple[ImageTower, TextTower]:
    """Frozen towers, loaded once per process and shared by every adapter-free embedder."""
    image, text = ImageTower(), TextTower()
    for tower in (image, text):
        tower.requires_grad_(False)
    return image, text


@contextmanager
def peft_warnings_silenced() -> Iterator[None]:
    """peft calls a transformers API deprecated in v5; its FutureWarning is not ours to fix."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
        yield


def load_adapter(tower: nn.Module, folder: Path) -> None:
    """Merge a peft LoRA folder into `tower.net` (inference needs no adapter bookkeeping)."""
    from peft import PeftModel

    with peft_warnings_silenced():
        tower.net = PeftModel.from_pretrained(tower.net, str(folder)).merge_and_unload()


class DualLiteEmbedder:
    """The dual encoder behind the Embedder protocol.

    Images are embedded without instructions. For text, a task instruction is prepended to
    the text ("<instruction> <text>"), the usual way to condition a sentence encoder.
    """

    precision: str = "auto"  # "fp32" turns autocast off (Settings.precision, via place)

    def __init__(
        self,
        heads: ProjectionHeads,
        card: ModelCard,
        image_tower: ImageTower | None = None,
        text_tower: TextTower | None = None,
        batch_size: int = 32,
        frames: int = K_FRAMES,
        image_size: int = IMAGE_SIZE,
    ) -> None:
        if image_tower is None or text_tower is None:
            shared_image, shared_text = shared_towers()
            image_tower = shared_image if image_tower is None else image_tower
            text_tower = shared_text if text_tower is None else text_tower
        self.heads = heads.eval()
        self.card = card
        self.image_tower = image_tower
        self.text_tower = text_tower
        self.batch_size = batch_size
        self.frames = frames
        self.image_size = image_size

    @classmethod
    def from_checkpoint(cls, folder: Path | str) -> DualLiteEmbedder:
        """Load heads (+ adapters) from a checkpoint folder written by `save_checkpoint`."""
        folder = Path(folder)
        config = read_checkpoint_config(folder)
        head_config = HeadConfig(**config["heads"])
        heads = ProjectionHeads(head_config)
        heads.load_state_dict(load_file(str(folder / HEADS_FILE)))
        towers: dict[str, nn.Module | None] = {"image": None, "text": None}
        for kind, dirname in ADAPTER_DIRS.items():
            if (folder / dirname).is_dir():
                tower = ImageTower() if kind == "image" else TextTower()
                load_adapter(tower, folder / dirname)
                towers[kind] = tower.eval().requires_grad_(False)
        card = checkpoint_card(folder, config)
        return cls(
            heads,
            card,
            image_tower=towers["image"],
            text_tower=towers["text"],
            frames=int(config.get("frames", K_FRAMES)),
            image_size=int(config.get("image_size", IMAGE_SIZE)),
        )

    @property
    def input_side(self) -> int:
        """The square input the image tower reads (a source may fit films to it early)."""
        return self.image_size

    # -- devices ---------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return module_device(self.heads)

    def to_device(self, device: str) -> DualLiteEmbedder:
        """Heads and towers to `device` (shared towers as a per-device copy); on CUDA the towers
        run under autocast (bf16/fp16) and features come back as float32."""
        shared_image, shared_text = shared_towers()
        self.image_tower = (
            shared_on(shared_image, device)
            if is_shared(self.image_tower, shared_image)
            else self.image_tower.to(device)
        )
        self.text_tower = (
            shared_on(shared_text, device)
            if is_shared(self.text_tower, shared_text)
            else self.text_tower.to(device)
        )
        self.heads = self.heads.to(device)
        return self

    # -- tower features (what the trainer caches) ------------------------------------------
    @property
    def image_chunk(self) -> int:
        """Images per image-tower forward: batch_size on a GPU, at most CPU_IMAGE_CHUNK
        elsewhere (less memory per pass, and faster there too)."""
        if self.device.startswith("cuda"):
            return self.batch_size
        return min(self.batch_size, CPU_IMAGE_CHUNK)

    def image_features(self, images: Sequence[np.ndarray]) -> torch.Tensor:
        """(n, 1280) frozen-tower features for images in [0, 1] (float32, on the CPU)."""
        chunks = [torch.zeros(0, IMAGE_DIM)]
        step = self.image_chunk
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(images), step):
                pixels = preprocess_images(images[start : start + step], self.image_size)
                chunks.append(self.image_tower(pixels).float().cpu())
        return torch.cat(chunks)

    def text_features(self, texts: Sequence[str]) -> torch.Tensor:
        """(n, 384) frozen-tower sentence features (float32, on the CPU)."""
        chunks = [torch.zeros(0, TEXT_DIM)]
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(texts), self.batch_size):
                batch = texts[start : start + self.batch_size]
                chunks.append(self.text_tower.encode(batch).float().cpu())
        return torch.cat(chunks)

    # -- embeddings ------------------------------------------------------------------------
    def encode_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        features = self.image_features(images)
        with torch.inference_mode():
            return self.heads.project_image(features.to(self.device)).float().cpu().numpy()

    def encode_text(self, texts: Sequence[str], instruction: str | None = None) -> np.ndarray:
        texts = with_instruction(texts, instruction)
        features = self.text_features(texts)
        with torch.inference_mode():
            return self.heads.project_text(features.to(self.device)).float().cpu().numpy()

    def encode_volumes(self, volumes: Sequence[np.ndarray]) -> np.ndarray:
        return encode_volumes(volumes, self.encode_images, self.card.dims, self.frames)

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        """Embed strings, Evidence or Studies; mixed inputs are mean-pooled field-wise."""
        return encode_fieldwise(
            items, self.encode_text, self.encode_images, self.card.dims, instruction, self.frames
        )

    def save_checkpoint(self, folder: Path | str, config: dict) -> ModelCard:
        """Write heads, adapters that are peft models, config.json and card.json."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file(
            {k: v.detach().contiguous() for k, v in self.heads.state_dict().items()},
            str(folder / HEADS_FILE),
        )
        for kind, tower in (("image", self.image_tower), ("text", self.text_tower)):
            if hasattr(tower.net, "peft_config"):
                tower.net.save_pretrained(str(folder / ADAPTER_DIRS[kind]))
        full = {
            "name": DUAL_LITE,
            "base": BASE,
            "dims": self.heads.config.embed_dim,
            "image_size": self.image_size,
            "frames": self.frames,
            "heads": asdict(self.heads.config),
            **config,
        }
        (folder / CONFIG_FILE).write_text(json.dumps(full, indent=2, default=str) + "\n")
        card = checkpoint_card(folder, full)
        (folder / CARD_FILE).write_text(json.dumps(card.to_dict(), indent=2) + "\n")
        self.card = card
        return card


def untrained(
    head_config: HeadConfig | None = None, seed: int = 0, image_size: int = IMAGE_SIZE
) -> DualLiteEmbedder:
    """Fresh heads on the shared frozen towers: the starting point of training."""
    config = head_config or HeadConfig()
    torch.manual_seed(seed)
    heads = ProjectionHeads(config)
    card = ModelCard(
        name=DUAL_LITE,
        version="untrained",
        dims=config.embed_dim,
        modalities=("text", "2d", "3d"),
        license=TOWERS_LICENSE,
        base=BASE,
        weights_sha256=f"untrained-seed{seed}",
    )
    return DualLiteEmbedder(heads, card, image_size=image_size)
