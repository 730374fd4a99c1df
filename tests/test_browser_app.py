"""The running app in a real browser (Playwright driving Debian's chromium).

`python app.py` runs in a subprocess on a free port with a temporary DATA_DIR, a small demo
(MEDHEB_DEMO_SIZE=120) and an admin password. A blinded study is created beforehand through
the study service from a run directory in the benchmark's file format. Gradio renders with
JavaScript, so every check waits for the element it reads. (Playwright's "networkidle" never
arrives here: Gradio keeps a heartbeat request open for the whole visit.)
Screenshots of each page land in test-artifacts/screenshots/.
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
from collections.abc import Iterator
from pathlib import Path

import pytest

from medheb_app.settings import PROJECT_ROOT
from tests.run_fixtures import MODELS, TASK, write_run

pytestmark = pytest.mark.browser

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
ADMIN_PASSWORD = "browser-admin-pass"
SEARCH_MODEL = os.environ.get("MEDHEB_BROWSER_MODEL", "oracle")
STARTUP_S = 600


def _require_browser() -> None:
    if Path(CHROMIUM).exists():
        return
    message = f"{CHROMIUM} is not installed (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs the browser tests to run: {message}")
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _store_run(out_dir: Path, settings) -> None:
    """A finished benchmark run of random vs oracle on two small text tasks, for the explorer."""
    from medheb_app.eval.runner import run_suite
    from medheb_app.tasks.base import Item, TaskMetadata
    from medheb_app.tasks.builders.generic import paired_task

    tasks = []
    for name, family, split in (
        ("tt-browser", "T-T", "ID"),
        ("vg-browser", "VG", "held-out-source"),
    ):
        meta = TaskMetadata(
            name=name,
            family=family,
            form="text",
            split=split,
            anatomy="chest",
            source="unit",
            qry_inst="Find the matching passage:",
        )
        pairs = [
            (Item(f"q{i}", f"w{i} w{i + 1}"), Item(f"t{i}", f"w{i} target")) for i in range(15)
        ]
        tasks.append(paired_task(meta, pairs))
    run_suite(tasks, ["random", "oracle"], out_dir, settings)


def _wait_until_serving(process: subprocess.Popen, port: int, timeout: float) -> None:
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


def _wait_for_demo(data_dir: Path, timeout: float) -> None:
    """The bootstrap is done when the demo index has a catalog for some model."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list((data_dir / "indices" / "demo-cxr").glob("*/catalog.json")):
            return
        time.sleep(1.0)
    raise TimeoutError("the demo index was not built in time")


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Iterator[dict]:
    _require_browser()
    root = tmp_path_factory.mktemp("browser")
    data_dir = root / "data"
    env = {
        **os.environ,
        "DATA_DIR": str(data_dir),
        "MEDHEB_DEMO_SIZE": "120",
        "MEDHEB_DEFAULT_MODEL": SEARCH_MODEL,
        "ADMIN_PASSWORD": ADMIN_PASSWORD,
        "PORT": str(_free_port()),
        "HOST": "127.0.0.1",
        "OMP_NUM_THREADS": "1",
    }
    from medheb_app.services import create_services
    from medheb_app.settings import Settings
    from medheb_app.study.items import create_study

    settings = Settings.from_env(data_dir=data_dir)
    services = create_services(settings, start_bootstrap=False)
    write_run(root / "run", with_images=True)
    study_id = create_study(
        services.store, "Reader study 1", list(MODELS), root / "run", n_items=3, seed=3,
        open_enrolment=True,
    ).id  # fmt: skip
    _store_run(root / "bench", settings)
    services.jobs.shutdown(wait=False)
    log = open(root / "app.log", "w")  # noqa: SIM115 - closed in teardown
    process = subprocess.Popen(
        [sys.executable, str(PROJECT_ROOT / "app.py")],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    port = int(env["PORT"])
    try:
        _wait_until_serving(process, port, STARTUP_S)
        yield {
            "url": f"http://127.0.0.1:{port}",
            "data_dir": data_dir,
            "settings": settings,
            "study_id": study_id,
            "log": root / "app.log",
        }
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()
        shutil.copy(root / "app.log", _artifacts() / "app.log")


def _artifacts() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS.parent


@pytest.fixture(scope="module")
def browser(app):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


# Playwright cannot read the bodies of Gradio's streamed responses (the queue's server-sent
# events), so the page records every fetch body as it streams in, via a tee of the stream.
RECORD_FETCH_BODIES = """
window.__bodies = [];
const originalFetch = window.fetch;
window.fetch = async (...args) => {
  const response = await originalFetch(...args);
  if (!response.body) return response;
  const [forPage, forTest] = response.body.tee();
  const reader = forTest.getReader();
  const decoder = new TextDecoder();
  (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      window.__bodies.push(decoder.decode(value, { stream: true }));
    }
  })().catch(() => {});
  return new Response(forPage, {
    status: response.status, statusText: response.statusText, headers: response.headers,
  });
};
"""


def _open(page, url: str) -> None:
    """Load a page and wait until Gradio has rendered it and run its load events."""
    page.goto(url, wait_until="load")
    page.locator(".gradio-container").wait_for()
    page.wait_for_function("() => !document.querySelector('.gradio-container .pending')")


def _tab(page, name: str) -> None:
    page.get_by_role("tab", name=name).click()


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _choose(page, elem_id: str, label_part: str) -> None:
    """Pick the option of a Gradio dropdown whose text contains `label_part`."""
    page.locator(f"#{elem_id} input").click()
    page.get_by_role("option").filter(has_text=label_part).first.click()


def test_search_returns_marked_results(app, page):
    _wait_for_demo(app["data_dir"], STARTUP_S)
    _open(page, app["url"])
    page.locator("#search-query textarea").fill("pleural effusion and no cardiomegaly")
    page.locator("#search-button").click()
    page.locator("#search-parsed").get_by_text("Pleural Effusion").wait_for()
    parsed = page.locator("#search-parsed").inner_text()
    assert "Must show: Pleural Effusion" in parsed and "Must not show: Cardiomegaly" in parsed
    thumbnails = page.locator("#search-hits img")
    thumbnails.first.wait_for()
    assert thumbnails.count() == 10
    captions = page.locator("#search-hits").inner_text()
    assert "#1 ·" in captions and "#10 ·" in captions
    thumbnails.first.click()
    page.locator("#search-detail").get_by_text("Report").wait_for()
    assert "SYNTHETIC phantom" in page.locator("#search-detail").inner_text()
    page.get_by_text("SYNTHETIC DEMO DATA").wait_for()
    _shot(page, "search")


def test_logic_aware_ranking_is_one_click_away(app, page):
    _wait_for_demo(app["data_dir"], STARTUP_S)
    _open(page, app["url"])
    page.locator("#search-ranking").get_by_text("Logic-aware (wanted").click()
    page.locator("#search-query textarea").fill("pleural effusion and no cardiomegaly")
    page.locator("#search-button").click()
    page.locator("#search-notice").get_by_text("Ranked logic-aware").wait_for()
    page.locator("#search-hits img").first.wait_for()
    captions = page.locator("#search-hits").inner_text()
    assert "#1 · p " in captions and "#10 · p " in captions
    page.locator("#search-hits img").first.click()
    page.locator("#search-detail").get_by_text("p(meets the query)").wait_for()
    _shot(page, "search-logic")


def test_explorer_and_analysis_tabs_render(app, page):
    _open(page, app["url"])
    _tab(page, "Benchmark explorer")
    page.get_by_text("100.00").filter(visible=True).first.wait_for()  # the oracle's Hit@1
    assert page.locator("#explorer-run input").input_value().startswith("Run 1:")
    assert page.locator("#explorer-task input").input_value() == "tt-browser"  # first task
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 7")
    page.locator("#explorer-ranked").get_by_text("✓ GOLD").first.wait_for()
    _shot(page, "explorer")
    _tab(page, "Study analysis")
    page.locator("#analysis-study").wait_for()
    _shot(page, "analysis")


def test_rater_page_is_blind_until_the_vote_and_votes_are_stored(app, page):
    bodies: list[str] = []

    def keep(response) -> None:
        try:
            bodies.append(response.text())
        except Exception:  # bodies of aborted or streaming requests are not readable
            bodies.append("")

    page.on("response", keep)
    page.add_init_script(RECORD_FETCH_BODIES)
    _open(page, f"{app['url']}/rate")
    _choose(page, "rater-study", f"(study {app['study_id']})")
    page.locator("#rater-name textarea").fill("Browser Rater")
    page.locator("#rater-sign-in").click()
    page.locator("#rater-query").get_by_text("query text").wait_for()
    page.locator("#rater-side-a").get_by_text("candidate report").first.wait_for()
    _shot(page, "rate-before-vote")
    streamed = "".join(page.evaluate("window.__bodies"))
    assert "candidate report" in streamed  # the item's own traffic was inspected
    seen_before_vote = page.content() + "".join(bodies) + streamed
    for secret in (*MODELS, TASK):
        assert secret not in seen_before_vote, f"{secret} leaked before the vote"

    for rated, choice in enumerate(("A", "B", "tie"), start=1):
        page.locator(f"#vote-{choice}").click()
        page.locator("#rater-message").get_by_text("Vote recorded").wait_for()
        message = page.locator("#rater-message").inner_text()
        assert f"({rated} of 3 done)" in message
        assert MODELS[0] in message and MODELS[1] in message  # revealed after the vote
        page.locator("#vote-next").click()
        if rated < 3:
            page.locator(f"#vote-{choice}").and_(page.locator(":enabled")).wait_for()
    page.locator("#rater-message").get_by_text("All items are rated").wait_for()
    _shot(page, "rate-done")

    from medheb_app.store.db import Store
    from medheb_app.study.export import votes_frame

    votes = votes_frame(Store.open(app["settings"].database_url), app["study_id"])
    mine = votes[votes["rater_name"] == "Browser Rater"]
    assert sorted(mine["choice"]) == ["A", "B", "tie"]
    assert mine["item"].nunique() == 3


def test_non_admin_cannot_start_a_job(app, page):
    _open(page, app["url"])
    _tab(page, "Admin")
    assert not page.locator("#admin-start-bench").is_visible()
    page.locator("#admin-password input").fill("not-the-password")
    page.locator("#admin-sign-in").click()
    page.locator("#admin-login-note").get_by_text("Wrong admin password").wait_for()
    assert not page.locator("#admin-start-bench").is_visible()
    _shot(page, "admin-refused")

    from sqlalchemy import func, select

    from medheb_app.store.db import Store
    from medheb_app.store.jobs_table import Job

    with Store.open(app["settings"].database_url).session() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0

    page.locator("#admin-password input").fill(ADMIN_PASSWORD)
    page.locator("#admin-sign-in").click()
    page.locator("#admin-start-bench").wait_for(state="visible")
    page.get_by_role("tab", name="Index build").click()
    page.locator("#admin-index-name textarea").fill("browser-built")
    page.locator("#admin-start-index").click()
    page.locator("#admin-job-note").get_by_text("Started job").wait_for()
    page.locator("#admin-jobs").get_by_test_id("cell-0-2").get_by_text("done").wait_for(
        timeout=120_000
    )  # polled
    assert "built browser-built" in page.locator("#admin-log textarea").input_value()
    _shot(page, "admin")
