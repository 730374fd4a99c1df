"""Run a suite against models: score, rank, write result files and record the run in the store.

Two kinds of suite, one runner:
- MedHEB (`medheb-lite` or a manifest folder), section 5.1: for each task a model embeds the
  queries (with the task instruction, Appendix A.6) and the candidate pool (without one),
  ranks candidates by cosine similarity and is scored by where the relevant targets land.
- CXR-Retrieve (`CxrRetrieveSuite`): 145 compositional text queries over a labelled chest
  X-ray gallery, scored by eval/cxr_retrieve.py under main and strict relevance.

Rankers, the baselines and the oracle of each kind of relevance: medheb_app.eval.rankers.
Every run writes DIR/summary.json (a `Summary`) plus one result file per model and task, and
a row per run and per model-task in the store, so the explorer lists both kinds alike.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from medheb_app.cancellation import Cancelled
from medheb_app.eval.cxr_retrieve import cxr_model_summary, evaluate
from medheb_app.eval.estimate import (
    estimate_cxr,
    estimate_medheb,
    model_cards,
    new_chars_key,
    new_vectors_key,
    rates_from_store,
)
from medheb_app.eval.medheb_scoring import (  # re-exported: the runner's public API
    evaluate_task,
    instruction_for,
    rank,
    summarise_model,
)
from medheb_app.eval.progress import WorkProgress
from medheb_app.eval.rankers import Progress, Ranker, load_ranker, unread_forms
from medheb_app.eval.ray_runner import RayPool
from medheb_app.eval.reports import render_report
from medheb_app.eval.results import ModelSummary, Summary, TaskRun, model_dirname, now_iso
from medheb_app.index.cache import EmbeddingCache
from medheb_app.models.registry import device_for
from medheb_app.ranking.logic_aware import PREFIX as LOGIC_PREFIX
from medheb_app.ranking.probes import ProbeConfig
from medheb_app.settings import Settings
from medheb_app.store import runs as run_table
from medheb_app.store.db import Store
from medheb_app.tasks.base import Suite, Task
from medheb_app.tasks.cxr_retrieve import CxrRetrieveSuite

ENGINES = ("local", "ray")


class RunRecord:
    """A run's row in the SQL store (or nothing, with record=False) and its clock: created
    when the run begins, started once its tasks are built, then results, then finish. Both
    kinds of suite keep their books here, so their summaries time and close alike."""

    def __init__(self, settings: Settings, record: bool) -> None:
        self.settings = settings
        self.record = record
        self.store = None
        self.run_id: int | None = None
        self.started_iso = now_iso()
        self.clock = time.perf_counter()
        self.build_s = 0.0
        self.model_timing: dict[str, float] = {}
        self.new_vectors: dict[str, int] = {}  # vectors each model computed (estimate rates)
        self.text_chars: dict[str, int] = {}  # characters of the texts each model embedded

    def kinds(self, spec: str, ranker: Any) -> None:
        """Record the ranker's embedding seconds and new vectors per input kind (the
        estimate's per-kind rates: "spec/kind_s", "spec/kind_new_vectors")."""
        for kind, (seconds, new) in getattr(ranker, "kind_timing", {}).items():
            if new > 0:
                self.model_timing[f"{spec}/{kind}"] = round(seconds, 3)
                self.new_vectors[f"{spec}/{kind}"] = int(new)
        chars = int(getattr(ranker, "new_text_chars", 0) or 0)
        if chars > 0 and f"{spec}/text" in self.new_vectors:
            self.text_chars[spec] = chars

    def start(self, suite: str, specs: list[str], out_dir: Path, settings: dict) -> None:
        """The tasks are built: note how long that took and open the run's store row."""
        self.build_s = time.perf_counter() - self.clock
        if self.record:
            self.store = Store.open(self.settings.database_url)
            self.run_id = run_table.start_run(self.store, suite, specs, str(out_dir), settings)

    def add(self, **values: Any) -> None:
        if self.store is not None and self.run_id is not None:
            run_table.add_task_result(self.store, self.run_id, **values)

    def finish(self, error: BaseException | None = None) -> None:
        if self.store is None or self.run_id is None:
            return
        if error is None:
            run_table.finish_run(self.store, self.run_id, "finished")
        else:
            status = "cancelled" if isinstance(error, Cancelled) else "failed"
            run_table.finish_run(self.store, self.run_id, status, error=str(error))

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Mark the run cancelled (Cancelled) or failed when the block raises; re-raise."""
        try:
            yield
        except BaseException as error:
            self.finish(error)
            raise

    def close(self, **fields: Any) -> Summary:
        """The run's Summary with its timing and store id; the store row is marked finished."""
        timing = {
            "build_tasks_s": round(self.build_s, 2),
            **{f"{k}_s": v for k, v in self.model_timing.items()},
            **{new_vectors_key(k): n for k, n in self.new_vectors.items()},
            **{new_chars_key(k): n for k, n in self.text_chars.items()},
        }
        summary = Summary(
            **fields,
            started=self.started_iso,
            finished=now_iso(),
            timing=timing,
            run_id=self.run_id,
        )
        summary.timing["total_s"] = round(time.perf_counter() - self.clock, 2)
        self.finish()
        return summary


@dataclass(frozen=True)
class RunContext:
    """What every suite's run loop needs besides the suite and the models."""

    specs: list[str]
    out_dir: Path
    settings: Settings
    report: Progress
    note: Callable[[str], None]
    stop: threading.Event | None
    only: Sequence[str] | None
    record: bool
    pool: Any = None  # with --engine ray: the RayPool that scores on the cluster

    def remote(self, models: Sequence[str | Ranker], *work: Any) -> Sequence[str | Ranker]:
        """The models as the engine runs them: as given (local), or as rankers whose scores
        are being computed on the Ray cluster, all pairs at once (eval/ray_runner.py)."""
        return models if self.pool is None else self.pool.rankers(models, *work)

    def unpack(self) -> tuple:
        return self.out_dir, self.settings, self.report, self.note, self.stop, self.record


def _check_models(models: Sequence[str | Ranker]) -> list[str]:
    if not models:
        raise ValueError("Give at least one model spec (e.g. --model random).")
    specs = [m if isinstance(m, str) else m.spec for m in models]
    if len(set(specs)) != len(specs):
        raise ValueError("The same model spec was given twice.")
    return specs


def run_suite(
    suite: Suite | CxrRetrieveSuite | Sequence[Task],
    models: Sequence[str | Ranker],
    out_dir: Path,
    settings: Settings,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    only: Sequence[str] | None = None,
    record: bool = True,
    log: Callable[[str], None] | None = None,
    engine: str = "local",
    ray_address: str | None = None,
) -> Summary:
    """Evaluate every model on every task; write result files, summary.json and report.md.

    `models` are spec strings (see eval.rankers.load_ranker) or ready Ranker objects.
    Runs are recorded in the SQL store (`record`). Cancelling through `stop` raises
    Cancelled (medheb_app.cancellation) after marking the run cancelled; finished task files
    stay on disk.
    `log` gets one line per task (what was scored, its main score, or why it was skipped).
    `engine` "ray" scores every task x model pair (every model, for cxr-retrieve) at once as
    Ray tasks on the cluster at `ray_address` ("auto", host:port; a local one is started and
    stopped when None); this process ranks, writes the same files and store rows.
    """
    if engine not in ENGINES:
        raise ValueError(f"Unknown engine {engine!r}; use {' or '.join(ENGINES)}.")
    if ray_address and engine != "ray":
        raise ValueError("--ray-address needs --engine ray.")
    specs = _check_models(models)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = progress or (lambda fraction, message: None)
    note = log or (lambda line: None)
    report(0.0, "building tasks")
    ctx = RunContext(specs, out_dir, settings, report, note, stop, only, record)
    runner = _run_cxr_retrieve if isinstance(suite, CxrRetrieveSuite) else _run_medheb
    if engine == "ray":
        with RayPool.connect(ray_address, settings, stop) as pool:
            summary = runner(suite, models, replace(ctx, pool=pool))
        # its per-model seconds are waits on units that ran side by side, not a model's rate
        summary.settings["engine"] = "ray"
    else:
        summary = runner(suite, models, ctx)
    summary.to_disk(out_dir)
    (out_dir / "report.md").write_text(render_report(summary))
    report(1.0, f"done: {len(summary.tasks)} tasks x {len(models)} models")
    return summary


def _run_medheb(
    suite: Suite | Sequence[Task], models: Sequence[str | Ranker], ctx: RunContext
) -> Summary:
    out_dir, settings, report, note, stop, record = ctx.unpack()
    recorder = RunRecord(settings, record)
    if isinstance(suite, Suite):
        suite_name = suite.name

        def building(name: str, i: int, n: int) -> None:
            if stop is not None and stop.is_set():
                cancelled = Cancelled(f"cancelled while building tasks ({i} of {n})")
                recorder.start(suite_name, ctx.specs, out_dir, run_settings(settings, ctx.specs))
                recorder.finish(cancelled)  # the run's row says it was cancelled, and when
                raise cancelled
            report(0.0, f"building task {name} ({i + 1} of {n})")

        tasks, skipped = suite.build(settings, only=ctx.only, before_each=building)
    else:
        suite_name, tasks, skipped = "custom", list(suite), {}
    for name, why in skipped.items():
        note(f"skipped {name}: {why}")
    if not tasks:
        raise ValueError(f"No task of suite {suite_name} could be built: {skipped}")
    settings_record = run_settings(settings, ctx.specs)
    recorder.start(suite_name, ctx.specs, out_dir, settings_record)
    models = ctx.remote(models, tasks)
    summaries: dict[str, ModelSummary] = {}
    cache = EmbeddingCache(settings.cache_dir)
    meter = _medheb_meter(report, suite_name, tasks, ctx.specs, settings, cache, recorder)
    with recorder.guard():
        for m, model in enumerate(models):
            model_started = time.perf_counter()
            ranker = load_ranker(model, settings) if isinstance(model, str) else model
            spec = ranker.spec
            vectors_before = cache.count(ranker.card.fingerprint)
            runs: list[TaskRun] = []
            for t, task in enumerate(tasks):
                if stop is not None and stop.is_set():
                    raise Cancelled("Benchmark run was cancelled.")
                stage = m * len(tasks) + t
                meter.at(stage, 0.0, f"{spec}: {task.name}")
                missing = unread_forms(task, ranker.card.modalities)
                if missing:
                    why = f"{spec} does not read {', '.join(sorted(missing))} evidence"
                    skipped[f"{spec}/{task.name}"] = why
                    note(f"skipped {spec}/{task.name}: {why}")
                    continue

                task_progress = meter.span(stage, stage, f"{task.name}: ")
                run = evaluate_task(task, ranker, task_progress, stop)
                path = run.to_disk(out_dir)
                runs.append(run)
                main = task.metadata.main_metric
                note(
                    f"{spec} on {task.name}: {main} {100 * run.scores[main]:.1f} "
                    f"({len(task.queries)} queries, {len(task.candidates)} candidates, "
                    f"{run.timing['score_s']:.1f} s)"
                )
                recorder.add(
                    model=spec,
                    task=task.name,
                    family=task.metadata.family,
                    split=task.metadata.split,
                    metrics={k: v for k, v in run.scores.items() if k != "n_queries"},
                    path=str(path),
                )
            if runs:
                summaries[spec] = summarise_model(spec, ranker.card.to_dict(), ranker.note, runs)
            recorder.model_timing[spec] = round(time.perf_counter() - model_started, 2)
            recorder.new_vectors[spec] = cache.count(ranker.card.fingerprint) - vectors_before
            recorder.kinds(spec, ranker)
    return recorder.close(
        suite=suite_name,
        models=summaries,
        tasks=[{**task.metadata.model_dump(), **task.counts()} for task in tasks],
        skipped=skipped,
        out_dir=str(out_dir),
        settings=settings_record,
    )


def _medheb_meter(
    report: Any,
    suite_name: str,
    tasks: Sequence[Task],
    specs: Sequence[str],
    settings: Settings,
    cache: Any,
    recorder: RunRecord,
) -> Any:
    """Progress weighted by the run's own estimate: one stage per (model, task), its weight
    the seconds the estimate gives it (per input kind, baselines zero), so a baseline that
    takes a second no longer fills half the bar."""
    rates = rates_from_store(recorder.store, specs) if recorder.store is not None else {}
    plan = estimate_medheb(suite_name, tasks, specs, model_cards(settings), cache, rates)
    work: dict[tuple[str, str], float] = {}
    for cell in plan.cells:
        work[cell.model, cell.task] = work.get((cell.model, cell.task), 0.0) + cell.work
    return WorkProgress(report, [work.get((s, t.name), 0.0) for s in specs for t in tasks])


def task_work(task: Any) -> int:
    """A task's share of a run's work: what a model embeds (queries plus candidates)."""
    return len(task.queries) + len(task.candidates)


def run_settings(settings: Settings, specs: Sequence[str]) -> dict[str, Any]:
    """What of the settings a run of `specs` depends on (kept in summary.json and the store):
    the device is what "auto" became on this machine for these models ("cpu" for a run of
    the oracle and random alone, which never imports torch to ask)."""
    models = [spec.strip().removeprefix(LOGIC_PREFIX) for spec in specs]
    return {
        "data_dir": str(settings.data_dir),
        "device": device_for(models, settings.device),
        "shared_data": str(settings.shared_data_dir),
    }


def _run_cxr_retrieve(
    suite: CxrRetrieveSuite, models: Sequence[str | Ranker], ctx: RunContext
) -> Summary:
    out_dir, settings, report, note, stop, record = ctx.unpack()

    if ctx.only:
        raise ValueError("The cxr-retrieve suite is one task; --task does not apply.")
    recorder = RunRecord(settings, record)
    gallery, train = suite.build(settings)
    for line in gallery.notes:
        note(f"note: {line}")
    settings_record = {**run_settings(settings, ctx.specs), **suite.describe()}
    recorder.start(suite.name, ctx.specs, out_dir, settings_record)
    models = ctx.remote(models, suite, gallery, train)
    cache = EmbeddingCache(settings.cache_dir)
    summaries: dict[str, ModelSummary] = {}
    cards = model_cards(settings)
    rates = rates_from_store(recorder.store, ctx.specs) if recorder.store is not None else {}
    plan = estimate_cxr(suite, gallery, train, ctx.specs, settings, cards, cache, rates)
    meter = WorkProgress(report, [cell.work for cell in plan.cells])
    stages = {spec: [i for i, c in enumerate(plan.cells) if c.model == spec] for spec in ctx.specs}
    with recorder.guard():
        for model in models:
            if stop is not None and stop.is_set():
                raise Cancelled("Benchmark run was cancelled.")
            model_started = time.perf_counter()
            spec = model if isinstance(model, str) else model.spec
            *fit, images, queries = stages[spec]
            base = cards.get(spec.removeprefix("logic:")) or {}
            vectors_before = cache.count(base["fingerprint"]) if base.get("fingerprint") else 0
            for i in fit:  # logic: probes not fit yet embed the train images first
                cell = plan.cells[i]
                note(f"{spec}: {cell.task}: {cell.items} embeddings, {cell.cached} cached")
                meter.at(i, 0.0, f"{spec}: fitting probes")
            fit_progress = meter.span(fit[0], fit[-1], f"{spec}: probe fit: ") if fit else None
            ranker = (
                load_ranker(
                    model,
                    settings,
                    "constraints",
                    cache=cache,
                    train_studies=lambda: train,
                    probe_config=ProbeConfig(views=suite.probe_views),
                    progress=fit_progress,
                )
                if isinstance(model, str)
                else model
            )
            if not base.get("fingerprint"):  # not a listed model: counted from here
                vectors_before = cache.count(ranker.card.fingerprint)
            for cell in (plan.cells[images], plan.cells[queries]):
                note(f"{spec}: {cell.task}: {cell.items} embeddings, {cell.cached} cached")
            model_progress = meter.span(images, queries, f"{spec}: ")
            model_progress(0.0, f"ranking {len(gallery)} images")

            result = evaluate(
                ranker, gallery, suite.setting, suite.paraphrase, model_progress, stop
            )
            meter.at(queries, 1.0, f"{spec}: scored {len(result.queries)} queries")
            result.timing_s["total"] = round(time.perf_counter() - model_started, 2)
            path = result.to_disk(out_dir)
            summaries[spec] = cxr_model_summary(result)
            flat = summaries[spec].tasks[suite.name]
            note(
                f"{spec} on cxr-retrieve ({len(gallery)} images): P@5 single "
                f"{flat['single/P@5']:.1f}, pair {flat['pair/P@5']:.1f}, negation "
                f"{flat['negation/P@5']:.1f}, HNRR@5 {flat['negation/HNRR@5']:.1f}"
            )
            recorder.add(
                model=spec,
                task=suite.name,
                family="T-I",
                split="ID",
                metrics={k: v for k, v in flat.items() if "/" in k},
                path=str(path),
            )
            recorder.model_timing[spec] = result.timing_s["total"]
            recorder.new_vectors[spec] = cache.count(ranker.card.fingerprint) - vectors_before
            recorder.kinds(spec, ranker)  # per-kind rates, as MedHEB runs record them
    return recorder.close(
        suite=suite.name,
        models=summaries,
        tasks=[
            {
                "name": suite.name,
                "family": "T-I",
                "form": "2d",
                "split": "ID",
                "source": suite.data,
                "graded": False,
                "n_queries": 145,
                "n_candidates": len(gallery),
                **suite.describe(),
            }
        ],
        skipped={},
        out_dir=str(out_dir),
        settings=settings_record,
        kind="cxr-retrieve",
    )


__all__ = [
    "evaluate_task",
    "instruction_for",
    "model_dirname",
    "rank",
    "run_suite",
    "summarise_model",
]
