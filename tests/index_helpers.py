"""Building a test index from studies in memory, through the one index builder."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from medheb_app.evidence.findings import Vocabulary
from medheb_app.evidence.study import Study
from medheb_app.index.build import build_index
from medheb_app.index.catalog import LoadedIndex, load_index
from medheb_app.index.sources import in_memory
from medheb_app.models.base import Embedder
from medheb_app.settings import Settings


def build_studies(
    name: str,
    studies: Sequence[Study],
    embedder: Embedder,
    settings: Settings,
    vocabulary: Vocabulary | None = None,
    **options: Any,
) -> LoadedIndex:
    """index/build.build_index over `studies` (kind, progress, ... as `options`), loaded back."""
    build_index(
        in_memory(list(studies), vocabulary=vocabulary), embedder, name, settings, **options
    )
    return load_index(name, embedder.card.fingerprint, settings)
