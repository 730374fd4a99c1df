"""The Ray engine of `bench run --engine ray`: a run's scoring as Ray tasks on a cluster.

The unit of work is one task x one model for a MedHEB suite and one model for CXR-Retrieve:
a Ray task that loads the model (once per worker process: the model registry memoises it)
and computes the (queries x candidates) score matrix, the costly part of a run. As soon as
the tasks are built every unit is submitted, so they run side by side on the cluster; the
runner's own loop (eval/runner.py) then goes through the pairs in the local engine's order
with a `RayRanker` in place of each model, whose `score` waits for that pair's matrix. The
driver therefore ranks, writes every result file and store row exactly as the local engine
does: only the process that computed the scores differs.

The cluster is the one `index build --engine ray` uses (index/ray_engine.py `connect`):
"auto" or host:port joins a running one; without an address a local cluster is started for
the run and stopped after it; a process that already called `ray.init` (a test session)
keeps its own. Workers read DATA_DIR (models, embedding cache, task data) at the driver's
paths, so on a multi-node cluster it must be on a shared filesystem. A unit asks for one CPU
(torch then runs on one thread), and one GPU for a real model when the cluster has GPUs and
the run's device is not "cpu".
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from medheb_app.cancellation import Cancelled
from medheb_app.eval.rankers import Progress, Ranker, load_ranker, unread_forms
from medheb_app.index.cache import EmbeddingCache
from medheb_app.index.ray_engine import connect
from medheb_app.models.base import ModelCard
from medheb_app.models.baselines import BASELINES
from medheb_app.ranking.probes import ProbeConfig
from medheb_app.settings import Settings
from medheb_app.tasks.cxr_retrieve import CxrRetrieveTask

POLL_S = 0.5  # how often a waiting driver looks at `stop`


@dataclass(frozen=True)
class Scored:
    """What a unit returns: the ranker it loaded (spec, card, note) and its score matrix,
    None when the model does not read the task's evidence (the runner skips that pair)."""

    spec: str
    card: ModelCard
    note: str
    scores: np.ndarray | None
    kind_timing: dict[str, list[float]] = field(default_factory=dict)  # the worker's, per kind
    new_text_chars: int = 0  # characters of the texts the worker embedded anew (estimate rates)


def _scored(ranker: Ranker, task: Any, readable: bool) -> Scored:
    scores = np.asarray(ranker.score(task)) if readable else None
    timing = {k: list(v) for k, v in getattr(ranker, "kind_timing", {}).items()}
    chars = int(getattr(ranker, "new_text_chars", 0) or 0)
    return Scored(ranker.spec, ranker.card, ranker.note, scores, timing, chars)


def score_medheb_pair(model: str | Ranker, task: Any, settings: Settings) -> Scored:
    """Ray task body: one model (loaded in this worker) scores one MedHEB task."""
    ranker = load_ranker(model, settings) if isinstance(model, str) else model
    return _scored(ranker, task, not unread_forms(task, ranker.card.modalities))


def score_cxr_model(
    model: str | Ranker, suite: Any, gallery: Any, train: Sequence[Any], settings: Settings
) -> Scored:
    """Ray task body: one model (loaded in this worker, logic: probes fit here) scores the
    145 CXR-Retrieve queries over the gallery."""
    ranker = (
        load_ranker(
            model,
            settings,
            "constraints",
            cache=EmbeddingCache(settings.cache_dir),
            train_studies=lambda: train,
            probe_config=ProbeConfig(views=suite.probe_views),
        )
        if isinstance(model, str)
        else model
    )
    return _scored(ranker, CxrRetrieveTask(gallery, paraphrase=suite.paraphrase), True)


class RayRanker:
    """A model whose scores are computed on the cluster: `score(task)` waits for that task's
    unit; `card` and `note` come from the first unit to finish loading the model."""

    def __init__(self, spec: str, units: dict[str, Any], pool: RayPool) -> None:
        self.spec = spec
        self.units = units  # task name (None for CXR-Retrieve) -> object ref of a Scored
        self.pool = pool
        self._first: Scored | None = None
        # embedding seconds and new vectors per input kind, summed over the units waited for
        # (the runner records them as the local engine's rankers report them)
        self.kind_timing: dict[str, list[float]] = {}
        self.new_text_chars = 0

    def _any(self) -> Scored:
        if self._first is None:
            self._first = self.pool.wait(next(iter(self.units.values())))
        return self._first

    @property
    def card(self) -> ModelCard:
        return self._any().card

    @property
    def note(self) -> str:
        return self._any().note

    def score(
        self, task: Any, progress: Progress | None = None, stop: threading.Event | None = None
    ) -> np.ndarray:
        key = getattr(task, "name", None) if None not in self.units else None
        scored = self.pool.wait(self.units[key])
        for kind, (seconds, new) in scored.kind_timing.items():
            spent = self.kind_timing.setdefault(kind, [0.0, 0])
            spent[0] += seconds
            spent[1] += new
        self.new_text_chars += scored.new_text_chars
        if scored.scores is None:
            raise ValueError(f"{self.spec} does not read the evidence of {key}.")
        return scored.scores


class RayPool:
    """The run's connection to the cluster and every unit it submitted."""

    def __init__(self, settings: Settings, stop: threading.Event | None) -> None:
        self.settings = settings
        self.stop = stop
        self.refs: list[Any] = []

    @classmethod
    @contextmanager
    def connect(
        cls, address: str | None, settings: Settings, stop: threading.Event | None
    ) -> Iterator[RayPool]:
        """Connected for the block; units still queued at its end (an error, a cancel) are
        cancelled, and a cluster started here is stopped."""
        import ray

        started_here = connect(address)
        pool = cls(settings, stop)
        try:
            yield pool
        finally:
            pool.cancel()
            if started_here:
                ray.shutdown()

    def _options(self, model: str | Ranker) -> dict[str, Any]:
        """One CPU per unit; one GPU too for a real model when the cluster has GPUs and the
        run may use them. No retries: a failing unit's error is the run's error."""
        import ray

        spec = model if isinstance(model, str) else model.spec
        gpus = ray.cluster_resources().get("GPU", 0)
        real = spec.strip() not in BASELINES
        use_gpu = bool(gpus) and self.settings.device != "cpu" and real
        return {"num_cpus": 1, "num_gpus": 1 if use_gpu else 0, "max_retries": 0}

    def rankers(self, models: Sequence[str | Ranker], *work: Any) -> list[RayRanker]:
        """Submit every unit of the run now; one RayRanker per model, in the given order.
        `work` is (tasks,) for a MedHEB suite, (suite, gallery, train) for CXR-Retrieve."""
        import ray

        settings = ray.put(self.settings)
        if len(work) == 1:
            tasks = list(work[0])
            shared = [ray.put(task) for task in tasks]
            body, keys = ray.remote(score_medheb_pair), [task.name for task in tasks]
            arguments = [(ref, settings) for ref in shared]
        else:
            suite, gallery, train = work
            body, keys = ray.remote(score_cxr_model), [None]
            arguments = [(*(ray.put(v) for v in (suite, gallery, list(train))), settings)]
        rankers = []
        for model in models:
            call = body.options(**self._options(model))
            pairs = zip(keys, arguments, strict=True)
            units = {key: call.remote(model, *args) for key, args in pairs}
            self.refs += list(units.values())
            # the spec the local loop would use: load_ranker's (stripped) for a MedHEB suite,
            # the string as given for CXR-Retrieve
            spec = model.strip() if isinstance(model, str) and len(work) == 1 else model
            spec = spec if isinstance(spec, str) else model.spec
            rankers.append(RayRanker(spec, units, self))
        return rankers

    def wait(self, ref: Any) -> Any:
        """The unit's result, looking at `stop` while it runs; a unit's error is raised as
        its own exception (its message, not Ray's traceback)."""
        import ray
        from ray.exceptions import RayTaskError

        while not ray.wait([ref], timeout=POLL_S)[0]:
            if self.stop is not None and self.stop.is_set():
                raise Cancelled("Benchmark run was cancelled.")
        try:
            return ray.get(ref)
        except RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, Exception):
                raise cause from None
            raise RuntimeError("A benchmark unit failed on the Ray cluster.") from None

    def cancel(self) -> None:
        """Cancel every unit not finished yet (finished ones are left alone)."""
        import ray

        if not self.refs:
            return
        _, pending = ray.wait(self.refs, num_returns=len(self.refs), timeout=0)
        for ref in pending:
            ray.cancel(ref, force=True)
