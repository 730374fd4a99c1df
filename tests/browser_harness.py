"""The browser tests' harness: Debian's chromium for Playwright, and `python app.py` served in
a subprocess on a free port, so every browser test module launches the app the same way; the
`browser` and `page` fixtures over a module's `app`, and `oracle_workbench`, the one app that
the search, drill-down and explorer modules share (all registered in tests/conftest.py).

Playwright drives /usr/bin/chromium (never `playwright install`); without it the tests skip
with the reason, except under CI=true where that is a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from medheb_app.settings import PROJECT_ROOT, Settings

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = PROJECT_ROOT / "test-artifacts" / "screenshots"
STARTUP_S = 600


def require_browser() -> None:
    """Skip (fail under CI=true) when chromium is not installed."""
    if Path(CHROMIUM).exists():
        return
    message = f"{CHROMIUM} is not installed (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs the browser tests to run: {message}")
    pytest.skip(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(argv: list[str], cwd: Path, env: dict[str, str], log, **popen) -> subprocess.Popen:
    """`python app.py` (or `argv`) in its own process group, output to `log`."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **popen,
    )


def stop_app(process: subprocess.Popen) -> None:
    """SIGTERM the app's process group, SIGKILL it if it has not exited after 20 s."""
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


def wait_until_serving(process: subprocess.Popen, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"app.py exited with code {process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/config", timeout=5):
                return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"app.py did not serve on port {port} within {timeout:.0f} s")


@contextmanager
def serve_app(
    root: Path, data_dir: Path, env: dict[str, str], log_name: str = "app.log"
) -> Iterator[str]:
    """Run `python app.py` on a free local port with DATA_DIR=data_dir plus `env`; yield its
    URL once it serves. On exit its process group is stopped and its output (root/app.log) is
    copied to test-artifacts/<log_name>."""
    port = free_port()
    full_env = {
        **os.environ,
        "DATA_DIR": str(data_dir),
        **env,
        "PORT": str(port),
        "HOST": "127.0.0.1",
        "OMP_NUM_THREADS": "1",
    }
    log = open(root / "app.log", "w")  # noqa: SIM115 - closed in the finally below
    process = start_app([sys.executable, str(PROJECT_ROOT / "app.py")], PROJECT_ROOT, full_env, log)
    try:
        wait_until_serving(process, port, STARTUP_S)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_app(process)
        log.close()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / "app.log", SCREENSHOTS.parent / log_name)


@contextmanager
def chromium(extra_args: Sequence[str] = ()) -> Iterator[object]:
    """A headless chromium for a module's tests (launching one costs seconds; a test's page
    gets a fresh context of it from desktop_page, so no cookies or storage carry over), with
    CHROMIUM_ARGS and `extra_args`."""
    from playwright.sync_api import sync_playwright  # deferred: only browser tests need it

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, *extra_args]
        )
        yield browser
        browser.close()


@contextmanager
def desktop_page(browser, width: int = 1400, height: int = 1000) -> Iterator[object]:
    """A page in a fresh context of `browser` at a desktop viewport, 60 s default timeout;
    the context is closed on exit."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


@pytest.fixture(scope="module")
def browser(app):
    """A module's chromium, launched once the module's own `app` fixture serves the page."""
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser):
    """A test's desktop page in a fresh context of the module's `browser`."""
    with desktop_page(browser) as opened:
        yield opened


class SharedApp:
    """`python app.py` over one prepared DATA_DIR, for the test modules of one xdist group
    (tests/conftest.py runs a group's tests on one worker, one after another). The first
    module that asks starts it; it is stopped when a module ends after which no collected test
    uses `fixture` (a session fixture's app would idle on until the worker's session ends), and
    started again should a module ask after that. A module may add to the DATA_DIR (`settings`)
    before it asks, as an operator would: the app lists new runs without a restart."""

    def __init__(
        self, fixture: str, root: Path, settings: Settings, env: dict[str, str], log_name: str
    ) -> None:
        self.fixture = fixture
        self.root = root
        self.settings = settings
        self.env = env
        self.log_name = log_name
        self._serving: ExitStack | None = None
        self._url = ""

    def start(self) -> str:
        """The app's URL, once it serves (started unless it runs)."""
        if self._serving is None:
            serving = ExitStack()
            self._url = serving.enter_context(
                serve_app(self.root, self.settings.data_dir, self.env, log_name=self.log_name)
            )
            self._serving = serving
        return self._url

    def stop(self) -> None:
        if self._serving is not None:
            serving, self._serving = self._serving, None
            serving.close()

    @contextmanager
    def serving(self, module_request: pytest.FixtureRequest) -> Iterator[str]:
        """The app's URL for the module of `module_request` (a module-scoped fixture's); at
        the module's end the app is stopped unless a test collected after it uses the app."""
        url = self.start()
        try:
            yield url
        finally:
            if not used_after(module_request, self.fixture):
                self.stop()


def used_after(module_request: pytest.FixtureRequest, fixture: str) -> bool:
    """Whether a test that comes after the last test of the requesting module, in the order
    this process runs its tests (session.items), uses `fixture`."""
    items = module_request.session.items
    prefix = f"{module_request.node.nodeid}::"
    last = max((i for i, item in enumerate(items) if item.nodeid.startswith(prefix)), default=-1)
    return any(fixture in getattr(item, "fixturenames", ()) for item in items[last + 1 :])


@pytest.fixture(scope="session")
def oracle_workbench(tmp_path_factory, shared_phantom_corpora) -> Iterator[SharedApp]:
    """The workbench that test_browser_search, test_browser_drilldown and test_browser_explorer
    drive (one xdist group): the 40-study synthetic demo on the oracle model and a 24-image
    NIH-layout index "nih-mini" built beforehand and published (MEDHEB_PUBLIC_INDICES); the
    drill-down and explorer modules each store their own run in it. One app for the three
    modules, not one each: an app's start and demo bootstrap (seconds of CPU) are paid once."""
    require_browser()
    from medheb_app.evidence.phantoms.saved import demo_key
    from medheb_app.index.build import build_from_source
    from tests.conftest import link_shared_corpora
    from tests.test_cxr_cli import nih_fixture

    root = tmp_path_factory.mktemp("browser-oracle")
    env = {"MEDHEB_DEMO_SIZE": "40", "MEDHEB_DEFAULT_MODEL": "oracle",
           "MEDHEB_DEMO_MODELS": "oracle",
           "MEDHEB_PUBLIC_INDICES": "nih-mini"}  # fmt: skip  # the operator published it
    settings = Settings.from_env(data_dir=root / "data")
    link_shared_corpora(shared_phantom_corpora, settings, demo_key(settings, 40))
    build_from_source(f"nih:{nih_fixture(root / 'nih-mini', n=24)}", "oracle", "nih-mini", settings)
    shared = SharedApp("oracle_workbench", root, settings, env, "app-oracle.log")
    try:
        yield shared
    finally:
        shared.stop()
