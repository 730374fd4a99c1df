"""Training captions sampled from label vectors, with the caption's assertion vector y.

CXR-Retrieve section 5.1: per image, 50% single-finding captions ("A"), 25% pairs ("A and
b") and 25% negations ("A and no b"), using the benchmark's templates; a negation is only
generated for a finding confirmed absent (label 0). Section 4.1: y in {-1, 0, 1}^L holds +1
for findings the caption affirms, -1 for the one it negates and 0 elsewhere, so the label
kernel measures agreement between what captions assert, not between full label profiles.

When an image cannot take the drawn kind (a pair needs two positives, a negation a positive
and a confirmed absence) it falls back to a simpler kind it can take (negation -> pair ->
single, pair -> single); an image with no positive finding gets no caption (None): no
template describes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.tasks.cxr_retrieve import negation_text, pair_text, single_text

KINDS = ("single", "pair", "negation")
PAPER_MIX = (0.5, 0.25, 0.25)


@dataclass(frozen=True)
class Caption:
    """A training caption and the assertions it makes over the vocabulary."""

    text: str
    y: np.ndarray  # int8, shape (L,), values in {-1, 0, 1}
    kind: str


def parse_mix(mix: str | Sequence[float]) -> tuple[float, float, float]:
    """'2:1:1' or (0.5, 0.25, 0.25) -> normalised (single, pair, negation) proportions."""
    values = [float(v) for v in mix.split(":")] if isinstance(mix, str) else [float(v) for v in mix]
    if len(values) != 3 or any(v < 0 for v in values) or sum(values) <= 0:
        raise ValueError(
            f"A caption mix is three non-negative weights single:pair:negation; got {mix!r}."
        )
    total = sum(values)
    return values[0] / total, values[1] / total, values[2] / total


def _caption(kind: str, names: Sequence[str], vocabulary: Sequence[str]) -> Caption:
    y = np.zeros(len(vocabulary), dtype=np.int8)
    index = {name: i for i, name in enumerate(vocabulary)}
    if kind == "single":
        y[index[names[0]]] = 1
        return Caption(single_text(names[0]), y, kind)
    if kind == "pair":
        y[index[names[0]]] = y[index[names[1]]] = 1
        return Caption(pair_text(names[0], names[1]), y, kind)
    y[index[names[0]]] = 1
    y[index[names[1]]] = -1
    return Caption(negation_text(names[0], names[1]), y, kind)


def sample_caption(
    findings: Mapping[str, object],
    rng: np.random.Generator,
    mix: Sequence[float] = PAPER_MIX,
    vocabulary: Sequence[str] = CXR_RETRIEVE_10,
) -> Caption | None:
    """One caption for an image's labels; None when it has no positive finding."""
    positives = [f for f in vocabulary if findings.get(f) == 1]
    absent = [f for f in vocabulary if findings.get(f) == 0]
    if not positives:
        return None
    wanted = str(rng.choice(KINDS, p=np.asarray(parse_mix(mix))))
    feasible = {
        "single": True,
        "pair": len(positives) >= 2,
        "negation": bool(absent),
    }
    order = {"negation": ("negation", "pair", "single"), "pair": ("pair", "single")}
    kind = next(k for k in order.get(wanted, ("single",)) if feasible[k])
    if kind == "single":
        return _caption(kind, [positives[rng.integers(len(positives))]], vocabulary)
    if kind == "pair":
        a, b = rng.choice(len(positives), size=2, replace=False)
        return _caption(kind, [positives[a], positives[b]], vocabulary)
    return _caption(
        kind,
        [positives[rng.integers(len(positives))], absent[rng.integers(len(absent))]],
        vocabulary,
    )


def sample_captions(
    label_rows: Sequence[Mapping[str, object]],
    rng: np.random.Generator,
    mix: Sequence[float] = PAPER_MIX,
    vocabulary: Sequence[str] = CXR_RETRIEVE_10,
) -> tuple[np.ndarray, list[Caption]]:
    """Captions for every image that can take one: (image indices, captions)."""
    indices, captions = [], []
    for i, findings in enumerate(label_rows):
        caption = sample_caption(findings, rng, mix, vocabulary)
        if caption is not None:
            indices.append(i)
            captions.append(caption)
    return np.asarray(indices, dtype=np.int64), captions
