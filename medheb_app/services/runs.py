"""Stored benchmark runs as the UI and the API read them (the UI never queries the store), and
what raters are shown for a run's items.

Both kinds of run (MedHEB suites and CXR-Retrieve) are listed and loaded alike: the store
indexes them, their folders hold the full record (medheb_app.eval.results).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from medheb_app.eval.colours import run_colours
from medheb_app.eval.estimate import Estimate, estimate_run, rates_from_store
from medheb_app.eval.results import Summary
from medheb_app.jobs import JobRunner
from medheb_app.models.baselines import BASELINES  # noqa: F401  (re-exported: a run's floor and ceiling specs)
from medheb_app.settings import Settings
from medheb_app.store.colours import model_slots
from medheb_app.store.db import Store
from medheb_app.store.runs import run_listing, run_out_dir
from medheb_app.study.blinding import run_is_blinded
from medheb_app.study.payloads import Renderer, describe_with_tasks
from medheb_app.tasks.medheb import SUITES

SHARED_DATA_LABEL = "the real-data folder (MEDHEB_SHARED_DATA)"
DATA_DIR_LABEL = "the app's data folder"
SKIPPED_COLUMNS = ("task", "model", "reason")
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~])/[^\s'\"]+")


def public_reason(reason: str, roots: Mapping[str, str]) -> str:
    """A skip reason with file-system paths replaced by what they stand for: a path under
    one of `roots` (path -> label) becomes the label, any other absolute path "a server
    path". What an anonymous page may show (no internal path)."""
    text = str(reason)
    for root, label in sorted(roots.items(), key=lambda item: -len(item[0])):
        if root and root != "/":
            pattern = re.escape(root.rstrip("/")) + r"(?![^/\s'\"])(/[^\s'\"]*)?"
            text = re.sub(pattern, label, text)
    return _ABSOLUTE_PATH.sub("a server path", text)


def skipped_rows(
    skipped: Mapping[str, str], roots: Mapping[str, str], show_paths: bool
) -> list[dict[str, str]]:
    """One row per skipped task (task, model, reason): a key "model/task" is one model
    skipped on a task it cannot read, a bare task name the task skipped for every model.
    Paths stay only for admins (`show_paths`), in the reason and in a model spec that names
    a checkpoint file alike."""

    def shown(text: str) -> str:
        return text if show_paths else public_reason(text, roots)

    rows = []
    for key, reason in skipped.items():
        model, _, task = key.rpartition("/") if "/" in key else ("", "", key)
        rows.append(
            {"task": task, "model": shown(model) or "all models", "reason": shown(str(reason))}
        )
    return rows


def run_shared_data_line(summary: Summary) -> str:
    """Where the run looked for real data (admins only: it is a server path)."""
    folder = summary.settings.get("shared_data")
    return f"Real data folder (MEDHEB_SHARED_DATA) of this run: {folder}" if folder else ""


def shared_data_line(settings: Settings) -> str:
    """Where real data is read from (MEDHEB_SHARED_DATA) and whether it is there."""
    folder = settings.shared_data_dir
    state = "found" if folder.is_dir() else "MISSING: real-data tasks will be skipped"
    return f"Real data folder (MEDHEB_SHARED_DATA): {folder} ({state})"


def describe_for_run(settings: Settings, suite: str) -> Renderer:
    """What raters are shown for a run's items: the suite's tasks rebuilt and rendered by
    medheb_app.study.payloads (salted file names, so no path names a task or an item). For a
    run of a suite this checkout cannot rebuild, the run files' own payloads are rendered;
    items that cannot be shown are withheld from the study."""
    # deferred: faiss (admin_jobs imports the index builder; `bench run --estimate` reads runs)
    from medheb_app.services.admin_jobs import stamp

    media_dir = settings.data_dir / "study-media" / stamp()
    if suite not in SUITES:
        return Renderer(media_dir)
    tasks, _skipped = SUITES[suite]().build(settings)
    return describe_with_tasks(tasks, media_dir)


class Runs:
    """Stored benchmark runs for the tabs, the API and the CLI (`services.runs`): bound to the
    settings, the store and the job runner (None for a CLI command, which starts none: only
    `job_skipped` reads it); each method is one call a caller makes."""

    def __init__(self, settings: Settings, store: Store, jobs: JobRunner | None = None) -> None:
        self.settings = settings
        self.store = store
        self.jobs = jobs

    def choices(self, limit: int = 200) -> list[tuple[str, int]]:
        """Finished runs, newest first, as (label, run id) for a picker."""
        return [
            (
                f"Run {row['id']}: {row['suite']} · {', '.join(row['models'])} · "
                f"{row['started']:%Y-%m-%d %H:%M}",
                row["id"],
            )
            for row in run_listing(self.store, limit=limit, status="finished")
        ]

    def summary(self, run_id: int) -> Summary:
        """The Summary of a stored run, read from its folder; KeyError for an unknown id."""
        return Summary.from_disk(run_out_dir(self.store, int(run_id)))

    def estimate(
        self,
        suite: str,
        models: list[str],
        tasks: list[str] | None = None,
        families: list[str] | None = None,
    ) -> Estimate:
        """What a run of `suite` (its chosen tasks or families) with `models` will cost: per
        task and model, the items it embeds, how many the embedding cache holds, and the
        seconds the rest take at each model's measured rate (eval/estimate.py). Builds the
        tasks as the run would (real-data tasks that cannot be built are listed as skipped);
        loads no model."""
        if not models:
            raise ValueError("Pick at least one model to estimate.")
        # deferred: faiss (admin_jobs imports the index builder; `bench run --estimate` reads runs)
        from medheb_app.services.admin_jobs import bench_suite

        params = {"suite": suite, "tasks": tasks or [], "families": families or []}
        built, only = bench_suite(self.settings, params)
        return self.estimate_suite(built, models, only, calibrate=True)

    def estimate_suite(
        self, suite: Any, models: list[str], only: list[str] | None = None, calibrate: bool = False
    ) -> Estimate:
        """What a run of an already chosen `suite` (its tasks `only`, None: all) with `models`
        will cost, at each model's rate measured in the store; `calibrate` times a model never
        measured on a few items (loads it), else a default rate is assumed (`bench run
        --estimate`). KeyError for an unknown task name."""
        rates = rates_from_store(self.store, models)
        return estimate_run(suite, models, self.settings, rates, only, calibrate=calibrate)

    def shared_data_line(self) -> str:
        """Where real data is read from (MEDHEB_SHARED_DATA) and whether it is there."""
        return shared_data_line(self.settings)

    def _path_roots(self, recorded: Mapping[str, Any] | None = None) -> dict[str, str]:
        """The folders a reason may name, as recorded by the run and as set now, with labels."""
        recorded = recorded or {}
        roots = {
            str(self.settings.shared_data_dir): SHARED_DATA_LABEL,
            str(self.settings.data_dir): DATA_DIR_LABEL,
        }
        if recorded.get("shared_data"):
            roots[str(recorded["shared_data"])] = SHARED_DATA_LABEL
        if recorded.get("data_dir"):
            roots[str(recorded["data_dir"])] = DATA_DIR_LABEL
        return roots

    def skipped(self, summary: Summary, is_admin: bool) -> list[dict[str, str]]:
        """The skipped tasks of a stored run and why (paths shown to admins only)."""
        return skipped_rows(summary.skipped, self._path_roots(summary.settings), is_admin)

    def job_skipped(self, job_id: int) -> list[dict[str, str]]:
        """The skipped tasks of a finished benchmark job (admin view: paths shown); empty for
        other jobs and for a job still running (its log names each skip as it happens)."""
        if self.jobs is None:
            raise ValueError("No job runner: jobs are read from the running app.")
        info = self.jobs.status(int(job_id))
        skipped = (info.result or {}).get("skipped") if info.kind == "bench-run" else None
        return skipped_rows(skipped or {}, self._path_roots(), show_paths=True)

    def colours(self, names: Sequence[str]) -> dict[str, str]:
        """`eval.colours.run_colours` with the slots recorded in the store (recording new
        models), so a model keeps its colour across runs. Here, not in eval/, because it
        reads the store (eval/ stays below store/: store.colours imports eval.colours)."""
        return run_colours(names, model_slots(self.store, names))

    def is_blinded(self, out_dir: str | Path | None) -> bool:
        """True when the run folder `out_dir` holds a ranked list an open reader study's item
        shows (medheb_app.study.blinding): its per-query lists stay hidden from non-admins."""
        return run_is_blinded(self.store, out_dir)

    def describe_for(self, suite: str) -> Renderer:
        """What raters are shown for a run's items (`describe_for_run` with these settings)."""
        return describe_for_run(self.settings, suite)
