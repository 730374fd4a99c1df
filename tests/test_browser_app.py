"""The running app in a real browser (Playwright driving Debian's chromium).

`python app.py` runs in a subprocess on a free port with a temporary DATA_DIR, a small demo
(MEDHEB_DEMO_SIZE=120) and an admin password. A blinded study (public title only) and its
rater invitations are created beforehand through the study service from a run directory in
the benchmark's file format; raters open their invitation link and rate with the keyboard.
Gradio renders with JavaScript, so every check waits for the element it reads. (Playwright's
"networkidle" never arrives here: Gradio keeps a heartbeat request open for the whole visit.)
Screenshots of each page land in test-artifacts/screenshots/.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser_harness import (
    SCREENSHOTS,
    STARTUP_S,
    require_browser,
    serve_app,
)
from tests.conftest import link_shared_corpora
from tests.run_fixtures import MODELS, TASK, write_run

pytestmark = pytest.mark.browser

ADMIN_PASSWORD = "browser-admin-pass"
SEARCH_MODEL = os.environ.get("MEDHEB_BROWSER_MODEL", "oracle")


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


def _wait_for_demo(data_dir: Path, timeout: float) -> None:
    """The bootstrap is done when the demo index has a catalog and its logic-aware probes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        index = list((data_dir / "indices" / "demo-cxr").glob("*/catalog.json"))
        if index and list((data_dir / "probes").glob("*-index-*.npz")):
            return
        time.sleep(1.0)
    raise TimeoutError("the demo index was not built in time")


@pytest.fixture(scope="module")
def app(tmp_path_factory, shared_phantom_corpora) -> Iterator[dict]:
    require_browser()
    root = tmp_path_factory.mktemp("browser")
    data_dir = root / "data"
    env = {
        "MEDHEB_DEMO_SIZE": "120",
        "MEDHEB_DEFAULT_MODEL": SEARCH_MODEL,
        "MEDHEB_DEMO_MODELS": SEARCH_MODEL,
        "ADMIN_PASSWORD": ADMIN_PASSWORD,
        # the page's searches use a model the open rater study compares (an open study pauses
        # those; tests/test_search_blinding.py pins that)
        "MEDHEB_STUDY_PAUSES_SEARCH": "0",
    }
    from medheb_app.evidence.phantoms.saved import demo_key
    from medheb_app.services import create_services
    from medheb_app.settings import Settings
    from medheb_app.study import create_invitations, create_study

    settings = Settings.from_env(data_dir=data_dir)
    link_shared_corpora(shared_phantom_corpora, settings, demo_key(settings, 120))
    services = create_services(settings, start_bootstrap=False)
    write_run(root / "run", with_images=True)
    study_id = create_study(
        services.store,
        "Internal study name",
        list(MODELS),
        root / "run",
        n_items=3,
        raters_per_item=4,
        seed=3,
        public_title="Chest reader study",
        reveal_after_vote=True,
    ).id
    invitations = create_invitations(services.store, study_id, 4)
    _store_run(root / "bench", settings)
    services.jobs.shutdown(wait=False)
    with serve_app(root, data_dir, env) as url:
        yield {
            "url": url,
            "data_dir": data_dir,
            "settings": settings,
            "study_id": study_id,
            "invitations": invitations,
            "log": root / "app.log",
        }


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


def _show_run(page, url: str, label: str) -> None:
    """The page opened on the benchmark explorer showing the run whose label starts with
    `label`: the app's newest run is shown first, so a run another module stored later in the
    same app is picked away from by name."""
    _open(page, url)
    _tab(page, "Benchmark explorer")
    page.wait_for_function("() => document.querySelector('#explorer-run input')?.value")
    if not page.locator("#explorer-run input").input_value().startswith(label):
        page.locator("#explorer-run input").click()
        page.get_by_role("option").filter(has_text=label).first.click()


def _shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _choose(page, elem_id: str, label_part: str) -> None:
    """Pick the option of a Gradio dropdown whose text contains `label_part`."""
    page.locator(f"#{elem_id} input").click()
    page.get_by_role("option").filter(has_text=label_part).first.click()


FOLD = {"width": 1400, "height": 900}


def _above_the_fold(locator) -> bool:
    """Whether the element starts within the first screen of the page (in page coordinates,
    so a scroll Gradio makes after an event does not count)."""
    box = locator.bounding_box()
    if box is None:
        return False
    top = box["y"] + locator.page.evaluate("window.scrollY")
    return top >= 0 and top + min(box["height"], 40) <= FOLD["height"]


def test_first_minute_description_examples_and_results_above_the_fold(app, browser):
    """At 1400x900, a visitor sees what the app does, clickable examples and, after clicking
    one, hits that meet it (the default ranking), without scrolling."""
    _wait_for_demo(app["data_dir"], STARTUP_S)
    context = browser.new_context(viewport=FOLD)
    page = context.new_page()
    page.set_default_timeout(60_000)
    try:
        _open(page, app["url"])
        description = page.locator("#app-description")
        description.get_by_text("compositional queries").wait_for()
        assert _above_the_fold(description)
        examples = page.locator("#search-examples")
        example = examples.get_by_text("pleural effusion and no cardiomegaly", exact=True).first
        example.wait_for()
        assert _above_the_fold(example)
        example.click()
        page.locator("#search-parsed").get_by_text("Pleural Effusion").wait_for()
        thumbnails = page.locator("#search-hits img")
        thumbnails.first.wait_for()
        assert _above_the_fold(page.locator("#search-hits img").first)
        captions = page.locator("#search-hits .sr-cap").all_inner_texts()
        assert captions[0] == "#1 ✓" and not any("✗" in text for text in captions)
        _shot(page, "first-minute")
    finally:
        context.close()


def test_search_returns_marked_results(app, page):
    _wait_for_demo(app["data_dir"], STARTUP_S)
    _open(page, app["url"])
    page.locator("#search-query textarea").fill("pleural effusion and no cardiomegaly")
    page.locator("#search-button").click()
    page.locator("#search-parsed").get_by_text("Pleural Effusion").wait_for()
    parsed = page.locator("#search-parsed").inner_text()
    assert "Must show: Pleural Effusion" in parsed and "Must not show: Cardiomegaly" in parsed
    page.locator("#search-hits .sr-line").get_by_text("Ranked logic-aware").wait_for()
    thumbnails = page.locator("#search-hits img")
    thumbnails.first.wait_for()
    assert thumbnails.count() == 10
    captions = page.locator("#search-hits .sr-cap").all_inner_texts()
    assert captions[0].startswith("#1") and captions[9].startswith("#10")
    thumbnails.first.click()
    page.locator("#search-detail").get_by_text("Report").wait_for()
    assert "SYNTHETIC phantom" in page.locator("#search-detail").inner_text()
    assert "p(meets the query)" in page.locator("#search-detail").inner_text()
    page.get_by_text("SYNTHETIC DEMO DATA").wait_for()
    _shot(page, "search")


def test_similarity_is_one_click_away_and_shown_side_by_side(app, page):
    _wait_for_demo(app["data_dir"], STARTUP_S)
    _open(page, app["url"])
    page.locator("#search-query textarea").fill("pleural effusion and no cardiomegaly")
    page.locator("#search-compare").get_by_text("side by side").click()
    page.locator("#search-button").click()
    page.locator("#search-compare-hits img").first.wait_for()
    assert "Ranked by similarity" in page.locator("#search-compare-hits").inner_text()
    assert page.locator("#search-hits .sr-cap").first.inner_text() == "#1 ✓"
    _shot(page, "search-side-by-side")
    page.locator("#search-ranking").get_by_text("Similarity (cosine").click()
    page.locator("#search-button").click()
    page.locator("#search-hits").get_by_text("Ranked logic-aware").wait_for(state="detached")
    page.locator("#search-hits").get_by_text("Ranked by similarity").first.wait_for()
    assert page.locator("#search-hits .sr-cap").first.inner_text().startswith("#1")


def test_explorer_and_analysis_tabs_render(app, page):
    _open(page, app["url"])
    _tab(page, "Benchmark explorer")
    # a fresh start lists the demo's own small run (random against the demo model) beside the
    # stored one, Run 1, which is picked here
    page.wait_for_function("() => document.querySelector('#explorer-run input')?.value")
    page.locator("#explorer-run input").click()
    page.get_by_role("option").filter(has_text="random, oracle").filter(
        has_text="custom"
    ).first.wait_for()
    page.get_by_role("option").filter(has_text="Run 1:").first.click()
    page.get_by_text("100.00").filter(visible=True).first.wait_for()  # the oracle's Hit@1
    assert page.locator("#explorer-run input").input_value().startswith("Run 1:")
    # the task picker follows the run picker asynchronously (the demo's own run was shown first)
    page.wait_for_function(
        "() => document.querySelector('#explorer-task input')?.value === 'tt-browser'"
    )
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 7")
    page.locator("#explorer-ranked").get_by_text("✓ GOLD").first.wait_for()
    _shot(page, "explorer")
    _tab(page, "Study analysis")
    page.locator("#analysis-study").wait_for()
    _shot(page, "analysis")


def _rate_with_keyboard(app, page, invitation, name: str) -> None:
    """Open the invitation link, check nothing secret reached the browser before the vote,
    then rate every item with keys only: 1, 2, 3 (auto-advance after each vote)."""
    bodies: list[str] = []

    def keep(response) -> None:
        try:
            bodies.append(response.text())
        except Exception:  # bodies of aborted or streaming requests are not readable
            bodies.append("")

    page.on("response", keep)
    page.add_init_script(RECORD_FETCH_BODIES)
    _open(page, f"{app['url']}{invitation.link}")
    assert invitation.secret not in page.url  # the redirect strips the secret
    page.locator("#rater-side-a").get_by_text("candidate report").first.wait_for()
    page.locator("#rater-header").get_by_text("Chest reader study").wait_for()
    page.locator("#rater-instruction").get_by_text("Better =").wait_for()
    assert page.locator("#rater-side-a img").count() >= 1  # the candidates' pictures
    _shot(page, f"{name}-before-vote")
    streamed = "".join(page.evaluate("window.__bodies"))
    assert "candidate report" in streamed  # the item's own traffic was inspected
    seen = page.content() + "".join(bodies) + streamed
    for secret in (*MODELS, TASK, "Internal study name", invitation.code):
        assert secret not in seen, f"{secret} leaked before the vote"
    assert 'href="/"' not in page.content()  # the raters' page does not link to the workbench

    for rated, key in enumerate(("1", "2", "3"), start=1):
        page.keyboard.press(key)
        page.locator("#rater-message").get_by_text("Vote recorded").wait_for()
        message = page.locator("#rater-message").inner_text()
        assert f"({rated} of 3 done)" in message
        # four raters per item: the systems are named only with an item's last vote, so no
        # rater (or second identity) meets an item whose sides an earlier reveal gave away
        assert "named once every rater of this item has voted" in message
        content = page.content()
        assert not any(model in content for model in MODELS)
        if rated == 1:
            _shot(page, f"{name}-vote-recorded")
        if rated < 3:  # auto-advance to the next item
            page.locator("#rater-header").get_by_text(f"{rated} of 3 items rated").wait_for()
            page.locator("#vote-A").and_(page.locator(":enabled")).wait_for()
    # the end (issue 18 item 5): thanked with their own count, and no Next button left
    page.locator("#rater-message").get_by_text("You rated 3 items").wait_for()
    assert "thank you" in page.locator("#rater-message").inner_text()
    page.locator("#vote-next").wait_for(state="hidden")
    page.keyboard.press("Enter")  # Enter has no Next to press: nothing breaks
    page.locator("#rater-header").get_by_text("3 of 3 items rated").wait_for()
    page.locator("#rater-message").get_by_text("You rated 3 items").wait_for()
    votes = page.locator("#rater-votes").bounding_box()  # the bar stays on screen on every width
    viewport = page.viewport_size
    assert votes is not None and votes["y"] + votes["height"] <= viewport["height"] + 1
    _shot(page, f"{name}-done")


def _votes_of(app, invitation) -> list[str]:
    from medheb_app.store.db import Store
    from medheb_app.study import list_invitations
    from medheb_app.study.export import votes_frame

    store = Store.open(app["settings"].database_url)
    [info] = [i for i in list_invitations(store, app["study_id"]) if i.id == invitation.id]
    votes = votes_frame(store, app["study_id"])
    return sorted(votes[votes["rater"] == info.rater_id]["choice"])


def test_rater_completes_the_study_with_the_keyboard_on_desktop(app, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(60_000)
    invitation = app["invitations"][0]
    _rate_with_keyboard(app, page, invitation, "rate-desktop")
    assert _votes_of(app, invitation) == ["A", "B", "tie"]
    context.close()


def test_rater_completes_the_study_with_the_keyboard_on_a_phone(app, browser):
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    page.set_default_timeout(60_000)
    invitation = app["invitations"][1]
    _open(page, f"{app['url']}{invitation.link}")
    page.locator("#rater-side-b").get_by_text("candidate report").first.wait_for()
    side_a = page.locator("#rater-side-a").bounding_box()
    side_b = page.locator("#rater-side-b").bounding_box()
    assert abs(side_a["y"] - side_b["y"]) < 5  # both lists side by side, not one under the other
    assert side_a["x"] + side_a["width"] <= side_b["x"] + 1
    for button in ("#vote-A", "#vote-B", "#vote-tie", "#vote-both_poor"):
        box = page.locator(button).bounding_box()  # reachable without scrolling: in the viewport
        assert box["y"] >= 0 and box["y"] + box["height"] <= 844, (button, box)
    _shot(page, "rate-phone-first-item")
    page.close()
    page = context.new_page()
    page.set_default_timeout(60_000)
    _rate_with_keyboard(app, page, invitation, "rate-phone")
    assert _votes_of(app, invitation) == ["A", "B", "tie"]
    context.close()


def test_zoom_shows_the_full_resolution_image(app, page):
    _open(page, f"{app['url']}{app['invitations'][2].link}")
    thumb = page.locator("#rater-side-a img.ev-zoomable").first
    thumb.wait_for()
    thumb.click()
    zoomed = page.locator("#ev-zoom img")
    zoomed.wait_for()
    assert zoomed.evaluate("(img) => img.naturalWidth") == 64  # the PNG at its own resolution
    page.keyboard.press("Escape")
    page.locator("#ev-zoom").wait_for(state="detached")


def test_non_admin_cannot_start_a_job(app, page):
    _open(page, app["url"])
    _tab(page, "Admin")
    assert not page.locator("#admin-start-bench").is_visible()
    page.locator("#admin-sign-in-link").click()  # a plain form outside Gradio
    page.locator("#password").fill("not-the-password")
    page.locator("#admin-submit").click()
    page.get_by_text("Wrong admin password").wait_for()
    _shot(page, "admin-refused")
    _open(page, app["url"])
    _tab(page, "Admin")
    assert not page.locator("#admin-start-bench").is_visible()

    from sqlalchemy import func, select

    from medheb_app.store.db import Store
    from medheb_app.store.jobs_table import Job

    with Store.open(app["settings"].database_url).session() as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0

    page.goto(f"{app['url']}/auth/admin")
    page.locator("#password").fill(ADMIN_PASSWORD)
    page.locator("#admin-submit").click()
    page.locator(".gradio-container").wait_for()  # redirected to the workbench, signed in
    page.wait_for_function("() => !document.querySelector('.gradio-container .pending')")
    _tab(page, "Admin")
    page.locator("#admin-start-bench").wait_for(state="visible")
    page.get_by_role("tab", name="Index build").click()
    name = page.locator("#admin-index-name textarea")
    name.wait_for(state="visible")
    name.fill("browser-built")
    name.press("Tab")  # a value typed into a just-mounted box must stay typed
    page.wait_for_timeout(300)
    assert name.input_value() == "browser-built"
    page.locator("#admin-start-index").click()
    page.locator("#admin-job-note").get_by_text("Started job").wait_for()
    page.locator("#admin-jobs").get_by_test_id("cell-0-2").get_by_text("done").wait_for(
        timeout=120_000
    )  # polled
    page.wait_for_function(
        "() => document.querySelector('#admin-log textarea').value.includes('built browser-built')"
    )
    _shot(page, "admin")
