"""The logic-aware ranker: decompose a query into constraints and score each image by logic.

Beyond the paper. Report-trained embedders read "A and no B" as a bag of words and retrieve
images with both A and B (CXR-Retrieve section 1, the affirmation bias). This ranker does not
ask the text tower to understand negation at all. It parses the query into constraints
(query/parser.py), scores every finding per image with a calibrated probe on the
model's image embeddings of the whole image and of zoomed crops (the view set: 2x2 and 3x3
grids by default, ranking/views.py; ranking/probes.py, fit on the train split's labels) and
combines
them with the query's logic, as the log-probability that an image satisfies the whole query
under independence:

    score(x) = sum_{A required} log p_A(x) + sum_{B excluded} log (1 - p_B(x))

A tiny share of the query-image cosine breaks ties. Findings the probe could not be fit on
(no labels in training, e.g. Fracture on NIH) fall back to the image's cosine to the finding's
name, standardised over the gallery and read as log-odds. Queries with no constraint (only
unknown words) rank by plain cosine. It works with any Embedder, so it is model-agnostic.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from medheb_app.evidence.findings import CXR_RETRIEVE_10
from medheb_app.evidence.study import Study
from medheb_app.index.cache import embed_with_cache
from medheb_app.models.base import Embedder
from medheb_app.query.parser import ParsedQuery, Setting, parse_query
from medheb_app.ranking.probes import FindingProbe, ProbeConfig, fit_probe
from medheb_app.ranking.views import crops_per_image, view_vectors
from medheb_app.settings import Settings

TIE_WEIGHT = 1e-3
PREFIX = "logic:"


def log_sigmoid(x: np.ndarray) -> np.ndarray:
    """log(1 / (1 + e^-x)), stable for large |x|."""
    return -np.logaddexp(0.0, -x)


def logic_scores(
    parsed: ParsedQuery,
    logits: np.ndarray,
    findings: Sequence[str],
    similarity: np.ndarray | None = None,
    tie_weight: float = TIE_WEIGHT,
    setting: Setting = "main",
) -> np.ndarray:
    """Per image: sum of log p(A) over required A and log(1 - p(B)) over excluded B.

    `logits` is (n, L) log-odds per finding (no NaN: fill fallbacks first); `similarity` the
    (n,) query-image cosine, used to break ties and as the whole score without constraints.
    An uncertain finding U ("possible pneumonia") follows query.parser.uncertain_holds: in
    the strict setting only a confirmed U counts, so it adds log p(U) like a required one; in
    main it holds unless U is confirmed absent, which a probe of "U positive" cannot tell from
    unmentioned, so it adds nothing and the cosine (which reads the word) breaks the tie.
    """
    n = logits.shape[0]
    similarity = np.zeros(n) if similarity is None else np.asarray(similarity, dtype=np.float64)
    if not parsed.has_constraints:
        return similarity
    column = {name: i for i, name in enumerate(findings)}
    total = np.zeros(n)
    hedged = parsed.uncertain if setting == "strict" else ()
    for name in (*parsed.positive, *(n for n in hedged if n in column)):
        total += log_sigmoid(logits[:, column[name]])
    for name in parsed.negative:
        total += log_sigmoid(-logits[:, column[name]])
    return total + tie_weight * similarity


def standardised(values: np.ndarray) -> np.ndarray:
    return (values - values.mean(axis=0)) / (values.std(axis=0) + 1e-8)


class LogicAwareRanker:
    """Constraint logic over per-finding probes on an embedder's image vectors."""

    def __init__(
        self,
        embedder: Embedder,
        probe: FindingProbe,
        cache: object = None,
        name: str | None = None,
        vocabulary: Sequence[str] = CXR_RETRIEVE_10,
    ) -> None:
        if probe.model_fingerprint != embedder.card.fingerprint:
            raise ValueError("This probe was fit on another model's embeddings; refit it.")
        self.embedder = embedder
        self.probe = probe
        self.cache = cache
        self.vocabulary = tuple(vocabulary)
        self.spec = name or f"{PREFIX}{embedder.card.name}"
        self.card = embedder.card
        self.note = (
            f"{self.spec} ranks by constraint logic over per-finding probes on "
            f"{embedder.card.name}'s image embeddings (views {probe.views})."
        )

    @property
    def name(self) -> str:
        return self.spec

    def finding_logits(self, features: np.ndarray, image_vectors: np.ndarray) -> np.ndarray:
        """(n, L) log-odds; unfitted findings from standardised cosine to the finding's name."""
        logits = self.probe.logits(features)
        missing = [i for i, ok in enumerate(self.probe.fitted) if not ok]
        if missing:
            names = [self.probe.findings[i] for i in missing]
            text = np.asarray(self.embedder.encode(names), dtype=np.float64)
            logits[:, missing] = standardised(image_vectors @ text.T)
        return logits

    def score_vectors(
        self,
        texts: Sequence[str],
        image_vectors: np.ndarray,
        features: np.ndarray | None = None,
    ) -> np.ndarray:
        """(len(texts), n) scores over precomputed image vectors (e.g. a search index).

        `features` are what the probe reads (probe_features); with the "whole" view set they
        are the image vectors themselves.
        """
        image_vectors = np.asarray(image_vectors, dtype=np.float64)
        if features is None:
            if self.probe.views != "whole":
                raise ValueError("This probe reads crop embeddings too; pass probe_features().")
            features = image_vectors
        logits = self.finding_logits(features, image_vectors)
        similarity = np.asarray(self.embedder.encode(list(texts)), np.float64) @ image_vectors.T
        rows = [
            logic_scores(parse_query(text, self.vocabulary), logits, self.probe.findings, sim)
            for text, sim in zip(texts, similarity, strict=True)
        ]
        return np.stack(rows) if rows else np.zeros((0, len(image_vectors)))

    def score(self, task: Any, progress: Any = None, stop: Any = None) -> np.ndarray:
        """The ranker protocol of medheb_app.eval.rankers: text queries against study images.

        Progress follows the work: whole images, their crops, then the queries."""
        texts = [str(query.item) for query in task.queries]
        gallery = [candidate.item for candidate in task.candidates]
        whole = len(gallery)
        crops = whole * (crops_per_image(self.probe.views) if self.probe.views != "whole" else 0)
        total = max(whole + crops + len(texts), 1)

        def part(offset: int, share: int) -> Any:
            if progress is None:
                return None
            return lambda fraction, message: progress((offset + share * fraction) / total, message)

        if progress:
            progress(0.0, f"embedding {whole} images and their crops")
        vectors = study_vectors(self.embedder, gallery, self.cache, part(0, whole))
        features = probe_features(
            self.embedder, gallery, self.probe.views, self.cache, vectors, part(whole, crops)
        )
        if progress:
            progress((whole + crops) / total, f"scoring {len(texts)} queries")
        return self.score_vectors(texts, vectors, features)


def study_vectors(
    embedder: Embedder, studies: Sequence[Study], cache: object = None, progress: Any = None
) -> np.ndarray:
    """Image embeddings of studies through the embedding cache (content-addressed keys)."""
    # deferred: faiss
    from medheb_app.index.catalog import study_content_key

    keys = [study_content_key(study) for study in studies]
    return embed_with_cache(embedder, list(studies), keys, cache, progress=progress)  # type: ignore[arg-type]


def probe_features(
    embedder: Embedder,
    studies: Sequence[Study],
    views: str,
    cache: object = None,
    vectors: np.ndarray | None = None,
    progress: Any = None,
) -> np.ndarray:
    """What a probe reads: the whole-image embedding, then the view set's crop embeddings.
    `progress` follows what is embedded here, by count: the whole images (unless `vectors`
    are given), then the crops."""
    whole = len(studies) if vectors is None else 0
    crops = len(studies) * crops_per_image(views) if views != "whole" else 0
    total = max(whole + crops, 1)

    def part(offset: int, share: int) -> Any:
        if progress is None:
            return None
        return lambda fraction, message: progress((offset + share * fraction) / total, message)

    if vectors is None:
        vectors = study_vectors(embedder, studies, cache, part(0, whole))
    if views == "whole":
        return np.asarray(vectors)
    crop_vectors = view_vectors(embedder, studies, views, cache, part(whole, crops))
    return np.concatenate([vectors, crop_vectors], axis=1)


def probe_path(
    settings: Settings,
    embedder: Embedder,
    train: Sequence[Study],
    config: ProbeConfig | None = None,
) -> Path:
    """Where the probe for (model, exact training images and labels, probe settings) is kept."""
    return probe_file(settings, embedder.card.fingerprint, train, config)


def probe_file(
    settings: Settings,
    fingerprint: str,
    train: Sequence[Study],
    config: ProbeConfig | None = None,
) -> Path:
    """probe_path from a model's fingerprint alone: a run's estimate asks whether the probe
    is already fit without loading the model (eval/estimate.py)."""
    # deferred: faiss
    from medheb_app.index.catalog import study_content_key

    digest = hashlib.sha1()
    for study in sorted(train, key=lambda s: s.id):
        digest.update(study_content_key(study).encode())
        digest.update(repr(sorted(study.findings.items(), key=str)).encode())
    config = config or ProbeConfig()
    name = f"{fingerprint}-{digest.hexdigest()[:12]}-{config.key()}.npz"
    return settings.data_dir / "probes" / name


def load_or_fit_probe(
    embedder: Embedder,
    train: Sequence[Study],
    settings: Settings,
    cache: object = None,
    vocabulary: Sequence[str] = CXR_RETRIEVE_10,
    config: ProbeConfig | None = None,
    progress: Any = None,
) -> FindingProbe:
    """The probe for these training studies, fit once and then read from DATA_DIR/probes.
    `progress` follows the embedding of the training images and their crops."""
    if not train:
        raise ValueError("The logic-aware ranker needs labelled training images to fit on.")
    config = config or ProbeConfig()
    path = probe_path(settings, embedder, train, config)
    if path.is_file():
        return FindingProbe.load(path)
    features = probe_features(embedder, train, config.views, cache, progress=progress)
    labels = [s.findings for s in train]
    probe = fit_probe(features, labels, vocabulary, embedder.card.fingerprint, config)
    probe.save(path)
    return probe
