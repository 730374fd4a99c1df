"""A small precomputed benchmark run and a blinded study on the demo corpus, so a fresh Space's
explorer and analysis tabs show something real on the first visit.

Built by the app's bootstrap after the demo index (medheb_app.demo), once, from the demo
corpus's held-out test studies: three MedHEB-style tasks (image to same-finding image, image to
its label, label to images) with at most SHOWCASE_QUERIES queries each, ranked by `random` and
by the first demo model, whose vectors for these studies are already in the embedding cache
from the index build, so the run costs seconds. The run is recorded like any other (runs
table, DATA_DIR/runs/demo-showcase) and a study of SHOWCASE_ITEMS items is created from it.
Everything is labelled synthetic. Later starts find both and do nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from medheb_app.eval.runner import run_suite
from medheb_app.evidence.phantoms import load_corpus, saved
from medheb_app.serving import default_demo_models
from medheb_app.settings import Settings
from medheb_app.store.db import Store
from medheb_app.study import (
    StudyError,
    create_study,
    describe_with_tasks,
    list_studies,
    load_run,
)
from medheb_app.study.items import common_queries
from medheb_app.tasks import medheb
from medheb_app.tasks.base import EmptyTask, revision
from medheb_app.tasks.builders import generic, phantom

Progress = Callable[[float, str], None]
SHOWCASE_RUN = "demo-showcase"
SHOWCASE_STUDY = "Demo study (synthetic phantoms)"
SHOWCASE_QUERIES = 40
SHOWCASE_ITEMS = 20


def showcase_models(settings: Settings) -> list[str]:
    """`random` (chance) against the first model the demo index was built for."""
    first = next((m for m in default_demo_models(settings) if m != "random"), "oracle")
    return ["random", first]


def showcase_tasks(corpus_dir: Path, n: int, seed: int) -> list[Any]:
    """The three small tasks over the demo corpus's test studies, less those the corpus is too
    small for (a 40-study demo has no two test studies that share a finding: no I-I query)."""
    test = phantom.in_part(load_corpus(corpus_dir), "test")
    rev = revision("demo-cxr", n, seed, saved.generator_version(), [s.id for s in test])
    items = phantom.labelled_chest(test, rev)
    label_id = medheb._label_id("chexpert")

    def meta(name: str, family: str, description: str, **fields: Any):
        return medheb._phantom_meta(name, family, description, rev, **fields)

    builders: list[Callable[[], Any]] = [
        lambda: generic.same_label_task(
            meta(
                "demo-cxr-i2i",
                "I-I",
                "Same finding, other phantoms (demo).",
                qry_inst=medheb.INST_I2I,
            ),
            items,
            SHOWCASE_QUERIES,
            seed=1,
        ),
        lambda: generic.image_to_label_task(
            meta(
                "demo-cxr-i2label",
                "I-Lab",
                "Image to its finding (demo).",
                qry_inst=medheb.INST_QUESTION,
                qry_text=medheb.TEXT_CXR_LABEL,
            ),
            items,
            label_id,
            medheb.label_text,
            max_queries=SHOWCASE_QUERIES,
            seed=2,
        ),
        lambda: generic.label_to_image_task(
            meta("demo-cxr-t2i", "T-I", "Finding to images (demo).", qry_inst=medheb.INST_T2I),
            items,
            label_id,
            medheb.label_text,
        ),
    ]
    try:
        return [build() for build in builders]
    except EmptyTask:
        return []


def ensure_showcase(
    settings: Settings,
    corpus_dir: Path,
    n: int,
    seed: int,
    progress: Progress | None = None,
    models: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Make the showcase run and study exist; cheap (two lookups) once they do. A demo corpus
    too small for them gets neither, or the run without the study, and a `reason` that the
    bootstrap's progress reports in one line."""
    models = list(models or showcase_models(settings))
    out = settings.runs_dir / SHOWCASE_RUN
    store = Store.open(settings.database_url)
    studies = {study["name"] for study in list_studies(store)}
    ran = (out / "summary.json").is_file()
    if ran and SHOWCASE_STUDY in studies:
        return {"run": str(out), "study": SHOWCASE_STUDY, "built": False}
    tasks = showcase_tasks(corpus_dir, n, seed)
    if not tasks:
        reason = (
            f"demo benchmark run skipped: the {n}-study demo corpus is too small for its tasks "
            "(a larger MEDHEB_DEMO_SIZE builds it)"
        )
        if progress:
            progress(1.0, reason)
        return {"run": None, "study": None, "built": False, "reason": reason}
    if not ran:
        if progress:
            progress(0.0, f"benchmarking {', '.join(models)} on {len(tasks)} small demo tasks")
        run_suite(tasks, models, out, settings, progress)
    if SHOWCASE_STUDY not in studies:
        outputs = load_run(out, models)
        shared = sum(len(ids) for ids in common_queries({m: outputs[m] for m in models}).values())
        describe = describe_with_tasks(tasks, settings.data_dir / "study-media" / SHOWCASE_RUN)
        try:
            create_study(
                store,
                SHOWCASE_STUDY,
                models,
                outputs,
                n_items=min(SHOWCASE_ITEMS, shared),
                seed=0,
                describe=describe,
                source=out,
            )
        except StudyError as error:  # a small demo: the run is kept for the explorer
            reason = f"demo study skipped: {error}"
            if progress:
                progress(1.0, reason)
            return {"run": str(out), "study": None, "built": not ran, "reason": reason}
    if progress:
        progress(1.0, "demo benchmark run and study ready")
    return {"run": str(out), "study": SHOWCASE_STUDY, "built": True}
