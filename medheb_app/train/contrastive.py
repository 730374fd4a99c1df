"""A small LiT-style contrastive trainer for dual-lite's heads (and optional LoRA towers).

Towers frozen: their features are computed once (images up front, each distinct text the
first time it is sampled) and only the projection heads and the logit scale train, which
makes an epoch over thousands of pairs take well under a second on a CPU. Towers LoRA-tuned
(peft): features are recomputed with gradients every step.

The loss is injected: `loss_fn(image_emb, text_emb, logit_scale, **extras)`, where `extras`
are per-pair tensors from the pair sampler (e.g. label vectors for the label-aware loss), so
other recipes reuse this loop. Progress goes to a callback (step, total, loss); a
threading.Event stops the run between steps.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from safetensors.torch import load_file

from medheb_app.models.base import ModelCard
from medheb_app.models.device import resolve_device
from medheb_app.models.dual_lite import (
    ADAPTER_DIRS,
    DUAL_LITE,
    HEADS_FILE,
    DualLiteEmbedder,
    HeadConfig,
    ProjectionHeads,
    checkpoint_sha256,
    peft_warnings_silenced,
    read_checkpoint_config,
    untrained,
)
from medheb_app.models.registry import checkpoint_folders
from medheb_app.models.towers import (
    IMAGE_ARCH,
    IMAGE_SIZE,
    ImageTower,
    TextTower,
    preprocess_images,
)
from medheb_app.settings import Settings
from medheb_app.train.config import config_to_dict
from medheb_app.train.loop import check_stop, report_stage, run_steps

Progress = Callable[[int, int, float], None]
LossFn = Callable[..., torch.Tensor]


@dataclass
class TrainerConfig:
    """Optimisation settings shared by every dual-lite training recipe."""

    epochs: int = field(default=20, metadata={"help": "passes over the training pairs"})
    batch_size: int = field(default=128, metadata={"help": "pairs per step (in-batch negatives)"})
    lr: float = field(default=1e-3, metadata={"help": "AdamW peak learning rate"})
    weight_decay: float = field(default=0.05, metadata={"help": "AdamW weight decay"})
    seed: int = field(default=0, metadata={"help": "seed for head init, shuffling and sampling"})
    embed_dim: int = field(default=256, metadata={"help": "shared embedding size"})
    hidden_dim: int = field(
        default=0, metadata={"help": "hidden width of the heads; 0 = linear projections"}
    )
    image_size: int = field(
        default=IMAGE_SIZE, metadata={"help": "side in pixels that images are resized to"}
    )
    tune: Literal["frozen", "lora"] = field(
        default="frozen", metadata={"help": "towers frozen (cached features) or LoRA-tuned"}
    )
    lora_rank: int = field(default=12, metadata={"help": "LoRA rank when tune=lora"})
    lora_alpha: int = field(default=24, metadata={"help": "LoRA alpha when tune=lora"})
    lora_towers: tuple[str, ...] = field(
        default=("image", "text"), metadata={"help": "towers that get LoRA adapters"}
    )
    init: str = field(
        default="",
        metadata={
            "help": "start from this dual-lite checkpoint's heads (a folder or dual-lite@TAG, "
            "e.g. models/dual-lite/report); empty = fresh heads"
        },
    )

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "embed_dim", "lora_rank", "lora_alpha"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1; got {getattr(self, name)}")
        if not 32 <= self.image_size <= 1024:
            raise ValueError(f"image_size must be between 32 and 1024; got {self.image_size}")
        if self.batch_size < 2:
            raise ValueError("batch_size must be at least 2: contrastive steps need negatives")
        if self.lr <= 0 or self.weight_decay < 0 or self.hidden_dim < 0:
            raise ValueError("lr must be > 0, weight_decay >= 0 and hidden_dim >= 0")
        if self.tune not in ("frozen", "lora"):
            raise ValueError(f"tune must be 'frozen' or 'lora'; got {self.tune!r}")
        unknown = set(self.lora_towers) - {"image", "text"}
        if unknown:
            raise ValueError(f"lora_towers must name 'image' and/or 'text'; got {sorted(unknown)}")


@dataclass
class Pairs:
    """Training pairs for one epoch: image i of `image_index` goes with text i."""

    image_index: np.ndarray
    texts: list[str]
    extras: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.image_index = np.asarray(self.image_index, dtype=np.int64)
        n = len(self.texts)
        if len(self.image_index) != n or any(len(v) != n for v in self.extras.values()):
            raise ValueError("Pairs: image_index, texts and every extra need one row per pair")


PairSampler = Callable[[int, np.random.Generator], Pairs]


@dataclass
class TrainResult:
    """What a finished run saved (a cancelled run raises Cancelled and saves nothing)."""

    folder: Path
    card: ModelCard
    steps: int
    epoch_losses: list[float]
    val_loss: float | None
    seconds: float

    @property
    def final_loss(self) -> float | None:
        return self.epoch_losses[-1] if self.epoch_losses else None


LORA_TARGETS = {
    "image": ["conv_pw", "conv_pwl"],  # EfficientNet blocks' 1x1 expand / project convolutions
    "text": ["query", "key", "value"],  # MiniLM self-attention projections
}


def _lora_tower(kind: str, config: TrainerConfig) -> ImageTower | TextTower:
    from peft import LoraConfig, get_peft_model

    tower = ImageTower() if kind == "image" else TextTower()
    tower.requires_grad_(False)
    lora = LoraConfig(
        r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=LORA_TARGETS[kind]
    )
    with peft_warnings_silenced():
        tower.net = get_peft_model(tower.net, lora)
    return tower


def init_folder(init: str, settings: Settings | None = None) -> Path | None:
    """The checkpoint folder named by `TrainerConfig.init`: a folder path or a dual-lite tag.

    Tags ("report", "dual-lite@report") are looked up like the registry does (models/dual-lite/,
    models/, DATA_DIR/models/). Empty means fresh heads (None).
    """
    if not init:
        return None
    path = Path(init).expanduser()
    if path.is_dir():
        read_checkpoint_config(path)  # a clear error when the folder is not a checkpoint
        return path

    tag = init.removeprefix(f"{DUAL_LITE}@")
    if settings is None:
        raise ValueError(f"init {init!r} names a checkpoint tag; looking it up needs settings.")
    folders = checkpoint_folders(settings)
    if tag not in folders:
        raise FileNotFoundError(
            f"init {init!r} is neither a dual-lite checkpoint folder nor a known tag; "
            f"known tags: {', '.join(sorted(folders)) or 'none'}."
        )
    return folders[tag]


def _portable(folder: Path) -> str:
    """A folder as recorded in a checkpoint: relative to the working directory when inside it."""
    resolved = folder.resolve()
    try:
        return str(resolved.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(resolved)


def load_init_heads(folder: Path, heads: HeadConfig) -> ProjectionHeads:
    """Projection heads (and logit scale) of a checkpoint, checked against the wanted shape.

    Only heads are taken over: a checkpoint with LoRA adapters would need its adapted towers
    too, which this trainer does not continue from, so it is refused rather than half-used.
    """
    config = read_checkpoint_config(folder)
    saved = HeadConfig(**config["heads"])
    if (saved.embed_dim, saved.hidden_dim) != (heads.embed_dim, heads.hidden_dim):
        raise ValueError(
            f"init checkpoint {folder} has heads embed_dim={saved.embed_dim}, "
            f"hidden_dim={saved.hidden_dim}; set the same --embed-dim and --hidden-dim "
            f"(got {heads.embed_dim} and {heads.hidden_dim})."
        )
    adapters = [kind for kind, name in ADAPTER_DIRS.items() if (folder / name).is_dir()]
    if adapters:
        raise ValueError(
            f"init checkpoint {folder} has LoRA adapters ({', '.join(adapters)}); "
            "only adapter-free checkpoints can seed the heads."
        )
    loaded = ProjectionHeads(saved)
    loaded.load_state_dict(load_file(str(folder / HEADS_FILE)))
    return loaded


def build_embedder(config: TrainerConfig, init: Path | None = None) -> DualLiteEmbedder:
    """Heads (fresh and seeded, or copied from the `init` checkpoint) on frozen shared towers,
    or on LoRA-wrapped private towers."""
    heads = HeadConfig(config.embed_dim, config.hidden_dim)
    embedder = untrained(heads, seed=config.seed, image_size=config.image_size)
    if init is not None:
        embedder.heads = load_init_heads(init, heads)
    if config.tune == "lora":
        for kind in config.lora_towers:
            setattr(embedder, f"{kind}_tower", _lora_tower(kind, config))
    return embedder


FEATURE_CHUNK = 16  # images / texts per cancellation check while caching frozen features


class _Features:
    """Tower features: cached once when frozen, recomputed with gradients when tuned.

    Caching runs in chunks of FEATURE_CHUNK, each a stage report and a cancellation check, so
    a 2,000-study run shows "caching image features 640/2000" and stops within one chunk."""

    def __init__(
        self,
        embedder: DualLiteEmbedder,
        images: Sequence[np.ndarray],
        tuned: set,
        cache_dir: Path | None = None,
        progress: Progress | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.embedder = embedder
        self.images = images
        self.tuned = tuned
        self.progress, self.stop = progress, stop
        self.image_cache = None
        if "image" not in tuned:
            key = f"image-{IMAGE_ARCH}-{embedder.image_size}-{data_fingerprint([], images)}"
            self.image_cache = _on_disk(
                cache_dir, key, lambda: self._chunked("image", images, embedder.image_features)
            )
        self.text_cache: dict[str, torch.Tensor] = {}
        self.cache_dir = cache_dir

    def _chunked(self, kind: str, inputs: Sequence, encode: Callable) -> torch.Tensor:
        chunks = []
        for start in range(0, len(inputs), FEATURE_CHUNK):
            check_stop(self.stop, f"caching {kind} features ({start} of {len(inputs)} done)")
            report_stage(self.progress, f"caching {kind} features {start}/{len(inputs)}")
            chunks.append(encode(inputs[start : start + FEATURE_CHUNK]))
        return torch.cat(chunks) if chunks else encode(inputs)

    def prepare_texts(self, texts: Sequence[str]) -> None:
        if "text" in self.tuned:
            return
        missing = sorted({t for t in texts if t not in self.text_cache})
        if missing:
            key = f"text-minilm-{data_fingerprint(missing, [])}"
            features = _on_disk(
                self.cache_dir,
                key,
                lambda: self._chunked("text", missing, self.embedder.text_features),
            )
            self.text_cache.update(zip(missing, features, strict=True))

    def image(self, index: np.ndarray) -> torch.Tensor:
        if self.image_cache is not None:
            return self.image_cache[torch.from_numpy(index)].to(self.embedder.device)
        pixels = preprocess_images([self.images[i] for i in index], self.embedder.image_size)
        return self.embedder.image_tower(pixels).to(self.embedder.device)

    def text(self, texts: Sequence[str]) -> torch.Tensor:
        if "text" in self.tuned:
            # templated captions repeat within a batch: run the tuned tower once per distinct one
            position = {text: i for i, text in enumerate(sorted(set(texts)))}
            rows = torch.tensor([position[text] for text in texts])
            encoded = self.embedder.text_tower.encode(list(position))
            return encoded[rows.to(encoded.device)].to(self.embedder.device)
        return torch.stack([self.text_cache[t] for t in texts]).to(self.embedder.device)


def _on_disk(cache_dir: Path | None, key: str, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Frozen-tower features, reused from `cache_dir` when the same inputs were seen before.

    clone(): features come from inference mode, and autograd refuses inference tensors.
    """
    path = None if cache_dir is None else Path(cache_dir) / f"{key}.pt"
    if path is not None and path.is_file():
        return torch.load(path, weights_only=True)
    features = compute().clone()
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".tmp")
        torch.save(features, partial)
        partial.replace(path)
    return features


def _batches(n: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches; a last batch of a single pair has no negatives and is dropped."""
    order = rng.permutation(n)
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    return [b for b in batches if len(b) >= 2]


def _loss(
    heads: ProjectionHeads, features: _Features, pairs: Pairs, rows: np.ndarray, loss_fn: LossFn
) -> torch.Tensor:
    image_emb = heads.project_image(features.image(pairs.image_index[rows]))
    text_emb = heads.project_text(features.text([pairs.texts[i] for i in rows]))
    extras = {k: v[torch.from_numpy(rows)].to(image_emb.device) for k, v in pairs.extras.items()}
    return loss_fn(image_emb, text_emb, heads.logit_scale(), **extras)


def train_contrastive(
    images: Sequence[np.ndarray],
    sample_pairs: PairSampler,
    loss_fn: LossFn,
    config: TrainerConfig,
    out: Path | str,
    run_info: dict | None = None,
    val_pairs: Pairs | None = None,
    val_images: Sequence[np.ndarray] | None = None,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    cache_dir: Path | None = None,
    settings: Settings | None = None,
) -> TrainResult:
    """Train heads (and LoRA adapters if config.tune == "lora") and save a checkpoint to `out`.

    `images` are the distinct training images; `sample_pairs(epoch, rng)` returns that
    epoch's pairs (fixed for report matching, resampled captions for label-aware training).
    `run_info` (recipe config, data fingerprint, tag, description) is stored in config.json.
    `cache_dir` keeps frozen-tower features on disk, keyed by the exact inputs, so a rerun
    with other head settings skips the towers. `config.init` names a checkpoint whose heads
    the run starts from (resolved with `settings`, see init_folder); its digest is recorded.
    """
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    init = init_folder(config.init, settings)
    report_stage(progress, f"loading the towers for {len(images)} training images")
    embedder = build_embedder(config, init)

    embedder.to_device(resolve_device(settings.device if settings is not None else "auto"))
    init_info = None
    if init is not None:
        init_info = {
            "spec": config.init,
            "folder": _portable(init),
            "sha256": checkpoint_sha256(init),
        }
    tuned = set(config.lora_towers) if config.tune == "lora" else set()
    check_stop(stop, "loading the towers")
    features = _Features(embedder, images, tuned, cache_dir, progress, stop)

    parameters = [p for p in embedder.heads.parameters()]
    for kind in tuned:
        parameters += [
            p for p in getattr(embedder, f"{kind}_tower").parameters() if p.requires_grad
        ]
    optimiser = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=config.weight_decay)

    epoch_pairs = [sample_pairs(0, rng)]
    steps_per_epoch = len(_batches(len(epoch_pairs[0].texts), config.batch_size, rng))
    if steps_per_epoch == 0:
        raise ValueError("Need at least 2 training pairs.")
    total = steps_per_epoch * config.epochs
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimiser, T_max=total)

    def epochs():
        for epoch in range(config.epochs):
            pairs = epoch_pairs[0] if epoch == 0 else sample_pairs(epoch, rng)
            features.prepare_texts(pairs.texts)
            yield ((pairs, rows) for rows in _batches(len(pairs.texts), config.batch_size, rng))

    def loss_of(batch):
        pairs, rows = batch
        return _loss(embedder.heads, features, pairs, rows, loss_fn), len(rows)

    embedder.heads.train()
    try:
        looped = run_steps(epochs(), loss_of, optimiser, schedule, total, progress, stop)
    finally:  # a cancelled run, too, gives its GPU memory back
        embedder.heads.eval()
        embedder.to_device("cpu")  # checkpoints and validation are written from the CPU
    step, epoch_losses = looped.step, looped.epoch_losses

    val_loss = None
    if val_pairs is not None and val_images is not None:
        val_loss = evaluate_loss(
            embedder, val_images, val_pairs, loss_fn, config.batch_size, cache_dir
        )

    folder = Path(out)
    seconds = time.perf_counter() - started
    info = dict(run_info or {})
    info.setdefault("tag", folder.name)
    if init_info is not None:
        info["init"] = init_info
    info["training"] = config_to_dict(config)
    info["results"] = {
        "steps": step,
        "epoch_losses": [round(x, 6) for x in epoch_losses],
        "final_loss": round(epoch_losses[-1], 6),
        "val_loss": None if val_loss is None else round(val_loss, 6),
        "seconds": round(seconds, 1),
    }
    card = embedder.save_checkpoint(folder, info)
    return TrainResult(folder, card, step, epoch_losses, val_loss, seconds)


def evaluate_loss(
    embedder: DualLiteEmbedder,
    images: Sequence[np.ndarray],
    pairs: Pairs,
    loss_fn: LossFn,
    batch_size: int,
    cache_dir: Path | None = None,
) -> float:
    """Mean loss over fixed, unshuffled batches of held-out pairs (no gradients)."""
    # the disk cache holds pretrained-tower features only: never use it for LoRA-tuned towers
    adapted = any(
        hasattr(tower.net, "peft_config") for tower in (embedder.image_tower, embedder.text_tower)
    )
    with torch.inference_mode():
        features = _Features(embedder, images, set(), None if adapted else cache_dir)
        features.prepare_texts(pairs.texts)
        total, count = 0.0, 0
        for start in range(0, len(pairs.texts), batch_size):
            rows = np.arange(start, min(start + batch_size, len(pairs.texts)))
            if len(rows) < 2:
                continue
            total += _loss(embedder.heads, features, pairs, rows, loss_fn).item() * len(rows)
            count += len(rows)
    return total / max(count, 1)


def data_fingerprint(texts: Sequence[str], images: Sequence[np.ndarray], **meta: object) -> str:
    """SHA-256 (16 hex) over the training texts, image bytes and recipe metadata."""
    digest = hashlib.sha256(repr(sorted(meta.items())).encode())
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    for image in images:
        digest.update(np.ascontiguousarray(image, dtype=np.float32).tobytes())
    return digest.hexdigest()[:16]
