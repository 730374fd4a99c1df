"""What the admin panel launches (and the admin API, and bench/bench_cancel.py): each factory
binds settings and returns a JobRunner function fn(params, progress, log, stop) -> result dict
(medheb_app/jobs.py). Benchmark runs, training and index builds call the same library
functions as the CLI."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from medheb_app.eval.estimate import TrainingEstimate, training_estimate
from medheb_app.eval.runner import run_suite
from medheb_app.index.build import build_from_source, check_replace
from medheb_app.index.catalog import check_index_name
from medheb_app.index.sources import check_served_source
from medheb_app.jobs import JobRunner
from medheb_app.models.registry import (
    UnknownModelError,
    card_only,
    check_spec,
    spec_of_folder,
    valid_specs,
)
from medheb_app.serving import build_default_model, default_demo_models
from medheb_app.settings import Settings
from medheb_app.tasks.base import FAMILIES
from medheb_app.tasks.cxr_retrieve import SUITE_NAME, CxrRetrieveSuite
from medheb_app.tasks.medheb import SUITES, get_suite
from medheb_app.train.config import config_from_sources
from medheb_app.train.loop import TrainingProgress
from medheb_app.train.recipes import RECIPES, get_recipe

JobFn = Callable[
    [dict[str, Any], Callable[..., None], Callable[[str], None], threading.Event], dict
]
# Presets the admin panel offers ("nih-1000" is the shared NIH sample wherever settings put
# it); any source spec (medheb_app/index/sources.py) is accepted.
INDEX_CORPORA = ("phantom", "nih-1000")
_LEGACY_CORPORA = {"phantom-demo": "phantom"}
JOB_REPLACE_ADVICE = "set replace: true to rebuild it, or choose another name"


def stamp() -> str:
    """A UTC time stamp for a run or media folder name."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


BENCH_SUITES = ("medheb-lite", "cxr-retrieve")


def bench_suite(settings: Settings, params: dict[str, Any]):
    """The suite a job's params name, and the tasks chosen (--task / --family alike)."""
    suite = str(params["suite"])
    if suite == SUITE_NAME:
        return (
            CxrRetrieveSuite(
                data=str(params.get("data") or "phantom"),
                setting=str(params.get("setting") or "main"),
                paraphrase=bool(params.get("paraphrase", False)),
            ),
            None,
        )
    if suite not in SUITES:
        raise ValueError(f"Unknown suite {suite!r}; known: {', '.join(BENCH_SUITES)}.")
    built = SUITES[suite]()
    wanted = [str(t) for t in params.get("tasks") or []]
    families = {str(f) for f in params.get("families") or []}
    wanted += [name for name, spec in built.specs.items() if spec.family in families]
    unknown = [name for name in wanted if name not in built.specs]
    if unknown:
        raise ValueError(f"Unknown task(s) {', '.join(unknown)} in suite {suite}.")
    return built, list(dict.fromkeys(wanted)) or None


def bench_job(settings: Settings) -> JobFn:
    """A benchmark run (MedHEB suite or CXR-Retrieve) for the chosen models and tasks; its
    results land in the store and runs_dir. Logs one line per task (scored or skipped, why)."""

    def run(params, progress, log, stop) -> dict:
        suite, only = bench_suite(settings, params)
        models = [str(m) for m in params["models"]]
        out = settings.runs_dir / f"{suite.name}-{stamp()}"
        log(f"benchmark {suite.name}: {', '.join(models)} -> {out}")
        log(f"real data (MEDHEB_SHARED_DATA): {settings.shared_data_dir}")
        if only:
            log(f"tasks: {', '.join(only)}")
        summary = run_suite(suite, models, out, settings, progress, stop, only=only, log=log)
        log(f"finished run {summary.run_id} ({len(summary.skipped)} skipped)")
        return {"run_id": summary.run_id, "out_dir": str(out), "skipped": summary.skipped}

    return run


def _training_progress(progress, log) -> TrainingProgress:
    """Adapt the trainer's (step, total, loss) callback and its stages to the job's progress
    (a TrainingProgress, which also times the run for the training estimate)."""
    return TrainingProgress(progress, log)


def train_job(settings: Settings) -> JobFn:
    """Train a checkpoint; it registers itself (dual-lite@<tag> or medemb-lite@<tag>) when saved."""

    def run(params, progress, log, stop) -> dict:
        recipe = get_recipe(str(params["recipe"]))
        tag = str(params["tag"]).strip()
        if not tag or not tag.replace("-", "").replace("_", "").isalnum():
            raise ValueError("A checkpoint tag uses letters, digits, - and _ only.")
        out = settings.trained_models_dir / tag
        defaults = {"epochs": 5, "n": 2000}
        overrides = {field: int(params.get(field, defaults[field])) for field in recipe.job_fields}
        config = config_from_sources(recipe.config_class(), overrides=overrides)
        log(f"training {recipe.name} -> {out} with {overrides}")
        watch = _training_progress(progress, log)
        result = recipe.run(config, out, settings, watch, stop)  # Cancelled when stopped

        spec = spec_of_folder(out, settings)  # the name the resolver registers it under
        if spec is None:  # its tag is taken by a committed checkpoint: load it by path
            spec = f"{recipe.spec(result.card.to_dict()).split('@')[0]}@{out}"
            log(f"tag {tag} is taken by a committed checkpoint; load this one by path")
        log(f"saved {spec}")
        return {
            "spec": spec,
            "out": str(out),
            "result": repr(result)[:500],
            "timing": watch.timing(),  # the training estimate's history (eval/estimate.py)
        }

    return run


def index_source(settings: Settings, params: dict[str, Any]) -> str:
    """The job's source spec: params["source"] (any spec `index build --source` takes), or
    the older params["corpus"] ("phantom-demo", "nih-1000")."""
    source = str(params.get("source") or params.get("corpus") or "").strip()
    if source == "nih-1000":
        return f"nih:{settings.shared_data_dir / 'nih-cxr14-1000'}"
    return _LEGACY_CORPORA.get(source, source)


def _shown_source(source: str) -> str:
    """A source spec for the job log: whole (phantom:20) unless it names a path, which may name
    a patient's folder: then its kind only (folder:)."""
    return f"{source.split(':', 1)[0]}:" if "/" in source or "\\" in source else source


def index_job(settings: Settings, roots_only: bool = False) -> JobFn:
    """Build a named index from any source spec (the same builder as `index build`, which also
    prepares logic-aware ranking), with items/s and an ETA in the progress messages; the
    search pickers then offer it. `roots_only` (AdminJobs.start): files outside the server's
    source roots are not read, each a line of failed.jsonl."""

    def run(params, progress, log, stop) -> dict:
        name, spec = check_index_name(str(params["name"])), str(params["model"])
        source = index_source(settings, params)
        # the source's kind only: the path typed may name a patient's folder
        log(f"index {name}: source {_shown_source(source)}, model {spec}")
        report = build_from_source(  # a stop raises Cancelled: the job is recorded cancelled
            source,
            spec,
            name,
            settings,
            kind=str(params.get("kind", "auto")),
            batch_size=int(params.get("batch_size", 32)),
            progress=progress,
            stop=stop,
            replace=bool(params.get("replace", False)),  # the CLI's rule and lock: issue 23
            roots_only=roots_only,
        )
        log(
            f"built {name}: {report.n_items} items, {report.embedded} embedded, "
            f"{report.reused} reused, {report.failed} failed in {report.seconds:.1f} s"
        )
        if report.failed:  # per reason, as failed.jsonl next to the index lists them
            reasons = ", ".join(f"{n} {why}" for why, n in report.failed_by_reason.items())
            log(f"not indexed: {reasons}")
        log("logic-aware ranking prepared" if report.logic else report.logic_note)
        for note in report.notes:
            log(f"note: {note}")
        return {"index": name, "model": spec, "count": report.n_items, **report.to_json()}

    return run


JOB_FACTORIES: dict[str, Callable[[Settings], JobFn]] = {
    "bench-run": bench_job,
    "train": train_job,
    "index-build": index_job,
}


class AdminJobs:
    """What the admin tab and the admin API launch (`services.admin_jobs`): the job kinds
    above submitted to the job runner with these settings, the choices their forms offer, and
    the training estimate shown before a training job starts."""

    kinds = tuple(JOB_FACTORIES)
    suites = BENCH_SUITES
    corpora = INDEX_CORPORA
    families = FAMILIES
    recipes = tuple(RECIPES)  # the one recipe registry (medheb_app.train.recipes)

    def __init__(self, settings: Settings, jobs: JobRunner) -> None:
        self.settings = settings
        self.jobs = jobs

    def start(self, kind: str, params: dict[str, Any]) -> int:
        """Submit a job of `kind` (a key of JOB_FACTORIES) with `params`; its id. A source
        outside the server's roots (or a manifest naming files outside them) is refused
        (SourceError, a ValueError) before it is queued, and an index job reads no file
        outside them (a symbolic link out of a root: a line of failed.jsonl)."""
        if kind not in JOB_FACTORIES:
            raise ValueError(f"Unknown job kind {kind!r}.")
        if kind == "index-build":  # the server reads archives under its roots only
            self._check_index_build(params)
            check_served_source(index_source(self.settings, params), self.settings)
            return self.jobs.submit(kind, params, index_job(self.settings, roots_only=True))
        if kind == "bench-run" and params.get("data"):
            check_served_source(str(params["data"]), self.settings)
        return self.jobs.submit(kind, params, JOB_FACTORIES[kind](self.settings))

    def _check_index_build(self, params: dict[str, Any]) -> None:
        """Refuse now, in words, what the job would only fail on later: a name that is no
        folder name, an unknown model, or an index this model already has (unless replace)."""
        name, spec = str(params.get("name", "")), str(params["model"])
        check_index_name(name)
        try:  # an unknown model is the caller's mistake: refused now, not a job's traceback
            check_spec(spec, self.settings)
        except UnknownModelError:
            known = ", ".join(valid_specs(self.settings))
            raise ValueError(f"Unknown model {spec!r}; this server's models: {known}.") from None
        if params.get("replace") or spec not in valid_specs(self.settings):
            return  # a spec naming files is read by the job itself, never here
        fingerprint = card_only(spec, self.settings).card.fingerprint
        check_replace(name, fingerprint, spec, self.settings, False, JOB_REPLACE_ADVICE)

    def medheb_task_names(self) -> list[str]:
        """The medheb-lite suite's task names (registered builders only: nothing is built)."""
        return get_suite("medheb-lite").names()

    def default_models(self) -> list[str]:
        """The shipped models a benchmark run starts with (serving policy)."""
        return default_demo_models(self.settings)

    def build_default_model(self) -> str:
        """The model an index build starts with (serving policy)."""
        return build_default_model(self.settings)

    def training_estimate(self, recipe: str, epochs: int, n: int | None) -> TrainingEstimate | None:
        """How long a training job will take: from the newest earlier job of the recipe, else
        timed on short calibration runs (eval/estimate.py); None when neither is possible."""
        history = self.jobs.history(limit=100, kind="train")
        return training_estimate(recipe, epochs, n, history, self.settings)
