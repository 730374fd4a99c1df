"""The explorer's drill-down in a real browser (Playwright + Debian chromium), checked on the
layout boxes and pixels the page draws (issue 22 item 1, and item 5's SYNTHETIC mark in the
explorer): a region query's image with the gold box drawn inside the image's box, a volume as
a slice with a slider under it that changes the slice shown, and the SYNTHETIC mark a box under
each generated thumbnail, never over it. Screenshots land in test-artifacts/screenshots/.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import numpy as np
import pytest

from tests.browser_harness import desktop_page
from tests.test_browser_app import _shot, _show_run
from tests.test_browser_search import _page_box

# one app with test_browser_search and test_browser_explorer (oracle_workbench)
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser-oracle")]
TASKS = ["phantom-cxr-vg", "phantom-mr-t1-t2"]


@pytest.fixture(scope="module")
def app(oracle_workbench, request) -> Iterator[dict]:
    """The oracle workbench (tests/browser_harness.py) with a medheb-lite run (random, oracle)
    of TASKS stored in it first: its newest run, which the explorer shows first."""
    from medheb_app.eval.runner import run_suite
    from medheb_app.tasks import medheb

    with pytest.MonkeyPatch.context() as patch:  # small corpora: the session's saved ones
        patch.setattr(medheb, "CHEST_N", 120)
        patch.setattr(medheb, "VOLUME_SUBJECTS", 6)
        suite = medheb.get_suite("medheb-lite")
        summary = run_suite(
            suite,
            ["random", "oracle"],
            oracle_workbench.root / "run",
            oracle_workbench.settings,
            only=TASKS,
        )
    with oracle_workbench.serving(request) as url:
        yield {"url": url, "run": summary.run_id}


@pytest.fixture(scope="module")
def explorer(app, browser) -> Iterator[object]:
    """A desktop page on the explorer over the module's medheb-lite run, for both tests: each
    drills into its own task from whichever task the page shows (a task picked after another
    is what a user does too). One page, not one each: a page's first load and the explorer's
    plots are seconds of chromium, and neither test checks what a fresh visitor sees."""
    with desktop_page(browser) as page:
        _show_run(page, app["url"], f"Run {app['run']}: medheb-lite")
        # the run's load chain ends by picking its first task's first query: a task picked
        # before that could be overwritten by it, as a user's could
        page.wait_for_function("() => document.querySelector('#explorer-query input')?.value")
        yield page


def _open_task(page, task: str) -> None:
    """Drill the explorer down into `task`'s first query."""
    page.locator("#explorer-task input").click()
    page.locator("#explorer-task input").fill(task)  # the list can open past the viewport
    page.get_by_role("option").filter(has_text=task).first.wait_for()
    page.keyboard.press("Enter")
    page.wait_for_function(
        f"() => document.querySelector('#explorer-task input')?.value === '{task}'"
    )
    # a volume keeps its other slices hidden: wait for the one image that shows
    page.locator("#explorer-ranked .dd-query img:visible").first.wait_for()


def _marks_under_images(page) -> int:
    """Each visible drill-down image with a SYNTHETIC mark: the mark's box lies under the
    image's box (never over its pixels) and within its width. Returns how many were checked."""
    figures = page.locator("#explorer-ranked figure.ev-figure")
    checked = 0
    for i in range(figures.count()):
        figure = figures.nth(i)
        if figure.locator(".ev-mark").count() == 0:
            continue
        image = _page_box(page, figure.locator("img:visible").first)
        mark = _page_box(page, figure.locator(".ev-mark"))
        assert mark["y"] >= image["y"] + image["height"] - 0.5, (i, mark, image)
        assert image["x"] - 0.5 <= mark["x"] <= image["x"] + image["width"]
        checked += 1
    return checked


def test_a_region_query_draws_its_gold_box_inside_the_image(explorer):
    from PIL import Image

    from medheb_app.ui.drilldown_view import GOLD_COLOUR

    page = explorer
    _open_task(page, "phantom-cxr-vg")
    # the previous task's query can still show until the region task's answer replaces it
    page.locator("#explorer-ranked .dd-query").get_by_text("green: gold region").wait_for()
    query = page.locator("#explorer-ranked .dd-query img").first
    query.evaluate("image => image.decode()")  # drawn before it is measured
    box = _page_box(page, query)
    assert box["width"] >= 150 and box["height"] >= 150  # drawn large enough to read a box
    # the image the browser shows, at its own pixels: a screenshot of it scaled to the column
    # can blend the 2-pixel box into the film (it did once under load, at 65cb8e6)
    src = query.get_attribute("src") or ""
    assert src.startswith("data:image/png;base64,"), src[:60]
    with Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))) as shown:
        pixels = np.asarray(shown.convert("RGB")).astype(int)
    green = (np.abs(pixels - np.array(GOLD_COLOUR)).sum(axis=-1) < 60).nonzero()
    assert green[0].size > 40, "no gold box drawn on the query image"
    top, bottom = green[0].min(), green[0].max()
    left, right = green[1].min(), green[1].max()
    height, width = pixels.shape[:2]
    assert 0 <= left < right < width and 0 <= top < bottom < height  # inside the image
    assert right - left >= 6 and bottom - top >= 6  # a box, not a speck
    assert (right - left) * (bottom - top) < 0.9 * width * height  # a region, not a frame
    legend = _page_box(page, page.locator("#explorer-ranked .dd-query").get_by_text("gold region"))
    assert legend["y"] >= box["y"] + box["height"] - 0.5  # the legend under the image
    assert _marks_under_images(page) >= 3  # the query and the candidates are all phantoms
    _shot(page, "drilldown-region")


def test_a_volume_shows_a_slice_with_a_slider_that_moves_it(explorer):
    page = explorer
    _open_task(page, "phantom-mr-t1-t2")
    volume = page.locator("#explorer-ranked .ev-volume").first
    volume.wait_for()
    slider = volume.locator("input.ev-slider")
    frame = volume.locator("img.ev-frame:visible")
    assert frame.count() == 1  # one slice shown at a time
    image, bar = _page_box(page, frame), _page_box(page, slider)
    assert bar["y"] >= image["y"] + image["height"] - 0.5  # the slider under the slice
    assert bar["width"] >= 0.8 * image["width"]
    label = volume.locator(".ev-slice")
    before, source = label.inner_text(), frame.get_attribute("src")
    assert before.startswith("slice ") and " of " in before
    slider.focus()
    page.keyboard.press("End")
    page.wait_for_function(
        "(text) => document.querySelector('#explorer-ranked .ev-volume .ev-slice')"
        ".textContent !== text",
        arg=before,
    )
    after = label.inner_text()
    assert after != before and after.split(" of ")[1] == before.split(" of ")[1]
    assert volume.locator("img.ev-frame:visible").get_attribute("src") != source
    assert _marks_under_images(page) >= 1
    _shot(page, "drilldown-volume")
