"""Service functions the UI calls for stored benchmark runs (the UI never queries the store).

Both kinds of run (MedHEB suites and CXR-Retrieve) are listed and loaded alike: the store
indexes them, their folders hold the full record (medheb_app.eval.results).
"""

from __future__ import annotations

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
