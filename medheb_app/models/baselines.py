"""Reference embedders that need no training: chance level ("random") and the label oracle.

They bracket every benchmark: a model below "random" is broken; "oracle" shows the ceiling
that a perfect reader of the ten CXR-Retrieve findings would reach.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.evidence.study import EmbedItem, Evidence, Study, as_evidence
from medheb_app.models.base import ModelCard, l2_normalise
from medheb_app.query.parser import parse_query

# The baseline specs: they embed nothing (labels or seeded noise), run in every suite, and are
# left out where a report or a picker speaks of the real models. The one list of them.
BASELINES = ("random", "oracle")

RANDOM_DIMS = 256


def content_digest(evidence: Evidence) -> bytes:
    """SHA-256 of what an item contains (text bytes, pixel bytes and shapes)."""
    digest = hashlib.sha256()
    if evidence.text is not None:
        digest.update(b"text:" + evidence.text.encode())
    for kind, array in (("image", evidence.image), ("volume", evidence.volume)):
        if array is not None:
            pixels = np.ascontiguousarray(array, dtype=np.float32)
            digest.update(f"{kind}:{pixels.shape}".encode())
            digest.update(pixels.tobytes())
    return digest.digest()


class RandomEmbedder:
    """A pseudo-random unit vector per item content: reproducible chance-level rankings.

    The same text or pixels always get the same vector (seeded by their SHA-256), so results
    and caches are stable across runs; the instruction is ignored.
    """

    def __init__(self, dims: int = RANDOM_DIMS) -> None:
        self.card = ModelCard(
            name="random",
            version="1",
            dims=dims,
            modalities=("text", "2d", "3d"),
            license="Apache-2.0",
            description="Chance level: a unit vector drawn from a hash of each item's content.",
            weights_sha256="none",
        )

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        vectors = np.zeros((len(items), self.card.dims), dtype=np.float32)
        for row, item in enumerate(items):
            seed = int.from_bytes(content_digest(as_evidence(item))[:8], "little")
            vectors[row] = np.random.default_rng(seed).standard_normal(self.card.dims)
        return l2_normalise(vectors)


def label_vector(findings: dict[str, object], vocabulary: Sequence[str]) -> np.ndarray:
    """+1 for a positive finding, -1 for anything else (negative, uncertain, unmentioned)."""
    return np.array([1.0 if findings.get(name) == 1 else -1.0 for name in vocabulary])


def constraint_vector(text: str, vocabulary: Sequence[str], setting: str = "main") -> np.ndarray:
    """+1 for asserted findings, -1 for negated ones, 0 otherwise (the query parser's reading).

    An uncertain finding follows query.parser.uncertain_holds: strict counts only a confirmed
    one, so it is +1 like an asserted finding; main counts present-or-unknown, which the label
    vector (+1 positive, else -1) cannot tell from absent, so it is 0 (no preference).
    """
    parsed = parse_query(text, tuple(vocabulary))
    hedged = set(parsed.uncertain) if setting == "strict" else set()
    return np.array(
        [
            1.0
            if name in parsed.positive or name in hedged
            else -1.0
            if name in parsed.negative
            else 0.0
            for name in vocabulary
        ]
    )


class OracleEmbedder:
    """The upper bound: ranks by the true labels of the CXR-Retrieve ten findings.

    A Study (image, volume or report) becomes its label vector (+1 positive, else -1); a
    plain text query becomes its parsed constraints (+1 asserted, -1 negated, 0 otherwise).
    Then the cosine of a query with a study is the number of satisfied constraints minus the
    violated ones over a constant norm, so studies meeting every constraint rank first.
    What the oracle cannot know gets a zero vector (it ties everywhere): a Study with no
    findings, a query naming no finding, and bare Evidence or pixels (no labels to read).
    """

    def __init__(self, vocabulary: Sequence[str] = CXR_RETRIEVE_10) -> None:
        self.vocabulary = tuple(vocabulary)
        self.card = ModelCard(
            name="oracle",
            version="1",
            dims=len(self.vocabulary),
            modalities=("text", "2d", "3d"),
            license="Apache-2.0",
            description="Upper bound from ground-truth labels (studies) and parsed queries.",
            weights_sha256="none",
            extra={"vocabulary": ",".join(self.vocabulary)},
        )

    def _vector(self, item: EmbedItem) -> np.ndarray:
        if isinstance(item, Study):
            if not any(value is not None for value in item.findings.values()):
                return np.zeros(len(self.vocabulary))
            return label_vector(item.findings, self.vocabulary)
        if isinstance(item, str):
            return constraint_vector(item, self.vocabulary)
        if isinstance(item, Evidence) and item.text is not None and item.forms == ("text",):
            return constraint_vector(item.text, self.vocabulary)
        return np.zeros(len(self.vocabulary))

    def encode(self, items: Sequence[EmbedItem], instruction: str | None = None) -> np.ndarray:
        if not items:
            return np.zeros((0, self.card.dims), dtype=np.float32)
        return l2_normalise(np.stack([self._vector(item) for item in items]))
