"""Frozen-tower visual features kept in memory by content hash (float16, size-bounded).

medemb-lite's image tower is frozen, so the visual tokens of an image never change: training
revisits the same images every epoch, and benchmark runs of several checkpoints in one
process share them. Least recently used entries go first when the budget is exceeded.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch


class FeatureCache:
    """Content hash -> tensor, evicting least recently used entries past `max_bytes`."""

    def __init__(self, max_bytes: int = 1 << 30) -> None:
        self.max_bytes = max_bytes
        self.used = 0
        self.store: OrderedDict[str, torch.Tensor] = OrderedDict()

    @staticmethod
    def key(array: np.ndarray, *settings: int) -> str:
        digest = hashlib.sha1(np.ascontiguousarray(array, dtype=np.float32).tobytes())
        digest.update(repr((array.shape, settings)).encode())
        return digest.hexdigest()

    def __contains__(self, key: str) -> bool:
        return key in self.store

    def __len__(self) -> int:
        return len(self.store)

    def get(self, key: str) -> torch.Tensor | None:
        if key in self.store:
            self.store.move_to_end(key)
            return self.store[key].float()
        return None

    def put(self, key: str, value: torch.Tensor) -> None:
        value = value.detach().to(torch.float16)
        if key in self.store:
            self.used -= self.store.pop(key).numel() * 2
        self.store[key] = value
        self.used += value.numel() * 2
        while self.used > self.max_bytes and len(self.store) > 1:
            _, old = self.store.popitem(last=False)
            self.used -= old.numel() * 2

    def save(self, path: Path | str) -> None:
        """Write every entry (float16) to `path`, atomically."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(path.suffix + ".partial")
        torch.save(dict(self.store), partial)
        partial.replace(path)

    def load(self, path: Path | str) -> int:
        """Add the entries saved at `path` (none when it is absent); returns how many."""
        path = Path(path)
        if not path.is_file():
            return 0
        saved = torch.load(path, map_location="cpu", weights_only=True)
        for key, value in saved.items():
            self.put(key, value)
        return len(saved)
