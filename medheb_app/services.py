"""Services: everything a UI tab needs, composed once at start-up and passed in explicitly.

FastChat replaced its module globals with a context object; this is ours. app.py calls
`create_services(Settings.from_env())` once and hands the result to `build_app`; tests build
their own with a temporary DATA_DIR. Nothing here knows about Gradio.
"""

from __future__ import annotations

import hmac
import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from medheb_app.settings import Settings
from medheb_app.store.db import Store

if TYPE_CHECKING:
    from medheb_app.jobs import JobRunner
    from medheb_app.models.base import Embedder
    from medheb_app.study.payloads import Renderer

log = logging.getLogger(__name__)
Progress = Callable[[float, str], None]
EnsureDemo = Callable[[Settings, Progress], Any]


@dataclass(frozen=True)
class BootstrapState:
    """Where the demo bootstrap stands: a fraction in [0, 1], a message, and how it ended."""

    fraction: float = 0.0
    message: str = "waiting to start"
    done: bool = False
    error: str = ""

    @property
    def ready(self) -> bool:
        return self.done and not self.error


class DemoBootstrap:
    """Builds or loads the demo corpus and index in a background thread, reporting progress.

    The first start can take minutes (phantoms + embedding); later starts load from disk.
    The page polls `state()` so a user sees a progress bar instead of a blank tab.
    """

    def __init__(self, settings: Settings, ensure: EnsureDemo | None = None) -> None:
        self.settings = settings
        self._ensure = ensure
        self._lock = threading.Lock()
        self._state = BootstrapState()
        self._thread: threading.Thread | None = None
        self.result: Any = None

    def _progress(self, fraction: float, message: str) -> None:
        with self._lock:
            changed = message != self._state.message
            self._state = BootstrapState(fraction=float(fraction), message=str(message))
        if changed:  # the console shows progress too, for a launch without a browser open
            log.info("demo bootstrap %3.0f%%: %s", 100 * fraction, message)

    def _run(self) -> None:
        try:
            ensure = self._ensure
            if ensure is None:
                from medheb_app.demo import bootstrap_app

                ensure = bootstrap_app
            self.result = ensure(self.settings, self._progress)
            final = BootstrapState(fraction=1.0, message="demo ready", done=True)
        except Exception as error:  # shown in the page; the app keeps serving the other tabs
            log.error("demo bootstrap failed:\n%s", traceback.format_exc())
            final = BootstrapState(
                fraction=self._state.fraction,
                message="demo could not be prepared",
                done=True,
                error=f"{type(error).__name__}: {error}",
            )
        with self._lock:
            self._state = final

    def start(self) -> DemoBootstrap:
        """Start the bootstrap once; later calls do nothing."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="demo-bootstrap")
                self._thread.daemon = True
                self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> BootstrapState:
        if self._thread is not None:
            self._thread.join(timeout)
        return self.state()

    def state(self) -> BootstrapState:
        with self._lock:
            return self._state


def _registry_loader(settings: Settings) -> Callable[[str], Embedder]:
    def load(spec: str) -> Embedder:
        from medheb_app.models.registry import load_embedder

        return load_embedder(spec, settings)

    return load


@dataclass
class Services:
    """Settings, the store, the job runner, the model loader and the demo bootstrap."""

    settings: Settings
    store: Store
    jobs: JobRunner
    bootstrap: DemoBootstrap
    load_embedder: Callable[[str], Embedder] = field(repr=False)

    @property
    def admin_enabled(self) -> bool:
        """Admin controls exist only when ADMIN_PASSWORD or ADMIN_USERS is set (a public demo
        has none)."""
        from medheb_app.access.auth import oauth_available

        return bool(
            self.settings.admin_password or (self.settings.admin_users and oauth_available())
        )

    def check_admin(self, password: str | None) -> bool:
        """Constant-time password check; always False when no admin password is configured."""
        if not self.admin_enabled or not password:
            return False
        return hmac.compare_digest(password.encode(), self.settings.admin_password.encode())

    def list_models(self) -> list[dict[str, Any]]:
        """Every embedder spec the pickers offer, read fresh so new checkpoints appear."""
        from medheb_app.models.registry import list_models

        return list_models(self.settings)

    def list_indices(self) -> list[Any]:
        """Every built index, read fresh so a new index build appears without restart."""
        from medheb_app.index.catalog import list_indices

        return list_indices(self.settings)


def create_services(
    settings: Settings | None = None,
    ensure_demo: EnsureDemo | None = None,
    start_bootstrap: bool = True,
) -> Services:
    """Open the store, recover interrupted jobs, and start the demo bootstrap in the background."""
    from medheb_app.jobs import JobRunner

    settings = settings or Settings.from_env()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = Store.open(settings.database_url)
    bootstrap = DemoBootstrap(settings, ensure_demo)
    if start_bootstrap:
        bootstrap.start()
    return Services(
        settings=settings,
        store=store,
        jobs=JobRunner(store, settings),
        bootstrap=bootstrap,
        load_embedder=_registry_loader(settings),
    )


# ---------------------------------------------------------------- admin job functions
# What the admin panel launches: each factory binds settings and returns a JobRunner function
# fn(params, progress, log, stop) -> result dict (medheb_app/jobs.py).

JobFn = Callable[
    [dict[str, Any], Callable[..., None], Callable[[str], None], threading.Event], dict
]
# Presets the admin panel offers ("nih-1000" is the shared NIH sample wherever settings put
# it); any source spec (medheb_app/index/sources.py) is accepted.
INDEX_CORPORA = ("phantom", "nih-1000")
_LEGACY_CORPORA = {"phantom-demo": "phantom"}


def _stamp() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


BENCH_SUITES = ("medheb-lite", "cxr-retrieve")


def bench_suite(settings: Settings, params: dict[str, Any]):
    """The suite a job's params name, and the tasks chosen (--task / --family alike)."""
    from medheb_app.tasks.cxr_retrieve import SUITE_NAME, CxrRetrieveSuite
    from medheb_app.tasks.medheb import SUITES

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
        from medheb_app.eval.runner import run_suite
        from medheb_app.jobs import JobCancelled

        suite, only = bench_suite(settings, params)
        models = [str(m) for m in params["models"]]
        out = settings.runs_dir / f"{suite.name}-{_stamp()}"
        log(f"benchmark {suite.name}: {', '.join(models)} -> {out}")
        log(f"real data (MEDHEB_SHARED_DATA): {settings.shared_data_dir}")
        if only:
            log(f"tasks: {', '.join(only)}")
        try:
            summary = run_suite(suite, models, out, settings, progress, stop, only=only, log=log)
        except InterruptedError as error:
            raise JobCancelled(str(error)) from error
        log(f"finished run {summary.run_id} ({len(summary.skipped)} skipped)")
        return {"run_id": summary.run_id, "out_dir": str(out), "skipped": summary.skipped}

    return run


def _training_progress(progress, log) -> Any:
    """Adapt the trainer's (step, total, loss) callback and its stages to the job's progress
    (a train.loop.TrainingProgress, which also times the run)."""
    from medheb_app.train.loop import TrainingProgress

    return TrainingProgress(progress, log)


def train_job(settings: Settings) -> JobFn:
    """Train a checkpoint; it registers itself (dual-lite@<tag> or medemb-lite@<tag>) when saved."""

    def run(params, progress, log, stop) -> dict:
        from medheb_app.jobs import JobCancelled
        from medheb_app.train.config import config_from_sources
        from medheb_app.train.recipes import get_recipe

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
        result = recipe.run(config, out, settings, watch, stop)
        if stop.is_set() or result.card is None:
            raise JobCancelled(f"stopped after step {result.steps}; no checkpoint saved")
        from medheb_app.models.registry import spec_of_folder

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


def index_job(settings: Settings) -> JobFn:
    """Build a named index from any source spec (the same builder as `index build`, which also
    prepares logic-aware ranking), with items/s and an ETA in the progress messages; the
    search pickers then offer it."""

    def run(params, progress, log, stop) -> dict:
        from medheb_app.index.build import build_from_source
        from medheb_app.index.catalog import check_index_name
        from medheb_app.jobs import JobCancelled

        name, spec = check_index_name(str(params["name"])), str(params["model"])
        source = index_source(settings, params)
        log(f"index {name}: source {source}, model {spec}")
        try:
            report = build_from_source(
                source,
                spec,
                name,
                settings,
                kind=str(params.get("kind", "auto")),
                batch_size=int(params.get("batch_size", 32)),
                progress=progress,
                stop=stop,
            )
        except InterruptedError as error:
            raise JobCancelled(str(error)) from error
        log(
            f"built {name}: {report.n_items} items, {report.embedded} embedded, "
            f"{report.reused} reused, {report.failed} failed in {report.seconds:.1f} s"
        )
        log("logic-aware ranking prepared" if report.logic else report.logic_note)
        return {"index": name, "model": spec, "count": report.n_items, **report.to_json()}

    return run


JOB_FACTORIES: dict[str, Callable[[Settings], JobFn]] = {
    "bench-run": bench_job,
    "train": train_job,
    "index-build": index_job,
}


def describe_for_run(settings: Settings, suite: str) -> Renderer:
    """What raters are shown for a run's items: the suite's tasks rebuilt and rendered by
    medheb_app.study.payloads (salted file names, so no path names a task or an item). For a
    run of a suite this checkout cannot rebuild, the run files' own payloads are rendered;
    items that cannot be shown are withheld from the study."""
    from medheb_app.study.payloads import Renderer, describe_with_tasks
    from medheb_app.tasks.medheb import SUITES

    media_dir = settings.data_dir / "study-media" / _stamp()
    if suite not in SUITES:
        return Renderer(media_dir)
    tasks, _skipped = SUITES[suite]().build(settings)
    return describe_with_tasks(tasks, media_dir)
