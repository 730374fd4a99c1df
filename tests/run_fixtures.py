"""A two-model benchmark run folder in the runner's DESIGN.md format, for the study tests,
and real (small) runs of the random and oracle baselines through the runner: `text_bench_run`
(one text task) and `medheb_lite_study` (a study over every medheb-lite family).

Model and task names end in "-secret" so blinding tests can search the page for them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from PIL import Image

if TYPE_CHECKING:
    from medheb_app.eval.results import Summary
    from medheb_app.settings import Settings
    from medheb_app.store.db import Store
    from medheb_app.tasks.base import Item, Task, TaskMetadata

MODELS = ("model-alpha-secret", "model-beta-secret")
TASK = "stratum-task-secret"


def write_run(run_dir: Path, with_images: bool = False) -> None:
    """DIR/<model>/<task>.json for both models: 4 queries over 6 candidates, shifted rankings.

    with_images adds a PNG per candidate (under DIR/media) beside its report text.
    """
    candidates: dict[str, dict[str, str]] = {}
    if with_images:
        (run_dir / "media").mkdir(parents=True)
    for i in range(6):
        candidates[f"c{i}"] = {"text": f"candidate report {i}"}
        if with_images:
            path = run_dir / "media" / f"c{i}.png"
            Image.fromarray(np.full((64, 64), 40 * i, dtype=np.uint8)).save(path)
            candidates[f"c{i}"]["image"] = str(path)
    for offset, model in enumerate(MODELS):
        queries = [
            {
                "id": f"q{q}",
                "query": f"query text {q}",
                "ranked": [f"c{(q + offset + r) % 6}" for r in range(6)],
                "positives": [f"c{q}"],
            }
            for q in range(4)
        ]
        payload = {
            "metadata": {"name": TASK, "family": "T-T", "split": "ID"},
            "queries": queries,
            "candidates": candidates,
        }
        (run_dir / model).mkdir(parents=True)
        (run_dir / model / f"{TASK}.json").write_text(json.dumps(payload))


def task_meta(name: str = "t", family: str = "I-I", form: str = "2d", **extra: Any) -> TaskMetadata:
    """A unit-test task's metadata: an in-distribution chest task from source "unit" whose
    query instruction is "Find:" unless `extra` says otherwise."""
    from medheb_app.tasks.base import TaskMetadata

    fields = {"split": "ID", "anatomy": "chest", "source": "unit", "qry_inst": "Find:", **extra}
    return TaskMetadata(name=name, family=family, form=form, **fields)


def text_bench_run(
    name: str, pairs: Sequence[tuple[Item, Item]], out_dir: Path, settings: Settings
) -> Summary:
    """run_suite of the random and oracle baselines on one text-to-text task of (query, target)
    pairs, recorded in the settings' store: what the admin and web tests build studies from."""
    from medheb_app.eval.runner import run_suite
    from medheb_app.tasks.builders.generic import paired_task

    meta = task_meta(name, "T-T", "text", qry_inst="Find the matching passage:")
    return run_suite([paired_task(meta, list(pairs))], ["random", "oracle"], out_dir, settings)


@dataclass(frozen=True)
class LiteRun:
    """The medheb-lite suite shrunk to seconds, built and run once: its tasks and run folder."""

    tasks: tuple[Task, ...]
    run_dir: Path


def medheb_lite_run(root: Path) -> LiteRun:
    """Build the medheb-lite suite shrunk to seconds (240 chest studies, 20 volume subjects, 6
    queries a task) on the session's saved phantom corpora (tests/conftest.py) and run random
    and oracle on it into root/run without a store row. conftest's session fixture
    `medheb_lite_run` calls it once; the studies drawn from the run are each test's own."""
    from medheb_app.eval.runner import run_suite
    from medheb_app.settings import Settings
    from medheb_app.tasks import medheb

    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(medheb, "CHEST_N", 240)
        patch.setattr(medheb, "VOLUME_SUBJECTS", 20)  # a test part of 4 subjects
        patch.setattr(medheb, "MAX_QUERIES", {"test": 6, "train": 6})
        patch.setattr(medheb, "GRADED_MAX_QUERIES", 6)
        settings = Settings.from_env(data_dir=root / "data")
        tasks, _skipped = medheb.get_suite("medheb-lite").build(settings)
        run_suite(tasks, ["random", "oracle"], root / "run", settings, record=False)
    finally:
        patch.undo()
    return LiteRun(tuple(tasks), root / "run")


def medheb_lite_study(
    lite: LiteRun, settings: Settings, root: Path, items_per_task: int, **options: Any
) -> tuple[list[Task], Store, Any]:
    """The study "every-family" of items_per_task x tasks items over the session's medheb-lite
    run `lite`, in this test's own store (settings.database_url), payload media under
    root/media. Returns the tasks, the store and create_study's result."""
    from medheb_app.store.db import Store
    from medheb_app.study import create_study, describe_with_tasks

    tasks = list(lite.tasks)
    store = Store.open(settings.database_url)
    created = create_study(
        store,
        "every-family",
        ["random", "oracle"],
        lite.run_dir,
        n_items=items_per_task * len(tasks),
        describe=describe_with_tasks(tasks, root / "media"),
        **options,
        reveal_after_vote=True,
    )
    return tasks, store, created
