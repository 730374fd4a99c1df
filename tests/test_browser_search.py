"""Search results at a glance, in a real browser (Playwright + Debian chromium), checked on the
layout boxes the page draws, not only its text (issue 22 item 5).

`python app.py` serves the synthetic demo index and a small real-layout NIH index (16x16 px
images, no SYNTHETIC flag) built beforehand (tests/browser_harness.py's oracle_workbench). On
a 375x812 phone the first hits sit right under the query within the first screen; every
caption fits inside its thumbnail's width without being cut; the SYNTHETIC mark is a box under
each generated image, never over it, in the list and in the hit pane; the banner shows over
the demo index only; a 16 px real image is shown upscaled with its true size stated.
Screenshots land in test-artifacts/screenshots/.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.browser_harness import STARTUP_S, desktop_page
from tests.test_browser_app import _choose, _open, _shot, _wait_for_demo

# one app with test_browser_drilldown and test_browser_explorer (oracle_workbench)
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser-oracle")]
QUERY = "pleural effusion and no cardiomegaly"
PHONE = {"width": 375, "height": 812}


@pytest.fixture(scope="module")
def app(oracle_workbench, request) -> Iterator[dict]:
    """The oracle workbench (tests/browser_harness.py), once its demo index is built."""
    with oracle_workbench.serving(request) as url:
        _wait_for_demo(oracle_workbench.settings.data_dir, STARTUP_S)
        yield {"url": url}


def _search(page, text: str) -> None:
    page.locator("#search-query textarea").fill(text)
    page.locator("#search-button").click()
    page.locator("#search-hits .sr-hit img").first.wait_for()


def _page_box(page, locator) -> dict:
    """The element's box in page coordinates (a scroll Gradio makes does not move it)."""
    box = locator.bounding_box()
    assert box is not None, "the element is not laid out"
    scroll = page.evaluate("() => ({x: window.scrollX, y: window.scrollY})")
    return {**box, "x": box["x"] + scroll["x"], "y": box["y"] + scroll["y"]}


def _check_cards(page, synthetic: bool) -> None:
    """Every card: caption no wider than the thumbnail and not cut off; the SYNTHETIC mark
    (when generated) a box below the image, not overlapping it."""
    cards = page.locator("#search-hits .sr-hit")
    assert cards.count() >= 5
    for i in range(cards.count()):
        card = cards.nth(i)
        image = _page_box(page, card.locator("img"))
        cap = card.locator(".sr-cap")
        caption = _page_box(page, cap)
        assert caption["width"] <= image["width"] + 0.5, (i, caption, image)
        assert caption["y"] >= image["y"] + image["height"] - 0.5  # under the image
        assert cap.evaluate("(el) => el.scrollWidth <= el.clientWidth"), "caption cut off"
        marks = card.locator(".ev-mark")
        assert marks.count() == (1 if synthetic else 0)
        if synthetic:
            mark = _page_box(page, marks)
            assert mark["y"] >= image["y"] + image["height"] - 0.5, (i, mark, image)
            assert image["x"] - 0.5 <= mark["x"] and mark["x"] + mark["width"] <= (
                image["x"] + image["width"] + 0.5
            )
            assert mark["height"] > 5 and mark["width"] > 20  # a visible mark


def test_on_a_phone_the_hits_are_right_under_the_query(app, browser):
    with desktop_page(browser, PHONE["width"], PHONE["height"]) as page:
        _open(page, app["url"])
        _search(page, QUERY)
        query = _page_box(page, page.locator("#search-query textarea"))
        first = _page_box(page, page.locator("#search-hits .sr-hit").first)
        assert first["y"] > query["y"] + query["height"]  # below the query...
        assert first["y"] - (query["y"] + query["height"]) < 260  # ...right under it
        assert first["y"] + first["height"] <= PHONE["height"]  # within the first screen
        line = page.locator("#search-hits .sr-line")
        assert line.inner_text().startswith("Ranked logic-aware. Score p = ")
        assert _page_box(page, line)["y"] < first["y"]  # the one line sits above the list
        _check_cards(page, synthetic=True)
        _shot(page, "search-phone")


def test_the_hit_pane_states_the_score_and_marks_synthetic_under_the_image(app, browser):
    with desktop_page(browser, 1400, 900) as page:
        _open(page, app["url"])
        page.locator("#search-banner").get_by_text("SYNTHETIC DEMO DATA").wait_for()
        _search(page, QUERY)
        _check_cards(page, synthetic=True)
        captions = page.locator("#search-hits .sr-cap").all_inner_texts()
        assert captions[0] == "#1 ✓" and all(" · " not in text for text in captions)
        page.locator("#search-hits .sr-hit").first.click()
        page.locator("#search-detail").get_by_text("p(meets the query)").wait_for()
        assert "log-odds" not in page.locator("#search-detail").inner_text()
        image = _page_box(page, page.locator("#search-large img"))
        mark = _page_box(page, page.locator("#search-large .ev-mark"))
        assert mark["y"] >= image["y"] + image["height"] - 0.5
        _shot(page, "search-detail-synthetic")


def test_a_real_index_has_no_banner_and_its_small_images_are_shown_upscaled(app, browser):
    with desktop_page(browser, 1400, 900) as page:
        _open(page, app["url"])
        page.locator("#search-banner").get_by_text("SYNTHETIC DEMO DATA").wait_for()
        _choose(page, "search-index", "nih-mini")
        page.locator("#search-banner .medheb-banner").wait_for(state="detached")
        _search(page, "pleural effusion")
        assert page.get_by_text("SYNTHETIC DEMO DATA").count() == 0
        _check_cards(page, synthetic=False)
        page.locator("#search-hits .sr-hit").first.click()
        size = page.locator("#search-large .sr-size")
        size.wait_for()
        assert size.inner_text() == "shown at 24x; original 16x16 px"
        image = _page_box(page, page.locator("#search-large img"))
        assert image["width"] >= 16 * 16  # drawn large, not at 16 px
        assert page.locator("#search-large .ev-mark").count() == 0
        _shot(page, "search-real-index")
