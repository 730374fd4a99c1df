"""The Ray engine of `bench run --engine ray`: a run's units of work as Ray tasks on a cluster.

A MedHEB run's unit is one task x one model, a CXR-Retrieve run's one model. Each unit is a
Ray task that loads its model (once per worker process: the model registry memoises it),
scores and returns its result to the driver; the driver writes result files, summary.json
and store rows exactly as the local engine does, in the same order (eval/runner.py), so the
two engines' folders differ only in timings. Tasks and galleries go to the object store
once and are shared by every unit that reads them.

The cluster is the one `index build --engine ray` uses (index/ray_engine.py `_connect`):
`ray_address` joins a running one ("auto", host:port); without it a local cluster is started
for the run and stopped after it; a process that already called `ray.init` (a test session)
keeps its own. Workers read DATA_DIR (models, embedding cache) at the driver's paths, so on a
multi-node cluster those must be on a shared filesystem. A unit asks for one CPU, and one
GPU when the cluster has GPUs and the run's device is not "cpu" (baselines never do).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from medheb_app.eval.rankers import Ranker
from medheb_app.eval.runner import (
    BASELINE_SPECS,
    PairOutcome,
    RunContext,
    score_cxr_model,
    score_pair,
)
from medheb_app.settings import Settings
from medheb_app.tasks.base import Task
from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite

POLL_S = 0.5  # how often the driver looks at `stop` while units run


def _pair_unit(model: str | Ranker, task: Task, index: int, settings: Settings) -> PairOutcome:
    """Ray task body: one model (loaded in this worker) scores one MedHEB task."""
    from medheb_app.eval.rankers import load_ranker

    started = time.perf_counter()
    ranker = load_ranker(model, settings) if isinstance(model, str) else model
    load_s = time.perf_counter() - started
    outcome = score_pair(ranker, task, index)
    return replace(outcome, seconds=outcome.seconds + load_s)


def _cxr_unit(
    model: str | Ranker, suite: CxrRetrieveSuite, gallery: Any, train: Any, settings: Settings
) -> Any:
    """Ray task body: one model (loaded in this worker) on CXR-Retrieve."""
    return score_cxr_model(model, suite, gallery, train, settings)


@contextmanager
def _cluster(address: str | None) -> Iterator[None]:
    """Connected to the run's cluster for the block; a cluster started here is stopped."""
    import ray

    from medheb_app.index.ray_engine import _connect

    started_here = _connect(address)
    try:
        yield
    finally:
        if started_here:
            ray.shutdown()


def _resources(model: str | Ranker, settings: Settings) -> dict[str, float]:
    """What one unit asks of the cluster: one CPU, plus one GPU for a real model when the
    cluster has GPUs and the run may use them."""
    import ray

    spec = model if isinstance(model, str) else model.spec
    gpus = ray.cluster_resources().get("GPU", 0)
    wants_gpu = gpus and settings.device != "cpu" and spec.strip() not in BASELINE_SPECS
    return {"num_cpus": 1, "num_gpus": 1 if wants_gpu else 0}


def _in_order(refs: Sequence[Any], ctx: RunContext, labels: Sequence[str]) -> Iterator[Any]:
    """Each unit's result in submission order, as soon as it and all before it are done.
    Progress counts finished units; `stop` cancels what is still queued or running. A unit's
    error is raised as its own exception (its message, not Ray's traceback)."""
    import ray
    from ray.exceptions import RayTaskError

    finished: set[Any] = set()
    waiting = list(refs)
    for position, ref in enumerate(refs):
        while ref not in finished:
            if ctx.stop is not None and ctx.stop.is_set():
                for pending in waiting:
                    ray.cancel(pending, force=True)
                raise InterruptedError("Benchmark run was cancelled.")
            done, waiting = ray.wait(waiting, num_returns=1, timeout=POLL_S)
            finished.update(done)
            if done:
                ctx.report(len(finished) / len(refs), f"{len(finished)}/{len(refs)} done")
        try:
            yield ray.get(ref)
        except RayTaskError as error:
            for pending in waiting:
                ray.cancel(pending, force=True)
            cause = getattr(error, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise RuntimeError(f"{labels[position]} failed on the Ray cluster.") from None


def ray_pair_outcomes(
    tasks: Sequence[Task], models: Sequence[str | Ranker], ctx: RunContext
) -> Iterator[PairOutcome]:
    """Every (model, task) pair's outcome, model by model and task by task (the local
    engine's order), each scored in a Ray task."""
    import ray

    with _cluster(ctx.ray_address):
        unit = ray.remote(_pair_unit)
        task_refs = [ray.put(task) for task in tasks]
        settings_ref = ray.put(ctx.settings)
        refs, labels = [], []
        for model in models:
            options = _resources(model, ctx.settings)
            for index, task in enumerate(tasks):
                call = unit.options(**options, max_retries=0)
                refs.append(call.remote(model, task_refs[index], index, settings_ref))
                spec = model if isinstance(model, str) else model.spec
                labels.append(f"{spec} on {task.name}")
        ctx.report(0.0, f"{len(refs)} task x model pairs sent to the Ray cluster")
        yield from _in_order(refs, ctx, labels)


def ray_cxr_outcomes(
    suite: CxrRetrieveSuite,
    gallery: Any,
    train: Sequence[Any],
    models: Sequence[str | Ranker],
    ctx: RunContext,
) -> Iterator[tuple[str, Any]]:
    """(spec, CxrRetrieveReport) for each model in order, each model scored in a Ray task."""
    import ray

    with _cluster(ctx.ray_address):
        unit = ray.remote(_cxr_unit)
        shared = [ray.put(value) for value in (suite, gallery, list(train), ctx.settings)]
        refs, specs = [], []
        for model in models:
            call = unit.options(**_resources(model, ctx.settings), max_retries=0)
            refs.append(call.remote(model, *shared))
            specs.append(model if isinstance(model, str) else model.spec)
        ctx.report(0.0, f"{len(refs)} models sent to the Ray cluster")
        for position, result in enumerate(_in_order(refs, ctx, specs)):
            yield specs[position], result
