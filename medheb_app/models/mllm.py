"""MLLM embedders ("mllm:/path/to/dir"): Qwen2-VL / Qwen3-VL read from a local folder.

MedHEB section 4 (MedEmb, after Qwen3-VL-Embedding and VLM2Vec): every input form goes
through ONE sequence interface. An item (text, a 2D image, a volume, or an image or volume
with text) becomes one chat, serialised by the model's own chat template:

    system:  the task instruction (queries) or a neutral default (candidates)
    user:    [image | video] [text]
    + the generation prompt, as Qwen3-VL-Embedding's reference embedder does

and the embedding is the last-layer hidden state of the final real token, L2-normalised.
"Last layer" is the base model's `last_hidden_state`, which in Qwen2-VL and Qwen3-VL is the
output of the final RMSNorm (`self.norm` is applied before it is returned; the test checks
this with a hook). Task instructions go in the system turn of queries only, never on
candidates (Appendix A.6). A volume is up to K = 64 uniformly sampled frames passed as a
video (Qwen's temporal patches pair consecutive frames). Pixel budgets are explicit.

Specs: "mllm:/path" or "mllm:/path?max_pixels=200704&frames=32" (any MLLMConfig field).
A folder holding a peft LoRA adapter (adapter_config.json), e.g. one trained by
`train medemb --model mllm:...`, loads its base from adapter_config.json and merges it.
A real checkpoint such as Qwen3-VL-Embedding-2B works by pointing the spec at its folder
(downloaded beforehand: this machine has no hub access).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np
import torch

from medheb_app.evidence.pixels import K_FRAMES, sample_frames
from medheb_app.evidence.study import EmbedItem, Evidence, EvidenceError, as_evidence
from medheb_app.models.base import ModelCard, file_sha256
from medheb_app.models.device import inference_dtype, module_device

PREFIX = "mllm:"
DEFAULT_INSTRUCTION = "Represent the user's input."  # Qwen3-VL-Embedding's default system text
ADAPTER_CONFIG = "adapter_config.json"
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]  # language-model attention


@dataclass(frozen=True)
class MLLMConfig:
    """How inputs are serialised; every field can be set in the spec's ?query string."""

    min_pixels: int = 4 * 28 * 28  # per image, as Qwen's processors count pixels
    max_pixels: int = 1280 * 28 * 28
    video_max_pixels: int = 128 * 28 * 28  # per volume frame, so 64 frames stay affordable
    frames: int = K_FRAMES
    batch_size: int = 8
    default_instruction: str = DEFAULT_INSTRUCTION
    end_token: str = ""  # e.g. "<|endoftext|>" to pool an appended end token instead

    def __post_init__(self) -> None:
        if not 0 < self.min_pixels <= self.max_pixels or self.video_max_pixels < self.min_pixels:
            raise ValueError("need 0 < min_pixels <= max_pixels and video_max_pixels >= min_pixels")
        if self.frames < 1 or self.batch_size < 1:
            raise ValueError("frames and batch_size must be at least 1")


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def hub_snapshot(repo_id: str) -> Path:
    """The folder of a Hugging Face hub model already in the local cache (HF_HUB_CACHE), as
    on a Space or an air-gapped lab mirror; never downloads. A clear error when it is absent."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        raise FileNotFoundError(
            f"MLLM {repo_id!r} is neither a folder nor in the local Hugging Face cache; "
            "download it on a connected machine with "
            f"`huggingface-cli download {repo_id}` and copy the cache over."
        ) from None


def parse_spec(spec: str) -> tuple[Path, MLLMConfig]:
    """'mllm:/dir?key=value&...' -> (folder, config); bad keys or values are one clear error."""
    if not spec.startswith(PREFIX):
        raise ValueError(f"Not an mllm spec: {spec!r} (expected {PREFIX}<model folder>).")
    path, _, query = spec[len(PREFIX) :].partition("?")
    folder = Path(path).expanduser()
    if path and not folder.is_dir() and _HUB_ID.match(path.removeprefix("hf-hub:")):
        folder = hub_snapshot(path.removeprefix("hf-hub:"))
    if not path or not folder.is_dir():
        raise FileNotFoundError(f"MLLM folder not found: {path!r} (spec {spec!r}).")
    fields = {f.name: f.type for f in dataclasses.fields(MLLMConfig)}
    values: dict[str, object] = {}
    for key, raw in parse_qsl(query, keep_blank_values=True):
        if key not in fields:
            raise ValueError(f"Unknown mllm option {key!r}; valid: {', '.join(fields)}")
        try:
            values[key] = raw if fields[key] in ("str", str) else int(raw)
        except ValueError:
            raise ValueError(f"mllm option {key}={raw!r} must be an integer") from None
    return folder, MLLMConfig(**values)


def conversation(evidence: Evidence, system: str) -> list[dict]:
    """One chat: the instruction as system turn, then visual content before any text."""
    content: list[dict] = []
    if evidence.image is not None:
        content.append({"type": "image"})
    if evidence.volume is not None:
        content.append({"type": "video"})
    if evidence.text is not None:
        content.append({"type": "text", "text": evidence.text})
    return [
        {"role": "system", "content": [{"type": "text", "text": system}]},
        {"role": "user", "content": content},
    ]


def to_rgb_uint8(image: np.ndarray) -> np.ndarray:
    """(H, W) or (H, W, 3|4) floats in [0, 1] -> (H, W, 3) uint8, as the processors expect."""
    array = np.asarray(image, dtype=np.float32)
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=-1)
    return (np.clip(array[..., :3], 0.0, 1.0) * 255).round().astype(np.uint8)


def volume_frames(volume: np.ndarray, frames: int) -> np.ndarray:
    """(D, H, W) -> (T, H, W, 3) uint8 of up to `frames` uniformly sampled slices (T >= 2)."""
    stack = sample_frames(np.asarray(volume), frames)
    if len(stack) == 1:  # a video needs one temporal patch of 2 frames
        stack = np.concatenate([stack, stack])
    return np.stack([to_rgb_uint8(frame) for frame in stack])


def last_token(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Hidden state of each row's final real token, for left or right padding alike."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    last = (attention_mask.bool() * positions).argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


class MLLMEmbedder:
    """A Qwen-VL style model behind the Embedder protocol (and the MedEmb trainer)."""

    lora_targets = LORA_TARGETS

    def __init__(self, model: torch.nn.Module, processor, card: ModelCard, config: MLLMConfig):
        self.backbone = model.eval()
        self.processor = processor
        self.card = card
        self.config = config

    @property
    def device(self) -> str:
        return module_device(self.backbone)

    def to_device(self, device: str) -> MLLMEmbedder:
        """The backbone to `device`, in bf16 (fp16 without bf16 support) on CUDA."""
        self.backbone = self.backbone.to(device=device, dtype=inference_dtype(device))
        return self

    @classmethod
    def from_folder(cls, folder: Path, config: MLLMConfig | None = None) -> MLLMEmbedder:
        """Load model and processor offline; a LoRA adapter folder loads its base first."""
        from transformers import AutoModel, AutoProcessor

        config = config or MLLMConfig()
        adapter = folder / ADAPTER_CONFIG
        base = (
            Path(json.loads(adapter.read_text())["base_model_name_or_path"])
            if (adapter.is_file())
            else folder
        )
        try:
            model = AutoModel.from_pretrained(str(base), local_files_only=True)
            processor = AutoProcessor.from_pretrained(str(base), local_files_only=True)
        except (OSError, ValueError, KeyError) as error:
            raise EvidenceError(
                f"Could not load an MLLM from {base}: {error}. The folder needs config.json, "
                "weights, a tokenizer with a chat template and an image processor."
            ) from None
        if adapter.is_file():
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(folder)).merge_and_unload()
        return cls(model, processor, mllm_card(folder, base, model, config), config)

    # -- the differentiable core (used by encode and by the MedEmb trainer) ------------------
    def tokens(self, items: Sequence[Evidence], instructions: Sequence[str | None]) -> dict:
        """Processor outputs (input_ids, attention_mask, mm_token_type_ids, pixels, grids)."""
        chats = [
            conversation(e, (inst or "").strip() or self.config.default_instruction)
            for e, inst in zip(items, instructions, strict=True)
        ]
        texts = self.processor.apply_chat_template(
            chats, add_generation_prompt=True, tokenize=False
        )
        texts = [text + self.config.end_token for text in texts]
        images = [to_rgb_uint8(e.image) for e in items if e.image is not None]
        videos = [
            volume_frames(e.volume, self.config.frames) for e in items if e.volume is not None
        ]
        kwargs: dict[str, object] = {"text": texts, "padding": True, "return_tensors": "pt"}
        size = {"shortest_edge": self.config.min_pixels, "longest_edge": self.config.max_pixels}
        if images:
            kwargs["images"] = images
            kwargs["images_kwargs"] = {"size": size}
        if videos:
            video_size = {**size, "longest_edge": self.config.video_max_pixels}
            kwargs["videos"] = videos
            kwargs["videos_kwargs"] = {
                "size": video_size,
                "do_sample_frames": False,  # frames are already sampled (K = 64)
                "cap_pixels_per_frame": True,
            }
        device, dtype = self.backbone.device, self.backbone.dtype
        return {
            key: value.to(device=device, dtype=dtype if value.is_floating_point() else None)
            if hasattr(value, "to")
            else value
            for key, value in dict(self.processor(**kwargs)).items()
        }

    def embed(self, items: Sequence[Evidence], instructions: Sequence[str | None]) -> torch.Tensor:
        """(n, d) L2-normalised final-token states; carries gradients when enabled."""
        inputs = self.tokens(items, instructions)
        hidden = self.backbone(**inputs).last_hidden_state  # mm_token_type_ids included
        pooled = last_token(hidden, inputs["attention_mask"])
        return torch.nn.functional.normalize(pooled.float(), dim=-1)

    def sequence_length(self, item: Evidence, instruction: str | None) -> int:
        """Tokens the item occupies (text, role markers and visual placeholders)."""
        return int(self.tokens([item], [instruction])["attention_mask"].sum())

    # -- the Embedder protocol ---------------------------------------------------------------
    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        """Queries get `instruction` in the system turn; candidates (None) the default."""
        evidence = [as_evidence(item) for item in items]
        chunks = [np.zeros((0, self.card.dims), dtype=np.float32)]
        step = self.config.batch_size
        with torch.inference_mode():
            for start in range(0, len(evidence), step):
                batch = evidence[start : start + step]
                chunks.append(self.embed(batch, [instruction] * len(batch)).float().cpu().numpy())
        return np.concatenate(chunks).astype(np.float32)


def _hidden_size(model: torch.nn.Module) -> int:
    config = model.config
    text = getattr(config, "text_config", None) or config
    return int(text.hidden_size)


def mllm_card(folder: Path, base: Path, model: torch.nn.Module, config: MLLMConfig) -> ModelCard:
    """Card whose digest covers the weight files (base and adapter) and the input settings."""
    weights = sorted({*base.glob("*.safetensors"), *folder.glob("*.safetensors")})
    digest = ",".join(file_sha256(str(path))[:16] for path in weights)
    return ModelCard(
        name=f"mllm:{folder.name}",
        version=folder.name,
        dims=_hidden_size(model),
        modalities=("text", "2d", "3d"),
        license="see the model folder",
        base=str(base),
        description=f"{type(model).__name__} final-token embedder (MedHEB section 4)",
        weights=str(folder),
        weights_sha256=digest,
        extra={k: str(v) for k, v in dataclasses.asdict(config).items()},
    )


def load(spec: str) -> MLLMEmbedder:
    """The registry's entry point for "mllm:..." specs."""
    folder, config = parse_spec(spec)
    return MLLMEmbedder.from_folder(folder, config)
