"""Study: one piece of clinical evidence (a 2D image, a 3D volume or a text) with its labels.

Findings follow the CheXpert coding used by both papers: 1 positive, 0 confirmed negative,
-1 uncertain, None not mentioned (CXR-Retrieve section 3.2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from medheb_app.evidence.pixels import EvidenceError
from medheb_app.evidence.readers import read_any

Form = Literal["2d", "3d", "text"]
FindingValue = Literal[1, 0, -1] | None
Findings = dict[str, FindingValue]


@dataclass(frozen=True)
class Box:
    """A finding's bounding box in pixel coordinates of the study's image (x, y = top left)."""

    finding: str
    x: float
    y: float
    w: float
    h: float
    side: str | None = None  # "left" | "right" | "bilateral" (patient's side)
    severity: str | None = None  # "mild" | "moderate" | "severe"


@dataclass(frozen=True)
class Evidence:
    """What an embedder reads: any of text, one 2D image, one volume (mixed inputs allowed).

    image: (H, W) or (H, W, 3) float32 in [0, 1]. volume: (D, H, W) float32 in [0, 1].
    """

    text: str | None = None
    image: np.ndarray | None = None
    volume: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.text is None and self.image is None and self.volume is None:
            raise EvidenceError("Evidence needs at least one of text, image or volume.")
        if self.image is not None and self.image.ndim not in (2, 3):
            raise EvidenceError(f"An image must be 2D (H, W[, C]); got shape {self.image.shape}.")
        if self.volume is not None and self.volume.ndim != 3:
            raise EvidenceError(f"A volume must be 3D (D, H, W); got shape {self.volume.shape}.")

    @property
    def forms(self) -> tuple[str, ...]:
        present = []
        if self.text is not None:
            present.append("text")
        if self.image is not None:
            present.append("2d")
        if self.volume is not None:
            present.append("3d")
        return tuple(present)


@dataclass
class Study:
    """One study with everything the app shows or evaluates about it.

    Pixels may be held in memory (`pixels`) or loaded lazily from `path` by `load_pixels`.
    `findings` keeps 1 / 0 / -1 / None exactly as the source coded it.
    """

    id: str
    form: Form
    modality: str = "CR"
    pixels: np.ndarray | None = None
    path: str | None = None
    text: str | None = None
    findings: Findings = field(default_factory=dict)
    boxes: list[Box] = field(default_factory=list)
    laterality: dict[str, str] = field(default_factory=dict)
    severity: dict[str, str] = field(default_factory=dict)
    patient_id: str | None = None
    split: str | None = None
    source: str = "unknown"
    synthetic: bool = False
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def reloadable(self) -> bool:
        """Whether load_pixels can read the pixels again once dropped (a build drops them
        after each batch to keep memory flat; streamed DICOM studies override this)."""
        return self.path is not None

    def load_pixels(self) -> np.ndarray | None:
        """The image or volume as float32 in [0, 1], read from `path` on first use."""
        if self.pixels is None and self.path is not None and self.form != "text":
            self.pixels = read_any(Path(self.path)).pixels
        return self.pixels

    def evidence(self, include_text: bool = False) -> Evidence:
        """The embedder's view: the pixels, plus the text when asked (mixed input)."""
        if self.form == "text":
            return Evidence(text=self.text or "")
        pixels = self.load_pixels()
        if pixels is None:
            raise EvidenceError(f"Study {self.id} has no pixels and no readable path.")
        text = self.text if include_text else None
        if self.form == "3d":
            return Evidence(volume=pixels, text=text)
        return Evidence(image=pixels, text=text)

    def positives(self) -> list[str]:
        return [name for name, value in self.findings.items() if value == 1]


EmbedItem = str | Evidence | Study


def as_evidence(item: EmbedItem) -> Evidence:
    """Normalise what callers pass to an embedder: a string is text, a Study gives its pixels."""
    if isinstance(item, Evidence):
        return item
    if isinstance(item, str):
        return Evidence(text=item)
    if isinstance(item, Study):
        return item.evidence()
    raise EvidenceError(f"Cannot embed an object of type {type(item).__name__}.")


def findings_from_mapping(values: Mapping[str, object]) -> Findings:
    """Coerce CSV-style cells (1.0, 0.0, -1.0, NaN, '', None) to 1 / 0 / -1 / None."""
    coded: Findings = {}
    for name, value in values.items():
        if value is None or value == "":
            coded[name] = None
            continue
        number = float(value)  # type: ignore[arg-type]
        if np.isnan(number):
            coded[name] = None
        elif number not in (1.0, 0.0, -1.0):
            raise EvidenceError(
                f"Finding {name!r} has value {value!r}; expected 1, 0, -1 or blank."
            )
        else:
            coded[name] = int(number)  # type: ignore[assignment]
    return coded
