"""Service functions the UI calls for stored benchmark runs (the UI never queries the store).

Both kinds of run (MedHEB suites and CXR-Retrieve) are listed and loaded alike: the store
indexes them, their folders hold the full record (medheb_app.eval.results).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medheb_app.eval.results import Summary


def finished_run_choices(services: Any, limit: int = 200) -> list[tuple[str, int]]:
    """Finished runs, newest first, as (label, run id) for a picker."""
    from medheb_app.store.runs import run_listing

    return [
        (
            f"Run {row['id']}: {row['suite']} · {', '.join(row['models'])} · "
            f"{row['started']:%Y-%m-%d %H:%M}",
            row["id"],
        )
        for row in run_listing(services.store, limit=limit, status="finished")
    ]


def run_summary(services: Any, run_id: int) -> Summary:
    """The Summary of a stored run, read from its folder; KeyError for an unknown id."""
    from medheb_app.store.runs import run_out_dir

    return Summary.from_disk(run_out_dir(services.store, int(run_id)))


def bench_estimate(services: Any, suite: str, models: list[str]) -> list[dict[str, Any]]:
    """Per model: how many vectors of it the embedding cache holds, how many items the last
    finished run of `suite` embedded, and how long that model took then: what a new run will
    cost (a cached vector is read, not recomputed). Reads only the store, the cache's index
    and summary files: never loads a model or builds a task."""
    from medheb_app.index.cache import EmbeddingCache
    from medheb_app.models.base import ModelCard
    from medheb_app.models.registry import list_models
    from medheb_app.store.runs import run_listing

    cards = {str(e["spec"]): e["card"] for e in list_models(services.settings)}
    cache = EmbeddingCache(services.settings.cache_dir)
    last = next(
        (r for r in run_listing(services.store, status="finished") if r["suite"] == suite), None
    )
    previous = None
    if last is not None:
        try:
            previous = Summary.from_disk(last["out_dir"])
        except (OSError, ValueError, KeyError):
            previous = None
    items = (
        sum(int(t.get("n_queries", 0)) + int(t.get("n_candidates", 0)) for t in previous.tasks)
        if previous
        else None
    )
    rows = []
    for spec in models:
        card = cards.get(spec)
        cached = None
        if isinstance(card, dict) and card.get("dims"):
            fields = {k: v for k, v in card.items() if k in ModelCard.__dataclass_fields__}
            fields["modalities"] = tuple(fields.get("modalities", ()))
            cached = cache.count(ModelCard(**fields).fingerprint)
        seconds = previous.timing.get(f"{spec}_s") if previous else None
        rows.append(
            {
                "model": spec,
                "cached vectors": cached if cached is not None else "n/a (no embeddings)",
                "items last run": items if items is not None else "no earlier run",
                "seconds last run": seconds if seconds is not None else "–",
            }
        )
    return rows


def shared_data_line(services: Any) -> str:
    """Where real data is read from (MEDHEB_SHARED_DATA) and whether it is there."""
    folder = services.settings.shared_data_dir
    state = "found" if folder.is_dir() else "MISSING: real-data tasks will be skipped"
    return f"Real data folder (MEDHEB_SHARED_DATA): {folder} ({state})"


def resolved_dir(path: str | Path) -> str:
    """A run folder as one comparable string (resolved when possible)."""
    try:
        return str(Path(path).resolve())
    except (OSError, RuntimeError):
        return str(path)


def open_study_sources(services: Any) -> set[str]:
    """The resolved run folders of every reader study that is not closed: the runs whose
    per-query results stay hidden from non-admins (ui/blinding.py)."""
    from sqlalchemy import select

    from medheb_app.store.study_tables import PreferenceStudy

    with services.store.session() as session:
        studies = session.scalars(select(PreferenceStudy)).all()
        return {
            resolved_dir(study.source)
            for study in studies
            if study.source and getattr(study, "closed_at", None) is None
        }
