"""The demo bootstrap: builds or loads the demo corpus and index in a background thread at
start-up and reports its progress, so the page shows a progress bar instead of a blank tab."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from medheb_app.demo import bootstrap_app
from medheb_app.public_text import public_message
from medheb_app.settings import Settings

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
                ensure = bootstrap_app
            self.result = ensure(self.settings, self._progress)
            final = BootstrapState(fraction=1.0, message="demo ready", done=True)
        except Exception as error:  # shown in the page; the app keeps serving the other tabs
            log.error("demo bootstrap failed:\n%s", traceback.format_exc())
            final = BootstrapState(
                fraction=self._state.fraction,
                message="demo could not be prepared",
                done=True,
                error=public_message(error, "the server log has the details"),
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
