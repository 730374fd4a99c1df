"""The Embedder protocol and the ModelCard that travels with every loaded model.

All embedders return float32 arrays of shape (n, dims) whose rows are L2-normalised, so that
inner product is cosine similarity (MedHEB section 3.1.1: rank candidates by cosine).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from medheb_app.evidence.study import EmbedItem


@dataclass(frozen=True)
class ModelCard:
    """What a model is, what it reads, and where its weights came from."""

    name: str
    version: str
    dims: int
    modalities: tuple[str, ...]  # subset of ("text", "2d", "3d")
    license: str
    base: str = ""
    description: str = ""
    weights: str = ""  # path or tag of the weights this instance was loaded from
    weights_sha256: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        """Stable id of exactly these weights and this preprocessing: keys the embedding cache."""
        payload = json.dumps(
            {
                "name": self.name,
                "version": self.version,
                "dims": self.dims,
                "weights_sha256": self.weights_sha256,
                "extra": self.extra,
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["modalities"] = list(self.modalities)
        data["fingerprint"] = self.fingerprint
        return data


@runtime_checkable
class Embedder(Protocol):
    """Anything that maps evidence to L2-normalised float32 vectors in one shared space."""

    card: ModelCard

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        """Embed `items`; `instruction` is the task's query prefix (never used on candidates)."""
        ...


@dataclass(frozen=True)
class CardOnly:
    """A model's card (and input side) without its weights: all a build's driver needs when
    Ray actors embed (index/ray_engine.py), so the driver holds no second copy of the model."""

    card: ModelCard
    input_side: int | None = None

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        raise RuntimeError(f"{self.card.name} was not loaded here; its actors embed.")


def input_side(embedder: object) -> int | None:
    """The square image input an embedder declares (`input_side`: it resizes every image to
    it with evidence/resize.py first), or None: a source may then fit images to it early."""
    side = getattr(embedder, "input_side", None)
    return int(side) if side else None


def l2_normalise(vectors: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Rows scaled to unit length, as float32; all-zero rows stay zero."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
    return (vectors / np.maximum(norms, eps)).astype(np.float32)


def file_sha256(path: str, chunk: int = 1 << 20) -> str:
    """SHA-256 of a weights file, so a fingerprint changes when the weights do."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()
