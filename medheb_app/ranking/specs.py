"""Ranker specs for the benchmark: any embedder spec, or "logic:<embedder spec>".

"logic:dual-lite" is the logic-aware ranker over dual-lite's image embeddings (whole image and
the zoomed crops of a view set, ranking/views.py), with its per-finding probes fit on the train
split of the same data source as the gallery (ProbeConfig; cached in DATA_DIR/probes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from medheb_app.evidence.study import Study
from medheb_app.ranking.logic_aware import PREFIX, LogicAwareRanker, load_or_fit_probe
from medheb_app.ranking.probes import ProbeConfig
from medheb_app.settings import Settings
from medheb_app.tasks.cxr_retrieve_eval import EmbeddingRanker, Ranker


def make_ranker(
    spec: str,
    settings: Settings,
    train_studies: Callable[[], Sequence[Study]],
    cache: object = None,
    probe_config: ProbeConfig | None = None,
) -> Ranker:
    """A ranker for `spec`; `train_studies` is called only when a probe must be fit."""
    from medheb_app.models.registry import load_embedder

    spec = spec.strip()
    if spec.startswith(PREFIX):
        base = spec[len(PREFIX) :]
        if not base:
            raise ValueError("A logic-aware spec names its embedder, e.g. 'logic:dual-lite'.")
        embedder = load_embedder(base, settings)
        probe = load_or_fit_probe(
            embedder, list(train_studies()), settings, cache, config=probe_config
        )
        return LogicAwareRanker(embedder, probe, cache, name=spec)
    return EmbeddingRanker(load_embedder(spec, settings), cache, name=spec)
