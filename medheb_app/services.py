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
                from medheb_app.demo import ensure_demo

                ensure = ensure_demo
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
        """Admin controls exist only when ADMIN_PASSWORD is set (a public demo has none)."""
        return bool(self.settings.admin_password)

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
