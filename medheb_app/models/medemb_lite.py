"""medemb-lite: one transformer reads one sequence for every evidence form (MedHEB section 4).

MedEmb serialises text, 2D images, volumes and mixed inputs into ONE sequence for one MLLM
and reads the embedding from the final token. medemb-lite does the same with the two
pretrained networks this machine has:

    [CLS] instruction [SEP] <visual tokens> text [SEP]      -> all-MiniLM-L6-v2 (BERT, 6 layers)
                                                               final [SEP] state -> L2 norm

Visual tokens: an image goes through the frozen EfficientNet-Lite0; its last feature map
(1280 channels, 7 x 7 at 224 px) is average-pooled to grid x grid cells, and a trained linear
layer maps each cell into BERT's 384-d token space (the way LLaVA-style MLLMs project vision
features into the LLM). A volume is up to K = 64 uniformly sampled frames, each pooled to
one token, in slice order (BERT's position embeddings keep the order). Visual tokens carry
token type 1, words type 0. The backbone is adapted with LoRA (r = 8, alpha = 32) on the
attention query/key/value and every dense layer; the projection is trained in full.

Queries carry the task instruction in front (Appendix A.6); candidates carry none. The
pooled token is configurable ("last", the MedEmb reading, or "mean") so the two can be
compared (docs/medemb.md). A checkpoint folder holds config.json, projection.safetensors,
adapter/ (peft LoRA), card.json; small enough to commit under models/medemb-lite/.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from functools import cache
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from medheb_app.evidence.pixels import sample_frames
from medheb_app.evidence.study import EmbedItem, Evidence, as_evidence
from medheb_app.models.base import ModelCard
from medheb_app.models.checkpoint_files import CONFIG_FILE
from medheb_app.models.device import autocast, module_device, shared_on
from medheb_app.models.feature_cache import FeatureCache
from medheb_app.models.medemb_lite_checkpoint import (  # re-exported: the checkpoint format
    ADAPTER_DIR,
    BASE,
    CARD_FILE,
    MEDEMB_LITE,
    PROJECTION_FILE,
    MedEmbLiteConfig,
    Pooling,
    _card,
    checkpoint_card,
    read_checkpoint_config,
)
from medheb_app.models.medemb_lite_checkpoint import checkpoint_folder as checkpoint_folder
from medheb_app.models.medemb_lite_checkpoint import checkpoint_sha256 as checkpoint_sha256
from medheb_app.models.medemb_lite_checkpoint import checkpoints as checkpoints
from medheb_app.models.medemb_projection import ChannelMoments, VisualProjection
from medheb_app.models.towers import (
    TEXT_DIM,
    ImageTower,
    preprocess_images,
    text_model_path,
    text_tokenizer,
)

LORA_TARGETS = ["query", "key", "value", "dense"]


@cache
def shared_image_tower() -> ImageTower:
    tower = ImageTower()
    return tower.requires_grad_(False).eval()


@cache
def shared_feature_cache() -> FeatureCache:
    return FeatureCache()


def load_backbone() -> nn.Module:
    """A private all-MiniLM-L6-v2 BertModel (LoRA wraps it, so it is never shared)."""
    from transformers import AutoModel

    return AutoModel.from_pretrained(text_model_path(), local_files_only=True)


class MedEmbLiteEmbedder(nn.Module):
    """The unified embedder; also the MedEmb trainer's model (embed / sequence_length)."""

    precision: str = "auto"  # "fp32" turns autocast off (Settings.precision, via place)

    lora_targets = LORA_TARGETS

    def __init__(
        self,
        config: MedEmbLiteConfig,
        card: ModelCard,
        backbone: nn.Module | None = None,
        projection: VisualProjection | None = None,
        batch_size: int = 32,
    ) -> None:
        super().__init__()
        self.config = config
        self.card = card
        self.backbone = backbone if backbone is not None else load_backbone()
        self.projection = projection or VisualProjection()
        self.tokenizer = text_tokenizer()
        self.image_tower = shared_image_tower()
        self.features = shared_feature_cache()
        self.batch_size = batch_size
        self.eval()

    # -- devices ---------------------------------------------------------------------------
    @property
    def device(self) -> str:
        return module_device(self.projection)

    def to_device(self, device: str) -> MedEmbLiteEmbedder:
        """Backbone, projection and (a per-device copy of the shared) image tower to `device`.

        Visual features stay cached on the CPU in float32, so the cache serves every device."""
        self.image_tower = shared_on(shared_image_tower(), device)
        self.to(device)
        return self

    # -- visual tokens ---------------------------------------------------------------------
    def _tower_tokens(self, images: Sequence[np.ndarray], size: int, grid: int) -> torch.Tensor:
        """(n, grid*grid, 1280) pooled feature-map cells of the frozen EfficientNet (CPU, fp32)."""
        with torch.inference_mode(), autocast(self.device, self.precision):
            pixels = preprocess_images(images, size).to(self.image_tower.device)
            maps = self.image_tower.net.forward_features(pixels)
            cells = F.adaptive_avg_pool2d(maps, grid).float().cpu()
        return cells.flatten(2).transpose(1, 2).clone()

    def visual_features(self, evidence: Evidence) -> torch.Tensor | None:
        """(tokens, 1280) frozen features of an item's image or volume, cached by content."""
        if evidence.image is not None:
            array, settings = evidence.image, (self.config.image_size, self.config.grid)
        elif evidence.volume is not None:
            array = evidence.volume
            settings = (self.config.frame_size, 1, self.config.frames)
        else:
            return None
        key = FeatureCache.key(array, *settings)
        found = self.features.get(key)
        if found is not None:
            return found
        if evidence.image is not None:
            tokens = self._tower_tokens([array], self.config.image_size, self.config.grid)[0]
        else:
            stack = sample_frames(np.asarray(array), self.config.frames)
            tokens = torch.cat(
                [
                    self._tower_tokens(stack[i : i + 32], self.config.frame_size, 1)[:, 0]
                    for i in range(0, len(stack), 32)
                ]
            )
        self.features.put(key, tokens)
        return tokens

    def precompute_visual(self, items: Sequence[Evidence], batch: int = 32) -> int:
        """Fill the feature cache for every image not in it, `batch` images per tower call.

        Training touches thousands of images once each; one batched tower pass per 32 of
        them is several times cheaper than the per-item path of `visual_features`.
        Returns how many images and volumes were computed (volumes one at a time, through
        `visual_features`: their frames are batched already).
        """
        settings = (self.config.image_size, self.config.grid)
        todo: dict[str, np.ndarray] = {}
        volumes = 0
        for item in items:
            if item.image is not None:
                key = FeatureCache.key(item.image, *settings)
                if key not in todo and key not in self.features:
                    todo[key] = item.image
            elif item.volume is not None:
                before = len(self.features)
                self.visual_features(item)
                volumes += len(self.features) > before
        keys = list(todo)
        for start in range(0, len(keys), batch):
            chunk = keys[start : start + batch]
            images = [todo[k] for k in chunk]
            tokens = self._tower_tokens(images, self.config.image_size, self.config.grid)
            for key, value in zip(chunk, tokens, strict=True):
                self.features.put(key, value)
        return len(keys) + volumes

    def fit_visual_statistics(self, items: Sequence[Evidence]) -> dict[str, int]:
        """Fit the projection's standardisation to the items' visual tokens (before training).

        Returns the number of tokens per kind; a kind with fewer than two keeps its current
        statistics.
        """
        moments = {kind: ChannelMoments() for kind in VisualProjection.kinds}
        for item in items:
            tokens = self.visual_features(item)
            if tokens is not None:
                moments["image" if item.image is not None else "frame"].add(tokens)
        for kind, found in moments.items():
            if found.n >= 2:
                self.projection.fit(found, kind)
        return {kind: found.n for kind, found in moments.items()}

    def _visual_count(self, evidence: Evidence) -> int:
        if evidence.image is not None:
            return self.config.grid**2
        if evidence.volume is not None:
            return min(len(evidence.volume), self.config.frames)
        return 0

    # -- sequences -------------------------------------------------------------------------
    def _word_ids(self, text: str | None) -> list[int]:
        if not text:
            return []
        limit = self.config.max_text_tokens
        tokens = self.tokenizer(text, add_special_tokens=False, truncation=True, max_length=limit)
        return tokens["input_ids"]

    def sequence_length(self, item: Evidence, instruction: str | None) -> int:
        """Tokens of the item's sequence (what the token-budgeted batcher counts)."""
        head = self._word_ids(instruction)
        return (
            2
            + len(head)
            + (1 if head else 0)
            + self._visual_count(item)
            + len(self._word_ids(item.text))
        )

    def _sequence(
        self, evidence: Evidence, instruction: str | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(length, 384) input embeddings (before BERT's position/type/LayerNorm) and types."""
        words = self.backbone.get_input_embeddings()
        cls, sep = self.tokenizer.cls_token_id, self.tokenizer.sep_token_id
        head = [cls, *self._word_ids(instruction)]
        if len(head) > 1:
            head.append(sep)
        tail = [*self._word_ids(evidence.text), sep]
        device = self.device
        parts = [words(torch.tensor(head, device=device))]
        types = [torch.zeros(len(head), dtype=torch.long, device=device)]
        visual = self.visual_features(evidence)
        if visual is not None:
            kind = "image" if evidence.image is not None else "frame"
            parts.append(self.projection(visual.to(device), kind))
            types.append(torch.ones(len(visual), dtype=torch.long, device=device))
        parts.append(words(torch.tensor(tail, device=device)))
        types.append(torch.zeros(len(tail), dtype=torch.long, device=device))
        return torch.cat(parts), torch.cat(types)

    def embed(self, items: Sequence[Evidence], instructions: Sequence[str | None]) -> torch.Tensor:
        """(n, 384) L2-normalised embeddings; carries gradients when enabled."""
        sequences = [self._sequence(e, i) for e, i in zip(items, instructions, strict=True)]
        longest = max(len(s) for s, _ in sequences)
        device = self.device
        embeds = torch.zeros(len(sequences), longest, TEXT_DIM, device=device)
        types = torch.zeros(len(sequences), longest, dtype=torch.long, device=device)
        mask = torch.zeros(len(sequences), longest, dtype=torch.long, device=device)
        for row, (sequence, kinds) in enumerate(sequences):
            embeds[row, : len(sequence)] = sequence
            types[row, : len(sequence)] = kinds
            mask[row, : len(sequence)] = 1
        hidden = self.backbone(
            inputs_embeds=embeds, attention_mask=mask, token_type_ids=types
        ).last_hidden_state
        return F.normalize(pool(hidden, mask, self.config.pooling), dim=-1)

    # -- the Embedder protocol ---------------------------------------------------------------
    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        """Queries get `instruction` in front; candidates (None) get no instruction."""
        evidence = [as_evidence(item) for item in items]
        self.precompute_visual(evidence)
        chunks = [np.zeros((0, self.card.dims), dtype=np.float32)]
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(evidence), self.batch_size):
                batch = evidence[start : start + self.batch_size]
                vectors = self.embed(batch, [instruction] * len(batch))
                chunks.append(vectors.float().cpu().numpy())
        return np.concatenate(chunks).astype(np.float32)

    # -- checkpoints -------------------------------------------------------------------------
    @classmethod
    def untrained(cls, config: MedEmbLiteConfig | None = None, seed: int = 0) -> MedEmbLiteEmbedder:
        torch.manual_seed(seed)
        config = config or MedEmbLiteConfig()
        card = _card(config, weights="", digest=f"untrained-seed{seed}", version="untrained")
        return cls(config, card)

    @classmethod
    def from_checkpoint(cls, folder: Path | str) -> MedEmbLiteEmbedder:
        from peft import PeftModel

        folder = Path(folder)
        saved = read_checkpoint_config(folder)
        config = MedEmbLiteConfig(**saved["model"])
        projection = VisualProjection()
        projection.load_weights(load_file(str(folder / PROJECTION_FILE)))
        backbone = load_backbone()
        if (folder / ADAPTER_DIR).is_dir():
            backbone = PeftModel.from_pretrained(backbone, str(folder / ADAPTER_DIR))
            backbone = backbone.merge_and_unload()
        card = checkpoint_card(folder, saved)
        return cls(config, card, backbone=backbone, projection=projection).requires_grad_(False)

    def save_checkpoint(self, folder: Path | str, info: dict) -> ModelCard:
        """Projection, LoRA adapter (when the backbone is a peft model), config and card."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().contiguous() for k, v in self.projection.state_dict().items()}
        save_file(state, str(folder / PROJECTION_FILE))
        if hasattr(self.backbone, "peft_config"):
            self.backbone.save_pretrained(str(folder / ADAPTER_DIR))
        full = {"name": MEDEMB_LITE, "base": BASE, "model": asdict(self.config), **info}
        (folder / CONFIG_FILE).write_text(json.dumps(full, indent=2, default=str) + "\n")
        self.card = checkpoint_card(folder, full)
        (folder / CARD_FILE).write_text(json.dumps(self.card.to_dict(), indent=2) + "\n")
        return self.card


def pool(hidden: torch.Tensor, mask: torch.Tensor, how: Pooling) -> torch.Tensor:
    """The final real token's state ("last", MedEmb) or the mean over real tokens."""
    if how == "mean":
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    last = mask.sum(dim=1) - 1  # right padding: the final [SEP]
    return hidden[torch.arange(hidden.shape[0]), last]
