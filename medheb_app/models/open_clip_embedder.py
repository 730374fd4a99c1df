"""open_clip models behind the Embedder protocol, from local files or the Hugging Face hub.

Specs (the part after "open_clip:"):
  <ARCH>@/path/weights.pt              a built-in open_clip architecture + a local checkpoint
  /path/config.json@/path/weights.pt   a user's own architecture JSON (registered with
                                       open_clip.add_model_config under the file's stem)
  local-dir:/path/to/folder            open_clip's own folder format (open_clip_config.json)
  hf-hub:org/name                      from the local Hugging Face cache when the model is
                                       there (works with HF_HUB_OFFLINE=1, as on a Space or an
                                       air-gapped mirror); otherwise downloads, or fails with a
                                       clear message when offline

Preprocessing is the model's own validation transform (its mean/std/size travel with the
config). Text: open_clip tokenizers backed by hub files cannot load offline, so models whose
text config names no Hugging Face tokenizer (all CLIP-style text towers) use open_clip's
built-in SimpleTokenizer (its BPE vocabulary ships inside the package).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from medheb_app.evidence.pixels import K_FRAMES
from medheb_app.evidence.study import EmbedItem
from medheb_app.models.base import ModelCard, file_sha256, l2_normalise
from medheb_app.models.device import autocast, module_device
from medheb_app.models.fieldwise import encode_fieldwise

PREFIX = "open_clip:"
HF_PREFIX = "hf-hub:"


class OpenClipSpecError(ValueError):
    """A malformed or unloadable open_clip spec; the message says what to pass instead."""


def parse_spec(spec: str) -> tuple[str, str | None]:
    """'open_clip:ARCH@WEIGHTS' -> (model_name_or_config, weights or None for schema specs)."""
    body = spec.removeprefix(PREFIX)
    if body.startswith((HF_PREFIX, "local-dir:")):
        return body, None
    arch, sep, weights = body.partition("@")
    if not sep or not arch or not weights:
        raise OpenClipSpecError(
            f"Bad open_clip spec {spec!r}: use open_clip:<ARCH>@<weights.pt>, "
            "open_clip:<config.json>@<weights.pt>, open_clip:local-dir:<folder> "
            "or open_clip:hf-hub:org/name."
        )
    return arch, weights


def _model_name(arch: str) -> str:
    """A built-in architecture name, or the stem of a user's config JSON after registering it."""
    import open_clip

    if arch.endswith(".json"):
        path = Path(arch)
        if not path.is_file():
            raise FileNotFoundError(f"open_clip model config not found: {path}")
        open_clip.add_model_config(str(path))
        return path.stem
    if arch not in open_clip.list_models():
        raise OpenClipSpecError(
            f"Unknown open_clip architecture {arch!r}; pass a config JSON path or one of "
            f"open_clip.list_models() (e.g. ViT-B-32, RN50)."
        )
    return arch


def _tokenizer(model_name: str, context_length: int) -> Callable[[list[str]], torch.Tensor]:
    """SimpleTokenizer for CLIP text configs; open_clip's own choice (may need the hub) else."""
    import open_clip
    from open_clip.tokenizer import SimpleTokenizer

    config = open_clip.get_model_config(model_name) or {}
    if not config.get("text_cfg", {}).get("hf_tokenizer_name"):
        return SimpleTokenizer(context_length=context_length)
    try:
        return open_clip.get_tokenizer(model_name, context_length=context_length)
    except OSError as error:
        raise OpenClipSpecError(
            f"The tokenizer of {model_name} lives on the Hugging Face hub and cannot be "
            f"loaded offline ({error})."
        ) from error


class OpenClipEmbedder:
    """Any open_clip CLIP model; mixed inputs and volumes are pooled field-wise."""

    precision: str = "auto"  # "fp32" turns autocast off (Settings.precision, via place)

    def __init__(self, spec: str, batch_size: int = 32, frames: int = K_FRAMES) -> None:
        import open_clip

        target, weights = parse_spec(spec)
        model_name = target if weights is None else _model_name(target)
        if weights is not None and not Path(weights).is_file():
            raise FileNotFoundError(f"open_clip weights not found: {weights}")
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(
                model_name, pretrained=weights, pretrained_text=False, load_weights=True
            )
        except (OSError, RuntimeError) as error:
            if target.startswith(HF_PREFIX):
                raise OpenClipSpecError(
                    f"Cannot download {target} (no network or no such repository): {error}. "
                    "Offline, download the weights elsewhere and use "
                    "open_clip:<ARCH>@<weights.pt>."
                ) from error
            raise
        self.model = model.eval()
        self.preprocess = preprocess
        self.batch_size = batch_size
        self.frames = frames
        if target.startswith((HF_PREFIX, "local-dir:")):
            self.tokenizer = open_clip.get_tokenizer(target)
        else:
            self.tokenizer = _tokenizer(model_name, model.context_length)
        dims = self._probe_dims()
        self.card = ModelCard(
            name=f"open_clip:{model_name}",
            version=Path(weights).name if weights else target,
            dims=dims,
            modalities=("text", "2d", "3d"),
            license="see the weights' source",
            base=model_name,
            weights=weights or target,
            weights_sha256=file_sha256(weights) if weights else target,
        )

    @property
    def device(self) -> str:
        return module_device(self.model)

    def to_device(self, device: str) -> OpenClipEmbedder:
        """The CLIP model to `device`; on CUDA it runs under autocast (bf16/fp16)."""
        self.model = self.model.to(device)
        return self

    def _probe_dims(self) -> int:
        """Output size from one forward pass (configs spell embed_dim in several places)."""
        with torch.inference_mode():
            return int(self.model.encode_text(self.tokenizer(["x"])).shape[-1])

    def encode_text(self, texts: Sequence[str]) -> np.ndarray:
        chunks = [np.zeros((0, self.card.dims), dtype=np.float32)]
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(texts), self.batch_size):
                tokens = self.tokenizer(list(texts[start : start + self.batch_size]))
                vectors = self.model.encode_text(tokens.to(self.device), normalize=True)
                chunks.append(vectors.float().cpu().numpy())
        return l2_normalise(np.concatenate(chunks))

    def encode_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        chunks = [np.zeros((0, self.card.dims), dtype=np.float32)]
        with torch.inference_mode(), autocast(self.device, self.precision):
            for start in range(0, len(images), self.batch_size):
                batch = [
                    self.preprocess(_to_pil(image))
                    for image in images[start : start + self.batch_size]
                ]
                pixels = torch.stack(batch).to(self.device)
                vectors = self.model.encode_image(pixels, normalize=True)
                chunks.append(vectors.float().cpu().numpy())
        return l2_normalise(np.concatenate(chunks))

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        """Text gets the instruction as a prefix; images and volumes are instruction-free."""
        return encode_fieldwise(
            items, self.encode_text, self.encode_images, self.card.dims, instruction, self.frames
        )


def _to_pil(image: np.ndarray) -> Image.Image:
    """[0, 1] greyscale or RGB array -> RGB PIL image for open_clip's transforms."""
    array = np.clip(np.asarray(image, dtype=np.float32), 0.0, 1.0)
    if array.ndim == 3 and array.shape[-1] == 1:
        array = array[..., 0]
    pil = Image.fromarray((array * 255).round().astype(np.uint8))
    return pil.convert("RGB")
