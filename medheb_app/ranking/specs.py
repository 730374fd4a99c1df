"""The logic-aware ranker spec: "logic:<embedder spec>".

"logic:dual-lite" is the logic-aware ranker over dual-lite's image embeddings (whole image and
the zoomed crops of a view set, ranking/views.py), with its per-finding probes fit on the train
split of the same data source as the gallery (ProbeConfig; cached in DATA_DIR/probes). Every
other spec is resolved by medheb_app.eval.rankers.load_ranker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from medheb_app.evidence.study import Study
from medheb_app.models import registry
from medheb_app.ranking.logic_aware import PREFIX, LogicAwareRanker, load_or_fit_probe
from medheb_app.ranking.probes import ProbeConfig
from medheb_app.settings import Settings


def logic_ranker(
    spec: str,
    settings: Settings,
    train_studies: Callable[[], Sequence[Study]],
    cache: object = None,
    probe_config: ProbeConfig | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> LogicAwareRanker:
    """The logic-aware ranker for `logic:<spec>`; `train_studies` is called only to fit
    (`progress` follows that fit's embeddings)."""
    spec = spec.strip()
    base = spec[len(PREFIX) :] if spec.startswith(PREFIX) else ""
    if not base:
        raise ValueError("A logic-aware spec names its embedder, e.g. 'logic:dual-lite'.")
    embedder = registry.load_embedder(base, settings)
    probe = load_or_fit_probe(
        embedder, list(train_studies()), settings, cache, config=probe_config, progress=progress
    )
    return LogicAwareRanker(embedder, probe, cache, name=spec)
