"""Display payloads for study items ({"text"} and / or {"image": path, "synthetic"}), made from
the benchmark tasks a run was computed on, for runs whose files carry no payloads."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import PIL.Image

from medheb_app.evidence.study import EmbedItem, Study
from medheb_app.study.run_outputs import Payload
from medheb_app.tasks.base import Task

Describe = Callable[[str, str], Payload | None]


def describe_with_tasks(tasks: Iterable[Task], media_dir: str | Path) -> Describe:
    """A `describe` callback from the benchmark tasks a run was made from: text items show
    their text, studies on disk their file, in-memory pixels (phantoms, region crops) a PNG
    written to `media_dir` (a volume: its middle slice). File names are salted hashes, so a
    path names neither the task nor the item."""
    media_dir = Path(media_dir)
    salt = secrets.token_hex(8)
    items: dict[tuple[str, str], tuple[EmbedItem, bool]] = {}
    for task in tasks:
        for entry in (*task.queries, *task.candidates):
            items[(task.name, entry.id)] = (entry.item, task.metadata.synthetic)

    def save(pixels: np.ndarray, key: str, volume: bool) -> str:
        if volume:
            pixels = pixels[len(pixels) // 2]  # (D, H, W): the middle slice
        image = np.rint(np.clip(np.nan_to_num(pixels), 0.0, 1.0) * 255).astype(np.uint8)
        name = hashlib.sha256(f"{salt}:{key}".encode()).hexdigest()[:24] + ".png"
        media_dir.mkdir(parents=True, exist_ok=True)
        PIL.Image.fromarray(image).save(media_dir / name)
        return str(media_dir / name)

    def describe(task: str, item_id: str) -> Payload | None:
        found = items.get((task, item_id))
        if found is None:
            return None
        item, synthetic = found
        key = f"{task}:{item_id}"
        if isinstance(item, str):
            return {"text": item}
        if isinstance(item, Study):
            if item.form == "text":
                return {"text": item.text or ""}
            synthetic = synthetic or item.synthetic
            if item.path:
                return {"image": str(item.path), "synthetic": synthetic}
            pixels = item.load_pixels()
            if pixels is None:
                return None
            return {"image": save(pixels, key, item.form == "3d"), "synthetic": synthetic}
        payload: Payload = {"text": item.text} if item.text else {}
        if item.image is not None:
            payload |= {"image": save(item.image, key, False), "synthetic": synthetic}
        elif item.volume is not None:
            payload |= {"image": save(item.volume, key, True), "synthetic": synthetic}
        return payload or None

    return describe
