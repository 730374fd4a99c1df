"""Saving a generated corpus to disk and loading it back, every field round-tripped.

Layout: `manifest.jsonl` (one study per line, pixels dropped) beside `images/<id>.png` (2D,
8-bit greyscale, the format of NIH ChestX-ray14 and MIMIC-CXR-JPG) and `volumes/<id>.npy`
(3D, float16 in [0, 1]). Loaded studies carry `path` and read their pixels lazily through
`Study.load_pixels` (medheb_app.evidence.readers.read_any).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
from PIL import Image

from medheb_app.evidence.study import Box, EvidenceError, Study

MANIFEST = "manifest.jsonl"


def quantise_image(pixels: np.ndarray) -> np.ndarray:
    """Round to the 8-bit grey levels a saved PNG holds, so memory and disk agree exactly."""
    return (np.round(np.clip(pixels, 0, 1) * 255) / 255).astype(np.float32)


def quantise_volume(pixels: np.ndarray) -> np.ndarray:
    """Round to float16, the precision a saved volume holds."""
    return np.clip(pixels, 0, 1).astype(np.float16).astype(np.float32)


def save_corpus(studies: list[Study], directory: Path) -> Path:
    """Write the studies' pixels and a manifest under `directory`; returns the manifest path."""
    directory = Path(directory)
    (directory / "images").mkdir(parents=True, exist_ok=True)
    (directory / "volumes").mkdir(parents=True, exist_ok=True)
    manifest = directory / MANIFEST
    with open(manifest, "w", encoding="utf-8") as out:
        for study in studies:
            record = _record(study, directory)
            out.write(json.dumps(record, default=_json_default) + "\n")
    return manifest


def _record(study: Study, directory: Path) -> dict[str, object]:
    record = asdict(study)
    record.pop("pixels")
    record["path"] = _write_pixels(study, directory)
    return record


def _write_pixels(study: Study, directory: Path) -> str | None:
    pixels = study.load_pixels()
    if pixels is None:
        return None
    if study.form == "3d":
        relative = f"volumes/{study.id}.npy"
        np.save(directory / relative, np.clip(pixels, 0, 1).astype(np.float16))
    else:
        relative = f"images/{study.id}.png"
        grey = np.round(np.clip(pixels, 0, 1) * 255).astype(np.uint8)
        Image.fromarray(grey, mode="L").save(directory / relative, optimize=False)
    return relative


def _json_default(value: object) -> object:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"Cannot store {type(value).__name__} in a corpus manifest.")


def load_corpus(directory: Path) -> list[Study]:
    """Read a corpus written by `save_corpus`; pixels load on first use."""
    directory = Path(directory)
    manifest = directory / MANIFEST
    if not manifest.is_file():
        raise EvidenceError(
            f"No phantom corpus at {directory} (missing {MANIFEST}); "
            "build one with `python -m medheb_app demo build`."
        )
    studies = []
    with open(manifest, encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise EvidenceError(
                    f"{manifest} line {number} is not valid JSON ({error})."
                ) from None
            studies.append(_study(record, directory))
    return studies


def _study(record: dict, directory: Path) -> Study:
    record = dict(record)
    record["boxes"] = [Box(**box) for box in record.get("boxes", [])]
    if record.get("path"):
        record["path"] = str(directory / record["path"])
    return Study(**record)
